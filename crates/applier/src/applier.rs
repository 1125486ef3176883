//! The ordered applier: a consumer-group member that folds the command
//! topic into Redis.
//!
//! For each batch it (1) decodes the records, dead-lettering those that are
//! not valid commands, (2) applies the valid ones in one pipelined round
//! trip of Lua calls (each call many SKU runs on a single Redis, one run on
//! a cluster), (3) publishes one outcome per
//! record, and once the brokers hold them all, (4) commits the consumer
//! offsets. The steps of consecutive batches overlap: while Redis applies
//! one batch (its calls sent by a task of their own), the applier reads
//! and decodes the next and publishes the outcomes of the one before, and
//! the batch before that may still wait for its deliveries. Redis applies
//! the batches one after another, in log order, and the producer keeps
//! each partition's outcomes in order. A
//! crash anywhere in between redelivers the uncommitted batches; the script
//! recognises applied offsets and answers with the stored decisions, so the
//! outcomes published again are identical.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use stockledger_core::report::Chain;

use futures::channel::oneshot::Canceled;
use futures::future::{join_all, JoinAll};
use rdkafka::consumer::{CommitMode, Consumer, StreamConsumer};
use rdkafka::error::KafkaError;
use rdkafka::message::{Header, Message, OwnedHeaders, OwnedMessage};
use rdkafka::producer::future_producer::{DeliveryFuture, OwnedDeliveryResult};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{Offset, TopicPartitionList};
use stockledger_core::codec::{self, EncodeError};
use stockledger_core::{Command, Decision, LogPosition, Outcome, ResultCode};
use stockledger_kafka::admin::{check_permanent, topic_config, AdminError, NotPermanent};
use stockledger_kafka::config::{CONTRACT_SETTINGS, FETCH_QUEUE_BACKOFF_MS};
use stockledger_kafka::group::{
    commit_and_close, default_instance_id, is_fatal, GroupWatch, SHUTDOWN_GRACE,
};
use stockledger_kafka::topic::offset_ranges;
use stockledger_kafka::KafkaConfig;
use stockledger_runtime::{redact_url, retry};
use tokio::sync::watch;
use tokio::task::{JoinError, JoinHandle};
use tracing::{debug, error, info, instrument, warn};

use crate::expiry;
use crate::record::{interpret, key_text};
use stockledger_kafka::lag::{Assignment, LagContext};
use stockledger_projection::{Entry, Marker, Prepared, Projection, ProjectionError};

/// Counter: records decided, by `result` (a redelivered batch counts again).
pub const RECORDS_METRIC: &str = "stockledger_applier_records_total";
/// Counter: records sent to the dead-letter topic.
pub const DEAD_LETTERS_METRIC: &str = "stockledger_applier_dead_letters_total";
/// Histogram: records per batch.
pub const BATCH_RECORDS_METRIC: &str = "stockledger_applier_batch_records";
/// Histogram: Lua calls (SKU runs) per batch.
pub const BATCH_RUNS_METRIC: &str = "stockledger_applier_batch_runs";
/// Histogram: seconds one batch's Lua calls took in Redis (one pipelined
/// round trip per node), per attempt.
pub const APPLY_SECONDS_METRIC: &str = "stockledger_applier_redis_apply_seconds";

/// Header of a dead-lettered record: why it was refused.
pub const DLQ_REASON_HEADER: &str = "stockledger.reason";
/// Header of a dead-lettered record: where it came from (`topic/partition@offset`).
pub const DLQ_SOURCE_HEADER: &str = "stockledger.source";

#[derive(Clone)]
pub struct ApplierConfig {
    pub kafka: KafkaConfig,
    pub redis_url: String,
    /// Key prefix of the projection in Redis.
    pub prefix: String,
    pub topic: String,
    pub outcomes_topic: String,
    pub dlq_topic: String,
    pub group_id: String,
    /// `group.instance.id` (static membership): a restarted applier with
    /// the same id takes its partitions back at once. `None`: a dynamic
    /// member. Defaults to the host's name.
    pub instance_id: Option<String>,
    /// Run even though the command topic has a finite retention (snapshots
    /// must then cover what the broker deletes).
    pub allow_finite_retention: bool,
    /// Most records taken into one batch.
    pub batch_size: usize,
    /// How long a batch waits to fill once its first record is in. Short,
    /// since what the consumer already holds is taken anyway: at 5k/s
    /// offered, 5 ms of it was a quarter of produce-to-decision; zero made
    /// batches so small at 20k/s that the applier fell behind (p50 200+ ms).
    pub batch_wait: Duration,
    /// How often throughput and lag are logged.
    pub stats_interval: Duration,
    /// The partitions this member holds, kept up to date while it runs
    /// (clone it before `run` to probe readiness).
    pub assignment: Assignment,
}

impl std::fmt::Debug for ApplierConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApplierConfig")
            .field("kafka", &self.kafka)
            .field("redis_url", &redact_url(&self.redis_url))
            .field("prefix", &self.prefix)
            .field("topic", &self.topic)
            .field("outcomes_topic", &self.outcomes_topic)
            .field("dlq_topic", &self.dlq_topic)
            .field("group_id", &self.group_id)
            .field("instance_id", &self.instance_id)
            .field("allow_finite_retention", &self.allow_finite_retention)
            .field("batch_size", &self.batch_size)
            .field("batch_wait", &self.batch_wait)
            .field("stats_interval", &self.stats_interval)
            .finish()
    }
}

impl ApplierConfig {
    /// A configuration with the documented defaults for everything but the
    /// connections.
    pub fn new(kafka: KafkaConfig, redis_url: impl Into<String>) -> Self {
        Self {
            kafka,
            redis_url: redis_url.into(),
            prefix: "stockledger".into(),
            topic: "stock.ledger".into(),
            outcomes_topic: "stock.ledger.outcomes".into(),
            dlq_topic: "stock.ledger.dlq".into(),
            group_id: "stockledger-applier".into(),
            instance_id: Some(default_instance_id()),
            allow_finite_retention: false,
            batch_size: 10_000,
            batch_wait: Duration::from_millis(1),
            stats_interval: Duration::from_secs(10),
            assignment: Assignment::new(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ApplierError {
    #[error("cannot create the Kafka {what}")]
    Client {
        what: &'static str,
        #[source]
        source: KafkaError,
    },
    #[error("cannot subscribe to {topic}")]
    Subscribe {
        topic: String,
        #[source]
        source: KafkaError,
    },
    #[error("the Redis projection failed")]
    Projection(#[from] ProjectionError),
    /// A batch could not be applied for a reason retrying does not cure;
    /// nothing of it was published or committed.
    #[error("applying records {offsets} of {topic} to Redis")]
    Apply {
        topic: String,
        /// `partition:first..=last` of each partition in the batch.
        offsets: String,
        #[source]
        source: ProjectionError,
    },
    #[error("reading the group's committed offsets")]
    Offsets(#[from] stockledger_kafka::topic::LogError),
    /// The command topic's partition count decides which partition each
    /// SKU lives on; without it nothing can be applied.
    #[error("reading the partitions of {topic}")]
    Partitions {
        topic: String,
        #[source]
        source: stockledger_kafka::topic::LogError,
    },
    /// The prefix holds the fold of another topic; applying this one onto it
    /// would mix two ledgers.
    #[error(
        "prefix {prefix} is the projection of topic {marked}, not {topic}; choose another prefix"
    )]
    OtherLog {
        prefix: String,
        marked: String,
        topic: String,
    },
    /// The broker's log ends before positions this projection has applied:
    /// the log was lost (an in-memory broker restarted) or the topic was
    /// deleted and recreated, so new records would reuse offsets the
    /// projection already holds decisions for.
    #[error(
        "the projection under {prefix} has applied {topic} up to {applied}, but the broker's log \
         ends before that ({ends}): the broker lost the log (an in-memory broker restarted, or \
         the topic was deleted and recreated). Nothing was applied and no offset was committed. \
         Rebuild from the log the broker has with `stockledger replay --into NEW_PREFIX`, then \
         run the applier with `--prefix NEW_PREFIX`; or restore the broker's log"
    )]
    LogLost {
        prefix: String,
        topic: String,
        /// `partition N offset O` of each position the log no longer reaches.
        applied: String,
        /// `partition N at offset E` of each of those partitions.
        ends: String,
    },
    /// Partitions were added to the command topic: SKUs now hash to other
    /// partitions than the ones their state was built from.
    #[error(
        "the command topic {topic} has {now} partitions, but the projection was built when it \
         had {marked}; SKUs now map to other partitions, so per-SKU order no longer holds. \
         Copy the log into a new topic with `stockledger repartition --to NEW_TOPIC \
         --partitions {now}`, rebuild with `stockledger --topic NEW_TOPIC --prefix NEW_PREFIX \
         replay --into NEW_PREFIX`, then run the applier on NEW_TOPIC and NEW_PREFIX"
    )]
    PartitionsChanged {
        topic: String,
        marked: i32,
        now: i32,
    },
    /// The command topic would lose records.
    #[error(transparent)]
    NotPermanent(#[from] NotPermanent),
    #[error("reading the configuration of the command topic")]
    TopicConfig(#[from] AdminError),
    #[error(transparent)]
    Encode(#[from] EncodeError),
    /// An outcome or dead letter was not delivered; offsets were not
    /// committed, so the batch is applied again (harmlessly) after restart.
    #[error("publishing the {what} for {position} to {topic} failed")]
    Publish {
        what: &'static str,
        topic: String,
        position: LogPosition,
        #[source]
        source: KafkaError,
    },
}

impl ApplierError {
    /// Whether the error may pass once the brokers or Redis answer again
    /// (a start's checks could not be made), rather than saying something
    /// about the log, the projection or the settings that waiting does not
    /// change.
    pub fn is_transient(&self) -> bool {
        match self {
            Self::Offsets(_) | Self::Partitions { .. } | Self::TopicConfig(_) => true,
            Self::Projection(e) => e.is_transient(),
            Self::Client { .. }
            | Self::Subscribe { .. }
            | Self::Apply { .. }
            | Self::OtherLog { .. }
            | Self::LogLost { .. }
            | Self::PartitionsChanged { .. }
            | Self::NotPermanent(_)
            | Self::Encode(_)
            | Self::Publish { .. } => false,
        }
    }
}

/// Totals of one run of the applier.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ApplierStats {
    pub records: u64,
    pub dead_lettered: u64,
    pub batches: u64,
}

/// One record of a batch, decoded or refused.
struct Item {
    position: LogPosition,
    /// The key for reports and outcomes, bounded in length.
    key: String,
    timestamp: i64,
    command: Result<Command, String>,
}

/// Refuses a projection that is the fold of another topic, or that lost its
/// state while the group has already committed progress (a Redis restarted
/// empty would otherwise be taken for "no stock" and the rest of the log
/// applied onto nothing). A new projection of a new group is marked.
async fn check_marker(
    config: &ApplierConfig,
    projection: &Projection,
    partitions: i32,
) -> Result<(), ApplierError> {
    match projection.marker().await? {
        Some(marked) if marked.topic != config.topic => Err(ApplierError::OtherLog {
            prefix: config.prefix.clone(),
            marked: marked.topic,
            topic: config.topic.clone(),
        }),
        Some(Marker {
            partitions: Some(marked),
            ..
        }) if marked != partitions => Err(ApplierError::PartitionsChanged {
            topic: config.topic.clone(),
            marked,
            now: partitions,
        }),
        Some(Marker {
            partitions: Some(_),
            applied,
            ..
        }) => check_log_reaches(config, applied).await,
        Some(Marker {
            partitions: None, ..
        }) => {
            // Marked by a release that did not record the count: the fold
            // so far was made with today's.
            projection.mark(&config.topic, partitions).await?;
            Ok(())
        }
        None => {
            let committed = stockledger_kafka::topic::committed_offsets(
                &config.kafka,
                &config.group_id,
                &config.topic,
            )
            .await?;
            if committed.values().any(|&offset| offset > 0) {
                return Err(ProjectionError::StateLost {
                    prefix: config.prefix.clone(),
                    key: projection.marker_key(),
                }
                .into());
            }
            projection.mark(&config.topic, partitions).await?;
            Ok(())
        }
    }
}

/// Refuses a projection that has applied positions the broker's log no
/// longer reaches.
async fn check_log_reaches(
    config: &ApplierConfig,
    applied: std::collections::BTreeMap<i32, i64>,
) -> Result<(), ApplierError> {
    let missing = stockledger_kafka::topic::missing_positions(
        &config.kafka,
        &config.topic,
        applied.into_iter().collect(),
        Duration::from_secs(30),
    )
    .await
    .map_err(|source| ApplierError::Partitions {
        topic: config.topic.clone(),
        source,
    })?;
    if missing.is_empty() {
        return Ok(());
    }
    let list = |f: &dyn Fn(&stockledger_kafka::topic::Missing) -> String| {
        missing.iter().map(f).collect::<Vec<_>>().join(", ")
    };
    Err(ApplierError::LogLost {
        prefix: config.prefix.clone(),
        topic: config.topic.clone(),
        applied: list(&|m| format!("partition {} offset {}", m.partition, m.offset)),
        ends: list(&|m| format!("partition {} at offset {}", m.partition, m.end)),
    })
}

/// `partition@next offset` of a commit, for the log.
fn offset_list(offsets: &TopicPartitionList) -> String {
    offsets
        .elements()
        .iter()
        .map(|e| format!("{}@{:?}", e.partition(), e.offset()))
        .collect::<Vec<_>>()
        .join(" ")
}

async fn partition_count(config: &ApplierConfig) -> Result<i32, ApplierError> {
    stockledger_kafka::topic::partition_count(&config.kafka, &config.topic)
        .await
        .map_err(|source| ApplierError::Partitions {
            topic: config.topic.clone(),
            source,
        })
}

/// What the applier publishes for a record.
#[derive(Debug, Clone, Copy)]
enum Kind {
    Outcome,
    DeadLetter,
}

impl Kind {
    fn what(self) -> &'static str {
        match self {
            Self::Outcome => "outcome",
            Self::DeadLetter => "dead letter",
        }
    }

    fn topic(self, config: &ApplierConfig) -> &str {
        match self {
            Self::Outcome => &config.outcomes_topic,
            Self::DeadLetter => &config.dlq_topic,
        }
    }
}

/// A record to publish for one item of a batch.
struct Outgoing<'a> {
    kind: Kind,
    key: &'a [u8],
    payload: Vec<u8>,
    headers: Option<OwnedHeaders>,
    position: &'a LogPosition,
}

/// A batch with Redis's decision for each valid command, in record order.
struct Decided {
    batch: Decoded,
    decisions: Vec<Decision>,
}

/// A batch applied to Redis whose outcomes are on their way to the brokers.
struct InFlight {
    deliveries: JoinAll<DeliveryFuture>,
    /// What each delivery carries and for which record (partition and
    /// offset of the command topic), in the same order.
    sent: Vec<(Kind, i32, i64)>,
    /// The next offset of each partition the batch read.
    offsets: TopicPartitionList,
    records: usize,
}

/// A batch read and decoded, with its script calls built.
struct Decoded {
    /// The records as read (a dead letter keeps their bytes).
    records: Vec<OwnedMessage>,
    /// What each record holds, in the same order.
    items: Vec<Item>,
    /// The script runs the batch makes.
    runs: usize,
    /// The next offset of each partition of the command topic (the one
    /// topic the consumer reads) in the batch.
    next: BTreeMap<i32, i64>,
}

/// What applying a batch in its own task came to: `None` when asked to
/// stop before Redis answered (whether it applied the batch or not, a
/// redelivery settles it).
type Applied = Result<Option<Vec<Decision>>, ProjectionError>;

/// A batch whose script calls are on their way to Redis, sent by a task of
/// their own while the applier reads the next batch and publishes the
/// previous one.
struct Applying {
    batch: Decoded,
    task: JoinHandle<Applied>,
}

/// The decisions of the batch being applied, once Redis has answered;
/// never ready without one.
async fn applied(applying: &mut Option<Applying>) -> Result<Applied, JoinError> {
    match applying {
        Some(batch) => (&mut batch.task).await,
        None => std::future::pending().await,
    }
}

/// Logs a failed Redis request that is tried again in `wait`.
fn redis_away(e: &ProjectionError, wait: Duration) {
    warn!(error = %Chain(&e), retry_in = ?wait, "Redis unavailable; nothing committed, retrying");
}

/// The delivery results of the batch in flight; never ready without one.
async fn delivered(in_flight: &mut Option<InFlight>) -> Vec<Result<OwnedDeliveryResult, Canceled>> {
    match in_flight {
        Some(batch) => (&mut batch.deliveries).await,
        None => std::future::pending().await,
    }
}

/// Runs the applier until `shutdown` completes. The batch in flight when it
/// does is finished and committed before returning.
pub async fn run(
    config: ApplierConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<ApplierStats, ApplierError> {
    let stop = stockledger_runtime::stop::stop_flag(shutdown);
    describe_metrics();
    let mut total = ApplierStats::default();
    let mut applier = Applier::start(config.clone(), stop.clone()).await?;
    loop {
        let (stats, fenced) = applier.run().await?;
        total.records += stats.records;
        total.dead_lettered += stats.dead_lettered;
        total.batches += stats.batches;
        if !fenced || *stop.borrow() {
            return Ok(total);
        }
        // librdkafka gives up on a consumer the broker fenced for good; a
        // new one rejoins (what was not committed is redelivered and
        // skipped as applied).
        warn!(
            group = %config.group_id,
            "the brokers fenced this member (its session ended while it could not reach \
             them); rejoining with a new consumer"
        );
        // The brokers were just unreachable and may not lead their
        // partitions yet: the start's checks are tried again until they
        // can be made, rather than ending an applier that ran well.
        let restarted = retry::until_stopped(
            || Applier::start(config.clone(), stop.clone()),
            ApplierError::is_transient,
            |e, wait| warn!(error = %Chain(&e), retry_in = ?wait, "cannot restart the applier yet"),
            &mut stop.clone(),
        )
        .await?;
        match restarted {
            Some(fresh) => applier = fresh,
            None => return Ok(total),
        }
    }
}

/// Gives each of the applier's metrics its help text, and each counter its
/// zero, so a dashboard shows them before their first event.
pub fn describe_metrics() {
    use metrics::{counter, describe_counter, describe_histogram, histogram};
    describe_counter!(
        RECORDS_METRIC,
        "Records decided, by result (a redelivered batch counts again)."
    );
    for result in ResultCode::ALL {
        counter!(RECORDS_METRIC, "result" => result.as_str()).absolute(0);
    }
    describe_counter!(
        DEAD_LETTERS_METRIC,
        "Records sent to the dead-letter topic."
    );
    counter!(DEAD_LETTERS_METRIC).absolute(0);
    describe_counter!(
        expiry::EXPIRES_METRIC,
        "Expire records the applier appended for holds past their deadline."
    );
    counter!(expiry::EXPIRES_METRIC).absolute(0);
    describe_histogram!(BATCH_RECORDS_METRIC, "Records per batch.");
    describe_histogram!(BATCH_RUNS_METRIC, "Lua calls (runs of one SKU) per batch.");
    describe_histogram!(
        APPLY_SECONDS_METRIC,
        metrics::Unit::Seconds,
        "Seconds one batch's Lua calls took in Redis, per attempt."
    );
    for histogram in [
        BATCH_RECORDS_METRIC,
        BATCH_RUNS_METRIC,
        APPLY_SECONDS_METRIC,
    ] {
        let _ = histogram!(histogram);
    }
}

struct Applier {
    config: ApplierConfig,
    /// The command topic's partition count, which decides each SKU's home
    /// partition; a record from a partition beyond it stops the applier.
    partitions: i32,
    consumer: StreamConsumer<LagContext>,
    producer: FutureProducer,
    projection: Projection,
    lag: Arc<AtomicI64>,
    stop: watch::Receiver<bool>,
    stats: ApplierStats,
    /// The offsets committed last (asynchronously); committed again,
    /// synchronously, when the applier stops.
    committed: TopicPartitionList,
}

impl Applier {
    async fn start(
        config: ApplierConfig,
        stop: watch::Receiver<bool>,
    ) -> Result<Self, ApplierError> {
        info!(config = ?config, "starting the applier");
        // Checked before anything is created: a refused start leaves offsets
        // and Redis untouched.
        let topic_config = topic_config(&config.kafka, &config.topic).await?;
        check_permanent(&config.topic, &topic_config, config.allow_finite_retention)?;
        let partitions = partition_count(&config).await?;
        let lag = Arc::new(AtomicI64::new(0));
        let context = LagContext::new(&config.topic, lag.clone(), config.assignment.clone());
        let stats_ms = config.stats_interval.as_millis().max(1000).to_string();
        let mut settings = vec![
            ("group.id", config.group_id.as_str()),
            ("enable.auto.commit", "false"),
            ("auto.offset.reset", "earliest"),
            ("statistics.interval.ms", &stats_ms),
            // Some brokers (tansu 0.6) hold a fetch for its whole wait even
            // when records are there; a short wait bounds the pickup delay
            // (at 5k/s offered, p50 produce-to-decision 24 ms with 10 ms,
            // 12 ms with 2 ms, at the same throughput under load; an idle
            // applier's fetches cost the broker nothing measurable).
            ("fetch.wait.max.ms", "2"),
            FETCH_QUEUE_BACKOFF_MS,
        ];
        if let Some(id) = &config.instance_id {
            settings.push(("group.instance.id", id));
        }
        let consumer: StreamConsumer<LagContext> = config
            .kafka
            .client_config(&settings)
            .create_with_context(context)
            .map_err(|source| ApplierError::Client {
                what: "consumer",
                source,
            })?;
        let mut producer_settings = CONTRACT_SETTINGS.to_vec();
        producer_settings.push(("linger.ms", "1"));
        let producer: FutureProducer = config
            .kafka
            .client_config(&producer_settings)
            .create()
            .map_err(|source| ApplierError::Client {
                what: "producer",
                source,
            })?;
        let projection = Projection::connect(&config.redis_url, config.prefix.clone())
            .await?
            .guarded()
            .announcing(config.topic.clone());
        check_marker(&config, &projection, partitions).await?;
        // Joined last: a start refused above never enters the group, and
        // dropping a consumer that never joined cannot block in a
        // rebalance callback while it leaves (seen with librdkafka when the
        // coordinator moved under a member being dropped).
        consumer
            .subscribe(&[&config.topic])
            .map_err(|source| ApplierError::Subscribe {
                topic: config.topic.clone(),
                source,
            })?;
        Ok(Self {
            config,
            partitions,
            consumer,
            producer,
            projection,
            lag,
            stop,
            stats: ApplierStats::default(),
            committed: TopicPartitionList::new(),
        })
    }

    /// Applies until asked to stop, or until the consumer is fenced for
    /// good (`true`: the caller starts a new one).
    async fn run(mut self) -> Result<(ApplierStats, bool), ApplierError> {
        let mut fenced = false;
        let mut ticker = tokio::time::interval(self.config.stats_interval);
        ticker.tick().await;
        let mut last_report = (Instant::now(), 0u64);
        let mut stop = self.stop.clone();
        let group = GroupWatch::start(
            &self.config.kafka,
            &self.config.group_id,
            &self.config.topic,
            stop.clone(),
        );
        // Three batches at once, at most: one applied in Redis by a task of
        // its own, the one before it on its way to the brokers, while this
        // task reads the next. Redis applies batches one after another, in
        // log order.
        let mut applying: Option<Applying> = None;
        let mut in_flight: Option<InFlight> = None;
        let mut unfinished: Vec<InFlight> = Vec::new();
        let mut expiry = tokio::time::interval(expiry::INTERVAL);
        expiry.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let first = tokio::select! {
                biased;
                // Unit, not the borrow `wait_for` returns: a branch below
                // awaits, and the borrow would make this future not `Send`.
                () = async { let _ = stop.wait_for(|s| *s).await; } => break,
                _ = expiry.tick() => {
                    self.expire_due().await;
                    continue;
                }
                _ = ticker.tick() => {
                    self.report(&group, &mut last_report);
                    continue;
                }
                results = delivered(&mut in_flight) => {
                    if let Some(done) = in_flight.take() {
                        self.commit(done, results)?;
                    }
                    continue;
                }
                // Records waiting come first: they are read while Redis
                // applies the batch before them.
                m = self.consumer.recv() => m,
                // Idle: publish what Redis has applied rather than wait
                // for more.
                joined = applied(&mut applying) => {
                    let Some(batch) = applying.take() else { continue };
                    let stopping = self
                        .publish_applied(batch, joined, &mut in_flight, &mut unfinished, &mut stop)
                        .await?;
                    if stopping {
                        break;
                    }
                    continue;
                }
            };
            let first = match first {
                Ok(m) => m.detach(),
                Err(e) if is_fatal(&e) => {
                    // What is applied and under way is finished below.
                    error!(error = %Chain(&e), "the consumer cannot go on");
                    fenced = true;
                    break;
                }
                Err(e) => {
                    warn!(error = %Chain(&e), "consumer error; retrying");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            if let Some(mut batch) = applying.take_if(|batch| batch.task.is_finished()) {
                // Redis has answered already: its waiters hear of it before
                // more is read.
                let joined = (&mut batch.task).await;
                if self
                    .publish_applied(batch, joined, &mut in_flight, &mut unfinished, &mut stop)
                    .await?
                {
                    break;
                }
            }
            let records = self.fill_batch(first).await;
            let batch = self.decode(records).await?;
            // Redis takes the next batch once it has answered for this one.
            let decided = match applying.take() {
                Some(mut previous) => {
                    let joined = (&mut previous.task).await;
                    match self.conclude(previous, joined)? {
                        Some(decided) => Some(decided),
                        // Stopping with Redis away: nothing of the batch
                        // is published, so nothing after it may be.
                        None => break,
                    }
                }
                None => None,
            };
            applying = Some(self.start_apply(batch));
            // A task spawned from a worker waits in that worker's LIFO slot,
            // which the other workers do not steal from, until this task
            // yields; publishing does not, so without this the batch would
            // reach Redis only after its predecessor's outcomes were encoded
            // (Redis and the applier taking turns instead of overlapping).
            tokio::task::yield_now().await;
            if let Some(decided) = decided {
                let next = self.publish(decided).await?;
                if self
                    .hand_over(&mut in_flight, next, &mut unfinished, &mut stop)
                    .await?
                {
                    break;
                }
            }
        }
        unfinished.extend(in_flight);
        let grace = tokio::time::Instant::now() + SHUTDOWN_GRACE;
        if let Some(mut batch) = applying.take() {
            // Asked to stop, the task gives up on a Redis that does not
            // answer; a batch it applied is published like any other.
            if let Ok(joined) = tokio::time::timeout_at(grace, &mut batch.task).await {
                if let Some(decided) = self.conclude(batch, joined)? {
                    unfinished.push(self.publish(decided).await?);
                }
            }
        }
        for batch in unfinished {
            match tokio::time::timeout_at(grace, self.finish(batch)).await {
                Ok(finished) => finished?,
                Err(_) => {
                    warn!(
                        within = ?SHUTDOWN_GRACE,
                        "outcomes not delivered in time (brokers unreachable?); \
                         their records are not committed and will be redelivered"
                    );
                    break;
                }
            }
        }
        // Make the last commit durable before exiting, so a restart does not
        // redeliver what this run finished; bounded, as the brokers may be away.
        let Applier {
            consumer,
            committed,
            stats,
            ..
        } = self;
        let within = grace.saturating_duration_since(tokio::time::Instant::now());
        // What was not committed is redelivered and skipped as applied.
        commit_and_close(consumer, committed, within)
            .await
            .warn_unless_done("records", within);
        info!(records = stats.records, "applier stopped");
        Ok((stats, fenced))
    }

    /// Appends an expire for each due hold of the partitions this member
    /// holds (see [`crate::expiry`]). A failure is logged: the next look
    /// tries again.
    async fn expire_due(&self) {
        let Ok(assignment) = self.consumer.assignment() else {
            return;
        };
        let partitions: Vec<i32> = assignment
            .elements_for_topic(&self.config.topic)
            .iter()
            .map(|e| e.partition())
            .collect();
        if partitions.is_empty() {
            return;
        }
        let result = expiry::expire_due(
            &self.projection,
            &self.producer,
            &self.config.topic,
            &partitions,
        )
        .await;
        match result {
            Ok(0) => {}
            Ok(sent) => debug!(sent, "expires appended for due holds"),
            Err(e) => warn!(error = %Chain(&e), "cannot look up due holds; trying again shortly"),
        }
    }

    async fn fill_batch(&self, first: OwnedMessage) -> Vec<OwnedMessage> {
        let mut batch = vec![first];
        let deadline = tokio::time::Instant::now() + self.config.batch_wait;
        // Once the deadline has passed, records already received are still
        // taken: `timeout_at` polls the receive before its deadline.
        while batch.len() < self.config.batch_size {
            match tokio::time::timeout_at(deadline, self.consumer.recv()).await {
                Ok(Ok(m)) => batch.push(m.detach()),
                Ok(Err(e)) => {
                    warn!(error = %Chain(&e), "consumer error while filling a batch");
                    break;
                }
                Err(_) => break,
            }
        }
        batch
    }

    /// Logs throughput and lag since `last` (the time and record count of
    /// the previous report), and makes now the last.
    fn report(&self, group: &GroupWatch, last: &mut (Instant, u64)) {
        let (at, records) = *last;
        let rate = (self.stats.records - records) as f64 / at.elapsed().as_secs_f64();
        let assigned = group.assigned(&self.consumer);
        if assigned == 0 {
            info!(
                records = self.stats.records,
                group = %self.config.group_id,
                "applier progress: no partitions assigned; waiting for the group"
            );
        } else {
            info!(
                records = self.stats.records,
                dead_lettered = self.stats.dead_lettered,
                rate_per_s = rate.round(),
                partitions = assigned,
                lag = self.lag.load(Ordering::Relaxed),
                "applier progress"
            );
        }
        *last = (Instant::now(), self.stats.records);
    }

    /// Decodes `records` and prepares the valid commands for Redis;
    /// refuses a batch from a partition beyond the count the projection
    /// was built with.
    async fn decode(
        &self,
        records: Vec<OwnedMessage>,
    ) -> Result<(Decoded, Prepared), ApplierError> {
        let items: Vec<Item> = records
            .iter()
            .map(|m| Item {
                position: LogPosition {
                    topic: m.topic().to_owned(),
                    partition: m.partition(),
                    offset: m.offset(),
                },
                key: key_text(m.key()),
                timestamp: m.timestamp().to_millis().unwrap_or_default(),
                command: interpret(m.key(), m.payload()),
            })
            .collect();
        if let Some(beyond) = items
            .iter()
            .map(|item| item.position.partition)
            .find(|&p| p >= self.partitions)
        {
            // Partitions were added since the count was read: stop before
            // applying anything of this batch, as a restart would refuse.
            return Err(ApplierError::PartitionsChanged {
                topic: self.config.topic.clone(),
                marked: self.partitions,
                now: partition_count(&self.config).await?.max(beyond + 1),
            });
        }
        let mut next: BTreeMap<i32, i64> = BTreeMap::new();
        for item in &items {
            let entry = next.entry(item.position.partition).or_insert(0);
            *entry = (*entry).max(item.position.offset + 1);
        }
        let prepared = self.projection.prepare(
            items.iter().map(|item| Entry {
                partition: item.position.partition,
                offset: item.position.offset,
                timestamp: item.timestamp,
                command: item.command.as_ref().ok(),
            }),
            self.partitions,
        );
        metrics::histogram!(BATCH_RECORDS_METRIC).record(items.len() as f64);
        metrics::histogram!(BATCH_RUNS_METRIC).record(prepared.runs() as f64);
        let batch = Decoded {
            records,
            items,
            runs: prepared.runs(),
            next,
        };
        Ok((batch, prepared))
    }

    /// Applies `batch` to Redis from a task of its own, retrying while
    /// Redis is unreachable until asked to stop.
    fn start_apply(&self, (batch, prepared): (Decoded, Prepared)) -> Applying {
        let projection = self.projection.clone();
        let mut stop = self.stop.clone();
        let task = tokio::spawn(async move {
            retry::until_stopped(
                || async {
                    let started = Instant::now();
                    let applied = projection.apply(&prepared).await;
                    metrics::histogram!(APPLY_SECONDS_METRIC)
                        .record(started.elapsed().as_secs_f64());
                    applied
                },
                ProjectionError::is_transient,
                redis_away,
                &mut stop,
            )
            .await
        });
        Applying { batch, task }
    }

    /// The decisions of a batch Redis has applied (`joined`), in record
    /// order; `None` when the task gave up on Redis to stop (nothing of the
    /// batch is published or committed).
    // Large, as every ApplierError is: it ends the run, once.
    #[allow(clippy::result_large_err)]
    fn conclude(
        &self,
        applying: Applying,
        joined: Result<Applied, JoinError>,
    ) -> Result<Option<Decided>, ApplierError> {
        let batch = applying.batch;
        let applied = match joined {
            Ok(applied) => applied,
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            // The runtime is shutting down: as good as asked to stop.
            Err(_) => Ok(None),
        };
        let offsets = || {
            offset_ranges(
                batch
                    .items
                    .iter()
                    .map(|i| (i.position.partition, i.position.offset)),
            )
        };
        let applied = applied.map_err(|source| ApplierError::Apply {
            topic: self.config.topic.clone(),
            offsets: offsets(),
            source,
        })?;
        let Some(decisions) = applied else {
            return Ok(None);
        };
        debug!(runs = batch.runs, offsets = %offsets(), "applied to Redis");
        Ok(Some(Decided { batch, decisions }))
    }

    /// Sends the outcomes (and dead letters) of a batch Redis has decided.
    #[instrument(name = "batch", skip_all, fields(n = self.stats.batches + 1, records = decided.batch.items.len()))]
    async fn publish(&mut self, decided: Decided) -> Result<InFlight, ApplierError> {
        let Decided { batch, decisions } = decided;
        let mut decisions = decisions.into_iter();
        // Encode everything first so the delivery futures can borrow it.
        let mut messages: Vec<Outgoing<'_>> = Vec::with_capacity(batch.items.len() + 1);
        // Records per result, counted once per batch rather than once per
        // record (a registry lookup each).
        let mut results: Vec<(ResultCode, u64)> = Vec::new();
        for (item, record) in batch.items.iter().zip(&batch.records) {
            let decision = match &item.command {
                Ok(_) => decisions.next(),
                Err(_) => None,
            };
            let (outcome, refusal) = match (&item.command, decision) {
                (Ok(command), Some(decision)) => {
                    // A misrouted record is decided, but not applied: it goes
                    // to the dead-letter topic too, as a record to fix.
                    let refusal = (decision.result == ResultCode::Misrouted)
                        .then(|| decision.reason.clone().unwrap_or_default());
                    let outcome = Outcome::for_command(item.position.clone(), command, decision);
                    (outcome, refusal)
                }
                (command, _) => {
                    // Every valid command got a decision, so this is a refusal.
                    let reason = command.as_ref().err().cloned().unwrap_or_default();
                    let outcome = Outcome::invalid(
                        item.position.clone(),
                        &item.key,
                        reason.clone(),
                        item.timestamp,
                    );
                    (outcome, Some(reason))
                }
            };
            if let Some(reason) = refusal {
                debug!(position = %item.position, %reason, "dead-lettering a record");
                let source = item.position.to_string();
                let headers = OwnedHeaders::new()
                    .insert(Header {
                        key: DLQ_REASON_HEADER,
                        value: Some(reason.as_bytes()),
                    })
                    .insert(Header {
                        key: DLQ_SOURCE_HEADER,
                        value: Some(source.as_bytes()),
                    });
                messages.push(Outgoing {
                    kind: Kind::DeadLetter,
                    key: record.key().unwrap_or_default(),
                    payload: record.payload().unwrap_or_default().to_vec(),
                    headers: Some(headers),
                    position: &item.position,
                });
                self.stats.dead_lettered += 1;
                metrics::counter!(DEAD_LETTERS_METRIC).increment(1);
            }
            match results
                .iter_mut()
                .find(|(r, _)| *r == outcome.decision.result)
            {
                Some((_, n)) => *n += 1,
                None => results.push((outcome.decision.result, 1)),
            }
            messages.push(Outgoing {
                kind: Kind::Outcome,
                key: item.key.as_bytes(),
                payload: codec::encode_outcome(&outcome)?,
                headers: None,
                position: &item.position,
            });
        }
        for (result, n) in results {
            metrics::counter!(RECORDS_METRIC, "result" => result.as_str()).increment(n);
        }
        let mut deliveries = Vec::with_capacity(messages.len());
        let mut sent = Vec::with_capacity(messages.len());
        for m in &messages {
            let mut record = FutureRecord::to(m.kind.topic(&self.config))
                .key(m.key)
                .payload(&m.payload);
            if let Some(headers) = &m.headers {
                record = record.headers(headers.clone());
            }
            deliveries.push(self.enqueue(record, m).await?);
            sent.push((m.kind, m.position.partition, m.position.offset));
        }

        let mut offsets = TopicPartitionList::new();
        let topic = &self.config.topic;
        for (&partition, &offset) in &batch.next {
            // The list is built from offsets just read; adding cannot fail
            // except on an invalid offset, which Kafka never hands out.
            if let Err(e) = offsets.add_partition_offset(topic, partition, Offset::Offset(offset)) {
                warn!(error = %Chain(&e), topic, partition, offset, "cannot record an offset to commit");
            }
        }
        Ok(InFlight {
            deliveries: join_all(deliveries),
            sent,
            offsets,
            records: batch.items.len(),
        })
    }

    /// Publishes a batch Redis has applied (`joined`) and makes it the
    /// batch in flight; `true` when the applier is to stop.
    async fn publish_applied(
        &mut self,
        batch: Applying,
        joined: Result<Applied, JoinError>,
        in_flight: &mut Option<InFlight>,
        unfinished: &mut Vec<InFlight>,
        stop: &mut watch::Receiver<bool>,
    ) -> Result<bool, ApplierError> {
        // Stopping with Redis away: nothing of the batch is published, so
        // nothing after it may be.
        let Some(decided) = self.conclude(batch, joined)? else {
            return Ok(true);
        };
        let next = self.publish(decided).await?;
        self.hand_over(in_flight, next, unfinished, stop).await
    }

    /// Makes `next` the batch in flight once the one before it is delivered
    /// and committed. `true` when asked to stop while waiting: both are then
    /// left in `unfinished`.
    async fn hand_over(
        &mut self,
        in_flight: &mut Option<InFlight>,
        next: InFlight,
        unfinished: &mut Vec<InFlight>,
        stop: &mut watch::Receiver<bool>,
    ) -> Result<bool, ApplierError> {
        if let Some(mut previous) = in_flight.take() {
            // With the brokers away, deliveries wait for them; a stop
            // then finishes both batches within the shutdown grace.
            let results = tokio::select! {
                results = &mut previous.deliveries => Some(results),
                _ = stop.wait_for(|s| *s) => None,
            };
            match results {
                Some(results) => self.commit(previous, results)?,
                None => {
                    unfinished.push(previous);
                    unfinished.push(next);
                    return Ok(true);
                }
            }
        }
        *in_flight = Some(next);
        Ok(false)
    }

    /// Hands one record to the producer, waiting while its queue is full.
    async fn enqueue(
        &self,
        mut record: FutureRecord<'_, [u8], Vec<u8>>,
        m: &Outgoing<'_>,
    ) -> Result<DeliveryFuture, ApplierError> {
        loop {
            match self.producer.send_result(record) {
                Ok(delivery) => return Ok(delivery),
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back)) => {
                    record = back;
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
                Err((source, _)) => {
                    return Err(ApplierError::Publish {
                        what: m.kind.what(),
                        topic: m.kind.topic(&self.config).to_owned(),
                        position: m.position.clone(),
                        source,
                    })
                }
            }
        }
    }

    /// Waits for every outcome of `batch` to be delivered, then commits it.
    async fn finish(&mut self, mut batch: InFlight) -> Result<(), ApplierError> {
        let results = (&mut batch.deliveries).await;
        self.commit(batch, results)
    }

    /// Once every outcome of `done` is delivered (`results`), commits its
    /// offsets; fails on the first record the brokers did not take.
    #[allow(clippy::result_large_err)] // the applier's one error type; it ends the run
    fn commit(
        &mut self,
        done: InFlight,
        results: Vec<Result<OwnedDeliveryResult, Canceled>>,
    ) -> Result<(), ApplierError> {
        for (result, (kind, partition, offset)) in results.into_iter().zip(done.sent) {
            let source = match result {
                Ok(Ok(_)) => continue,
                Ok(Err((source, _))) => source,
                Err(_) => KafkaError::Canceled,
            };
            return Err(ApplierError::Publish {
                what: kind.what(),
                topic: kind.topic(&self.config).to_owned(),
                // The applier reads one topic: every record is from it.
                position: LogPosition {
                    topic: self.config.topic.clone(),
                    partition,
                    offset,
                },
                source,
            });
        }
        let offsets = done.offsets;
        if let Err(e) = self.consumer.commit(&offsets, CommitMode::Async) {
            // Not fatal: the records are applied; a redelivery is harmless.
            warn!(error = %Chain(&e), "committing offsets failed; records may be redelivered");
        }
        for element in offsets.elements() {
            let (topic, partition) = (element.topic(), element.partition());
            match self.committed.find_partition(topic, partition) {
                Some(_) => {
                    let _ = self
                        .committed
                        .set_partition_offset(topic, partition, element.offset());
                }
                None => {
                    let _ = self
                        .committed
                        .add_partition_offset(topic, partition, element.offset());
                }
            }
        }
        self.stats.records += done.records as u64;
        self.stats.batches += 1;
        debug!(
            records = done.records,
            committed = %offset_list(&offsets),
            "outcomes delivered; offsets committed"
        );
        Ok(())
    }
}
