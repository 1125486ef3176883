//! The analyst scenario: an archive of many rows, and the time each
//! documented query takes on it.
//!
//! The rows go into a database of their own (created, migrated with the
//! archiver's migrations, dropped at the end unless `--keep`), so the fill
//! neither slows nor is slowed by the rest of the run. They are generated in
//! PostgreSQL with `INSERT … SELECT generate_series`, the archiver's own
//! insert shape (every column, through the partitioned table, its indexes
//! and the trigger that keeps `ledger_hourly`) without the Kafka consumer in
//! front. 10,000 SKUs over ten days;
//! each SKU's rows in log order with rising `occurred_at`.

use std::str::FromStr;
use std::time::{Duration, Instant};

use anyhow::Context;
use hdrhistogram::Histogram;
use rand::{RngExt, SeedableRng};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{ConnectOptions, Executor, PgPool};
use stockledger_analysts::query::{self, AsOf, HistoryOf, HistoryQuery};
use stockledger_cli::Global;

use crate::Measurement;

const SKUS: i64 = 10_000;
const DAYS: i64 = 10;
const TOPIC: &str = "stock.ledger";
/// 2026-11-01T00:00:00Z: the generated log's first instant.
const START_MS: i64 = 1_793_491_200_000;
const DAY_MS: i64 = 86_400_000;
/// Fewest rows the scenario fills: one per SKU per day.
pub const MIN_ROWS: i64 = SKUS * DAYS;
/// Rows per INSERT while filling (one transaction each).
const FILL_CHUNK: i64 = 1_000_000;

/// Fills an archive of `rows` rows and times the queries; one measurement
/// per query (its count and p50/p99/p999 latency).
pub async fn analyst(
    g: &Global,
    run_id: &str,
    rows: i64,
    samples: u64,
    keep: bool,
) -> anyhow::Result<Vec<Measurement>> {
    let database = format!("stockledger_{}", run_id.replace('-', "_"));
    let admin = PgConnectOptions::from_str(&g.database_url)?.disable_statement_logging();
    let mut conn = admin.connect().await.context("connecting to PostgreSQL")?;
    conn.execute(format!("CREATE DATABASE {database}").as_str())
        .await
        .with_context(|| format!("creating the scratch database {database}"))?;
    let options = admin.clone().database(&database);
    let measured = fill_and_measure(options, rows, samples).await;
    if keep {
        println!("  kept the analyst archive in database {database}");
    } else {
        conn.execute(format!("DROP DATABASE {database} WITH (FORCE)").as_str())
            .await
            .with_context(|| format!("dropping the scratch database {database}"))?;
    }
    measured
}

async fn fill_and_measure(
    options: PgConnectOptions,
    rows: i64,
    samples: u64,
) -> anyhow::Result<Vec<Measurement>> {
    let pool = PgPoolOptions::new()
        .max_connections(2)
        .connect_with(options)
        .await?;
    stockledger_archiver::MIGRATOR.run(&pool).await?;
    let started = Instant::now();
    fill(&pool, rows).await?;
    let fill_seconds = started.elapsed().as_secs_f64();
    sqlx::query("VACUUM ANALYZE ledger_entries")
        .execute(&pool)
        .await?;
    let mut results = vec![Measurement {
        scenario: "analyst-fill",
        records: rows as u64,
        seconds: fill_seconds,
        setup: format!(
            "{rows} rows, {SKUS} SKUs over {DAYS} days, bulk INSERT through the partitioned table and its indexes"
        ),
        latency_ms: None,
        peak_rss_mib: None,
        failed: None,
        instructions: None,
        machine_cpu: None,
        hops: None,
    }];
    // Same seed every run: the same SKUs and instants are asked for.
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    for query in Query::ALL {
        let samples = query.samples(samples);
        let what = query.what(rows);
        let m = timed(query.name(), &what, samples, || {
            let pick = Pick::random(&mut rng, rows);
            let pool = pool.clone();
            async move { query.run(&pool, pick).await }
        })
        .await?;
        results.push(m);
    }
    Ok(results)
}

/// What one sample asks about: a SKU, an instant within the log's span
/// (a day before its end at the latest) and a log offset.
struct Pick {
    sku: String,
    at: i64,
    offset: i64,
}

impl Pick {
    fn random(rng: &mut impl RngExt, rows: i64) -> Self {
        Self {
            sku: format!("SKU-{}", rng.random_range(0..SKUS)),
            at: START_MS + rng.random_range(0..(DAYS - 1) * DAY_MS),
            offset: rng.random_range(0..rows),
        }
    }

    /// The start of the day `at` falls in.
    fn day(&self) -> i64 {
        START_MS + (self.at - START_MS) / DAY_MS * DAY_MS
    }
}

/// The documented queries, each timed on its own.
#[derive(Debug, Clone, Copy)]
enum Query {
    SkuDay,
    SkuPage,
    AsOfTime,
    AsOfOffset,
    ReportSkuDay,
    ReportAllDay,
    SellOutsSku,
    OrderTimeline,
}

impl Query {
    const ALL: [Query; 8] = [
        Self::SkuDay,
        Self::SkuPage,
        Self::AsOfTime,
        Self::AsOfOffset,
        Self::ReportSkuDay,
        Self::ReportAllDay,
        Self::SellOutsSku,
        Self::OrderTimeline,
    ];

    fn name(self) -> &'static str {
        match self {
            Self::SkuDay => "q-sku-day",
            Self::SkuPage => "q-sku-page",
            Self::AsOfTime => "q-as-of-time",
            Self::AsOfOffset => "q-as-of-offset",
            Self::ReportSkuDay => "q-report-sku-day",
            Self::ReportAllDay => "q-report-all-day",
            Self::SellOutsSku => "q-sell-outs-sku",
            Self::OrderTimeline => "q-order-timeline",
        }
    }

    /// What the query asks, on an archive of `rows` rows.
    fn what(self, rows: i64) -> String {
        let per_sku = (rows / SKUS).max(1);
        match self {
            Self::SkuDay => format!(
                "history of one SKU over a day (~{} rows), log order",
                per_sku / DAYS
            ),
            Self::SkuPage => format!("newest 100 of one SKU's {per_sku} rows, refusals only"),
            Self::AsOfTime => "stock of one SKU as of a time".into(),
            Self::AsOfOffset => "stock of one SKU as of a log offset".into(),
            Self::ReportSkuDay => "one SKU, one day, per hour".into(),
            Self::ReportAllDay => format!(
                "every SKU ({SKUS}), one day (~{} rows), per hour",
                rows / DAYS
            ),
            Self::SellOutsSku => "ledger_sell_outs view, one SKU".into(),
            Self::OrderTimeline => "ledger_order_timeline view, one order".into(),
        }
    }

    /// How many times it is asked: the report over every SKU reads a
    /// day's rows, so it gets a twentieth of the samples (at least 3).
    fn samples(self, samples: u64) -> u64 {
        match self {
            Self::ReportAllDay => (samples / 20).max(3),
            _ => samples,
        }
    }

    async fn run(self, pool: &PgPool, pick: Pick) -> anyhow::Result<()> {
        match self {
            Self::SkuDay => {
                let mut q = HistoryQuery::of(HistoryOf::Sku(pick.sku), 1000);
                q.since_ms = Some(pick.at);
                q.until_ms = Some(pick.at + DAY_MS);
                query::history_page(pool, TOPIC, &q).await?;
            }
            Self::SkuPage => {
                let mut q = HistoryQuery::of(HistoryOf::Sku(pick.sku), 100);
                q.newest_first = true;
                q.results = vec![stockledger_core::ResultCode::RejectedInsufficient];
                query::history_page(pool, TOPIC, &q).await?;
            }
            Self::AsOfTime => {
                query::stock_as_of(pool, TOPIC, &pick.sku, AsOf::Time(pick.at)).await?;
            }
            Self::AsOfOffset => {
                query::stock_as_of(pool, TOPIC, &pick.sku, AsOf::Offset(pick.offset)).await?;
            }
            Self::ReportSkuDay | Self::ReportAllDay => {
                let sku = matches!(self, Self::ReportSkuDay).then_some(pick.sku.as_str());
                let day = pick.day();
                let range = query::ReportRange {
                    topic: TOPIC,
                    every_secs: 3600,
                    since_ms: day,
                    until_ms: day + DAY_MS,
                    sku,
                    max_rows: i64::MAX,
                };
                query::report(pool, &range).await?;
            }
            Self::SellOutsSku => {
                sqlx::query(
                    "SELECT * FROM ledger_sell_outs WHERE topic = $1 AND sku = $2
                     ORDER BY occurred_at DESC LIMIT 10",
                )
                .bind(TOPIC)
                .bind(pick.sku)
                .fetch_all(pool)
                .await?;
            }
            Self::OrderTimeline => {
                sqlx::query(
                    "SELECT * FROM ledger_order_timeline WHERE order_id = $1
                     ORDER BY sku, log_offset",
                )
                .bind(format!("o-{}", pick.offset / 10))
                .fetch_all(pool)
                .await?;
            }
        }
        Ok(())
    }
}

/// Generates `rows` rows in chunks, creating the months' partitions first.
async fn fill(pool: &PgPool, rows: i64) -> anyhow::Result<()> {
    let step_ms = (DAYS * DAY_MS / rows).max(1);
    sqlx::query(
        "SELECT ledger_entries_ensure_months(ARRAY(
             SELECT timestamptz 'epoch' + interval '1 millisecond' * ($1 + d * 86400000)
             FROM generate_series(0, $2) AS d))",
    )
    .bind(START_MS)
    .bind(DAYS)
    .execute(pool)
    .await?;
    let mut from = 0;
    while from < rows {
        let to = (from + FILL_CHUNK).min(rows) - 1;
        // Row i: SKU i % SKUS on partition (i % SKUS) % 8, log offset i.
        // Most are applied deducts of orders o-(i/10); every 10th a
        // rollback, every 13th refused, each SKU restocked every 1000th row.
        sqlx::query(
            "INSERT INTO ledger_entries (topic, partition, log_offset, sku, command, command_id,
                 order_id, adjustment_id, quantity, result, delta, available_after, total_after,
                 reason, occurred_at, restock_mode, rollback_reason)
             SELECT $1, (i % $4)::int % 8, i, 'SKU-' || (i % $4),
                 CASE WHEN kind = 'R' THEN 'RESTOCK' WHEN kind = 'B' THEN 'ROLLBACK' ELSE 'DEDUCT' END,
                 md5(i::text),
                 CASE WHEN kind = 'R' THEN NULL ELSE 'o-' || (i / 10) END,
                 CASE WHEN kind = 'R' THEN 'a-' || i END,
                 CASE WHEN kind = 'B' THEN NULL ELSE 1 + i % 3 END,
                 CASE WHEN kind = 'X' THEN 'REJECTED_INSUFFICIENT' ELSE 'APPLIED' END,
                 CASE kind WHEN 'R' THEN 100 WHEN 'B' THEN 1 WHEN 'X' THEN 0 ELSE -1 END,
                 (1000 - (i / $4) % 1000)::bigint, 1000,
                 CASE WHEN kind = 'X' THEN 'insufficient stock' END,
                 timestamptz 'epoch' + interval '1 millisecond' * ($5 + i * $6),
                 CASE WHEN kind = 'R' THEN 'ADD' END,
                 CASE WHEN kind = 'B' THEN 'payment failed' END
             FROM (SELECT i, CASE WHEN (i / $4) % 1000 = 0 THEN 'R' WHEN i % 10 = 7 THEN 'B'
                                  WHEN i % 13 = 5 THEN 'X' ELSE 'D' END AS kind
                   FROM generate_series($2::bigint, $3::bigint) AS i) AS g",
        )
        .bind(TOPIC)
        .bind(from)
        .bind(to)
        .bind(SKUS)
        .bind(START_MS)
        .bind(step_ms)
        .execute(pool)
        .await?;
        from = to + 1;
    }
    Ok(())
}

/// Runs `samples` queries from `next`, one at a time; their latencies.
async fn timed<F, Fut>(
    scenario: &'static str,
    what: &str,
    samples: u64,
    mut next: F,
) -> anyhow::Result<Measurement>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<()>>,
{
    let mut latencies = Histogram::<u64>::new(3)?;
    let started = Instant::now();
    for _ in 0..samples {
        let one = Instant::now();
        next()
            .await
            .with_context(|| format!("{scenario}: {what}"))?;
        latencies.record(duration_us(one.elapsed()))?;
    }
    let seconds = started.elapsed().as_secs_f64();
    let [p50, p99, p999] = crate::percentiles_ms(&latencies);
    Ok(Measurement {
        scenario,
        records: samples,
        seconds,
        setup: format!("{what}: p50 {p50:.1} ms, p99 {p99:.1} ms, max {p999:.1} ms"),
        latency_ms: Some([p50, p99, p999]),
        peak_rss_mib: None,
        failed: None,
        instructions: None,
        machine_cpu: None,
        hops: None,
    })
}

fn duration_us(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX).max(1)
}
