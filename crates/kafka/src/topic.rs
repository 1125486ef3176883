//! Reading a whole topic to its current end, its partitions, and a
//! consumer group's committed offsets.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::error::KafkaError;
use rdkafka::message::{Headers, Message};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{Offset, TopicPartitionList};

use crate::config::{KafkaConfig, FETCH_QUEUE_BACKOFF_MS, READ_TO_END_FETCH_WAIT_MS};
use crate::lag::LagContext;

/// One record as read from the log.
#[derive(Debug, Clone)]
pub struct LogRecord {
    pub partition: i32,
    pub offset: i64,
    pub key: Option<Vec<u8>>,
    pub payload: Option<Vec<u8>>,
    pub timestamp: Option<i64>,
    pub headers: Vec<(String, Vec<u8>)>,
}

impl LogRecord {
    /// The text of the first header named `name`, if there is one (bytes
    /// that are not UTF-8 shown as U+FFFD).
    pub fn header(&self, name: &str) -> Option<String> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| String::from_utf8_lossy(v).into_owned())
    }
}

#[derive(Debug, thiserror::Error)]
pub enum LogError {
    #[error("a Kafka request failed")]
    Kafka(#[from] KafkaError),
    #[error("topic {0} does not exist")]
    NoSuchTopic(String),
    #[error("reading {topic} did not reach the high watermarks within {timeout:?}")]
    Timeout { topic: String, timeout: Duration },
    #[error("the log reader task failed: {0}")]
    Task(String),
}

/// The partition ids of `topic` (empty if it does not exist), waiting up to
/// [`COORDINATOR_WAIT`] for a broker that has no leaders yet. Blocking.
pub fn partitions_of<C: ConsumerContext, T: Consumer<C>>(
    consumer: &T,
    topic: &str,
) -> Result<Vec<i32>, KafkaError> {
    let metadata = retry_while(leaders_moving, || {
        consumer.fetch_metadata(Some(topic), Duration::from_secs(10))
    })?;
    Ok(metadata
        .topics()
        .iter()
        .filter(|t| t.name() == topic)
        .flat_map(|t| t.partitions().iter().map(|p| p.id()))
        .collect())
}

/// How many partitions `topic` has.
pub async fn partition_count(kafka: &KafkaConfig, topic: &str) -> Result<i32, LogError> {
    let consumer: BaseConsumer = kafka.client_config(&[]).create()?;
    let topic = topic.to_owned();
    tokio::task::spawn_blocking(move || {
        let count = partitions_of(&consumer, &topic)?.len() as i32;
        if count == 0 {
            return Err(LogError::NoSuchTopic(topic));
        }
        Ok(count)
    })
    .await
    .map_err(|e| LogError::Task(e.to_string()))?
}

/// How many records `topic` holds (the sum over its partitions of the high
/// watermark less the first offset kept).
pub async fn record_count(kafka: &KafkaConfig, topic: &str) -> Result<i64, LogError> {
    Ok(watermarks_of(kafka, topic)
        .await?
        .values()
        .map(|(low, high)| high - low)
        .sum())
}

/// The low and high watermarks of each partition of `topic`: the first
/// offset kept and the offset the next record will get.
pub async fn watermarks_of(
    kafka: &KafkaConfig,
    topic: &str,
) -> Result<BTreeMap<i32, (i64, i64)>, LogError> {
    let consumer: BaseConsumer = kafka.client_config(&[]).create()?;
    let topic = topic.to_owned();
    tokio::task::spawn_blocking(move || {
        let partitions = partitions_of(&consumer, &topic)?;
        if partitions.is_empty() {
            return Err(LogError::NoSuchTopic(topic));
        }
        partitions
            .into_iter()
            .map(|p| {
                Ok((
                    p,
                    watermarks(&consumer, &topic, p, Duration::from_secs(10))?,
                ))
            })
            .collect()
    })
    .await
    .map_err(|e| LogError::Task(e.to_string()))?
}

/// The names of the topics on the brokers that start with `prefix`.
pub async fn topics_starting_with(
    kafka: &KafkaConfig,
    prefix: &str,
) -> Result<Vec<String>, LogError> {
    let consumer: BaseConsumer = kafka.client_config(&[]).create()?;
    let prefix = prefix.to_owned();
    tokio::task::spawn_blocking(move || {
        let metadata = consumer.fetch_metadata(None, Duration::from_secs(10))?;
        Ok(metadata
            .topics()
            .iter()
            .map(|t| t.name().to_owned())
            .filter(|name| name.starts_with(&prefix))
            .collect())
    })
    .await
    .map_err(|e| LogError::Task(e.to_string()))?
}

/// The offsets `group` has committed on `topic`, by partition (partitions
/// without a commit are left out).
pub async fn committed_offsets(
    kafka: &KafkaConfig,
    group: &str,
    topic: &str,
) -> Result<HashMap<i32, i64>, LogError> {
    let consumer: BaseConsumer = kafka
        .client_config(&[("group.id", group), ("enable.auto.commit", "false")])
        .create()?;
    let topic = topic.to_owned();
    tokio::task::spawn_blocking(move || {
        let partitions = partitions_of(&consumer, &topic)?;
        Ok(committed_on(&consumer, &topic, &partitions)?)
    })
    .await
    .map_err(|e| LogError::Task(e.to_string()))?
}

/// A consumer that reads the log by assignment, outside any group's
/// progress, and hears where each partition ends.
const LOG_READER: [(&str, &str); 4] = [
    ("group.id", "stockledger-log-reader"),
    ("enable.auto.commit", "false"),
    ("enable.auto.offset.store", "false"),
    ("enable.partition.eof", "true"),
];

/// How long [`committed_on`] waits for the group's coordinator, and
/// [`partitions_of`] and [`watermarks`] for leaders, to come up: a broker that has just started
/// (or moved a coordinator) answers
/// `NOT_COORDINATOR` or `COORDINATOR_LOAD_IN_PROGRESS` for a few seconds
/// (Apache Kafka creates and loads `__consumer_offsets` on the first
/// group request), and librdkafka hands those back rather than retrying.
pub const COORDINATOR_WAIT: Duration = Duration::from_secs(30);

/// Whether `error` says the group's coordinator is not there yet, which a
/// later attempt outlives.
pub fn coordinator_moving(error: &KafkaError) -> bool {
    use rdkafka::types::RDKafkaErrorCode as Code;
    matches!(
        error.rdkafka_error_code(),
        Some(
            Code::NotCoordinator | Code::CoordinatorNotAvailable | Code::CoordinatorLoadInProgress
        )
    )
}

/// Runs `attempt` until it ends in an error `passing` does not accept, or
/// [`COORDINATOR_WAIT`] is over. Blocking.
fn retry_while<T>(
    passing: fn(&KafkaError) -> bool,
    mut attempt: impl FnMut() -> Result<T, KafkaError>,
) -> Result<T, KafkaError> {
    let deadline = Instant::now() + COORDINATOR_WAIT;
    loop {
        match attempt() {
            Err(e) if passing(&e) && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(200));
            }
            other => return other,
        }
    }
}

/// The low and high watermarks of `topic`'s `partition`, waiting up to
/// [`COORDINATOR_WAIT`] for a leader as [`partitions_of`] does. Blocking.
pub fn watermarks<C: ConsumerContext, T: Consumer<C>>(
    consumer: &T,
    topic: &str,
    partition: i32,
    timeout: Duration,
) -> Result<(i64, i64), KafkaError> {
    retry_while(leaders_moving, || {
        consumer.fetch_watermarks(topic, partition, timeout)
    })
}

/// Whether `error` says the partitions have no leader for now, or one
/// just elected, which a later attempt outlives: Apache Kafka answers so
/// for a few seconds after it restarts or resumes from a pause, until its
/// controller has unfenced it, and after a leader of a replicated
/// partition dies (`OffsetNotAvailable`: the new leader's high watermark
/// has not caught up; the leader epochs a client knows are behind).
///
/// Also two of librdkafka's own while a node of a cluster is down or
/// restarting: `DestroyBroker` (a request sent through a bootstrap
/// connection the client dropped for the broker's own) and
/// `TimedOutQueue` (the request waited for a connection to the dead node;
/// the next attempt goes to a live one). With every broker away the
/// client says `BrokerTransportFailure`, which is not asked again.
///
/// The nemesis of seeds 20261125 and 1 found a starting applier exiting on
/// `DestroyBroker`, `TimedOutQueue` and `OffsetNotAvailable`.
pub fn leaders_moving(error: &KafkaError) -> bool {
    use rdkafka::types::RDKafkaErrorCode as Code;
    matches!(
        error.rdkafka_error_code(),
        Some(
            Code::UnknownPartition
                | Code::LeaderNotAvailable
                | Code::NotLeaderForPartition
                | Code::OffsetNotAvailable
                | Code::FencedLeaderEpoch
                | Code::UnknownLeaderEpoch
                | Code::DestroyBroker
                | Code::TimedOutQueue
        )
    )
}

/// The offsets the group of `consumer` has committed on `partitions` of
/// `topic` (partitions without a commit are left out), waiting up to
/// [`COORDINATOR_WAIT`] for the group's coordinator. Blocking.
pub fn committed_on<C: ConsumerContext, T: Consumer<C>>(
    consumer: &T,
    topic: &str,
    partitions: &[i32],
) -> Result<HashMap<i32, i64>, KafkaError> {
    let mut wanted = TopicPartitionList::new();
    for &p in partitions {
        wanted.add_partition(topic, p);
    }
    let committed = retry_while(coordinator_moving, || {
        consumer.committed_offsets(wanted.clone(), Duration::from_secs(10))
    })?;
    Ok(committed
        .elements()
        .iter()
        .filter_map(|e| match e.offset() {
            Offset::Offset(o) => Some((e.partition(), o)),
            _ => None,
        })
        .collect())
}

/// Reads every record of `topic` from the beginning to the end of each
/// partition, sorted by partition and offset.
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
    // The end of each partition is where the broker reports partition EOF
    // (the high watermark of a fetch). ListOffsets is not used: some
    // Kafka-compatible brokers answer it with the last batch's base offset.
    let consumer: BaseConsumer<LagContext> = kafka
        .client_config(
            &[
                &LOG_READER[..],
                &[READ_TO_END_FETCH_WAIT_MS, FETCH_QUEUE_BACKOFF_MS],
            ]
            .concat(),
        )
        .create_with_context(LagContext::new(
            topic,
            Default::default(),
            Default::default(),
        ))?;
    let partitions = partitions_of(&consumer, topic)?;
    if partitions.is_empty() {
        return Err(LogError::NoSuchTopic(topic.to_owned()));
    }
    let mut assignment = TopicPartitionList::new();
    for &p in &partitions {
        assignment.add_partition_offset(topic, p, Offset::Beginning)?;
    }
    consumer.assign(&assignment)?;
    let mut pending: HashSet<i32> = partitions.into_iter().collect();
    let mut records = Vec::new();
    let deadline = Instant::now() + timeout;
    while !pending.is_empty() {
        check_deadline(deadline, topic, timeout)?;
        match consumer.poll(Duration::from_millis(200)) {
            None => {}
            Some(Err(KafkaError::PartitionEOF(p))) => {
                pending.remove(&p);
            }
            // A connection to a broker that went away, reported while
            // librdkafka reconnects on its own: the deadline bounds it.
            Some(Err(KafkaError::MessageConsumption(
                RDKafkaErrorCode::BrokerTransportFailure | RDKafkaErrorCode::AllBrokersDown,
            ))) => {}
            Some(Err(e)) => return Err(e.into()),
            Some(Ok(message)) => records.push(LogRecord::of(&message)),
        }
    }
    records.sort_by_key(|r| (r.partition, r.offset));
    Ok(records)
}

impl LogRecord {
    fn of(message: &impl Message) -> Self {
        Self {
            partition: message.partition(),
            offset: message.offset(),
            key: message.key().map(<[u8]>::to_vec),
            payload: message.payload().map(<[u8]>::to_vec),
            timestamp: message.timestamp().to_millis(),
            headers: message
                .headers()
                .map(|hs| {
                    hs.iter()
                        .map(|h| (h.key.to_owned(), h.value.unwrap_or_default().to_vec()))
                        .collect()
                })
                .unwrap_or_default(),
        }
    }
}

/// The one record at `offset` of `topic`'s `partition`, read within
/// `timeout` (`None` if the partition holds no such offset).
pub async fn read_at(
    kafka: &KafkaConfig,
    topic: &str,
    partition: i32,
    offset: i64,
    timeout: Duration,
) -> Result<Option<LogRecord>, LogError> {
    let consumer: BaseConsumer = kafka
        .client_config(&[&LOG_READER[..], &[READ_TO_END_FETCH_WAIT_MS]].concat())
        .create()?;
    let topic = topic.to_owned();
    tokio::task::spawn_blocking(move || {
        let mut assignment = TopicPartitionList::new();
        assignment.add_partition_offset(&topic, partition, Offset::Offset(offset))?;
        consumer.assign(&assignment)?;
        let deadline = Instant::now() + timeout;
        loop {
            check_deadline(deadline, &topic, timeout)?;
            match consumer.poll(Duration::from_millis(200)) {
                None => {}
                Some(Err(KafkaError::PartitionEOF(_))) => return Ok(None),
                Some(Err(e)) => return Err(e.into()),
                Some(Ok(message)) if message.offset() == offset => {
                    return Ok(Some(LogRecord::of(&message)))
                }
                // Compacted away or past it: the offset holds nothing.
                Some(Ok(_)) => return Ok(None),
            }
        }
    })
    .await
    .map_err(|e| LogError::Task(e.to_string()))?
}

/// How many replicas `topic`'s first partition has (its replication
/// factor).
pub async fn replication_of(kafka: &KafkaConfig, topic: &str) -> Result<i32, LogError> {
    let consumer: BaseConsumer = kafka.client_config(&[]).create()?;
    let topic = topic.to_owned();
    tokio::task::spawn_blocking(move || {
        let metadata = consumer.fetch_metadata(Some(&topic), Duration::from_secs(10))?;
        let replicas = metadata
            .topics()
            .iter()
            .find(|t| t.name() == topic)
            .and_then(|t| t.partitions().first().map(|p| p.replicas().len()))
            .ok_or_else(|| LogError::NoSuchTopic(topic.clone()))?;
        Ok(i32::try_from(replicas).unwrap_or(1).max(1))
    })
    .await
    .map_err(|e| LogError::Task(e.to_string()))?
}

/// The last record of `topic`'s `partition`, if it holds any, read within
/// `timeout`. It reads from the record before the high watermark to the
/// end, so a broker that reports the watermark as the last batch's base
/// offset + 1 still gives the true last record.
pub async fn last_record(
    kafka: &KafkaConfig,
    topic: &str,
    partition: i32,
    timeout: Duration,
) -> Result<Option<LogRecord>, LogError> {
    Ok(last_records(kafka, topic, partition, 1, timeout)
        .await?
        .pop())
}

/// The last `count` records of `topic`'s `partition` (fewer if it holds
/// fewer), oldest first, read within `timeout`, as [`last_record`] reads
/// the last.
pub async fn last_records(
    kafka: &KafkaConfig,
    topic: &str,
    partition: i32,
    count: usize,
    timeout: Duration,
) -> Result<Vec<LogRecord>, LogError> {
    let consumer: BaseConsumer = kafka
        .client_config(&[&LOG_READER[..], &[READ_TO_END_FETCH_WAIT_MS]].concat())
        .create()?;
    let topic = topic.to_owned();
    let keep = count.max(1);
    tokio::task::spawn_blocking(move || {
        let (low, high) = watermarks(&consumer, &topic, partition, timeout)?;
        if high <= low {
            return Ok(Vec::new());
        }
        let back = i64::try_from(keep).unwrap_or(i64::MAX);
        let from = high.saturating_sub(back).max(low);
        let mut assignment = TopicPartitionList::new();
        assignment.add_partition_offset(&topic, partition, Offset::Offset(from))?;
        consumer.assign(&assignment)?;
        let deadline = Instant::now() + timeout;
        let mut last = std::collections::VecDeque::with_capacity(keep);
        loop {
            check_deadline(deadline, &topic, timeout)?;
            match consumer.poll(Duration::from_millis(200)) {
                None => {}
                Some(Err(KafkaError::PartitionEOF(_))) => return Ok(last.into()),
                Some(Err(e)) => return Err(e.into()),
                Some(Ok(message)) => {
                    if last.len() == keep {
                        last.pop_front();
                    }
                    last.push_back(LogRecord::of(&message));
                }
            }
        }
    })
    .await
    .map_err(|e| LogError::Task(e.to_string()))?
}

/// A read of `topic` that was given `timeout` has run out at `deadline`.
fn check_deadline(deadline: Instant, topic: &str, timeout: Duration) -> Result<(), LogError> {
    if Instant::now() > deadline {
        return Err(LogError::Timeout {
            topic: topic.to_owned(),
            timeout,
        });
    }
    Ok(())
}

/// A position the log was expected to hold and does not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Missing {
    pub partition: i32,
    /// The offset that should be there.
    pub offset: i64,
    /// The partition's high watermark as the broker reports it.
    pub end: i64,
}

/// Which of `wanted` (partition, offset) positions of `topic` the broker no
/// longer holds because the partition's log ends at or before them (a
/// broker that lost its log, a topic deleted and recreated). A partition
/// whose reported end is past the offset holds it; otherwise the record is
/// fetched, since some Kafka-compatible brokers report the end as the last
/// batch's base offset + 1.
pub async fn missing_positions(
    kafka: &KafkaConfig,
    topic: &str,
    wanted: Vec<(i32, i64)>,
    timeout: Duration,
) -> Result<Vec<Missing>, LogError> {
    let kafka = kafka.clone();
    let topic = topic.to_owned();
    tokio::task::spawn_blocking(move || missing_positions_blocking(&kafka, &topic, wanted, timeout))
        .await
        .map_err(|e| LogError::Task(e.to_string()))?
}

fn missing_positions_blocking(
    kafka: &KafkaConfig,
    topic: &str,
    wanted: Vec<(i32, i64)>,
    timeout: Duration,
) -> Result<Vec<Missing>, LogError> {
    let consumer: BaseConsumer = kafka.client_config(&LOG_READER).create()?;
    let partitions: HashSet<i32> = partitions_of(&consumer, topic)?.into_iter().collect();
    let mut unsure = HashMap::new();
    let mut missing = Vec::new();
    for (partition, offset) in wanted {
        if !partitions.contains(&partition) {
            missing.push(Missing {
                partition,
                offset,
                end: 0,
            });
            continue;
        }
        let (_, end) = watermarks(&consumer, topic, partition, Duration::from_secs(10))?;
        if end <= offset {
            unsure.insert(partition, (offset, end));
        }
    }
    if unsure.is_empty() {
        return Ok(missing);
    }
    // Read from the last record the reported end names: past the true end
    // some brokers answer an empty fetch forever rather than "out of
    // range", while reading up to the end always ends in partition EOF.
    let mut assignment = TopicPartitionList::new();
    for (&partition, &(_, end)) in &unsure {
        assignment.add_partition_offset(topic, partition, Offset::Offset((end - 1).max(0)))?;
    }
    consumer.assign(&assignment)?;
    let deadline = Instant::now() + timeout;
    while !unsure.is_empty() {
        check_deadline(deadline, topic, timeout)?;
        match consumer.poll(Duration::from_millis(200)) {
            None => {}
            Some(Ok(message)) => {
                let partition = message.partition();
                if unsure
                    .get(&partition)
                    .is_some_and(|&(offset, _)| message.offset() >= offset)
                {
                    unsure.remove(&partition);
                }
            }
            Some(Err(KafkaError::PartitionEOF(partition))) => {
                if let Some((offset, end)) = unsure.remove(&partition) {
                    missing.push(Missing {
                        partition,
                        offset,
                        end,
                    });
                }
            }
            Some(Err(e)) => return Err(e.into()),
        }
    }
    missing.sort_by_key(|m| m.partition);
    Ok(missing)
}

/// `partition:first..=last` for each partition of a batch of records given
/// as `(partition, offset)`, in partition order: how logs and errors name
/// the records a batch or a page covers.
pub fn offset_ranges(records: impl IntoIterator<Item = (i32, i64)>) -> String {
    let mut ranges: std::collections::BTreeMap<i32, (i64, i64)> = Default::default();
    for (partition, offset) in records {
        let range = ranges.entry(partition).or_insert((offset, offset));
        *range = (range.0.min(offset), range.1.max(offset));
    }
    ranges
        .iter()
        .map(|(p, (first, last))| format!("{p}:{first}..={last}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The partition and offset of the first record [`offset_ranges`] names
/// (the first partition's first offset): where a batch starts.
pub fn first_of_ranges(ranges: &str) -> Option<(i32, i64)> {
    let (partition, range) = ranges.split_whitespace().next()?.split_once(':')?;
    let first = range.split("..").next()?;
    Some((partition.parse().ok()?, first.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_is_named_by_the_offsets_it_covers() {
        let records = [(1, 9), (0, 4), (1, 7), (0, 5)];
        assert_eq!(offset_ranges(records), "0:4..=5 1:7..=9");
        assert_eq!(first_of_ranges("0:4..=5 1:7..=9"), Some((0, 4)));
        assert_eq!(offset_ranges([]), "");
        assert_eq!(first_of_ranges(""), None);
    }

    /// Found by the nemesis of seeds 20261125 and 1: an applier started
    /// while a node was down, or just after a leader died, exited on
    /// `DestroyBroker`, `TimedOutQueue` or `OffsetNotAvailable` from its
    /// first requests instead of asking again.
    #[test]
    fn a_metadata_request_on_a_dropped_bootstrap_connection_is_asked_again() {
        use rdkafka::types::RDKafkaErrorCode as Code;
        let error = |code| KafkaError::MetadataFetch(code);
        assert!(leaders_moving(&error(Code::DestroyBroker)));
        assert!(leaders_moving(&error(Code::TimedOutQueue)));
        assert!(leaders_moving(&error(Code::OffsetNotAvailable)));
        assert!(!leaders_moving(&error(Code::BrokerTransportFailure)));
        assert!(leaders_moving(&error(Code::LeaderNotAvailable)));
        assert!(!leaders_moving(&error(Code::TopicAuthorizationFailed)));
        assert!(!leaders_moving(&error(Code::UnknownTopicOrPartition)));
    }
}
