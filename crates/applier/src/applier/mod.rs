//! The ordered applier: a consumer-group member that folds the command
//! topic into Redis.
//!
//! For each batch it (1) decodes the records, dead-lettering those that are
//! not valid commands, (2) decides the valid ones with the core's machine
//! on the part of each SKU's state they read from Redis and writes what
//! changed in one fenced transaction (a script per SKU on a cluster; see
//! `stockledger_projection::fold`), (3) publishes one outcome per
//! record, and once the brokers hold them all, (4) commits the consumer
//! offsets. The steps of consecutive batches overlap: while Redis applies
//! one batch (its calls sent by a task of their own), the applier reads
//! and decodes the next and publishes the outcomes of the one before, and
//! the batch before that may still wait for its deliveries. Redis applies
//! the batches one after another, in log order, and the producer keeps
//! each partition's outcomes in order. A
//! crash anywhere in between redelivers the uncommitted batches; the fold
//! recognises applied offsets and answers with the stored decisions, so the
//! outcomes published again are identical.
//!
//! - [`config`]: how an applier is set up; [`error`](mod@error): why it stops.
//! - `start`: the checks a start makes before applying anything.
//! - `batch`: a batch from the log to Redis and its decisions back.
//! - `publish`: outcomes and dead letters to the brokers, then the commit.
//! - `letter`: a refused record as its dead letter, whole or as a digest.
//! - `stopped`: the record the applier stopped on, noted for `status`.
//!
//! This file holds the loop that drives them.

mod batch;
pub mod config;
pub mod error;
pub mod hops;
mod letter;
mod publish;
mod start;
mod stopped;

pub use config::ApplierConfig;
pub use error::ApplierError;
pub use stopped::REPEATED_STOPS_METRIC;

use batch::{applied, Applying, Item};
use publish::{delivered, InFlight};
use start::{check_marker, partition_count, prepare_events_topic, record_limit};

use std::future::Future;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use stockledger_core::report::Chain;

use futures::FutureExt;
use rdkafka::consumer::{Consumer, StreamConsumer};
use rdkafka::producer::ThreadedProducer;
use rdkafka::TopicPartitionList;
use stockledger_core::ResultCode;
use stockledger_kafka::admin::{check_permanent, topic_config};
use stockledger_kafka::config::{CONTRACT_SETTINGS, FETCH_QUEUE_BACKOFF_MS};
use stockledger_kafka::group::{
    commit_and_close, is_fatal, GroupWatch, ProgressLine, SHUTDOWN_GRACE,
};
use stockledger_runtime::retry;
use tokio::sync::watch;
use tracing::{debug, error, info, warn};

use crate::deliveries::Reports;
use crate::expiry;
use stockledger_kafka::lag::LagContext;
use stockledger_projection::Projection;

/// Counter: records decided, by `result` (a redelivered batch counts again).
pub const RECORDS_METRIC: &str = "stockledger_applier_records_total";
/// Counter: records sent to the dead-letter topic.
pub const DEAD_LETTERS_METRIC: &str = "stockledger_applier_dead_letters_total";
/// Histogram: records per batch.
pub const BATCH_RECORDS_METRIC: &str = "stockledger_applier_batch_records";
/// Histogram: SKUs per batch.
pub const BATCH_RUNS_METRIC: &str = "stockledger_applier_batch_runs";
/// Histogram: seconds one batch took in Redis (its reads, decisions and
/// fenced write), per attempt.
pub const APPLY_SECONDS_METRIC: &str = "stockledger_applier_redis_apply_seconds";
/// Counter: writes the fence refused (see
/// [`Projection::fence_refusals`]).
pub const FENCE_REFUSALS_METRIC: &str = "stockledger_applier_fence_refusals_total";

/// Totals of one run of the applier.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ApplierStats {
    pub records: u64,
    pub dead_lettered: u64,
    pub batches: u64,
}

/// Runs the applier until `shutdown` completes. The batch in flight when it
/// does is finished and committed before returning.
pub async fn run(
    config: ApplierConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<ApplierStats, ApplierError> {
    let ran = fold(config.clone(), shutdown).await;
    if let Err(e) = &ran {
        stopped::note(&config, e).await;
    }
    ran
}

/// [`run`], but for noting the record an error stopped it on.
async fn fold(
    config: ApplierConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<ApplierStats, ApplierError> {
    let stop = stockledger_runtime::stop::stop_flag(shutdown);
    describe_metrics();
    let mut total = ApplierStats::default();
    let Some(mut applier) = start_when_possible(&config, &stop).await? else {
        return Ok(total);
    };
    loop {
        let (stats, fenced) = applier.run().await?;
        total.records += stats.records;
        total.dead_lettered += stats.dead_lettered;
        total.batches += stats.batches;
        if !fenced || *stop.borrow() {
            return Ok(total);
        }
        // librdkafka gives up on a consumer the broker fenced for good, and
        // on partitions whose committed offsets it could not read; a new
        // one rejoins (what was not committed is redelivered and skipped
        // as applied).
        warn!(
            group = %config.group_id,
            "the consumer cannot go on (fenced by the brokers, or holding partitions it will \
             never fetch); rejoining with a new consumer"
        );
        match start_when_possible(&config, &stop).await? {
            Some(fresh) => applier = fresh,
            None => return Ok(total),
        }
    }
}

/// Starts an applier once its checks can be made: while a broker or Redis
/// does not answer (a broker restarting or leaderless, Redis cut off or
/// failing over) the start is tried again with backoff, logged each time,
/// rather than ending the process; an error waiting does not cure (a
/// missing topic, a projection of another log) ends it at once. `None`:
/// stopped before it could start.
async fn start_when_possible(
    config: &ApplierConfig,
    stop: &tokio::sync::watch::Receiver<bool>,
) -> Result<Option<Applier>, ApplierError> {
    retry::until_stopped(
        || Applier::start(config.clone(), stop.clone()),
        ApplierError::is_transient,
        |e, wait| warn!(error = %Chain(&e), retry_in = ?wait, "cannot start the applier yet"),
        &mut stop.clone(),
    )
    .await
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
    metrics::describe_gauge!(
        expiry::HOLD_OVERDUE_METRIC,
        "Seconds the most overdue hold was past its deadline at the expirer's last look (0: none due)."
    );
    metrics::gauge!(expiry::HOLD_OVERDUE_METRIC).set(0.0);
    describe_counter!(
        crate::baskets::REFUNDS_METRIC,
        "Refunds the applier appended for the sold lines of baskets left partly sold past their deadline."
    );
    counter!(crate::baskets::REFUNDS_METRIC).absolute(0);
    describe_counter!(
        FENCE_REFUSALS_METRIC,
        "Writes to Redis the fence refused, each decided again: another member had folded the partition since, or a restore or swap had rewritten SKUs (a batch on a single Redis, a SKU on a cluster)."
    );
    counter!(FENCE_REFUSALS_METRIC).absolute(0);
    metrics::describe_gauge!(
        REPEATED_STOPS_METRIC,
        "Times in a row the applier stopped on the same record, as its note said when it started (0: none); 2 or more is a crash loop."
    );
    metrics::gauge!(REPEATED_STOPS_METRIC).set(0.0);
    describe_histogram!(BATCH_RECORDS_METRIC, "Records per batch.");
    describe_histogram!(BATCH_RUNS_METRIC, "SKUs per batch.");
    describe_histogram!(
        APPLY_SECONDS_METRIC,
        metrics::Unit::Seconds,
        "Seconds one batch took in Redis (read, decide, fenced write), per attempt."
    );
    for histogram in [
        BATCH_RECORDS_METRIC,
        BATCH_RUNS_METRIC,
        APPLY_SECONDS_METRIC,
    ] {
        let _ = histogram!(histogram);
    }
}

/// The clocks of the applier's loop, and what its stats line reads.
struct Clocks {
    /// The stats line's.
    ticker: tokio::time::Interval,
    /// The expirer's ([`expiry::INTERVAL`]).
    expiry: tokio::time::Interval,
    /// The baskets' settling ([`crate::baskets::INTERVAL`]).
    settling: tokio::time::Interval,
    line: ProgressLine,
    group: GroupWatch,
}

/// Three batches at once, at most: one applied in Redis by a task of its
/// own, the one before it on its way to the brokers, while the loop reads
/// the next. Redis applies batches one after another, in log order.
struct Underway {
    applying: Option<Applying>,
    in_flight: Option<InFlight>,
    /// Batches published but not yet delivered and committed when a stop
    /// came while waiting for them: `drain` finishes them.
    unfinished: Vec<InFlight>,
    stop: watch::Receiver<bool>,
}

/// What a turn of the applier's loop leaves it to do.
enum Turn {
    Again,
    Stop,
    /// The consumer cannot go on; a new one is to take over.
    Fenced,
}

struct Applier {
    config: ApplierConfig,
    /// The command topic's partition count, which decides each SKU's home
    /// partition; a record from a partition beyond it stops the applier.
    partitions: i32,
    consumer: StreamConsumer<LagContext>,
    /// Its delivery reports are collected a batch at a time
    /// ([`Reports`]).
    producer: ThreadedProducer<Reports>,
    projection: Projection,
    lag: Arc<AtomicI64>,
    stop: watch::Receiver<bool>,
    stats: ApplierStats,
    /// The offsets committed last (asynchronously); committed again,
    /// synchronously, when the applier stops.
    committed: TopicPartitionList,
    /// What of the stock events topic each command partition has written.
    events: publish::EventMarks,
    /// The largest record the producer writes ([`record_limit`]): a dead
    /// letter that would be larger keeps a digest of the record instead.
    record_limit: usize,
    /// The record the applier's note says it stopped on (partition,
    /// offset), until a commit goes past it.
    stuck: Option<(i32, i64)>,
    /// A commit went past `stuck`: its note is removed at the next tick.
    unstuck: bool,
    /// Where each outcome is encoded before the producer copies it.
    buffer: Vec<u8>,
    /// The records the last batch took.
    last_batch: usize,
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
        // librdkafka's own default (1,000,000) is below the brokers'
        // (1,048,588): a record between the two would be refused here
        // though the topic takes it.
        let record_limit = record_limit(&config).await?;
        let max_bytes = record_limit.to_string();
        let batch_bytes = record_limit.min(1_000_000).to_string();
        let mut producer_settings = CONTRACT_SETTINGS.to_vec();
        let linger = config.outcome_linger_ms.to_string();
        producer_settings.push(("linger.ms", &linger));
        producer_settings.push(("message.max.bytes", &max_bytes));
        producer_settings.push(("batch.size", &batch_bytes));
        // A record the brokers refuse for good stops the producer rather
        // than let a later one of the same partition in: stock events are
        // told apart from those already published by their position alone,
        // so a partition of them must never have a hole.
        producer_settings.push(("enable.gapless.guarantee", "true"));
        let producer: ThreadedProducer<Reports> = config
            .kafka
            .client_config(&producer_settings)
            .create_with_context(Reports::default())
            .map_err(|source| ApplierError::Client {
                what: "producer",
                source,
            })?;
        let projection = Projection::connect(&config.redis_url, config.prefix.clone())
            .await?
            .guarded()
            .announcing(config.topic.clone())
            .caching(config.cached_skus, config.cached_fields);
        check_marker(&config, &projection, partitions).await?;
        let stuck = stopped::read(&projection, &config.topic).await?;
        if config.stock_events {
            prepare_events_topic(&config, partitions).await?;
        }
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
            events: publish::EventMarks::default(),
            record_limit,
            stuck,
            unstuck: false,
            buffer: Vec::with_capacity(512),
            last_batch: 0,
        })
    }

    /// Applies until asked to stop, or until the consumer cannot go on
    /// (`true`: the caller starts a new one): fenced for good, or holding
    /// partitions librdkafka will never fetch
    /// ([`LagContext::stranded`]).
    async fn run(mut self) -> Result<(ApplierStats, bool), ApplierError> {
        let mut ticker = tokio::time::interval(self.config.stats_interval);
        ticker.tick().await;
        let stop = self.stop.clone();
        let mut clocks = Clocks {
            ticker,
            expiry: tokio::time::interval(expiry::INTERVAL),
            settling: tokio::time::interval(crate::baskets::INTERVAL),
            line: ProgressLine::new("applier", &self.config.group_id, self.config.stats_interval),
            group: GroupWatch::start(
                &self.config.kafka,
                &self.config.group_id,
                &self.config.topic,
                stop.clone(),
            ),
        };
        for clock in [&mut clocks.expiry, &mut clocks.settling] {
            clock.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        }
        let mut flow = Underway {
            applying: None,
            in_flight: None,
            unfinished: Vec::new(),
            stop,
        };
        let fenced = loop {
            if self.consumer.context().stranded() {
                // Set with a consumer error, which may have been taken
                // while filling a batch: looked at every turn (the
                // expirer's tick makes one five times a second).
                error!("the consumer holds partitions it will never fetch");
                break true;
            }
            match self.turn(&mut clocks, &mut flow).await? {
                Turn::Again => {}
                Turn::Stop => break false,
                Turn::Fenced => break true,
            }
        };
        let Underway {
            applying,
            in_flight,
            mut unfinished,
            ..
        } = flow;
        unfinished.extend(in_flight);
        self.drain(applying, unfinished, fenced).await
    }

    /// One turn of the loop: the first of a stop, a clock's tick, a batch
    /// delivered or applied, and a record read (with the batch it starts).
    async fn turn(
        &mut self,
        clocks: &mut Clocks,
        flow: &mut Underway,
    ) -> Result<Turn, ApplierError> {
        let Underway {
            applying,
            in_flight,
            unfinished,
            stop,
        } = flow;
        let first = tokio::select! {
            biased;
            // Unit, not the borrow `wait_for` returns: a branch below
            // awaits, and the borrow would make this future not `Send`.
            () = async { let _ = stop.wait_for(|s| *s).await; } => return Ok(Turn::Stop),
            _ = clocks.expiry.tick() => {
                self.expire_due().await;
                return Ok(Turn::Again);
            }
            _ = clocks.settling.tick() => {
                self.settle_baskets().await;
                return Ok(Turn::Again);
            }
            _ = clocks.ticker.tick() => {
                self.report(&clocks.group, &mut clocks.line);
                self.forget_stop().await;
                return Ok(Turn::Again);
            }
            answered = delivered(in_flight) => {
                if let Some(done) = in_flight.take() {
                    self.commit(done, answered)?;
                }
                return Ok(Turn::Again);
            }
            // Records waiting come first: they are read while Redis
            // applies the batch before them.
            m = self.consumer.recv() => m,
            // Idle: publish what Redis has applied rather than wait
            // for more.
            joined = applied(applying) => {
                let Some(batch) = applying.take() else { return Ok(Turn::Again) };
                let stopping = self
                    .publish_applied(batch, joined, in_flight, unfinished, stop)
                    .await?;
                return Ok(if stopping { Turn::Stop } else { Turn::Again });
            }
        };
        let first = match first {
            // With hops timed, when it was read: before the batch Redis
            // answered meanwhile is published.
            Ok(m) => (
                Item::take(&m, self.partitions),
                self.config.hops.as_ref().map(|_| Instant::now()),
            ),
            Err(e) if is_fatal(&e) => {
                // What is applied and under way is finished by `drain`.
                error!(error = %Chain(&e), "the consumer cannot go on");
                return Ok(Turn::Fenced);
            }
            Err(e) => {
                warn!(error = %Chain(&e), "consumer error; retrying");
                tokio::time::sleep(Duration::from_millis(100)).await;
                return Ok(Turn::Again);
            }
        };
        let stopping = (self.take_batch(first, applying, in_flight, unfinished, stop)).await?;
        Ok(if stopping { Turn::Stop } else { Turn::Again })
    }

    /// Takes a batch starting at `first` (with when it was read, with hops
    /// timed): publishes the batch Redis has answered for, reads and
    /// decodes the rest of this one, and hands it to Redis once the batch
    /// before is decided. `true` when the applier is to stop.
    async fn take_batch(
        &mut self,
        first: (Item, Option<Instant>),
        applying: &mut Option<Applying>,
        in_flight: &mut Option<InFlight>,
        unfinished: &mut Vec<InFlight>,
        stop: &mut watch::Receiver<bool>,
    ) -> Result<bool, ApplierError> {
        if let Some(mut batch) = applying.take_if(|batch| batch.task.is_finished()) {
            // Redis has answered already: its waiters hear of it before
            // more is read.
            let joined = (&mut batch.task).await;
            if self
                .publish_applied(batch, joined, in_flight, unfinished, stop)
                .await?
            {
                return Ok(true);
            }
        }
        let (items, read) = self.fill_batch(first, applying).await;
        self.last_batch = items.len();
        let batch = self.prepare(items, read).await?;
        // Redis takes the next batch once it has answered for this one.
        let decided = match applying.take() {
            Some(mut previous) => {
                let joined = (&mut previous.task).await;
                match self.conclude(previous, joined)? {
                    Some(decided) => Some(decided),
                    // Stopping with Redis away: nothing of the batch
                    // is published, so nothing after it may be.
                    None => return Ok(true),
                }
            }
            None => None,
        };
        *applying = Some(self.start_apply(batch));
        // A task spawned from a worker waits in that worker's LIFO slot,
        // which the other workers do not steal from, until this task
        // yields; publishing does not, so without this the batch would
        // reach Redis only after its predecessor's outcomes were encoded
        // (Redis and the applier taking turns instead of overlapping).
        tokio::task::yield_now().await;
        match decided {
            Some(decided) => {
                let next = self.publish(decided).await?;
                self.hand_over(in_flight, next, unfinished, stop).await
            }
            None => Ok(false),
        }
    }

    /// Stops within the shutdown grace: publishes the batch Redis may still
    /// be applying, waits for what is under way to be delivered and
    /// committed, and makes the last commit durable.
    async fn drain(
        mut self,
        applying: Option<Applying>,
        mut unfinished: Vec<InFlight>,
        fenced: bool,
    ) -> Result<(ApplierStats, bool), ApplierError> {
        let grace = tokio::time::Instant::now() + SHUTDOWN_GRACE;
        if let Some(mut batch) = applying {
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

    /// Refunds the sold lines of baskets left partly sold past their
    /// deadline (see [`crate::baskets`]), while this member holds
    /// partitions. A failure is logged: the next look tries again.
    async fn settle_baskets(&self) {
        let holds_partitions = self.consumer.assignment().is_ok_and(|a| a.count() > 0);
        if !holds_partitions {
            return;
        }
        let now = expiry::now_ms();
        match crate::baskets::settle_due(&self.projection, &self.producer, &self.config.topic, now)
            .await
        {
            Ok(0) => {}
            Ok(sent) => debug!(sent, "refunds appended for baskets left partly sold"),
            Err(e) => {
                warn!(error = %Chain(&e), "cannot look up open baskets; trying again shortly")
            }
        }
    }

    /// Takes `first` and the records after it into a batch, each decoded
    /// as it is received ([`Item::take`]): those already received, and
    /// those arriving within the batch wait while Redis is still applying
    /// the batch before (`previous`). With Redis idle the batch goes at
    /// once: waiting would only delay its decisions. With hops timed, also
    /// when each record was taken.
    async fn fill_batch(
        &self,
        (first, first_read): (Item, Option<Instant>),
        previous: &Option<Applying>,
    ) -> (Vec<Item>, Vec<Instant>) {
        let timed = first_read.is_some();
        let mut read: Vec<Instant> = first_read.into_iter().collect();
        // Room for as many as the batch before took: a batch of records
        // grown one at a time copied each several times over.
        let mut batch = Vec::with_capacity(self.last_batch.clamp(1, self.config.batch_size));
        batch.push(first);
        let deadline = tokio::time::Instant::now() + self.config.batch_wait;
        let redis_busy = || previous.as_ref().is_some_and(|p| !p.task.is_finished());
        while batch.len() < self.config.batch_size {
            // Records already received are taken whatever the wait.
            let received = match self.consumer.recv().now_or_never() {
                Some(received) => received,
                None if !redis_busy() => break,
                None => match tokio::time::timeout_at(deadline, self.consumer.recv()).await {
                    Ok(received) => received,
                    Err(_) => break,
                },
            };
            match received {
                Ok(m) => {
                    batch.push(Item::take(&m, self.partitions));
                    if timed {
                        read.push(Instant::now());
                    }
                }
                Err(e) => {
                    warn!(error = %Chain(&e), "consumer error while filling a batch");
                    break;
                }
            }
        }
        (batch, read)
    }

    /// Removes the applier's stop note once a commit went past its record:
    /// the crash loop, if there was one, is over.
    async fn forget_stop(&mut self) {
        if !self.unstuck {
            return;
        }
        match self.projection.clear_stop(stopped::SERVICE).await {
            Ok(()) => {
                info!("went past the record the applier last stopped on; its note is removed");
                metrics::gauge!(REPEATED_STOPS_METRIC).set(0.0);
                (self.stuck, self.unstuck) = (None, false);
            }
            Err(e) => warn!(error = %Chain(&e), "cannot remove the applier's stop note yet"),
        }
    }

    /// Logs the applier's progress line.
    fn report(&self, group: &GroupWatch, line: &mut ProgressLine) {
        if let Some((partitions, rate)) = line.take(group, &self.consumer, self.stats.records) {
            info!(
                records = self.stats.records,
                dead_lettered = self.stats.dead_lettered,
                rate_per_s = rate,
                partitions,
                lag = self.lag.load(Ordering::Relaxed),
                "applier progress"
            );
        }
    }
}
