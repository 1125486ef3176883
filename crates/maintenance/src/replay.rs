//! Rebuilding the projection from the log into a fresh prefix, and swapping
//! it in for the live one while the applier keeps running.
//!
//! The replay reads the command topic from the beginning (or from given
//! offsets), folds it as the applier does, batch by batch, into the
//! target prefix, and stops once every partition has reached its end (unless
//! it follows). A swap then replaces, SKU by SKU and atomically, the live
//! state with the rebuilt one, but only where the rebuilt state is at least
//! as far along the log as the live one; a SKU the live applier has moved
//! past is caught up first, so no applied record is lost.
//!
//! A batch is decided and written by a task of its own while the next one
//! is read and decoded, so the two share the machine's cores.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdkafka::consumer::{Consumer, StreamConsumer};
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::{Offset, TopicPartitionList};
use stockledger_kafka::admin::{check_permanent, topic_config, AdminError, NotPermanent};
use stockledger_kafka::config::{FETCH_QUEUE_BACKOFF_MS, READ_TO_END_FETCH_WAIT_MS};
use stockledger_kafka::KafkaConfig;
use tracing::{debug, info, info_span, Instrument};

use stockledger_core::record::interpret;
use stockledger_kafka::lag::LagContext;
use stockledger_kafka::topic::{partitions_of, watermarks};
use stockledger_projection::{Entry, Projection, ProjectionError};

#[derive(Debug, Clone)]
pub struct SwapConfig {
    /// The prefix the applier serves from.
    pub live_prefix: String,
    /// Where replaced live keys go; `None` deletes them.
    pub old_prefix: Option<String>,
}

#[derive(Debug, Clone)]
pub struct ReplayConfig {
    pub kafka: KafkaConfig,
    pub redis_url: String,
    pub topic: String,
    /// The prefix the replay writes.
    pub target_prefix: String,
    /// Where each partition starts; partitions not named start at the beginning.
    pub start: HashMap<i32, i64>,
    /// Keep applying new records after reaching the end (no swap then).
    pub follow: bool,
    pub swap: Option<SwapConfig>,
    /// Records read and applied together: 50,000 by default. A batch's
    /// records of one SKU go to Redis as one run, whose stock is read and
    /// written once, so the more records per SKU a batch holds, the less
    /// Redis works per record; Redis still takes them in script calls of
    /// at most 1,000 records. Nobody waits on a replay's batch, so it can
    /// be wide.
    pub batch_size: usize,
    /// Refuse to start unless the target prefix is empty. Off only when the
    /// target was just seeded from a snapshot.
    pub require_empty_target: bool,
    /// Replay even though the command topic has a finite retention.
    pub allow_finite_retention: bool,
}

impl ReplayConfig {
    pub fn new(
        kafka: KafkaConfig,
        redis_url: impl Into<String>,
        topic: impl Into<String>,
        target_prefix: impl Into<String>,
    ) -> Self {
        Self {
            kafka,
            redis_url: redis_url.into(),
            topic: topic.into(),
            target_prefix: target_prefix.into(),
            start: HashMap::new(),
            follow: false,
            swap: None,
            batch_size: 50_000,
            require_empty_target: true,
            allow_finite_retention: false,
        }
    }
}

/// Where a replay is, reported a few times a second.
#[derive(Debug, Clone, Copy, Default)]
pub struct ReplayProgress {
    pub records: u64,
    /// Records left before the end of the log, as last fetched.
    pub lag: i64,
    pub elapsed: Duration,
    /// Every partition has reached its end at least once.
    pub caught_up: bool,
}

impl ReplayProgress {
    pub fn rate(&self) -> f64 {
        self.records as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

#[derive(Debug, Clone, Default)]
pub struct ReplayReport {
    pub records: u64,
    /// SKUs in the rebuilt prefix (before any swap moved them).
    pub skus: usize,
    /// SKUs swapped into the live prefix.
    pub swapped: usize,
    /// Live SKUs with no record in the log; the swap leaves them as they are.
    pub live_only: Vec<String>,
    /// The replay was stopped before it finished.
    pub interrupted: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    #[error("a Kafka request failed")]
    Kafka(#[from] KafkaError),
    #[error("topic {0} does not exist")]
    NoSuchTopic(String),
    #[error("prefix {prefix} already holds {skus} SKUs; replay into an empty prefix (delete it, or choose another)")]
    TargetNotEmpty { prefix: String, skus: usize },
    #[error("the Redis projection failed")]
    Projection(#[from] ProjectionError),
    #[error(transparent)]
    NotPermanent(#[from] NotPermanent),
    #[error("the runtime stopped while a batch was being applied")]
    RuntimeStopped,
    #[error("reading the configuration of the command topic")]
    TopicConfig(#[from] AdminError),
    /// The broker no longer has records the replay must start from.
    #[error(
        "partition {partition} of {topic} begins at offset {earliest}, but the replay must start \
         at offset {start}: records {start}..{earliest} are gone (deleted by retention). Nothing \
         was written. Restore a snapshot taken at or after offset {earliest} and replay from it \
         (`stockledger snapshot`, then `stockledger replay --from-snapshot`)"
    )]
    Truncated {
        topic: String,
        partition: i32,
        start: i64,
        earliest: i64,
    },
}

impl From<redis::RedisError> for ReplayError {
    fn from(e: redis::RedisError) -> Self {
        Self::Projection(e.into())
    }
}

/// Refuses to start `partition` at `start` when the broker's log begins
/// after it: the records between are gone, and a fold without them would
/// be wrong.
fn check_start(topic: &str, partition: i32, start: i64, earliest: i64) -> Result<(), ReplayError> {
    if earliest > start {
        return Err(ReplayError::Truncated {
            topic: topic.to_owned(),
            partition,
            start,
            earliest,
        });
    }
    Ok(())
}

/// Replays the log into `config.target_prefix`, swapping it in at the end
/// when asked. `on_progress` is called about four times a second.
pub async fn replay(
    config: ReplayConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
    mut on_progress: impl FnMut(&ReplayProgress) + Send,
) -> Result<ReplayReport, ReplayError> {
    let mut stop = stockledger_runtime::stop::stop_flag(shutdown);
    let topic_config = topic_config(&config.kafka, &config.topic).await?;
    check_permanent(&config.topic, &topic_config, config.allow_finite_retention)?;
    let target = open_target(&config).await?;
    let lag = Arc::new(AtomicI64::new(0));
    let (consumer, partitions, assignment) = open_log(&config, lag.clone())?;
    let count = partitions.len() as i32;
    target.mark(&config.topic, count).await?;
    consumer.assign(&assignment)?;
    info!(topic = %config.topic, target = %config.target_prefix, partitions = partitions.len(), "replay started");

    let started = Instant::now();
    let mut progress = ReplayProgress::default();
    let mut at_end: HashSet<i32> = HashSet::new();
    let mut swapped: HashSet<String> = HashSet::new();
    let mut report = ReplayReport::default();
    let mut last_report = Instant::now();
    let mut new_end = false;
    // A batch is read and decoded while the one before it is decided and
    // written, on another of the runtime's threads.
    let mut applying: Option<Applying> = None;
    loop {
        if *stop.borrow() {
            report.interrupted = true;
            break;
        }
        let read = read_batch(
            &consumer,
            &mut stop,
            config.batch_size,
            partitions.len(),
            &mut at_end,
            &mut new_end,
        )
        .await;
        progress.records += finish(applying.take()).await?;
        let read = read?;
        applying = Some(start_apply(&target, read, count, &swapped));
        // Let the apply start on another thread before the next read.
        tokio::task::yield_now().await;
        progress.lag = lag.load(Ordering::Relaxed);
        progress.elapsed = started.elapsed();
        progress.caught_up |= at_end.len() == partitions.len();
        if last_report.elapsed() >= Duration::from_millis(250) {
            on_progress(&progress);
            last_report = Instant::now();
        }
        if at_end.len() < partitions.len() || config.follow || !new_end {
            continue;
        }
        // The end of the log: what was read is applied before any swap.
        progress.records += finish(applying.take()).await?;
        new_end = false;
        let Some(swap) = &config.swap else { break };
        // Swap what is at least as far along as the live state; keep reading
        // for the SKUs the applier has moved past.
        let behind = swap_pass(swap, &target, &mut swapped).await?;
        if behind == 0 {
            hand_over_marker(&config, swap, &target, count).await?;
            break;
        }
        info!(
            behind,
            "some live SKUs are ahead of the replay; catching up"
        );
    }
    // Asked to stop: the batch under way lands (or fails) before the report.
    progress.records += finish(applying.take()).await?;
    progress.elapsed = started.elapsed();
    progress.lag = lag.load(Ordering::Relaxed);
    on_progress(&progress);
    report.records = progress.records;
    report.swapped = swapped.len();
    report.skus = swapped.len() + target.skus().await?.len();
    if let Some(swap) = config.swap.as_ref().filter(|_| !report.interrupted) {
        report.live_only = live_only(&config, swap, &swapped).await?;
    }
    info!(
        records = report.records,
        skus = report.skus,
        swapped = report.swapped,
        "replay finished"
    );
    Ok(report)
}

/// The live SKUs no record of the log rebuilt: left as they were.
async fn live_only(
    config: &ReplayConfig,
    swap: &SwapConfig,
    swapped: &HashSet<String>,
) -> Result<Vec<String>, ReplayError> {
    let live = Projection::connect(&config.redis_url, swap.live_prefix.clone()).await?;
    Ok(live
        .skus()
        .await?
        .into_iter()
        .filter(|s| !swapped.contains(s))
        .collect())
}

/// The projection the replay folds into; with `require_empty_target`, one
/// that holds no SKU yet.
async fn open_target(config: &ReplayConfig) -> Result<Projection, ReplayError> {
    let target = Projection::connect(&config.redis_url, config.target_prefix.clone()).await?;
    let existing = target.skus().await?.len();
    if existing > 0 && config.require_empty_target {
        return Err(ReplayError::TargetNotEmpty {
            prefix: config.target_prefix.clone(),
            skus: existing,
        });
    }
    Ok(target)
}

/// A consumer of the whole log (outside any group's assignment), its
/// partitions, and where each is read from: the configured start, which
/// must not be before the partition's earliest offset.
fn open_log(
    config: &ReplayConfig,
    lag: Arc<AtomicI64>,
) -> Result<(StreamConsumer<LagContext>, Vec<i32>, TopicPartitionList), ReplayError> {
    let consumer: StreamConsumer<LagContext> = config
        .kafka
        .client_config(&[
            (
                "group.id",
                &format!("stockledger-replay-{}", config.target_prefix),
            ),
            ("enable.auto.commit", "false"),
            ("enable.partition.eof", "true"),
            ("statistics.interval.ms", "500"),
            READ_TO_END_FETCH_WAIT_MS,
            FETCH_QUEUE_BACKOFF_MS,
        ])
        .create_with_context(LagContext::new(&config.topic, lag, Default::default()))?;
    let partitions = partitions_of(&consumer, &config.topic)?;
    if partitions.is_empty() {
        return Err(ReplayError::NoSuchTopic(config.topic.clone()));
    }
    let mut assignment = TopicPartitionList::new();
    for &p in &partitions {
        let start = config.start.get(&p).copied().unwrap_or(0);
        let (earliest, _) = watermarks(&consumer, &config.topic, p, Duration::from_secs(30))?;
        check_start(&config.topic, p, start, earliest)?;
        assignment.add_partition_offset(&config.topic, p, Offset::Offset(start))?;
    }
    Ok((consumer, partitions, assignment))
}

/// Once every SKU is swapped in: the live prefix is a whole fold of the
/// log again (this re-marks a Redis that had lost its state), with the
/// furthest offset folded from each partition and the holds' index taken
/// from the target, whose marker goes.
async fn hand_over_marker(
    config: &ReplayConfig,
    swap: &SwapConfig,
    target: &Projection,
    partitions: i32,
) -> Result<(), ReplayError> {
    let live = Projection::connect(&config.redis_url, swap.live_prefix.clone()).await?;
    live.mark(&config.topic, partitions).await?;
    let folded = target
        .marker()
        .await?
        .map(|m| m.applied)
        .unwrap_or_default();
    live.record_applied(&folded.into_iter().collect::<Vec<_>>())
        .await?;
    target.copy_holds_into(&live, partitions).await?;
    target.copy_baskets_into(&live).await?;
    target.unmark().await?;
    Ok(())
}

/// Records a batch makes room for at once: a wider batch grows as it reads.
const READ_CAPACITY: usize = 65_536;

/// A batch read from the log and decoded, not yet applied.
#[derive(Default)]
struct Decoded {
    /// Every record read: (partition, offset, timestamp, the command if
    /// it is a valid one).
    entries: Vec<(i32, i64, i64, Option<stockledger_core::Command>)>,
    /// Records read, valid or not.
    records: u64,
}

/// Reads up to `batch_size` records (or what arrives within 250 ms),
/// decoding each, and notes the partitions that reach their end (a
/// partition newly there sets `new_end`).
async fn read_batch(
    consumer: &StreamConsumer<LagContext>,
    stop: &mut tokio::sync::watch::Receiver<bool>,
    batch_size: usize,
    partitions: usize,
    at_end: &mut HashSet<i32>,
    new_end: &mut bool,
) -> Result<Decoded, ReplayError> {
    let mut batch = Decoded {
        entries: Vec::with_capacity(batch_size.min(READ_CAPACITY)),
        records: 0,
    };
    // One timer for the whole batch, armed only once the log runs dry.
    let deadline = tokio::time::sleep(Duration::from_millis(250));
    tokio::pin!(deadline);
    while batch.records < batch_size as u64 {
        let next = tokio::select! {
            biased;
            r = consumer.recv() => r,
            _ = &mut deadline => break, // apply what we have
            _ = stop.wait_for(|s| *s) => break,
        };
        match next {
            Ok(m) => {
                let (partition, offset) = (m.partition(), m.offset());
                at_end.remove(&partition);
                batch.records += 1;
                let timestamp = m.timestamp().to_millis().unwrap_or_default();
                let command = interpret(m.key(), m.payload()).ok();
                batch.entries.push((partition, offset, timestamp, command));
            }
            Err(KafkaError::PartitionEOF(p)) => {
                *new_end |= at_end.insert(p);
                if at_end.len() == partitions {
                    break;
                }
            }
            Err(e) => return Err(e.into()),
        }
    }
    Ok(batch)
}

/// A batch being decided and written by a task of its own; it answers
/// how many records it held.
type Applying = tokio::task::JoinHandle<Result<u64, ProjectionError>>;

/// Starts applying the valid commands of `batch`, except for SKUs already
/// swapped into the live prefix (the live applier owns them now), and
/// recording in the target's marker how far each partition is folded.
fn start_apply(
    target: &Projection,
    batch: Decoded,
    partitions: i32,
    swapped: &HashSet<String>,
) -> Applying {
    let prepared = target.prepare(
        batch.entries.iter().map(|(p, o, t, command)| Entry {
            partition: *p,
            offset: *o,
            timestamp: *t,
            command: command
                .as_ref()
                .filter(|c| !swapped.contains(c.sku.as_str())),
        }),
        partitions,
    );
    // The prepared batch owns its commands: the decoded ones go now.
    let records = batch.records;
    drop(batch);
    let target = target.clone();
    tokio::spawn(
        async move {
            target.apply(&prepared).await?;
            debug!(runs = prepared.runs(), "applied to the target prefix");
            Ok(records)
        }
        .instrument(info_span!("replay_batch", records)),
    )
}

/// Waits for the batch under way, if any: how many records it held.
async fn finish(applying: Option<Applying>) -> Result<u64, ReplayError> {
    let Some(task) = applying else { return Ok(0) };
    match task.await {
        Ok(applied) => Ok(applied?),
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        Err(_) => Err(ReplayError::RuntimeStopped),
    }
}

/// Swaps every rebuilt SKU that is not behind its live state; returns how
/// many are behind.
async fn swap_pass(
    swap: &SwapConfig,
    target: &Projection,
    swapped: &mut HashSet<String>,
) -> Result<usize, ReplayError> {
    let mut behind = 0;
    for sku in target.skus().await? {
        if target
            .swap_into(&sku, &swap.live_prefix, swap.old_prefix.as_deref())
            .await?
        {
            swapped.insert(sku);
        } else {
            behind += 1;
        }
    }
    Ok(behind)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_log_that_begins_after_the_start_is_refused_naming_both_offsets_and_the_fix() {
        assert!(check_start("t", 0, 0, 0).is_ok());
        assert!(
            check_start("t", 0, 500, 200).is_ok(),
            "a snapshot covers the gap"
        );
        let message = check_start("t", 3, 0, 1200).unwrap_err().to_string();
        assert!(
            message.contains("partition 3 of t begins at offset 1200"),
            "{message}"
        );
        assert!(message.contains("must start at offset 0"), "{message}");
        assert!(message.contains("--from-snapshot"), "{message}");
    }
}
