//! Copying the command log into a new topic with another partition count.
//!
//! Adding partitions to a topic moves SKUs to other partitions: the records
//! of one SKU end up on two partitions and no consumer can apply them in
//! order. The way out is a new topic where every record sits on its key's
//! home partition for the new count. Each source partition is read in order
//! and the partitions are merged by record timestamp (ties by partition), so
//! a partition's own order is always kept and a SKU whose records span two
//! partitions (before and after the growth) gets them in the order they were
//! written. Timestamps, keys, payloads and headers are copied unchanged.

use std::future::Future;
use std::time::Duration;

use futures::future::join_all;
use rdkafka::consumer::{Consumer, StreamConsumer};
use rdkafka::error::KafkaError;
use rdkafka::message::{Headers, Message, OwnedHeaders, OwnedMessage};
use rdkafka::producer::future_producer::DeliveryFuture;
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{Offset, TopicPartitionList};
use stockledger_core::partition::home_partition;
use stockledger_kafka::admin::{command_topic_spec, create_topics, AdminError};
use stockledger_kafka::config::CONTRACT_SETTINGS;
use stockledger_kafka::topic::{partitions_of, watermarks};
use stockledger_kafka::KafkaConfig;
use tracing::info;

/// Records handed to the producer before waiting for their deliveries.
const IN_FLIGHT: usize = 10_000;

#[derive(Debug, Clone)]
pub struct RepartitionConfig {
    pub kafka: KafkaConfig,
    /// The command topic to copy.
    pub from: String,
    /// The topic to create and fill; it must not exist, or be empty.
    pub to: String,
    pub partitions: i32,
    pub replication: i32,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RepartitionReport {
    /// Records copied.
    pub records: u64,
    /// Records per partition of the new topic.
    pub per_partition: Vec<u64>,
    /// The source's partition count.
    pub source_partitions: i32,
    /// The copy was stopped before it finished; the new topic is partial.
    pub interrupted: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum RepartitionError {
    #[error("a Kafka request failed")]
    Kafka(#[from] KafkaError),
    #[error(transparent)]
    Admin(#[from] AdminError),
    #[error("topic {0} does not exist")]
    NoSuchTopic(String),
    #[error("--partitions: must be at least 1, got {0}")]
    Partitions(i32),
    #[error("--to: the new topic must differ from the command topic {0}")]
    SameTopic(String),
    #[error(
        "--to: topic {topic} already holds {records} records; choose a topic that does not exist \
         (or delete it first)"
    )]
    TargetNotEmpty { topic: String, records: i64 },
    #[error(
        "--to: topic {topic} exists with {found} partitions, not {wanted}; choose a topic that \
         does not exist"
    )]
    TargetPartitions {
        topic: String,
        found: i32,
        wanted: i32,
    },
    #[error(
        "partition {partition} of {topic} begins at offset {earliest}: records before it are gone \
         (deleted by retention), so a copy would not be the whole log"
    )]
    Truncated {
        topic: String,
        partition: i32,
        earliest: i64,
    },
    #[error("copying the record at partition {partition} offset {offset}")]
    Copy {
        partition: i32,
        offset: i64,
        #[source]
        source: KafkaError,
    },
}

/// Copies the log of `config.from`, each partition up to the end the copy
/// finds (producers must be stopped first), into
/// `config.to` (created with the command topic's settings).
pub async fn repartition(
    config: RepartitionConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
    mut on_progress: impl FnMut(u64, u64) + Send,
) -> Result<RepartitionReport, RepartitionError> {
    let stop = stockledger_runtime::stop::stop_flag(shutdown);
    if config.partitions < 1 {
        return Err(RepartitionError::Partitions(config.partitions));
    }
    if config.from == config.to {
        return Err(RepartitionError::SameTopic(config.from.clone()));
    }
    let (sources, total) = check_source(&config)?;
    let spec = command_topic_spec(&config.to, config.partitions, config.replication);
    create_topics(&config.kafka, &[spec]).await?;
    // One consumer per source partition, so each is read in its own order.
    let mut readers = sources
        .iter()
        .map(|&p| Source::open(&config, p))
        .collect::<Result<Vec<_>, _>>()?;
    let producer: FutureProducer = config
        .kafka
        .client_config(&CONTRACT_SETTINGS)
        .set("linger.ms", "5")
        .create()?;
    info!(from = %config.from, to = %config.to, partitions = config.partitions, "repartition started");

    let mut report = RepartitionReport {
        per_partition: vec![0; config.partitions as usize],
        source_partitions: sources.len() as i32,
        ..RepartitionReport::default()
    };
    let mut pending: Vec<(DeliveryFuture, (i32, i64))> = Vec::new();
    loop {
        if *stop.borrow() {
            report.interrupted = true;
            break;
        }
        for source in &mut readers {
            source.fill().await?;
        }
        // The earliest head (by timestamp, then partition) goes next.
        let Some(source) = readers
            .iter_mut()
            .filter(|s| s.head.is_some())
            .min_by_key(|s| (s.head.as_ref().map(timestamp_of), s.partition))
        else {
            break;
        };
        let Some(record) = source.head.take() else {
            break;
        };
        let partition = home_partition(record.key().unwrap_or_default(), config.partitions);
        let out = copy_of(&record, &config.to, partition);
        let delivery = enqueue(&producer, out)
            .await
            .map_err(|source| RepartitionError::Copy {
                partition: record.partition(),
                offset: record.offset(),
                source,
            })?;
        pending.push((delivery, (record.partition(), record.offset())));
        report.records += 1;
        report.per_partition[partition as usize] += 1;
        if pending.len() >= IN_FLIGHT {
            settle(std::mem::take(&mut pending)).await?;
            on_progress(report.records, total);
        }
    }
    settle(pending).await?;
    on_progress(report.records, total.max(report.records));
    info!(records = report.records, "repartition finished");
    Ok(report)
}

/// The source topic's partitions, once it is known to exist whole (its
/// earliest offsets 0: a truncated log cannot be copied in order) and the
/// target may be created, and how many records they hold now.
fn check_source(config: &RepartitionConfig) -> Result<(Vec<i32>, u64), RepartitionError> {
    let reader: StreamConsumer = config.kafka.client_config(&[]).create()?;
    let sources = partitions_of(&reader, &config.from)?;
    if sources.is_empty() {
        return Err(RepartitionError::NoSuchTopic(config.from.clone()));
    }
    check_target(config, &reader)?;
    let mut total = 0u64;
    for &p in &sources {
        let (earliest, end) = watermarks(&reader, &config.from, p, Duration::from_secs(30))?;
        total += end.max(0) as u64;
        if earliest > 0 {
            return Err(RepartitionError::Truncated {
                topic: config.from.clone(),
                partition: p,
                earliest,
            });
        }
    }
    Ok((sources, total))
}

/// `record` as it goes to `partition` of `topic`: the same key, payload,
/// timestamp and headers.
fn copy_of<'a>(
    record: &'a OwnedMessage,
    topic: &'a str,
    partition: i32,
) -> FutureRecord<'a, [u8], [u8]> {
    let mut out = FutureRecord::to(topic)
        .partition(partition)
        .key(record.key().unwrap_or_default())
        .payload(record.payload().unwrap_or_default());
    if let Some(ts) = record.timestamp().to_millis() {
        out = out.timestamp(ts);
    }
    if let Some(headers) = record.headers() {
        let copied = headers.iter().fold(OwnedHeaders::new(), |all, h| {
            all.insert(rdkafka::message::Header {
                key: h.key,
                value: h.value,
            })
        });
        out = out.headers(copied);
    }
    out
}

/// The target must be new, or empty with the wanted partition count.
fn check_target(
    config: &RepartitionConfig,
    reader: &StreamConsumer,
) -> Result<(), RepartitionError> {
    let existing = partitions_of(reader, &config.to)?;
    if existing.is_empty() {
        return Ok(());
    }
    let mut records = 0;
    for &p in &existing {
        let (low, high) = watermarks(reader, &config.to, p, Duration::from_secs(30))?;
        records += high - low;
    }
    if records > 0 {
        return Err(RepartitionError::TargetNotEmpty {
            topic: config.to.clone(),
            records,
        });
    }
    if existing.len() as i32 != config.partitions {
        return Err(RepartitionError::TargetPartitions {
            topic: config.to.clone(),
            found: existing.len() as i32,
            wanted: config.partitions,
        });
    }
    Ok(())
}

fn timestamp_of(m: &OwnedMessage) -> i64 {
    m.timestamp().to_millis().unwrap_or(i64::MIN)
}

/// One partition of the source, read up to its end (partition EOF).
struct Source {
    partition: i32,
    /// The end was reached.
    done: bool,
    consumer: StreamConsumer,
    head: Option<OwnedMessage>,
}

impl Source {
    /// A reader of `partition` of the source topic from its beginning.
    fn open(config: &RepartitionConfig, partition: i32) -> Result<Self, KafkaError> {
        let consumer: StreamConsumer = config
            .kafka
            .client_config(&[
                // Partitions are assigned, never subscribed: the group
                // only names the client; nothing is committed.
                ("group.id", "stockledger-repartition"),
                ("enable.auto.commit", "false"),
                // The end of a partition is where the broker reports EOF, as
                // for every reader of the whole log (topic::read_topic).
                ("enable.partition.eof", "true"),
            ])
            .create()?;
        let mut assignment = TopicPartitionList::new();
        assignment.add_partition_offset(&config.from, partition, Offset::Beginning)?;
        consumer.assign(&assignment)?;
        Ok(Self {
            partition,
            done: false,
            consumer,
            head: None,
        })
    }

    /// Reads the next record into `head` unless it is there or the end is reached.
    async fn fill(&mut self) -> Result<(), KafkaError> {
        if self.head.is_some() || self.done {
            return Ok(());
        }
        match self.consumer.recv().await {
            Ok(m) => self.head = Some(m.detach()),
            Err(KafkaError::PartitionEOF(_)) => self.done = true,
            Err(e) => return Err(e),
        }
        Ok(())
    }
}

/// Hands one record to the producer, waiting while its queue is full.
async fn enqueue(
    producer: &FutureProducer,
    mut record: FutureRecord<'_, [u8], [u8]>,
) -> Result<DeliveryFuture, KafkaError> {
    loop {
        match producer.send_result(record) {
            Ok(delivery) => return Ok(delivery),
            Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back)) => {
                record = back;
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            Err((e, _)) => return Err(e),
        }
    }
}

/// Waits for every delivery; the first failure ends the copy.
async fn settle(pending: Vec<(DeliveryFuture, (i32, i64))>) -> Result<(), RepartitionError> {
    let (deliveries, sources): (Vec<_>, Vec<_>) = pending.into_iter().unzip();
    for (result, (partition, offset)) in join_all(deliveries).await.into_iter().zip(sources) {
        let failure = match result {
            Ok(Ok(_)) => continue,
            Ok(Err((e, _))) => e,
            Err(_) => KafkaError::Canceled,
        };
        return Err(RepartitionError::Copy {
            partition,
            offset,
            source: failure,
        });
    }
    Ok(())
}
