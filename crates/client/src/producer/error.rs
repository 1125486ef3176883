//! Why a command was not sent, or not confirmed sent: the producer's
//! errors, and the context that remembers the brokers' refusal of the
//! login so a timed-out record can say why.

use std::sync::{Arc, Mutex};

use rdkafka::error::KafkaError;
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::ClientContext;
use stockledger_core::codec::EncodeError;
use stockledger_core::ValidationError;
use stockledger_projection::ProjectionError;
use tracing::error;

use crate::soldout::SoldOut;

/// Why a command was not sent, or not confirmed sent.
///
/// ```
/// use stockledger_client::ProducerError;
/// use stockledger_core::Quantity;
///
/// let refused: ProducerError = Quantity::new(0).unwrap_err().into();
/// assert_eq!(refused.to_string(), "invalid command: quantity: must be at least 1, got 0");
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProducerError {
    /// A command field was refused; nothing was sent.
    /// The field's problem is part of the message, not a cause of it.
    #[error("invalid command: {0}")]
    Invalid(ValidationError),
    #[error("librdkafka setting {name}={value} would break the ledger's contract (it needs {name}={required})")]
    ContractSetting {
        name: String,
        value: String,
        required: &'static str,
    },
    #[error("cannot create the Kafka producer")]
    Client(#[source] KafkaError),
    #[error(transparent)]
    Encode(#[from] EncodeError),
    /// The producer's local queue is full (the brokers are slower than the
    /// sender, or away); nothing was sent. Only [`LedgerProducer::try_send`](super::LedgerProducer::try_send)
    /// refuses so; the other methods wait for room.
    #[error("the producer's queue is full; command {command_id} for sku {sku} was not sent")]
    QueueFull { sku: String, command_id: String },
    /// The brokers did not take the record; the failure hands back the
    /// encoded command so nothing is dropped silently.
    #[error(transparent)]
    Delivery(Box<DeliveryFailure>),
    /// The sold-out fast path refused the deduct: nothing was sent, and
    /// the refusal is not in the log or the archive.
    #[error("sku {} is sold out (nothing available, nothing held, as of offset {}): refused here, not logged", .0.sku, .0.offset)]
    SoldOut(SoldOut),
    /// The sold-out guard or the order checks could not read Redis;
    /// nothing was sent.
    #[error("checking the ledger's state before sending failed")]
    StateCheck(#[source] ProjectionError),
}

impl From<ValidationError> for ProducerError {
    fn from(e: ValidationError) -> Self {
        Self::Invalid(e)
    }
}

/// A command the brokers did not take. `payload` is the encoded command,
/// handed back so the caller can retry or record it.
///
/// ```
/// use rdkafka::error::KafkaError;
/// use stockledger_client::producer::DeliveryFailure;
///
/// let failure = DeliveryFailure {
///     topic: "stock.ledger".into(),
///     sku: "SKU-1".into(),
///     command_id: "c-1".into(),
///     error: KafkaError::Canceled,
///     payload: vec![0xC3, 0x01],
///     login_refused: Some("SASL authentication error".into()),
/// };
/// assert!(failure.to_string().contains("refused this client's login"));
/// ```
#[derive(Debug, thiserror::Error)]
#[error(
    "command {command_id} for sku {sku} was not delivered to {topic}{}",
    login_refused.as_ref().map_or(String::new(), |why| format!(
        " (the brokers refused this client's login: {why}; check sasl.username and \
         KAFKA_SASL_PASSWORD)"
    ))
)]
pub struct DeliveryFailure {
    pub topic: String,
    pub sku: String,
    pub command_id: String,
    #[source]
    pub error: KafkaError,
    pub payload: Vec<u8>,
    /// Why the brokers last refused the client's login (SASL), if they
    /// did since the last record went through: a record that times out
    /// then says so, not only that it timed out.
    pub login_refused: Option<String>,
}

/// A producer's context: logs librdkafka's errors as the default one does
/// and remembers the brokers' last refusal of the login. librdkafka keeps
/// retrying a refused login (credentials may be fixed on the brokers), so
/// records wait out their timeout, and without this their error would not
/// say why.
/// Clones share what they remember (librdkafka keeps the context; the
/// producer keeps a clone to ask).
#[derive(Clone, Default)]
pub(super) struct LoginWatch {
    refused: Arc<Mutex<Option<String>>>,
}

impl ClientContext for LoginWatch {
    fn error(&self, error: KafkaError, reason: &str) {
        if error.rdkafka_error_code() == Some(RDKafkaErrorCode::Authentication) {
            *self.refused.lock().unwrap_or_else(|e| e.into_inner()) = Some(reason.to_owned());
        }
        error!(target: "librdkafka", "librdkafka: {error} {reason}");
    }
}

impl LoginWatch {
    pub(super) fn refused(&self) -> Option<String> {
        self.refused
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    pub(super) fn forget(&self) {
        self.refused
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
    }
}
