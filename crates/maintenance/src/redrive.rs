//! Sending dead letters back to the command topic once what refused them
//! is fixed (a producer's partitioner, a schema now understood, a key put
//! right upstream and the record re-sent is not this: that is a new record).
//!
//! Each dead letter is judged as the applier would judge it
//! ([`record::interpret`]); one that is still not a command stays where it
//! is, with the reason. One that is goes to its SKU's home partition with
//! its key, payload and headers (the dead-letter headers dropped, a
//! [`REDRIVEN_FROM_HEADER`] added) and its command's own time as the record
//! timestamp, as the producer would have sent it.
//!
//! Re-driving is idempotent: the projection remembers each dead letter sent
//! back ([`Projection::redriven_to`]), and a second run skips it. Were the
//! process to stop between the brokers' ack and that note, the next run
//! sends the record again, and the ledger decides the repeat as a
//! `DUPLICATE` of the first: its effect is still once.

use std::time::Duration;

use rdkafka::error::KafkaError;
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};
use stockledger_core::partition::home_partition;
use stockledger_core::{record, LogPosition};
use stockledger_kafka::config::CONTRACT_SETTINGS;
use stockledger_kafka::names::{
    DLQ_REASON_HEADER, DLQ_SOURCE_HEADER, DLQ_VALUE_LENGTH_HEADER, DLQ_VALUE_SHA256_HEADER,
};
use stockledger_kafka::topic::{partition_count, LogError, LogRecord};
use stockledger_kafka::KafkaConfig;
use stockledger_projection::{Projection, ProjectionError};

/// The header a re-driven record carries: the dead letter it was copied
/// from, as `topic/partition@offset`.
pub const REDRIVEN_FROM_HEADER: &str = "stockledger.redriven-from";

/// What became of one dead letter.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Verdict {
    /// Sent to the command topic, at this position.
    Redriven(LogPosition),
    /// A valid command now; a dry run leaves it where it is.
    WouldRedrive,
    /// Sent back by an earlier run, to this position; not sent again.
    AlreadyRedriven(String),
    /// Still not a command the applier would decide; left in the
    /// dead-letter topic.
    StillInvalid(String),
}

/// What to re-drive, and where to.
#[derive(Debug, Clone)]
pub struct RedriveConfig {
    pub kafka: KafkaConfig,
    /// The dead-letter topic the records were read from.
    pub dlq_topic: String,
    /// The command topic they go back to.
    pub command_topic: String,
    /// Judge each record and say what would happen; send nothing.
    pub dry_run: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum RedriveError {
    #[error("reading the command topic failed")]
    Log(#[from] LogError),
    #[error("the command topic {0} does not exist")]
    NoCommandTopic(String),
    #[error("cannot create the Kafka producer")]
    Client(#[source] KafkaError),
    #[error("sending dead letter {dead_letter} back to {topic} failed")]
    Send {
        dead_letter: String,
        topic: String,
        #[source]
        source: KafkaError,
    },
    #[error("reading or noting what was re-driven in Redis failed")]
    Projection(#[from] ProjectionError),
}

/// Judges each of `dead_letters` (records of `config.dlq_topic`) and sends
/// the valid ones back, one at a time, in the order given; `on_done` hears
/// how many are done. The verdicts are in the same order.
pub async fn redrive(
    config: &RedriveConfig,
    projection: &Projection,
    dead_letters: &[LogRecord],
    mut on_done: impl FnMut(u64) + Send,
) -> Result<Vec<Verdict>, RedriveError> {
    let partitions = partition_count(&config.kafka, &config.command_topic).await?;
    if partitions < 1 {
        return Err(RedriveError::NoCommandTopic(config.command_topic.clone()));
    }
    let producer: FutureProducer = config
        .kafka
        .client_config(&CONTRACT_SETTINGS)
        .create()
        .map_err(RedriveError::Client)?;
    let mut verdicts = Vec::with_capacity(dead_letters.len());
    for (done, letter) in dead_letters.iter().enumerate() {
        let verdict = judge_and_send(config, projection, &producer, partitions, letter).await?;
        verdicts.push(verdict);
        on_done(done as u64 + 1);
    }
    Ok(verdicts)
}

/// The position of a dead letter, as [`REDRIVEN_FROM_HEADER`] names it.
pub fn dead_letter_position(topic: &str, letter: &LogRecord) -> String {
    LogPosition {
        topic: topic.to_owned(),
        partition: letter.partition,
        offset: letter.offset,
    }
    .to_string()
}

async fn judge_and_send(
    config: &RedriveConfig,
    projection: &Projection,
    producer: &FutureProducer,
    partitions: i32,
    letter: &LogRecord,
) -> Result<Verdict, RedriveError> {
    let from = dead_letter_position(&config.dlq_topic, letter);
    if let Some(to) = projection.redriven_to(&from).await? {
        return Ok(Verdict::AlreadyRedriven(to));
    }
    if let Some(sha256) = letter.header(DLQ_VALUE_SHA256_HEADER) {
        let length = letter.header(DLQ_VALUE_LENGTH_HEADER).unwrap_or_default();
        let source = letter.header(DLQ_SOURCE_HEADER).unwrap_or_default();
        return Ok(Verdict::StillInvalid(format!(
            "the dead letter keeps only the value's length ({length} bytes) and SHA-256 \
             ({sha256}); the record itself is at {source}"
        )));
    }
    let command = match record::interpret(letter.key.as_deref(), letter.payload.as_deref()) {
        Ok(command) => command,
        Err(why) => return Ok(Verdict::StillInvalid(why)),
    };
    if config.dry_run {
        return Ok(Verdict::WouldRedrive);
    }
    let key = command.sku.as_str().as_bytes();
    let headers = letter
        .headers
        .iter()
        .filter(|(k, _)| {
            k != DLQ_REASON_HEADER && k != DLQ_SOURCE_HEADER && k != REDRIVEN_FROM_HEADER
        })
        .fold(OwnedHeaders::new(), |all, (k, v)| {
            all.insert(Header {
                key: k,
                value: Some(v),
            })
        })
        .insert(Header {
            key: REDRIVEN_FROM_HEADER,
            value: Some(from.as_bytes()),
        });
    let record = FutureRecord::to(&config.command_topic)
        .partition(home_partition(key, partitions))
        .key(key)
        .payload(letter.payload.as_deref().unwrap_or_default())
        .headers(headers)
        .timestamp(command.occurred_at);
    let delivery = producer
        .send(record, Duration::from_secs(60))
        .await
        .map_err(|(source, _)| RedriveError::Send {
            dead_letter: from.clone(),
            topic: config.command_topic.clone(),
            source,
        })?;
    let to = LogPosition {
        topic: config.command_topic.clone(),
        partition: delivery.partition,
        offset: delivery.offset,
    };
    projection.mark_redriven(&from, &to.to_string()).await?;
    Ok(Verdict::Redriven(to))
}
