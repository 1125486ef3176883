//! Appending commands to the ledger.

use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rdkafka::error::KafkaError;
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{DeliveryFuture, FutureProducer, FutureRecord, Producer};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::ClientConfig;
use stockledger_core::codec::{self, EncodeError};
use stockledger_core::report::Chain;
use stockledger_core::trace::{valid_traceparent, TRACEPARENT_HEADER};
use stockledger_core::{Command, CommandBody, CommandId, LogPosition, Sku, ValidationError};
use stockledger_kafka::config::{KafkaConfig, CONTRACT_SETTINGS};
use tracing::warn;

use crate::precheck::OrderChecks;
use crate::soldout::SoldOutGuard;
use error::LoginWatch;

pub use error::{DeliveryFailure, ProducerError};

mod error;

thread_local! {
    /// Where a command is encoded before librdkafka copies it.
    static PAYLOAD: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// How long a send waits for room in a full local queue (the bound of
/// [`LedgerProducer::send`]'s wait there; `message.timeout.ms` bounds
/// what follows).
const QUEUE_WAIT: Duration = Duration::from_secs(60);

/// Defaults of every producer; each may be overridden.
const TUNABLE_DEFAULTS: [(&str, &str); 2] = [
    // A record not delivered within this bound is handed back as an error.
    ("message.timeout.ms", "30000"),
    ("compression.type", "none"),
];

/// What a producer is tuned for: how long librdkafka holds a record back
/// to share a request with later ones (`linger.ms`). A pass-through
/// `linger.ms` (`-X`, [`KafkaConfig::properties`]) wins over either.
///
/// ```
/// use stockledger_client::producer::Tuning;
///
/// assert_eq!(Tuning::default(), Tuning::Latency);
/// assert_eq!(Tuning::Latency.linger_ms(), 1);
/// assert_eq!(Tuning::Throughput.linger_ms(), 5);
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Tuning {
    /// For callers that wait on each command (order services, the
    /// gateway): a record waits at most 1 ms for others. On Apache Kafka
    /// over loopback at 5,000 commands/s this took the broker's
    /// acknowledgement from p50 5.4 ms (5 ms) to 2.7-2.8 ms; sending each
    /// record at once (0 ms) was quicker still at that rate but swamped
    /// the broker with requests at 20,000/s (docs/BENCHMARKS.md, "Latency").
    #[default]
    Latency,
    /// For loaders that publish many commands at once without waiting on
    /// each (restocks from a file, backfills): records wait up to 5 ms to
    /// fill larger requests, which costs the broker less a record.
    Throughput,
}

impl Tuning {
    /// The `linger.ms` this tuning sets.
    pub fn linger_ms(self) -> u32 {
        match self {
            Self::Latency => 1,
            Self::Throughput => 5,
        }
    }
}

/// The header naming the payload's encoding, for tools reading the topic.
///
/// ```
/// use stockledger_client::producer::{CONTENT_TYPE, CONTENT_TYPE_HEADER};
///
/// assert_eq!((CONTENT_TYPE_HEADER, CONTENT_TYPE), ("content-type", "application/vnd.apache.avro.single-object"));
/// ```
pub const CONTENT_TYPE_HEADER: &str = "content-type";
/// The content type of every command record: Avro single-object encoding.
///
/// ```
/// use stockledger_client::producer::CONTENT_TYPE;
///
/// assert!(CONTENT_TYPE.ends_with("single-object"));
/// ```
pub const CONTENT_TYPE: &str = "application/vnd.apache.avro.single-object";

/// Where a command landed, returned once the brokers hold it.
///
/// ```
/// use stockledger_client::Receipt;
/// use stockledger_core::{CommandId, LogPosition, Sku};
///
/// let receipt = Receipt {
///     command_id: CommandId::new("c-1")?,
///     sku: Sku::new("SKU-1")?,
///     position: LogPosition { topic: "stock.ledger".into(), partition: 4, offset: 17 },
/// };
/// assert_eq!(receipt.position.to_string(), "stock.ledger/4@17");
/// # Ok::<(), stockledger_core::ValidationError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Receipt {
    pub command_id: CommandId,
    pub sku: Sku,
    pub position: LogPosition,
}

/// Sends commands to the command topic: the transport underneath
/// [`Ledger`](crate::Ledger), which is where an order service starts (its
/// typed methods build each command's body). Cheap to share: clone it or
/// put it in an `Arc`; all clones use one librdkafka producer. Reach it
/// with [`Ledger::producer`](crate::Ledger::producer) for what only it
/// offers: [`try_send`](Self::try_send), [`send_traced`](Self::send_traced),
/// [`send_command`](Self::send_command), [`locate`](Self::locate).
///
/// ```no_run
/// use stockledger_client::{CommandBody, Deduct, KafkaConfig, LedgerProducer, OrderId, Quantity, Sku};
///
/// # async fn example() -> Result<(), Box<dyn std::error::Error>> {
/// let producer = LedgerProducer::new(&KafkaConfig::new("127.0.0.1:9092"), "stock.ledger")?;
/// let body = CommandBody::Deduct(Deduct::new(OrderId::new("order-43")?, Quantity::new(1)?));
/// let sent = producer.send(Sku::new("SKU-1")?, body).await?; // validated, and durable in the log
/// println!("in the log at {}", sent.position);
/// # Ok(())
/// # }
/// ```
///
/// A producer the brokers fence is replaced by a fresh one (a new
/// producer id): after a record times out, librdkafka bumps its idempotent
/// producer's epoch, and brokers that do not follow that bump (tansu 0.6)
/// refuse every later record with `ProducerFenced`, for good. A refused
/// record was not written, so it is sent once more through the new
/// producer.
#[derive(Clone)]
pub struct LedgerProducer {
    current: Arc<RwLock<Current>>,
    config: Arc<ClientConfig>,
    topic: String,
    sold_out: Option<SoldOutGuard>,
    order_checks: Option<OrderChecks>,
}

/// The librdkafka producer in use and how many were replaced before it.
#[derive(Clone)]
struct Current {
    generation: u64,
    producer: Arc<FutureProducer<LoginWatch>>,
    login: LoginWatch,
}

impl std::fmt::Debug for LedgerProducer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LedgerProducer")
            .field("topic", &self.topic)
            .finish_non_exhaustive()
    }
}

impl LedgerProducer {
    /// A producer of `topic` on `kafka`'s brokers, with the settings the
    /// contract needs (the idempotent producer, `acks=all`, the murmur2
    /// partitioner); a pass-through property that would break them is
    /// refused. Nothing is sent until the first command.
    ///
    /// ```
    /// use stockledger_client::{KafkaConfig, LedgerProducer, ProducerError};
    ///
    /// let mut kafka = KafkaConfig::new("127.0.0.1:9092");
    /// kafka.properties.push(("acks".into(), "1".into()));
    /// let refused = LedgerProducer::new(&kafka, "stock.ledger").unwrap_err();
    /// assert!(matches!(refused, ProducerError::ContractSetting { ref name, .. } if name == "acks"));
    /// ```
    pub fn new(kafka: &KafkaConfig, topic: impl Into<String>) -> Result<Self, ProducerError> {
        Self::tuned(kafka, topic, Tuning::default())
    }

    /// [`LedgerProducer::new`], tuned for `tuning` rather than for callers
    /// waiting on each command.
    ///
    /// ```
    /// use stockledger_client::producer::Tuning;
    /// use stockledger_client::{KafkaConfig, LedgerProducer};
    ///
    /// let loader = LedgerProducer::tuned(&KafkaConfig::new("127.0.0.1:9092"), "stock.ledger", Tuning::Throughput)?;
    /// # Ok::<(), stockledger_client::ProducerError>(())
    /// ```
    pub fn tuned(
        kafka: &KafkaConfig,
        topic: impl Into<String>,
        tuning: Tuning,
    ) -> Result<Self, ProducerError> {
        for (name, required) in CONTRACT_SETTINGS {
            if let Some(value) = kafka.property(name) {
                if value != required {
                    return Err(ProducerError::ContractSetting {
                        name: name.to_owned(),
                        value: value.to_owned(),
                        required,
                    });
                }
            }
        }
        let linger = tuning.linger_ms().to_string();
        let defaults: Vec<(&str, &str)> = CONTRACT_SETTINGS
            .iter()
            .chain(TUNABLE_DEFAULTS.iter())
            .copied()
            .chain([("linger.ms", linger.as_str())])
            .collect();
        let config = kafka.client_config(&defaults);
        let login = LoginWatch::default();
        let producer = config
            .create_with_context(login.clone())
            .map_err(ProducerError::Client)?;
        Ok(Self {
            current: Arc::new(RwLock::new(Current {
                generation: 0,
                producer: Arc::new(producer),
                login,
            })),
            config: Arc::new(config),
            topic: topic.into(),
            sold_out: None,
            order_checks: None,
        })
    }

    /// This producer, refusing confirms and refunds the projection shows
    /// to be wrong before they reach the log (see [`crate::precheck`]).
    ///
    /// ```no_run
    /// # async fn example() -> Result<(), Box<dyn std::error::Error>> {
    /// use stockledger_client::{CommandBody, Confirm, KafkaConfig, LedgerProducer, OrderChecks, OrderId, Sku};
    ///
    /// let checks = OrderChecks::connect("redis://127.0.0.1:6379", "stockledger").await?;
    /// let producer = LedgerProducer::new(&KafkaConfig::new("127.0.0.1:9092"), "stock.ledger")?
    ///     .with_order_checks(checks);
    /// // Refused here if the ledger holds no reservation of order-42.
    /// let confirm = CommandBody::Confirm(Confirm { order_id: OrderId::new("order-42")? });
    /// producer.send(Sku::new("SKU-1")?, confirm).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn with_order_checks(mut self, checks: OrderChecks) -> Self {
        self.order_checks = Some(checks);
        self
    }

    /// This producer, refusing deducts and reservations of a sold-out SKU
    /// before they reach the log (see [`crate::soldout`]).
    ///
    /// ```no_run
    /// # async fn example() -> Result<(), Box<dyn std::error::Error>> {
    /// use stockledger_client::{CommandBody, Deduct, KafkaConfig, LedgerProducer, OrderId};
    /// use stockledger_client::{ProducerError, Quantity, Sku, SoldOutGuard};
    ///
    /// let guard = SoldOutGuard::connect("redis://127.0.0.1:6379", "stockledger").await?;
    /// let producer = LedgerProducer::new(&KafkaConfig::new("127.0.0.1:9092"), "stock.ledger")?
    ///     .with_sold_out_guard(guard.clone());
    /// let deduct = CommandBody::Deduct(Deduct::new(OrderId::new("order-42")?, Quantity::new(1)?));
    /// match producer.send(Sku::new("SKU-1")?, deduct).await {
    ///     Err(ProducerError::SoldOut(s)) => println!("{} is sold out (as of offset {})", s.sku, s.offset),
    ///     other => println!("{:?}", other?.position),
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn with_sold_out_guard(mut self, guard: SoldOutGuard) -> Self {
        self.sold_out = Some(guard);
        self
    }

    fn current(&self) -> Current {
        self.current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Replaces the producer of `generation` after the brokers fenced it
    /// (once, however many sends saw the refusal).
    fn renew(&self, generation: u64) {
        let mut current = self.current.write().unwrap_or_else(|e| e.into_inner());
        if current.generation != generation {
            return;
        }
        let login = LoginWatch::default();
        match self
            .config
            .create_with_context::<_, FutureProducer<LoginWatch>>(login.clone())
        {
            Ok(fresh) => {
                warn!(
                    topic = %self.topic,
                    "the brokers fenced the producer (they do not know the epoch librdkafka \
                     moved to after a record timed out); continuing with a new producer id"
                );
                *current = Current {
                    generation: generation + 1,
                    producer: Arc::new(fresh),
                    login,
                };
            }
            Err(e) => {
                warn!(error = %Chain(&e), "cannot replace the fenced producer; retrying on the next send")
            }
        }
    }

    /// The command topic this producer writes to.
    ///
    /// ```
    /// use stockledger_client::{KafkaConfig, LedgerProducer};
    ///
    /// let producer = LedgerProducer::new(&KafkaConfig::new("127.0.0.1:9092"), "stock.ledger")?;
    /// assert_eq!(producer.topic(), "stock.ledger");
    /// # Ok::<(), stockledger_client::ProducerError>(())
    /// ```
    pub fn topic(&self) -> &str {
        &self.topic
    }

    /// Sends an already validated command body with a fresh command id
    /// (a deduct first passes the sold-out guard, if there is one).
    ///
    /// ```no_run
    /// # async fn example(producer: stockledger_client::LedgerProducer) -> Result<(), Box<dyn std::error::Error>> {
    /// use stockledger_core::{CommandBody, Limit, Quantity, Sku};
    ///
    /// let body = CommandBody::Limit(Limit { per_user: Some(Quantity::new(2)?) });
    /// let receipt = producer.send(Sku::new("SKU-1")?, body).await?;
    /// println!("limit in the log at {}", receipt.position);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn send(&self, sku: Sku, body: CommandBody) -> Result<Receipt, ProducerError> {
        let command = new_command(sku, body)?;
        self.check_state(&command).await?;
        self.send_command(&command).await
    }

    /// The opt-in checks before a command is sent: the order checks of a
    /// confirm or refund, the sold-out guard of a deduct.
    async fn check_state(&self, command: &Command) -> Result<(), ProducerError> {
        if let Some(checks) = &self.order_checks {
            checks
                .check(command)
                .await
                .map_err(ProducerError::StateCheck)??;
        }
        let (Some(guard), CommandBody::Deduct(_)) = (&self.sold_out, &command.body) else {
            return Ok(());
        };
        match guard.check(command.sku.as_str()).await {
            Ok(None) => Ok(()),
            Ok(Some(sold_out)) => Err(ProducerError::SoldOut(sold_out)),
            Err(e) => Err(ProducerError::StateCheck(e)),
        }
    }

    /// Like [`LedgerProducer::send`], but refuses at once with
    /// [`ProducerError::QueueFull`] when the local queue has no room,
    /// rather than waiting for it: for callers that must answer quickly
    /// and can tell their own caller to come back (the HTTP gateway).
    ///
    /// ```no_run
    /// # async fn example(producer: stockledger_client::LedgerProducer) -> Result<(), Box<dyn std::error::Error>> {
    /// use stockledger_client::ProducerError;
    /// use stockledger_core::{CommandBody, Deduct, OrderId, Quantity, Sku};
    ///
    /// let body = CommandBody::Deduct(Deduct::new(OrderId::new("order-42")?, Quantity::new(1)?));
    /// match producer.try_send(Sku::new("SKU-1")?, body).await {
    ///     Err(ProducerError::QueueFull { .. }) => println!("busy: come back in a second"),
    ///     other => println!("{:?}", other?.position),
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn try_send(&self, sku: Sku, body: CommandBody) -> Result<Receipt, ProducerError> {
        let command = new_command(sku, body)?;
        self.check_state(&command).await?;
        self.deliver(&command, Queue::Refuse, None).await
    }

    /// Whether the brokers answer a metadata request for the command topic
    /// within `timeout` (blocking: call it off the async threads).
    ///
    /// ```no_run
    /// # async fn example(producer: stockledger_client::LedgerProducer) -> Result<(), Box<dyn std::error::Error>> {
    /// use std::time::Duration;
    ///
    /// let probe = producer.clone();
    /// tokio::task::spawn_blocking(move || probe.reachable(Duration::from_secs(2))).await??;
    /// # Ok(())
    /// # }
    /// ```
    pub fn reachable(&self, timeout: Duration) -> Result<(), KafkaError> {
        let metadata = self
            .current()
            .producer
            .client()
            .fetch_metadata(Some(&self.topic), timeout)?;
        match metadata.topics().first().and_then(|t| t.error()) {
            Some(code) => Err(KafkaError::MetadataFetch(code.into())),
            None => Ok(()),
        }
    }

    /// The offset the next record of the command topic's `partition` will
    /// get (its high watermark), within `timeout` (blocking: call it off
    /// the async threads).
    ///
    /// ```no_run
    /// # fn example(producer: stockledger_client::LedgerProducer) -> Result<(), Box<dyn std::error::Error>> {
    /// use std::time::Duration;
    ///
    /// let next = producer.log_end(0, Duration::from_secs(2))?;
    /// println!("partition 0 holds offsets below {next}");
    /// # Ok(())
    /// # }
    /// ```
    pub fn log_end(&self, partition: i32, timeout: Duration) -> Result<i64, KafkaError> {
        let (_, high) =
            self.current()
                .producer
                .client()
                .fetch_watermarks(&self.topic, partition, timeout)?;
        Ok(high)
    }

    /// Sends `command` as it is, keyed by its SKU, and waits until the
    /// brokers acknowledge it.
    ///
    /// ```no_run
    /// # async fn example(producer: stockledger_client::LedgerProducer) -> Result<(), Box<dyn std::error::Error>> {
    /// use stockledger_core::{Command, CommandBody, CommandId, Expire, OrderId, Sku};
    ///
    /// // A command id of the caller's choosing, e.g. kept in its outbox.
    /// let command = Command {
    ///     command_id: CommandId::new("outbox-981")?,
    ///     sku: Sku::new("SKU-1")?,
    ///     occurred_at: 1_700_000_000_000,
    ///     body: CommandBody::Expire(Expire { order_id: OrderId::new("order-42")? }),
    /// };
    /// let receipt = producer.send_command(&command).await?;
    /// assert_eq!(receipt.command_id, command.command_id);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn send_command(&self, command: &Command) -> Result<Receipt, ProducerError> {
        self.deliver(command, Queue::Wait, None).await
    }

    /// Like [`LedgerProducer::send`] (or, with `queue_full_refuses`,
    /// [`LedgerProducer::try_send`]), with the caller's W3C `traceparent`
    /// as a record header: the applier copies it to the outcome's headers
    /// and the archiver into the row, so the order can be followed from the
    /// service that sent it to its archived decision. One that is not a
    /// valid `traceparent` is refused, naming the field.
    ///
    /// ```no_run
    /// # async fn example(producer: stockledger_client::LedgerProducer) -> Result<(), Box<dyn std::error::Error>> {
    /// use stockledger_client::{CommandBody, Deduct, OrderId, Quantity, Sku};
    ///
    /// // From the incoming request's span (e.g. OpenTelemetry's propagator).
    /// let traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    /// let body = CommandBody::Deduct(Deduct::new(OrderId::new("order-42")?, Quantity::new(1)?));
    /// producer.send_traced(Sku::new("SKU-1")?, body, traceparent, false).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn send_traced(
        &self,
        sku: Sku,
        body: CommandBody,
        traceparent: &str,
        queue_full_refuses: bool,
    ) -> Result<Receipt, ProducerError> {
        let Some(traceparent) = valid_traceparent(traceparent.as_bytes()) else {
            return Err(ProducerError::Invalid(ValidationError::new(
                "traceparent",
                "is not a W3C traceparent (00-<32 hex>-<16 hex>-<2 hex>, lower case, ids not all zeros)",
            )));
        };
        let command = new_command(sku, body)?;
        self.check_state(&command).await?;
        let queue = if queue_full_refuses {
            Queue::Refuse
        } else {
            Queue::Wait
        };
        self.deliver(&command, queue, Some(traceparent)).await
    }

    /// Sends `command` and waits for the brokers' answer. A record the
    /// brokers refused because they fenced the producer was not written
    /// (librdkafka: "MsgNotPersisted"), so it is sent once more through the
    /// producer that replaces the fenced one.
    async fn deliver(
        &self,
        command: &Command,
        queue: Queue,
        traceparent: Option<&str>,
    ) -> Result<Receipt, ProducerError> {
        // The applier refuses it too; refused here, nothing is published.
        stockledger_core::command::check_instant("occurred_at", command.occurred_at)
            .map_err(ProducerError::Invalid)?;
        let mut resent = false;
        loop {
            let current = self.current();
            let handed = self.hand_over(&current, command, queue, traceparent);
            let delivered = match handed.await? {
                Ok(delivery) => match delivery.await {
                    Ok(Ok(delivery)) => Ok(delivery),
                    Ok(Err((error, _))) => Err(error),
                    Err(_canceled) => Err(KafkaError::Canceled),
                },
                Err(KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull))
                    if matches!(queue, Queue::Refuse) =>
                {
                    return Err(ProducerError::QueueFull {
                        sku: command.sku.to_string(),
                        command_id: command.command_id.to_string(),
                    })
                }
                Err(error) => Err(error),
            };
            // The bytes sent, for a failure's report: encoded again, as
            // the buffer they were sent from is this thread's.
            let payload = || codec::encode_command(command).unwrap_or_default();
            match delivered {
                Ok(delivery) if delivery.offset < 0 => {
                    // Written, offset unknown: librdkafka says so when a
                    // retried batch turns out to be in the log already
                    // (DUPLICATE_SEQUENCE_NUMBER), as after a leader dies.
                    current.login.forget();
                    let offset = self
                        .locate(&command.command_id, delivery.partition)
                        .await
                        .map_err(|error| self.failure(command, error, payload(), None))?;
                    return Ok(self.receipt(command, delivery.partition, offset));
                }
                Ok(delivery) => {
                    current.login.forget();
                    return Ok(self.receipt(command, delivery.partition, delivery.offset));
                }
                Err(error) if is_fenced(&error) && !resent => {
                    self.renew(current.generation);
                    resent = true;
                }
                Err(error) => {
                    let login_refused = current.login.refused();
                    return Err(self.failure(command, error, payload(), login_refused));
                }
            }
        }
    }

    /// The offset of the command `command_id` on the command topic's
    /// `partition`, read back from the log's end: where a command landed
    /// that the brokers acknowledged without an offset. The nemesis of
    /// seed 7 caught a receipt at offset -1001 for such a command.
    ///
    /// ```no_run
    /// # async fn example(producer: stockledger_client::LedgerProducer, receipt: stockledger_client::Receipt) -> Result<(), Box<dyn std::error::Error>> {
    /// // A receipt of this producer's.
    /// let found = producer.locate(&receipt.command_id, receipt.position.partition).await?;
    /// assert_eq!(found, receipt.position.offset);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn locate(&self, command_id: &CommandId, partition: i32) -> Result<i64, KafkaError> {
        let config = (*self.config).clone();
        let topic = self.topic.clone();
        let id = command_id.clone();
        tokio::task::spawn_blocking(move || locate_blocking(&config, &topic, partition, &id))
            .await
            .map_err(|_| KafkaError::Canceled)?
    }

    /// Hands `command` to `current`'s producer, encoded into this thread's
    /// buffer (librdkafka copies it, so no record keeps a buffer of its
    /// own): the answer is the brokers' to come. While the local queue is
    /// full, `Queue::Wait` tries again every 100 ms for up to a minute, as
    /// librdkafka's own future does; `Queue::Refuse` answers `QueueFull`.
    /// The outer error: `command` cannot be encoded (nothing is sent).
    async fn hand_over(
        &self,
        current: &Current,
        command: &Command,
        queue: Queue,
        traceparent: Option<&str>,
    ) -> Result<Result<DeliveryFuture, KafkaError>, EncodeError> {
        let started = Instant::now();
        loop {
            let handed = PAYLOAD.with_borrow_mut(|payload| {
                codec::encode_command_into(command, payload)?;
                let record = self.record(command, payload, traceparent);
                Ok(current
                    .producer
                    .send_result(record)
                    .map_err(|(error, _)| error))
            })?;
            match handed {
                Err(KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull))
                    if matches!(queue, Queue::Wait) && started.elapsed() < QUEUE_WAIT =>
                {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                handed => return Ok(handed),
            }
        }
    }

    fn record<'a>(
        &'a self,
        command: &'a Command,
        payload: &'a [u8],
        traceparent: Option<&str>,
    ) -> FutureRecord<'a, str, [u8]> {
        let mut headers = OwnedHeaders::new().insert(Header {
            key: CONTENT_TYPE_HEADER,
            value: Some(CONTENT_TYPE),
        });
        if let Some(traceparent) = traceparent {
            headers = headers.insert(Header {
                key: TRACEPARENT_HEADER,
                value: Some(traceparent),
            });
        }
        // The record's timestamp is the command's own time, the instant its
        // deadline was checked against: the ledger compares deadlines with
        // record timestamps.
        FutureRecord::to(&self.topic)
            .key(command.sku.as_str())
            .payload(payload)
            .headers(headers)
            .timestamp(command.occurred_at)
    }

    fn receipt(&self, command: &Command, partition: i32, offset: i64) -> Receipt {
        Receipt {
            command_id: command.command_id.clone(),
            sku: command.sku.clone(),
            position: LogPosition {
                topic: self.topic.clone(),
                partition,
                offset,
            },
        }
    }

    fn failure(
        &self,
        command: &Command,
        error: KafkaError,
        payload: Vec<u8>,
        login_refused: Option<String>,
    ) -> ProducerError {
        ProducerError::Delivery(Box::new(DeliveryFailure {
            topic: self.topic.clone(),
            sku: command.sku.to_string(),
            command_id: command.command_id.to_string(),
            error,
            payload,
            login_refused,
        }))
    }
}

/// What a send does when the local queue is full.
#[derive(Debug, Clone, Copy)]
enum Queue {
    Wait,
    Refuse,
}

/// Whether the brokers refused the producer's id or epoch: it will not
/// send again.
fn is_fenced(error: &KafkaError) -> bool {
    matches!(
        error.rdkafka_error_code(),
        Some(
            RDKafkaErrorCode::ProducerFenced
                | RDKafkaErrorCode::InvalidProducerEpoch
                | RDKafkaErrorCode::UnknownProducerId
        )
    )
}

/// A command with a fresh id, stamped now; a reservation's deadline is
/// checked against that instant (after it, at most seven days ahead), and
/// so is a sale window (neither end more than a year ahead). The
/// id is a version 4 UUID from a thread-local CSPRNG (uuid's `fast-rng`)
/// rather than a `getrandom` system call per command.
fn new_command(sku: Sku, body: CommandBody) -> Result<Command, ProducerError> {
    let occurred_at = now_millis();
    match &body {
        CommandBody::Deduct(d) => {
            d.check_deadline(occurred_at)?;
            d.check_basket_line()?;
        }
        CommandBody::Window(w) => w.window.check_ahead(occurred_at)?,
        _ => {}
    }
    Ok(Command {
        command_id: CommandId::new(uuid::Uuid::new_v4().to_string())?,
        sku,
        occurred_at,
        body,
    })
}

/// Now, in milliseconds since the Unix epoch: the time a command is
/// stamped with, and a hold's deadline is counted from.
pub(crate) fn now_millis() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or_default()
}

/// How far back [`LedgerProducer::locate`] reads at most.
const LOCATE_DEPTH: i64 = 1_000_000;

/// Reads `partition` backwards from its end, in windows four times larger
/// each time, for the record of `id`.
fn locate_blocking(
    config: &ClientConfig,
    topic: &str,
    partition: i32,
    id: &CommandId,
) -> Result<i64, KafkaError> {
    use rdkafka::consumer::{BaseConsumer, Consumer};
    use rdkafka::{Message, Offset, TopicPartitionList};
    const WAIT: Duration = Duration::from_secs(10);
    let mut config = config.clone();
    for producer_only in [
        "acks",
        "enable.idempotence",
        "linger.ms",
        "message.timeout.ms",
        "compression.type",
    ] {
        config.remove(producer_only);
    }
    let consumer: BaseConsumer = config
        // librdkafka assigns only through a group; nothing is committed.
        .set("group.id", "stockledger-locate")
        .set("enable.auto.commit", "false")
        .set("enable.partition.eof", "false")
        .create()?;
    let (low, high) = stockledger_kafka::topic::watermarks(&consumer, topic, partition, WAIT)?;
    let mut end = high;
    let mut window = 1_000;
    while end > low && high - end < LOCATE_DEPTH {
        let start = (end - window).max(low);
        let mut assignment = TopicPartitionList::new();
        assignment.add_partition_offset(topic, partition, Offset::Offset(start))?;
        consumer.assign(&assignment)?;
        let deadline = std::time::Instant::now() + WAIT;
        let mut next = start;
        while next < end && std::time::Instant::now() < deadline {
            let Some(message) = consumer.poll(Duration::from_millis(200)) else {
                continue;
            };
            let message = message?;
            next = message.offset() + 1;
            let found = message
                .payload()
                .and_then(|p| codec::decode_command(p).ok())
                .is_some_and(|c| c.command_id == *id);
            if found && message.offset() < end {
                return Ok(message.offset());
            }
        }
        end = start;
        window *= 4;
    }
    Err(KafkaError::MessageConsumption(RDKafkaErrorCode::NoOffset))
}
