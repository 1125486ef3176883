//! Reading a whole topic up to the high watermarks seen at the start, and
//! folding the command log through the reference state machine.

use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::{Offset, TopicPartitionList};
use stockledger_core::Ledger;
use stockledger_producer::KafkaConfig;

use crate::record::interpret;

/// One record as read from the log.
#[derive(Debug, Clone)]
pub struct LogRecord {
    pub partition: i32,
    pub offset: i64,
    pub key: Option<Vec<u8>>,
    pub payload: Option<Vec<u8>>,
    pub timestamp: Option<i64>,
}

#[derive(Debug, thiserror::Error)]
pub enum LogError {
    #[error("Kafka: {0}")]
    Kafka(#[from] KafkaError),
    #[error("topic {0} does not exist")]
    NoSuchTopic(String),
    #[error("reading {topic} did not reach the high watermarks within {timeout:?}")]
    Timeout { topic: String, timeout: Duration },
    #[error("the log reader task failed: {0}")]
    Task(String),
}

/// Reads every record of `topic` from the beginning up to the high
/// watermarks it finds when it starts, in offset order per partition.
pub async fn read_topic(
    kafka: &KafkaConfig,
    topic: &str,
    timeout: Duration,
) -> Result<Vec<LogRecord>, LogError> {
    let kafka = kafka.clone();
    let topic = topic.to_owned();
    tokio::task::spawn_blocking(move || read_topic_blocking(&kafka, &topic, timeout))
        .await
        .map_err(|e| LogError::Task(e.to_string()))?
}

fn read_topic_blocking(
    kafka: &KafkaConfig,
    topic: &str,
    timeout: Duration,
) -> Result<Vec<LogRecord>, LogError> {
    let consumer: BaseConsumer = kafka
        .client_config(&[
            ("group.id", "stockledger-log-reader"),
            ("enable.auto.commit", "false"),
            ("enable.auto.offset.store", "false"),
        ])
        .create()?;
    let metadata = consumer.fetch_metadata(Some(topic), Duration::from_secs(10))?;
    let partitions: Vec<i32> = metadata
        .topics()
        .iter()
        .find(|t| t.name() == topic)
        .map(|t| t.partitions().iter().map(|p| p.id()).collect())
        .unwrap_or_default();
    if partitions.is_empty() {
        return Err(LogError::NoSuchTopic(topic.to_owned()));
    }
    let mut assignment = TopicPartitionList::new();
    let mut remaining = 0usize;
    let mut ends = std::collections::HashMap::new();
    for &p in &partitions {
        let (low, high) = consumer.fetch_watermarks(topic, p, Duration::from_secs(10))?;
        if high > low {
            assignment.add_partition_offset(topic, p, Offset::Beginning)?;
            ends.insert(p, high);
            remaining += 1;
        }
    }
    let mut records = Vec::new();
    if remaining == 0 {
        return Ok(records);
    }
    consumer.assign(&assignment)?;
    let deadline = Instant::now() + timeout;
    while remaining > 0 {
        if Instant::now() > deadline {
            return Err(LogError::Timeout {
                topic: topic.to_owned(),
                timeout,
            });
        }
        let Some(message) = consumer.poll(Duration::from_millis(200)) else {
            continue;
        };
        let message = message?;
        let Some(&end) = ends.get(&message.partition()) else {
            continue;
        };
        if message.offset() >= end {
            continue;
        }
        records.push(LogRecord {
            partition: message.partition(),
            offset: message.offset(),
            key: message.key().map(<[u8]>::to_vec),
            payload: message.payload().map(<[u8]>::to_vec),
            timestamp: message.timestamp().to_millis(),
        });
        if message.offset() + 1 == end {
            remaining -= 1;
        }
    }
    records.sort_by_key(|r| (r.partition, r.offset));
    Ok(records)
}

/// Folds command records through the reference state machine, skipping
/// those that are not valid commands (the applier dead-letters them).
pub fn fold(records: &[LogRecord]) -> Ledger {
    let mut ledger = Ledger::default();
    for record in records {
        if let Ok(command) = interpret(record.key.as_deref(), record.payload.as_deref()) {
            ledger.apply(record.offset, &command);
        }
    }
    ledger
}
