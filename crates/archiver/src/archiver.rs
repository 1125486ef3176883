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

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::time::{Duration, Instant};
use stockledger_core::report::Chain;

use rdkafka::consumer::{CommitMode, Consumer, StreamConsumer};
use rdkafka::error::KafkaError;
use rdkafka::message::{Message, OwnedMessage};
use rdkafka::{Offset, TopicPartitionList};
use sqlx::{PgConnection, PgPool};
use stockledger_core::codec;
use stockledger_core::Outcome;
use stockledger_kafka::config::FETCH_QUEUE_BACKOFF_MS;
use stockledger_kafka::group::{
    commit_and_close, default_instance_id, is_fatal, GroupWatch, SHUTDOWN_GRACE,
};
use stockledger_kafka::lag::{Assignment, LagContext};
use stockledger_kafka::topic::offset_ranges;
use stockledger_kafka::KafkaConfig;
use stockledger_runtime::{redact_url, retry};
use tokio::sync::watch;
use tracing::{debug, error, info, instrument, warn};

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
            group_id: "stockledger-archiver".into(),
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
    let mut stop = stockledger_runtime::stop::stop_flag(shutdown);
    describe_metrics();
    info!(config = ?config, "starting the archiver");
    let writers = config.writers.max(1);
    // Migrated as the login, then written as the archiver's role only.
    crate::connect(&config.database_url, 1)
        .await
        .map_err(|e| match e {
            sqlx::Error::Migrate(m) => ArchiverError::Migrate(*m),
            other => ArchiverError::Database(other),
        })?
        .close()
        .await;
    let pool = crate::connect_as(
        &config.database_url,
        writers as u32 + 1,
        Duration::from_secs(30),
        crate::DbRole::Archiver,
    )
    .map_err(ArchiverError::Database)?;
    let mut progress = load_progress(&pool, &config).await?;
    // Months whose partition of ledger_entries this run knows exists.
    let mut months = HashSet::new();
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
    ];
    if let Some(id) = &config.instance_id {
        settings.push(("group.instance.id", id));
    }
    let stats_ms = config.stats_interval.as_millis().max(1000).to_string();
    settings.push(("statistics.interval.ms", &stats_ms));
    let join = || -> Result<StreamConsumer<LagContext>, ArchiverError> {
        let context = LagContext::new(
            &config.outcomes_topic,
            Default::default(),
            config.assignment.clone(),
        );
        let consumer: StreamConsumer<LagContext> = config
            .kafka
            .client_config(&settings)
            .create_with_context(context)
            .map_err(ArchiverError::Client)?;
        consumer
            .subscribe(&[&config.outcomes_topic])
            .map_err(|source| ArchiverError::Subscribe {
                topic: config.outcomes_topic.clone(),
                source,
            })?;
        Ok(consumer)
    };
    let mut consumer = join()?;

    let group = GroupWatch::start(
        &config.kafka,
        &config.group_id,
        &config.outcomes_topic,
        stop.clone(),
    );
    let mut stats = ArchiverStats::default();
    let mut ticker = tokio::time::interval(config.stats_interval);
    ticker.tick().await;
    let mut last_report = (Instant::now(), 0u64);
    // Read while the page before is written: the next page's messages.
    let mut next: Vec<OwnedMessage> = Vec::new();
    let report = |consumer: &StreamConsumer<LagContext>,
                  last: &mut (Instant, u64),
                  stats: &ArchiverStats| {
        let (at, rows) = *last;
        let rate = (stats.rows - rows) as f64 / at.elapsed().as_secs_f64();
        if group.assigned(consumer) == 0 {
            info!(rows = stats.rows, group = %config.group_id, "archiver progress: no partitions assigned; waiting for the group");
        } else {
            info!(
                rows = stats.rows,
                pages = stats.pages,
                rate_per_s = rate.round(),
                "archiver progress"
            );
        }
        *last = (Instant::now(), stats.rows);
    };
    loop {
        if *stop.borrow() {
            break;
        }
        let page = if next.is_empty() {
            let first = tokio::select! {
                biased;
                _ = stop.wait_for(|s| *s) => break,
                _ = ticker.tick() => {
                    report(&consumer, &mut last_report, &stats);
                    continue;
                }
                m = consumer.recv() => m,
            };
            match first {
                Ok(m) => fill_page(&consumer, vec![m.detach()], &config).await,
                Err(e) if is_fatal(&e) => {
                    // librdkafka gives up on a consumer the broker fenced
                    // for good; a new one rejoins. The progress table says
                    // where to go on; pages read again are skipped.
                    warn!(error = %Chain(&e), group = %config.group_id, "the consumer cannot go on; rejoining with a new one");
                    let offsets = offsets_of(&config.outcomes_topic, &progress);
                    commit_and_close(consumer, offsets, SHUTDOWN_GRACE).await;
                    consumer = join()?;
                    continue;
                }
                Err(e) => {
                    warn!(error = %Chain(&e), "consumer error; retrying");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            }
        } else {
            if last_report.0.elapsed() >= config.stats_interval {
                report(&consumer, &mut last_report, &stats);
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
        record(written, &mut progress, &mut months, &mut stats);
        stats.pages += 1;
        metrics::histogram!(PAGE_ROWS_METRIC).record(page_len as f64);
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

/// The page in at most `writers` shares by SKU (the record key): each
/// SKU's messages in one share and in their order, so two shares never
/// update the same rows of `ledger_hourly`.
fn share_out(page: Vec<OwnedMessage>, writers: usize) -> Vec<Vec<OwnedMessage>> {
    let writers = writers.max(1);
    if writers == 1 {
        return vec![page];
    }
    let mut shares: Vec<Vec<OwnedMessage>> = (0..writers)
        .map(|_| Vec::with_capacity(page.len() / writers + 1))
        .collect();
    for m in page {
        // FNV-1a: cheap, and the same share for the same key.
        let hash = m
            .key()
            .unwrap_or_default()
            .iter()
            .fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
                (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
            });
        shares[(hash % writers as u64) as usize].push(m);
    }
    shares.retain(|share| !share.is_empty());
    shares
}

/// Writes a page, its shares at once, each on its own connection and in
/// its own transaction, then the progress of the page's partitions. A page
/// that makes one share carries its progress in its own transaction. If
/// some shares commit and the rest or the progress do not, the page is
/// read again later and its archived rows collapse on the primary key
/// (the trigger adds only rows actually inserted to `ledger_hourly`).
/// Returns `None` if asked to stop while waiting for PostgreSQL.
async fn write_page_in_shares(
    pool: &PgPool,
    config: &ArchiverConfig,
    page: Vec<OwnedMessage>,
    progress: &HashMap<i32, i64>,
    months: &HashSet<(i64, u32)>,
    stop: &watch::Receiver<bool>,
) -> Result<Option<Written>, ArchiverError> {
    let shares = share_out(page, config.writers);
    let alone = shares.len() == 1;
    let writes = futures::future::join_all(shares.iter().map(|share| {
        write_page_with_retry(pool, config, share, progress, months, alone, stop.clone())
    }));
    let mut page_written = Written::default();
    for written in writes.await {
        match written? {
            Some(written) => page_written.add(written),
            None => return Ok(None),
        }
    }
    if !alone {
        let next = &page_written.next_offsets;
        let stored = retry::until_stopped(
            || async {
                let mut conn = pool.acquire().await?;
                write_progress(&mut conn, config, next).await
            },
            is_transient,
            postgres_away,
            &mut stop.clone(),
        )
        .await
        .map_err(|source| ArchiverError::Progress {
            topic: config.outcomes_topic.clone(),
            source,
        })?;
        if stored.is_none() {
            return Ok(None);
        }
    }
    Ok(Some(page_written))
}

/// Writes a page (or a share of one), retrying with backoff while
/// PostgreSQL is unreachable; with `progress_too`, the progress of its
/// partitions in the same transaction. Returns `None` if asked to stop
/// while waiting (nothing was written).
async fn write_page_with_retry(
    pool: &PgPool,
    config: &ArchiverConfig,
    page: &[OwnedMessage],
    progress: &HashMap<i32, i64>,
    months: &HashSet<(i64, u32)>,
    progress_too: bool,
    mut stop: watch::Receiver<bool>,
) -> Result<Option<Written>, ArchiverError> {
    let write = |via| write_page(pool, config, page, progress, months, via, progress_too);
    retry::until_stopped(
        || async {
            let started = Instant::now();
            let written = match write(Via::Copy).await {
                Err(e) if is_unique_violation(&e) => {
                    debug!("a row of the page is archived already; inserting it row by row");
                    write(Via::Insert).await
                }
                other => other,
            };
            metrics::histogram!(PAGE_SECONDS_METRIC).record(started.elapsed().as_secs_f64());
            written
        },
        is_transient,
        postgres_away,
        &mut stop,
    )
    .await
    .map_err(|source| ArchiverError::Page {
        topic: config.outcomes_topic.clone(),
        offsets: offset_ranges(page.iter().map(|m| (m.partition(), m.offset()))),
        source,
    })
}

/// Takes in what a written page archived and advanced.
fn record(
    written: Written,
    progress: &mut HashMap<i32, i64>,
    months: &mut HashSet<(i64, u32)>,
    stats: &mut ArchiverStats,
) {
    stats.rows += written.rows;
    stats.undecodable += written.undecodable;
    metrics::counter!(ROWS_METRIC).increment(written.rows);
    metrics::counter!(UNDECODABLE_METRIC).increment(written.undecodable);
    for (partition, next) in written.next_offsets {
        progress.insert(partition, next);
    }
    months.extend(written.new_months);
}

/// Says that a write is waiting for PostgreSQL, before each retry.
fn postgres_away(e: &sqlx::Error, wait: Duration) {
    warn!(error = %Chain(&e), retry_in = ?wait, "PostgreSQL unavailable; progress not advanced, retrying");
}

/// Whether PostgreSQL may answer if asked again (unreachable, restarting,
/// a pool out of connections), or the page may go through when written
/// again (a deadlock or serialization failure with another archiver
/// updating the same hours of `ledger_hourly` during a rebalance).
fn is_transient(e: &sqlx::Error) -> bool {
    matches!(
        e,
        sqlx::Error::Io(_) | sqlx::Error::PoolTimedOut | sqlx::Error::Protocol(_)
    ) || matches!(e, sqlx::Error::Database(db) if db.code().is_some_and(|c| {
        c.starts_with("08") || ["57P01", "57P03", "40P01", "40001"].contains(&c.as_ref())
    }))
}

#[derive(Debug, Default)]
struct Written {
    rows: u64,
    undecodable: u64,
    next_offsets: HashMap<i32, i64>,
    /// Months whose partition the page made sure of.
    new_months: Vec<(i64, u32)>,
}

impl Written {
    /// Adds what another share of the same page wrote.
    fn add(&mut self, share: Written) {
        self.rows += share.rows;
        self.undecodable += share.undecodable;
        for (partition, next) in share.next_offsets {
            let at = self.next_offsets.entry(partition).or_insert(next);
            *at = (*at).max(next);
        }
        self.new_months.extend(share.new_months);
    }
}

/// What a page adds to the archive: its rows not archived yet, the next
/// offset of each partition it covers, and how many messages could not be
/// decoded (logged, never archived).
#[derive(Debug, Default)]
struct PageRows {
    columns: Columns,
    next_offsets: HashMap<i32, i64>,
    undecodable: u64,
}

/// The rows of `page`, skipping messages that `progress` (next offset per
/// partition) says an earlier page archived.
fn page_rows(page: &[OwnedMessage], progress: &HashMap<i32, i64>) -> PageRows {
    let mut rows = PageRows::default();
    for message in page {
        let (partition, offset) = (message.partition(), message.offset());
        if progress.get(&partition).is_some_and(|&next| offset < next) {
            continue; // archived by an earlier page
        }
        let next = rows.next_offsets.entry(partition).or_insert(0);
        *next = (*next).max(offset + 1);
        match codec::decode_outcome(message.payload().unwrap_or_default()) {
            Ok(outcome) => rows.columns.push(outcome),
            Err(e) => {
                rows.undecodable += 1;
                error!(topic = message.topic(), partition, offset, error = %Chain(&e), "undecodable outcome message; not archived");
            }
        }
    }
    rows
}

/// The page as columns, ready for `UNNEST`.
#[derive(Debug, Default)]
struct Columns {
    topic: Vec<String>,
    partition: Vec<i32>,
    offset: Vec<i64>,
    sku: Vec<String>,
    command: Vec<Option<String>>,
    command_id: Vec<Option<String>>,
    order_id: Vec<Option<String>>,
    adjustment_id: Vec<Option<String>>,
    quantity: Vec<Option<i64>>,
    result: Vec<String>,
    delta: Vec<i64>,
    available_after: Vec<i64>,
    total_after: Vec<i64>,
    reason: Vec<Option<String>>,
    occurred_at_ms: Vec<i64>,
    restock_mode: Vec<Option<&'static str>>,
    rollback_reason: Vec<Option<String>>,
    user_id: Vec<Option<String>>,
    expires_at_ms: Vec<Option<i64>>,
}

impl Columns {
    fn push(&mut self, o: Outcome) {
        self.topic.push(o.position.topic);
        self.partition.push(o.position.partition);
        self.offset.push(o.position.offset);
        self.sku.push(o.sku);
        self.command.push(o.kind.map(|k| k.as_str().to_owned()));
        self.command_id.push(o.command_id);
        self.order_id.push(o.order_id);
        self.adjustment_id.push(o.adjustment_id);
        self.quantity.push(o.quantity);
        self.result.push(o.decision.result.as_str().to_owned());
        self.delta.push(o.decision.delta);
        self.available_after.push(o.decision.available);
        self.total_after.push(o.decision.total);
        self.reason.push(o.decision.reason);
        self.occurred_at_ms.push(o.occurred_at);
        self.restock_mode.push(o.restock_mode.map(|m| m.as_str()));
        self.rollback_reason.push(o.rollback_reason);
        self.user_id.push(o.user_id);
        self.expires_at_ms.push(o.expires_at);
    }
}

/// The UTC (year, month) of an instant in milliseconds since the Unix epoch.
/// Instants beyond year 9999 either way (which PostgreSQL's timestamps do not
/// hold anyway) fall in (±10000, 0).
fn utc_month(ms: i64) -> (i64, u32) {
    match time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000) {
        Ok(t) => (i64::from(t.year()), u32::from(u8::from(t.month()))),
        Err(_) => (ms.signum() * 10_000, 0),
    }
}

/// The months of `instants` not in `known`, each with one of its instants.
fn unknown_months(instants: &[i64], known: &HashSet<(i64, u32)>) -> Vec<((i64, u32), i64)> {
    let mut found: Vec<((i64, u32), i64)> = Vec::new();
    for &ms in instants {
        let month = utc_month(ms);
        if !known.contains(&month) && !found.iter().any(|(m, _)| *m == month) {
            found.push((month, ms));
        }
    }
    found
}

/// How a page's rows go in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Via {
    Copy,
    Insert,
}

/// Whether `e` is a unique violation: a row of the page is archived already.
fn is_unique_violation(e: &sqlx::Error) -> bool {
    matches!(e, sqlx::Error::Database(db) if db.code().is_some_and(|c| c == "23505"))
}

/// Inserts the page's rows, skipping any already archived (`ON CONFLICT DO
/// NOTHING` on the log position).
async fn insert_rows(conn: &mut PgConnection, columns: &Columns) -> Result<(), sqlx::Error> {
    sqlx::query(
        "INSERT INTO ledger_entries (topic, partition, log_offset, sku, command, command_id,
             order_id, adjustment_id, quantity, result, delta, available_after, total_after,
             reason, occurred_at, restock_mode, rollback_reason, user_id, expires_at)
         SELECT topic, partition, log_offset, sku, command, command_id, order_id,
             adjustment_id, quantity, result, delta, available_after, total_after, reason,
             timestamptz 'epoch' + occurred_ms * interval '1 millisecond', restock_mode,
             rollback_reason, user_id,
             timestamptz 'epoch' + expires_ms * interval '1 millisecond'
         FROM UNNEST($1::text[], $2::int[], $3::bigint[], $4::text[], $5::text[], $6::text[],
             $7::text[], $8::text[], $9::bigint[], $10::text[], $11::bigint[], $12::bigint[],
             $13::bigint[], $14::text[], $15::bigint[], $16::text[], $17::text[], $18::text[],
             $19::bigint[])
             AS page(topic, partition, log_offset, sku, command, command_id, order_id,
                 adjustment_id, quantity, result, delta, available_after, total_after, reason,
                 occurred_ms, restock_mode, rollback_reason, user_id, expires_ms)
         ON CONFLICT DO NOTHING",
    )
    .bind(&columns.topic)
    .bind(&columns.partition)
    .bind(&columns.offset)
    .bind(&columns.sku)
    .bind(&columns.command)
    .bind(&columns.command_id)
    .bind(&columns.order_id)
    .bind(&columns.adjustment_id)
    .bind(&columns.quantity)
    .bind(&columns.result)
    .bind(&columns.delta)
    .bind(&columns.available_after)
    .bind(&columns.total_after)
    .bind(&columns.reason)
    .bind(&columns.occurred_at_ms)
    .bind(&columns.restock_mode)
    .bind(&columns.rollback_reason)
    .bind(&columns.user_id)
    .bind(&columns.expires_at_ms)
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// The columns [`copy_rows`] writes, in the order it writes them.
const COPY: &str = "COPY ledger_entries (topic, partition, log_offset, sku, command, command_id,
    order_id, adjustment_id, quantity, result, delta, available_after, total_after, reason,
    occurred_at, restock_mode, rollback_reason, user_id, expires_at) FROM STDIN (FORMAT binary)";

/// Writes the page's rows with a binary `COPY`: no statement to plan, no
/// per-row conflict check. A row already archived (possible only when two
/// archivers briefly hold the same partition) fails the whole page with a
/// unique violation; the page is then written again with [`insert_rows`].
async fn copy_rows(conn: &mut PgConnection, columns: &Columns) -> Result<(), sqlx::Error> {
    let mut copy = conn.copy_in_raw(COPY).await?;
    if let Err(e) = copy.send(binary_copy(columns)).await {
        return Err(match copy.abort("page not sent").await {
            Ok(()) => e,
            Err(abort) => abort,
        });
    }
    copy.finish().await?;
    Ok(())
}

/// Microseconds between the Unix epoch and PostgreSQL's, 2000-01-01 UTC.
const PG_EPOCH_MICROS: i64 = 946_684_800_000_000;

/// The page in PostgreSQL's binary `COPY` format, columns as in [`COPY`].
fn binary_copy(c: &Columns) -> Vec<u8> {
    fn text(out: &mut Vec<u8>, value: Option<&str>) {
        match value {
            Some(v) => {
                out.extend_from_slice(&(v.len() as i32).to_be_bytes());
                out.extend_from_slice(v.as_bytes());
            }
            None => out.extend_from_slice(&(-1i32).to_be_bytes()),
        }
    }
    fn int8(out: &mut Vec<u8>, value: Option<i64>) {
        match value {
            Some(v) => {
                out.extend_from_slice(&8i32.to_be_bytes());
                out.extend_from_slice(&v.to_be_bytes());
            }
            None => out.extend_from_slice(&(-1i32).to_be_bytes()),
        }
    }
    // An instant PostgreSQL cannot hold (beyond the range of i64
    // microseconds) is sent as one it refuses, as the SQL form would be.
    let micros = |ms: i64| {
        ms.checked_mul(1000)
            .and_then(|us| us.checked_sub(PG_EPOCH_MICROS))
            .unwrap_or(i64::MAX)
    };
    let mut out = Vec::with_capacity(64 + c.offset.len() * 256);
    out.extend_from_slice(b"PGCOPY\n\xff\r\n\0");
    out.extend_from_slice(&0i32.to_be_bytes()); // flags
    out.extend_from_slice(&0i32.to_be_bytes()); // no header extension
    for i in 0..c.offset.len() {
        out.extend_from_slice(&19i16.to_be_bytes());
        text(&mut out, Some(&c.topic[i]));
        out.extend_from_slice(&4i32.to_be_bytes());
        out.extend_from_slice(&c.partition[i].to_be_bytes());
        int8(&mut out, Some(c.offset[i]));
        text(&mut out, Some(&c.sku[i]));
        text(&mut out, c.command[i].as_deref());
        text(&mut out, c.command_id[i].as_deref());
        text(&mut out, c.order_id[i].as_deref());
        text(&mut out, c.adjustment_id[i].as_deref());
        int8(&mut out, c.quantity[i]);
        text(&mut out, Some(&c.result[i]));
        int8(&mut out, Some(c.delta[i]));
        int8(&mut out, Some(c.available_after[i]));
        int8(&mut out, Some(c.total_after[i]));
        text(&mut out, c.reason[i].as_deref());
        int8(&mut out, Some(micros(c.occurred_at_ms[i])));
        text(&mut out, c.restock_mode[i]);
        text(&mut out, c.rollback_reason[i].as_deref());
        text(&mut out, c.user_id[i].as_deref());
        int8(&mut out, c.expires_at_ms[i].map(micros));
    }
    out.extend_from_slice(&(-1i16).to_be_bytes());
    out
}

#[instrument(name = "page", skip_all, fields(messages = page.len()))]
async fn write_page(
    pool: &PgPool,
    config: &ArchiverConfig,
    page: &[OwnedMessage],
    progress: &HashMap<i32, i64>,
    months: &HashSet<(i64, u32)>,
    via: Via,
    progress_too: bool,
) -> Result<Written, sqlx::Error> {
    let PageRows {
        columns,
        next_offsets,
        undecodable,
    } = page_rows(page, progress);
    let rows = columns.offset.len() as u64;
    let new_months = unknown_months(&columns.occurred_at_ms, months);
    let mut tx = pool.begin().await?;
    if !new_months.is_empty() {
        let instants: Vec<i64> = new_months.iter().map(|&(_, ms)| ms).collect();
        sqlx::query(
            "SELECT ledger_entries_ensure_months(ARRAY(
                 SELECT timestamptz 'epoch' + ms * interval '1 millisecond'
                 FROM UNNEST($1::bigint[]) AS ms))",
        )
        .bind(&instants)
        .execute(&mut *tx)
        .await?;
    }
    if rows > 0 {
        match via {
            Via::Copy => copy_rows(&mut tx, &columns).await?,
            Via::Insert => insert_rows(&mut tx, &columns).await?,
        }
    }
    if progress_too {
        write_progress(&mut tx, config, &next_offsets).await?;
    }
    tx.commit().await?;
    debug!(rows, undecodable, next = ?next_offsets, progress_too, "page archived");
    Ok(Written {
        rows,
        undecodable,
        next_offsets,
        new_months: new_months.into_iter().map(|(month, _)| month).collect(),
    })
}

/// Records the next offset to archive of each partition, never moving one
/// back (a page redelivered after a rebalance may end below it).
async fn write_progress(
    conn: &mut PgConnection,
    config: &ArchiverConfig,
    next_offsets: &HashMap<i32, i64>,
) -> Result<(), sqlx::Error> {
    let partitions: Vec<i32> = next_offsets.keys().copied().collect();
    let nexts: Vec<i64> = partitions.iter().map(|p| next_offsets[p]).collect();
    sqlx::query(
        "INSERT INTO archiver_progress (consumer_group, topic, partition, next_offset)
         SELECT $1, $2, partition, next_offset FROM UNNEST($3::int[], $4::bigint[])
             AS p(partition, next_offset)
         ON CONFLICT (consumer_group, topic, partition) DO UPDATE
         SET next_offset = GREATEST(archiver_progress.next_offset, EXCLUDED.next_offset),
             updated_at = now()",
    )
    .bind(&config.group_id)
    .bind(&config.outcomes_topic)
    .bind(&partitions)
    .bind(&nexts)
    .execute(&mut *conn)
    .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use rdkafka::message::OwnedMessage;
    use rdkafka::Timestamp;
    use stockledger_core::{Decision, LogPosition, Outcome, ResultCode};

    use super::*;

    /// An outcome message at `partition`/`offset` of the outcomes topic for
    /// the command record at `command_offset`.
    fn message(partition: i32, offset: i64, payload: Vec<u8>) -> OwnedMessage {
        OwnedMessage::new(
            Some(payload),
            Some(b"SKU".to_vec()),
            "t.outcomes".into(),
            Timestamp::NotAvailable,
            partition,
            offset,
            None,
        )
    }

    fn outcome(partition: i32, command_offset: i64) -> Vec<u8> {
        let position = LogPosition {
            topic: "t".into(),
            partition,
            offset: command_offset,
        };
        let mut o = Outcome::invalid(position, "SKU", "x".into(), 0);
        o.decision = Decision {
            result: ResultCode::Applied,
            delta: -1,
            available: 4,
            total: 5,
            reason: None,
        };
        codec::encode_outcome(&o).unwrap_or_default()
    }

    #[test]
    fn a_page_skips_what_earlier_pages_archived_and_advances_each_partition() {
        let page = [
            message(0, 7, outcome(0, 70)),
            message(1, 3, outcome(1, 30)),
            message(0, 8, outcome(0, 80)),
            message(1, 4, b"not an outcome".to_vec()),
            message(2, 0, outcome(2, 0)),
        ];
        // Partition 0 was archived up to offset 8 (exclusive), 1 up to 3.
        let progress = HashMap::from([(0, 8), (1, 3)]);
        let rows = page_rows(&page, &progress);
        assert_eq!(rows.columns.offset, [30, 80, 0], "command offsets archived");
        assert_eq!(rows.columns.partition, [1, 0, 2]);
        assert_eq!(rows.undecodable, 1);
        assert_eq!(rows.next_offsets, HashMap::from([(0, 9), (1, 5), (2, 1)]));
    }

    #[test]
    fn a_page_is_shared_out_by_sku_in_order_and_about_evenly() {
        let page: Vec<OwnedMessage> = (0..2000)
            .map(|offset| {
                message((offset % 3) as i32, offset, Vec::new())
                    .set_key(Some(format!("SKU-{}", offset % 100).into_bytes()))
            })
            .collect();
        let shares = share_out(page.clone(), 2);
        assert_eq!(shares.len(), 2);
        for share in &shares {
            assert!(
                (700..=1300).contains(&share.len()),
                "about half each: {}",
                share.len()
            );
            let offsets: Vec<i64> = share.iter().map(|m| m.offset()).collect();
            assert!(offsets.is_sorted(), "messages keep their order");
        }
        for sku in 0..100 {
            let key = format!("SKU-{sku}").into_bytes();
            let holders = shares
                .iter()
                .filter(|s| s.iter().any(|m| m.key() == Some(key.as_slice())))
                .count();
            assert_eq!(holders, 1, "SKU-{sku} is in one share");
        }
        let all: usize = shares.iter().map(Vec::len).sum();
        assert_eq!(all, page.len(), "nothing lost");

        // One writer, or one SKU: the page as it came.
        for shares in [share_out(page.clone(), 1), share_out(page[..1].to_vec(), 4)] {
            assert_eq!(shares.len(), 1);
        }
        assert_eq!(share_out(page.clone(), 1)[0].len(), page.len());
    }

    #[test]
    fn shares_of_a_page_add_up_to_its_rows_and_furthest_offsets() {
        let mut page = Written::default();
        page.add(Written {
            rows: 3,
            undecodable: 1,
            next_offsets: HashMap::from([(0, 9), (1, 4)]),
            new_months: vec![(2026, 11)],
        });
        page.add(Written {
            rows: 2,
            undecodable: 0,
            next_offsets: HashMap::from([(0, 7), (2, 5)]),
            new_months: Vec::new(),
        });
        assert_eq!((page.rows, page.undecodable), (5, 1));
        assert_eq!(page.next_offsets, HashMap::from([(0, 9), (1, 4), (2, 5)]));
        assert_eq!(page.new_months, [(2026, 11)]);
    }

    #[test]
    fn instants_fall_in_their_utc_month_on_both_sides_of_the_epoch() {
        assert_eq!(utc_month(0), (1970, 1));
        assert_eq!(utc_month(-1), (1969, 12));
        // 2024-02-29T23:59:59.999Z and the next millisecond.
        assert_eq!(utc_month(1_709_251_199_999), (2024, 2));
        assert_eq!(utc_month(1_709_251_200_000), (2024, 3));
        // 2026-12-31T23:59:59.999Z and 2027-01-01T00:00:00Z.
        assert_eq!(utc_month(1_798_761_599_999), (2026, 12));
        assert_eq!(utc_month(1_798_761_600_000), (2027, 1));
        let known = HashSet::from([(2024, 2)]);
        assert_eq!(
            unknown_months(
                &[1_709_251_199_999, 1_709_251_200_000, 1_709_251_200_001, 0],
                &known
            ),
            [((2024, 3), 1_709_251_200_000), ((1970, 1), 0)]
        );
    }

    #[test]
    fn a_page_entirely_archived_already_adds_nothing() {
        let page = [message(0, 1, outcome(0, 1)), message(0, 2, outcome(0, 2))];
        let rows = page_rows(&page, &HashMap::from([(0, 5)]));
        assert!(rows.columns.offset.is_empty());
        assert!(rows.next_offsets.is_empty());
        assert_eq!(rows.undecodable, 0);
    }
}
