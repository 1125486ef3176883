//! Outcomes to PostgreSQL, a page at a time.
//!
//! A page is at most `page_size` outcomes (so memory is bounded by it) or
//! whatever arrived within `page_wait` of its first record; the next page
//! is read while one is written. A page is split by SKU (the record key)
//! into up to `writers` shares, written at once on their own connections,
//! each one transaction: a binary `COPY` of its rows (and, for the first
//! row of a month, the creation of that month's partition of
//! `ledger_entries`). Once every share has committed, the archiver's
//! progress (next offset per partition) is written; a page of one share
//! writes it in that share's transaction. Every share of a page commits
//! before the next page is written. A share holding a row archived already
//! fails the `COPY` on the primary key (the log position) and is written
//! again as one `INSERT … SELECT FROM UNNEST(…) ON CONFLICT DO NOTHING`.
//! Kafka offsets are committed after the progress; if that commit is lost,
//! the redelivered page is skipped by the stored progress and, failing
//! that (a stop between the shares and the progress), collapses on the
//! primary key.
//!
//! `page` writes a page, `rows` makes its rows, `stopped` notes the record
//! an error stopped the archiver on, for `status`.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::time::Duration;

use rdkafka::consumer::{CommitMode, Consumer, StreamConsumer};
use rdkafka::error::KafkaError;
use rdkafka::message::OwnedMessage;
use rdkafka::{Offset, TopicPartitionList};
use sqlx::PgPool;
use stockledger_core::report::Chain;
use stockledger_kafka::config::FETCH_QUEUE_BACKOFF_MS;
use stockledger_kafka::group::{
    commit_and_close, default_instance_id, is_fatal, GroupWatch, ProgressLine, SHUTDOWN_GRACE,
};
use stockledger_kafka::lag::{Assignment, LagContext};
use stockledger_kafka::KafkaConfig;
use stockledger_runtime::{redact_url, retry};
use tracing::{info, warn};

use page::{record, write_page_in_shares};

mod page;
mod rows;
mod stopped;

pub use stopped::REPEATED_STOPS_METRIC;

#[derive(Clone)]
pub struct ArchiverConfig {
    pub kafka: KafkaConfig,
    pub database_url: String,
    pub outcomes_topic: String,
    pub group_id: String,
    /// `group.instance.id` (static membership), as for the applier: a
    /// restarted archiver takes its partitions back at once. Defaults to
    /// the host's name.
    pub instance_id: Option<String>,
    /// Most outcomes written in one transaction. 5,000 by default: pages
    /// of 5,000 archived about 30 % more rows a second than pages of
    /// 1,000 on the benchmark machine (fewer commits), for about 12 MiB
    /// more peak memory (docs/BENCHMARKS.md, "Archive pages").
    pub page_size: usize,
    /// How long a page waits to fill once its first outcome is in.
    pub page_wait: Duration,
    /// PostgreSQL connections writing one page at once, each its own
    /// transaction over its share of the page's SKUs, the page's progress
    /// once all have committed. One PostgreSQL backend is what bounds the
    /// archive rate; see docs/BENCHMARKS.md, "Archive writers".
    pub writers: usize,
    pub stats_interval: Duration,
    /// The partitions this member holds, kept up to date while it runs
    /// (clone it before `run` to probe readiness).
    pub assignment: Assignment,
}

/// Counter: outcome messages written to (or found already in) the archive.
pub const ROWS_METRIC: &str = "stockledger_archiver_rows_total";
/// Counter: outcome messages that could not be decoded (logged, not archived).
pub const UNDECODABLE_METRIC: &str = "stockledger_archiver_undecodable_total";
/// Histogram: outcome messages per page.
pub const PAGE_ROWS_METRIC: &str = "stockledger_archiver_page_rows";
/// Histogram: seconds one page's transaction took, per attempt.
pub const PAGE_SECONDS_METRIC: &str = "stockledger_archiver_page_seconds";

impl std::fmt::Debug for ArchiverConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ArchiverConfig")
            .field("kafka", &self.kafka)
            .field("database_url", &redact_url(&self.database_url))
            .field("outcomes_topic", &self.outcomes_topic)
            .field("group_id", &self.group_id)
            .field("instance_id", &self.instance_id)
            .field("page_size", &self.page_size)
            .field("page_wait", &self.page_wait)
            .field("writers", &self.writers)
            .field("stats_interval", &self.stats_interval)
            .finish()
    }
}

impl ArchiverConfig {
    pub fn new(kafka: KafkaConfig, database_url: impl Into<String>) -> Self {
        Self {
            kafka,
            database_url: database_url.into(),
            outcomes_topic: "stock.ledger.outcomes".into(),
            group_id: stockledger_kafka::names::ARCHIVER_GROUP.into(),
            instance_id: Some(default_instance_id()),
            page_size: 5000,
            page_wait: Duration::from_millis(100),
            writers: 2,
            stats_interval: Duration::from_secs(10),
            assignment: Assignment::new(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ArchiverError {
    #[error("cannot create the Kafka consumer")]
    Client(#[source] KafkaError),
    #[error("cannot subscribe to {topic}")]
    Subscribe {
        topic: String,
        #[source]
        source: KafkaError,
    },
    #[error("a PostgreSQL request failed")]
    Database(#[from] sqlx::Error),
    /// A page could not be written for a reason retrying does not cure;
    /// its progress was not advanced, so a restart writes it again.
    #[error("writing the page of outcomes {offsets} of {topic}")]
    Page {
        topic: String,
        /// `partition:first..=last` of each partition the page covers.
        offsets: String,
        #[source]
        source: sqlx::Error,
    },
    /// The page's rows were written but not its progress; a restart
    /// reads the page again and its rows collapse on the primary key.
    #[error("recording the archiver's progress on {topic}")]
    Progress {
        topic: String,
        #[source]
        source: sqlx::Error,
    },
    #[error("migrating the archive schema")]
    Migrate(#[from] sqlx::migrate::MigrateError),
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ArchiverStats {
    /// Outcomes written (or found already written) by this run.
    pub rows: u64,
    pub pages: u64,
    /// Outcome messages that could not be decoded (logged, not archived).
    pub undecodable: u64,
}

/// Gives each of the archiver's metrics its help text, and each counter its
/// zero, so a dashboard shows them before their first event.
pub fn describe_metrics() {
    use metrics::{counter, describe_counter, describe_histogram, histogram};
    describe_counter!(
        ROWS_METRIC,
        "Outcome messages written to (or found already in) the archive."
    );
    counter!(ROWS_METRIC).absolute(0);
    metrics::describe_gauge!(
        REPEATED_STOPS_METRIC,
        "Times in a row the archiver stopped on the same record, as its note said when it started (0: none); 2 or more is a crash loop."
    );
    metrics::gauge!(REPEATED_STOPS_METRIC).set(0.0);
    describe_counter!(
        UNDECODABLE_METRIC,
        "Outcome messages that could not be decoded (logged, not archived)."
    );
    counter!(UNDECODABLE_METRIC).absolute(0);
    describe_histogram!(PAGE_ROWS_METRIC, "Outcome messages per page.");
    describe_histogram!(
        PAGE_SECONDS_METRIC,
        metrics::Unit::Seconds,
        "Seconds one page's transaction took (or one writer's share of it), per attempt."
    );
    let _ = histogram!(PAGE_ROWS_METRIC);
    let _ = histogram!(PAGE_SECONDS_METRIC);
}

/// Runs the archiver until `shutdown` completes; the page in flight is
/// finished first.
pub async fn run(
    config: ArchiverConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<ArchiverStats, ArchiverError> {
    let ran = archive(config.clone(), shutdown).await;
    if let Err(e) = &ran {
        stopped::note(&config, e).await;
    }
    ran
}

/// [`run`], but for noting the record an error stopped it on.
async fn archive(
    config: ArchiverConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<ArchiverStats, ArchiverError> {
    let mut stop = stockledger_runtime::stop::stop_flag(shutdown);
    describe_metrics();
    info!(config = ?config, "starting the archiver");
    let Some((pool, mut progress)) = open_when_possible(&config, &stop).await? else {
        return Ok(ArchiverStats::default());
    };
    let mut stuck = stopped::read(&pool, &config).await?;
    // Months whose partition of ledger_entries this run knows exists.
    let mut months = HashSet::new();
    let stats_ms = config.stats_interval.as_millis().max(1000).to_string();
    let settings = consumer_settings(&config, &stats_ms);
    let mut consumer = join(&config, &settings)?;
    let group = GroupWatch::start(
        &config.kafka,
        &config.group_id,
        &config.outcomes_topic,
        stop.clone(),
    );
    let mut stats = ArchiverStats::default();
    let mut ticker = tokio::time::interval(config.stats_interval);
    ticker.tick().await;
    let mut line = ProgressLine::new("archiver", &config.group_id, config.stats_interval);
    // Read while the page before is written: the next page's messages.
    let mut next: Vec<OwnedMessage> = Vec::new();
    loop {
        if *stop.borrow() {
            break;
        }
        if consumer.context().stranded() {
            consumer = rejoin(consumer, &config, &settings, &progress, None).await?;
            continue;
        }
        let page = if next.is_empty() {
            let first = tokio::select! {
                biased;
                _ = stop.wait_for(|s| *s) => break,
                _ = ticker.tick() => {
                    report(&mut line, &group, &consumer, &stats);
                    continue;
                }
                m = consumer.recv() => m,
            };
            match first {
                Ok(m) => fill_page(&consumer, vec![m.detach()], &config).await,
                Err(e) if is_fatal(&e) => {
                    consumer = rejoin(consumer, &config, &settings, &progress, Some(&e)).await?;
                    continue;
                }
                Err(e) => {
                    warn!(error = %Chain(&e), "consumer error; retrying");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            }
        } else {
            if line.due() {
                report(&mut line, &group, &consumer, &stats);
            }
            std::mem::take(&mut next)
        };
        let page_len = page.len();
        let write = write_page_in_shares(&pool, &config, page, &progress, &months, &stop);
        let (written, read) = tokio::join!(write, fill_page(&consumer, Vec::new(), &config));
        next = read;
        let Some(written) = written? else {
            break;
        };
        record(written, page_len, &mut progress, &mut months, &mut stats);
        stopped::forget_if_past(&pool, &config, &mut stuck, &progress).await;
        let offsets = offsets_of(&config.outcomes_topic, &progress);
        if let Err(e) = consumer.commit(&offsets, CommitMode::Async) {
            warn!(error = %Chain(&e), "committing offsets failed; pages may be redelivered and skipped");
        }
    }
    // The progress table is the truth; this keeps a restart from re-reading
    // pages it would only skip. Bounded, as the brokers may be away.
    let offsets = offsets_of(&config.outcomes_topic, &progress);
    commit_and_close(consumer, offsets, SHUTDOWN_GRACE)
        .await
        .warn_unless_done("pages", SHUTDOWN_GRACE);
    info!(rows = stats.rows, "archiver stopped");
    Ok(stats)
}

/// Brings the archive's schema up to date as the login, then opens the
/// pool the pages are written with, acting as the archiver's role only.
/// The archive's pool and this group's progress, once PostgreSQL answers:
/// while it does not (cut off, restarting) the start is tried again with
/// backoff, logged each time, rather than ending the process; an error
/// waiting does not cure (a failed migration, a refused password) ends it
/// at once. `None`: stopped before PostgreSQL answered.
async fn open_when_possible(
    config: &ArchiverConfig,
    stop: &tokio::sync::watch::Receiver<bool>,
) -> Result<Option<(PgPool, HashMap<i32, i64>)>, ArchiverError> {
    retry::until_stopped(
        || async {
            let pool = open_archive(config).await?;
            let progress = load_progress(&pool, config).await?;
            Ok((pool, progress))
        },
        |e| matches!(e, ArchiverError::Database(e) if page::is_transient(e)),
        |e, wait| warn!(error = %Chain(e), retry_in = ?wait, "cannot start the archiver yet"),
        &mut stop.clone(),
    )
    .await
}

async fn open_archive(config: &ArchiverConfig) -> Result<PgPool, ArchiverError> {
    crate::connect(&config.database_url, 1)
        .await
        .map_err(|e| match e {
            sqlx::Error::Migrate(m) => ArchiverError::Migrate(*m),
            other => ArchiverError::Database(other),
        })?
        .close()
        .await;
    crate::connect_as(
        &config.database_url,
        config.writers.max(1) as u32 + 1,
        Duration::from_secs(30),
        crate::DbRole::Archiver,
    )
    .map_err(ArchiverError::Database)
}

/// The archiver's consumer settings; `stats_ms` is its statistics interval.
fn consumer_settings<'a>(config: &'a ArchiverConfig, stats_ms: &'a str) -> Vec<(&'a str, &'a str)> {
    let mut settings = vec![
        ("group.id", config.group_id.as_str()),
        ("enable.auto.commit", "false"),
        ("auto.offset.reset", "earliest"),
        // librdkafka prefetches up to 100,000 messages per partition by
        // default: with a long backlog that, not the page, set the
        // archiver's memory (29 MiB at 200k records, 78 MiB at 2M);
        // with 20,000 it was 31 and 39 MiB, at the same archive rate.
        ("queued.min.messages", "20000"),
        // Some brokers (tansu 0.6) hold every fetch for its whole wait,
        // even with records there: the default 500 ms cost a fifth of the
        // archive rate (docs/BENCHMARKS.md, "Fetch waits"). An idle
        // archiver asks twenty times a second.
        ("fetch.wait.max.ms", "50"),
        FETCH_QUEUE_BACKOFF_MS,
        ("statistics.interval.ms", stats_ms),
    ];
    if let Some(id) = &config.instance_id {
        settings.push(("group.instance.id", id));
    }
    settings
}

/// Closes `consumer` (committing what `progress` says is archived) and
/// joins the group with a new one, when the consumer cannot go on:
/// librdkafka gave up on it (`fatal`: the broker fenced it for good), or
/// it holds partitions librdkafka will never fetch
/// ([`LagContext::stranded`]). The progress table says where to go on;
/// pages read again are skipped.
async fn rejoin(
    consumer: StreamConsumer<LagContext>,
    config: &ArchiverConfig,
    settings: &[(&str, &str)],
    progress: &HashMap<i32, i64>,
    fatal: Option<&KafkaError>,
) -> Result<StreamConsumer<LagContext>, ArchiverError> {
    let group = &config.group_id;
    match fatal {
        Some(e) => {
            warn!(error = %Chain(e), %group, "the consumer cannot go on; rejoining with a new one")
        }
        None => {
            warn!(%group, "the consumer holds partitions it will never fetch; rejoining with a new one")
        }
    }
    let offsets = offsets_of(&config.outcomes_topic, progress);
    commit_and_close(consumer, offsets, SHUTDOWN_GRACE).await;
    join(config, settings)
}

/// A new consumer in the archiver's group, subscribed to the outcomes.
fn join(
    config: &ArchiverConfig,
    settings: &[(&str, &str)],
) -> Result<StreamConsumer<LagContext>, ArchiverError> {
    let context = LagContext::new(
        &config.outcomes_topic,
        Default::default(),
        config.assignment.clone(),
    );
    let consumer: StreamConsumer<LagContext> = config
        .kafka
        .client_config(settings)
        .create_with_context(context)
        .map_err(ArchiverError::Client)?;
    consumer
        .subscribe(&[&config.outcomes_topic])
        .map_err(|source| ArchiverError::Subscribe {
            topic: config.outcomes_topic.clone(),
            source,
        })?;
    Ok(consumer)
}

/// Logs the archiver's progress each stats interval: rows, pages and the
/// rate since the last report, or that the group has given it nothing.
/// Logs the archiver's progress line.
fn report(
    line: &mut ProgressLine,
    group: &GroupWatch,
    consumer: &StreamConsumer<LagContext>,
    stats: &ArchiverStats,
) {
    if let Some((partitions, rate)) = line.take(group, consumer, stats.rows) {
        info!(
            rows = stats.rows,
            pages = stats.pages,
            rate_per_s = rate,
            partitions,
            "archiver progress"
        );
    }
}

/// Adds to `page` what arrives within the page wait, up to the page size.
async fn fill_page(
    consumer: &StreamConsumer<LagContext>,
    mut page: Vec<OwnedMessage>,
    config: &ArchiverConfig,
) -> Vec<OwnedMessage> {
    let deadline = tokio::time::Instant::now() + config.page_wait;
    while page.len() < config.page_size {
        match tokio::time::timeout_at(deadline, consumer.recv()).await {
            Ok(Ok(m)) => page.push(m.detach()),
            Ok(Err(e)) => {
                warn!(error = %Chain(&e), "consumer error while filling a page");
                break;
            }
            Err(_) => break,
        }
    }
    page
}

fn offsets_of(topic: &str, progress: &HashMap<i32, i64>) -> TopicPartitionList {
    let mut offsets = TopicPartitionList::new();
    for (&partition, &next) in progress {
        if let Err(e) = offsets.add_partition_offset(topic, partition, Offset::Offset(next)) {
            warn!(error = %Chain(&e), partition, "cannot record an offset to commit");
        }
    }
    offsets
}

async fn load_progress(
    pool: &PgPool,
    config: &ArchiverConfig,
) -> Result<HashMap<i32, i64>, sqlx::Error> {
    let rows: Vec<(i32, i64)> = sqlx::query_as(
        "SELECT partition, next_offset FROM archiver_progress
         WHERE consumer_group = $1 AND topic = $2",
    )
    .bind(&config.group_id)
    .bind(&config.outcomes_topic)
    .fetch_all(pool)
    .await?;
    Ok(rows.into_iter().collect())
}
