//! `stockledger-bench`: named scenarios against the configured services,
//! each reported next to baselines measured in the same run on the same
//! machine, since absolute figures drift on shared machines.
//!
//! Scenarios:
//! - `e2e-uniform` / `e2e-hot`: deducts, and one rollback in ten, produced
//!   as fast as the producer library takes them over many SKUs / one SKU,
//!   timed from the first produce to the last record applied and committed
//!   by an in-process applier. Each ends with the contract check: Redis
//!   equals the reference fold of the log, and archiving the outcomes
//!   leaves one row per log record; a scenario that fails it reports FAIL,
//!   not a figure, and the run exits non-zero.
//! - `latency-5k` / `latency-20k`: commands offered at a fixed rate, each
//!   timed from the produce call until its decision is visible to the order
//!   service; p50, p99 and p999.
//! - `replay`: rebuilding a fresh prefix from the e2e-uniform log.
//! - `archive`: archiving the e2e-uniform outcomes into PostgreSQL (the
//!   contract check's archiving, timed).
//! - `memory`: e2e-uniform at a tenth of its records and at all of them,
//!   applied and archived by `stockledger apply` and `stockledger archive`
//!   processes, with each one's peak resident set (Linux `VmHWM`).
//! - `gateway-5k`: deducts through the HTTP gateway (`stockledger serve`)
//!   offered at 5,000/s by oha, each waiting for its decision; p50, p99 and
//!   p999 next to `latency-5k`'s.
//! - `gateway-max`: as many deducts as the gateway takes, without waiting,
//!   next to the producer library's rate on the same topic.
//! - `scale` (on demand, not in the default set): a long log (10M records)
//!   applied and archived by processes in three steps, each one's peak RSS
//!   read after each step (the last one ends with the contract check), then
//!   replayed whole, its rate read as it passes each step.
//! - Baselines: `redis-lua-direct` (seed 001: one script call per request
//!   straight to Redis), `pg-row` (one row, `UPDATE … WHERE available >= $1`
//!   plus a flow-record insert per request) and `pg-buckets` (the same over
//!   8 bucket rows, seed 000).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::{Args, ValueEnum};
use futures::stream::{self, StreamExt};
use hdrhistogram::Histogram;
use stockledger_applier::replay::ReplayConfig;
use stockledger_client::LedgerProducer;
use stockledger_core::RestockMode;
use stockledger_kafka::admin::{create_topics, ledger_topic_specs, LedgerTopics, Retention};
use stockledger_kafka::topic::committed_offsets;
use stockledger_testkit::wait_until;
use tokio::sync::oneshot;

use stockledger_cli::{applier_config, archiver_config, connect_archive, Global};

use crate::baselines::{pg_rows, redis_lua_direct};
use crate::process::Component;
use crate::report::{memory_growth, write_results};

mod analyst;
mod baselines;
mod cpu;
mod gateway;
mod process;
mod report;

/// One command in this many of the e2e scenarios is a rollback.
const ROLLBACK_EVERY: u64 = 10;

#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Directory to write results.json, results.md and results.svg into.
    #[arg(long, default_value = "bench-results")]
    pub out: PathBuf,
    /// Small counts (for CI: the figures are printed, never asserted).
    #[arg(long)]
    pub quick: bool,
    /// Scenarios to run, comma-separated [default: all].
    #[arg(long, value_enum, value_delimiter = ',')]
    pub scenarios: Vec<Scenario>,
    /// Concurrent clients of the baselines.
    #[arg(long, default_value_t = 50)]
    pub concurrency: usize,
    /// Commands the producer library keeps in flight in the e2e scenarios.
    #[arg(long, default_value_t = 10_000)]
    pub in_flight: usize,
    /// Partitions of the e2e topics.
    #[arg(long, default_value_t = 8)]
    pub partitions: i32,
    /// Keep the Redis keys and archived rows the run wrote (by default they
    /// are removed at the end, so later runs and tests do not scan past
    /// them, nor insert into ever larger indexes).
    #[arg(long)]
    pub keep: bool,
    /// Records of the e2e scenarios and of the baselines (the memory
    /// scenario runs a tenth of them, then all) [default: 200000, or 2000
    /// with --quick].
    #[arg(long)]
    pub records: Option<u64>,
    /// Records per applier batch in the e2e scenarios (as `apply --batch-size`).
    #[arg(long, default_value_t = 10_000)]
    pub batch_size: usize,
    /// Milliseconds an applier batch waits to fill after its first record
    /// in the e2e scenarios (as `apply --batch-wait-ms`).
    #[arg(long, default_value_t = 1)]
    pub batch_wait_ms: u64,
    /// Most outcomes the archiver writes in one transaction in the e2e,
    /// memory and scale scenarios (as `archive --page-size`).
    #[arg(long, default_value_t = 5000)]
    pub page_size: usize,
    /// PostgreSQL connections the archiver writes a page with in the e2e,
    /// memory and scale scenarios (as `archive --writers`).
    #[arg(long, default_value_t = 2)]
    pub writers: usize,
    /// Rows of the analyst scenario's archive [default: 10000000, or 100000
    /// with --quick].
    #[arg(long)]
    pub analyst_rows: Option<i64>,
    /// Records of the scale scenario's log [default: 10000000, or 100000
    /// with --quick].
    #[arg(long)]
    pub scale_records: Option<u64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Scenario {
    E2eUniform,
    E2eHot,
    #[value(name = "latency-5k")]
    Latency5k,
    #[value(name = "latency-20k")]
    Latency20k,
    Replay,
    Archive,
    RedisLuaDirect,
    PgRow,
    PgBuckets,
    Memory,
    #[value(name = "gateway-5k")]
    Gateway5k,
    GatewayMax,
    /// The archive's queries on a large archive (its own database).
    Analyst,
    /// A long log (`--scale-records`, 10M by default): the applier's and
    /// archiver's peak RSS and the replay rate at a tenth, half and all of
    /// it. Run on demand only: not part of the default set.
    Scale,
}

impl Scenario {
    const ALL: [Scenario; 13] = [
        Self::RedisLuaDirect,
        Self::PgRow,
        Self::PgBuckets,
        Self::E2eUniform,
        Self::E2eHot,
        Self::Latency5k,
        Self::Latency20k,
        Self::Gateway5k,
        Self::GatewayMax,
        Self::Replay,
        Self::Archive,
        Self::Memory,
        Self::Analyst,
    ];

    fn name(self) -> &'static str {
        match self {
            Self::E2eUniform => "e2e-uniform",
            Self::E2eHot => "e2e-hot",
            Self::Latency5k => "latency-5k",
            Self::Latency20k => "latency-20k",
            Self::Replay => "replay",
            Self::Archive => "archive",
            Self::RedisLuaDirect => "redis-lua-direct",
            Self::PgRow => "pg-row",
            Self::PgBuckets => "pg-buckets",
            Self::Memory => "memory",
            Self::Gateway5k => "gateway-5k",
            Self::GatewayMax => "gateway-max",
            Self::Analyst => "analyst",
            Self::Scale => "scale",
        }
    }
}

/// One scenario's figure.
#[derive(Debug, Clone)]
struct Measurement {
    scenario: &'static str,
    records: u64,
    seconds: f64,
    setup: String,
    /// p50, p99 and p999 in milliseconds, for latency scenarios.
    latency_ms: Option<[f64; 3]>,
    /// Peak resident set of the applier and the archiver processes, in MiB,
    /// for the memory scenario.
    peak_rss_mib: Option<[f64; 2]>,
    /// Why the scenario's contract check failed: its figure is not reported.
    failed: Option<String>,
}

impl Measurement {
    fn rate(&self) -> f64 {
        self.records as f64 / self.seconds.max(1e-9)
    }
}

/// Counts per scenario.
struct Counts {
    /// Records of the e2e scenarios and of the baselines, the same count so
    /// that their rates compare.
    records: u64,
    /// Records of the 5k/s latency scenario (4× that at 20k/s).
    latency: u64,
    skus: usize,
}

/// What e2e-uniform leaves for the replay and archive scenarios.
struct Ledger {
    topic: String,
    /// Archiving its outcomes, done by the contract check.
    archive: Measurement,
}

pub async fn run(g: &Global, args: BenchArgs) -> anyhow::Result<ExitCode> {
    let counts = if args.quick {
        Counts {
            records: 2_000,
            latency: 500,
            skus: 200,
        }
    } else {
        Counts {
            records: 200_000,
            latency: 20_000,
            skus: 10_000,
        }
    };
    let counts = Counts {
        records: args.records.unwrap_or(counts.records).max(10),
        ..counts
    };
    let run_id = format!("bench-{}", &uuid::Uuid::new_v4().simple().to_string()[..8]);
    let selected = if args.scenarios.is_empty() {
        Scenario::ALL.to_vec()
    } else {
        args.scenarios.clone()
    };
    println!(
        "stockledger bench {run_id} ({} mode)",
        if args.quick { "quick" } else { "full" }
    );
    let pool = connect_archive(g, args.concurrency.min(50) as u32 + 2).await?;
    let mut results: Vec<Measurement> = Vec::new();
    let mut uniform: Option<Ledger> = None;
    for scenario in selected {
        if scenario == Scenario::Memory {
            for records in [counts.records / 10, counts.records] {
                let m = memory(g, &pool, &args, &run_id, counts.skus, records).await?;
                print_measurement(&m);
                results.push(m);
            }
            continue;
        }
        if scenario == Scenario::Scale {
            let records = args
                .scale_records
                .unwrap_or(if args.quick { 100_000 } else { 10_000_000 })
                .max(1000);
            // Printed as each step is measured: the scenario takes minutes.
            results.extend(scale(g, &pool, &args, &run_id, counts.skus, records).await?);
            continue;
        }
        if scenario == Scenario::Analyst {
            let (rows, samples) = if args.quick {
                (100_000, 20)
            } else {
                (10_000_000, 200)
            };
            let rows = args.analyst_rows.unwrap_or(rows).max(analyst::MIN_ROWS);
            for m in analyst::analyst(g, &run_id, rows, samples, args.keep).await? {
                print_measurement(&m);
                results.push(m);
            }
            continue;
        }
        let m = match scenario {
            Scenario::RedisLuaDirect => {
                redis_lua_direct(g, &run_id, &counts, args.concurrency).await?
            }
            Scenario::PgRow | Scenario::PgBuckets => {
                let rows = if scenario == Scenario::PgRow { 1 } else { 8 };
                pg_rows(
                    &pool,
                    &run_id,
                    scenario.name(),
                    rows,
                    counts.records,
                    args.concurrency,
                )
                .await?
            }
            Scenario::E2eUniform => {
                let (m, ledger) = e2e(
                    g,
                    &pool,
                    &args,
                    &run_id,
                    scenario.name(),
                    counts.skus,
                    counts.records,
                )
                .await?;
                uniform = Some(ledger);
                m
            }
            Scenario::E2eHot => {
                e2e(g, &pool, &args, &run_id, scenario.name(), 1, counts.records)
                    .await?
                    .0
            }
            Scenario::Latency5k => {
                latency(g, &args, &run_id, scenario.name(), 5_000, counts.latency).await?
            }
            Scenario::Latency20k => {
                latency(
                    g,
                    &args,
                    &run_id,
                    scenario.name(),
                    20_000,
                    4 * counts.latency,
                )
                .await?
            }
            Scenario::Gateway5k => {
                gateway::fixed_rate(g, &args, &run_id, scenario.name(), 5_000, counts.latency)
                    .await?
            }
            Scenario::GatewayMax => {
                gateway::throughput(g, &args, &run_id, scenario.name(), counts.records).await?
            }
            Scenario::Memory | Scenario::Analyst | Scenario::Scale => {
                unreachable!("measured above")
            }
            Scenario::Replay | Scenario::Archive => {
                let ledger = match &uniform {
                    Some(l) => l,
                    None => {
                        let (_, ledger) = e2e(
                            g,
                            &pool,
                            &args,
                            &run_id,
                            "e2e-uniform",
                            counts.skus,
                            counts.records,
                        )
                        .await?;
                        uniform.insert(ledger)
                    }
                };
                if scenario == Scenario::Replay {
                    replay(g, &run_id, ledger).await?
                } else {
                    ledger.archive.clone()
                }
            }
        };
        print_measurement(&m);
        results.push(m);
    }
    print!("{}", memory_growth(&results));
    write_results(&args.out, &run_id, args.quick, &results)?;
    if !args.keep {
        let (keys, rows) = clean_up(g, &pool, &run_id).await?;
        println!(
            "removed the run's {keys} Redis keys and {rows} archived rows (--keep keeps them)"
        );
    }
    println!("results in {}", args.out.display());
    let failed: Vec<&str> = results
        .iter()
        .filter(|m| m.failed.is_some())
        .map(|m| m.scenario)
        .collect();
    if !failed.is_empty() {
        eprintln!("contract check failed in: {}", failed.join(", "));
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}

fn print_measurement(m: &Measurement) {
    if let Some(failure) = &m.failed {
        println!("  {:<18} FAIL: {failure}", m.scenario);
        return;
    }
    println!(
        "  {:<18} {:>9} records in {:>7.2} s = {:>10.0} /s   ({})",
        m.scenario,
        m.records,
        m.seconds,
        m.rate(),
        m.setup
    );
}

/// e2e-uniform with the applier and the archiver as processes of their
/// own, reporting each one's peak resident set once every record is
/// applied and archived.
async fn memory(
    g: &Global,
    pool: &sqlx::PgPool,
    args: &BenchArgs,
    run_id: &str,
    skus: usize,
    records: u64,
) -> anyhow::Result<Measurement> {
    let name = format!("memory-{records}");
    let (pipeline, archiver, archiver_group) =
        with_processes(g, args, run_id, &name, skus, records).await?;
    let started = Instant::now();
    pipeline.publish(records, args.in_flight).await?;
    pipeline.wait_applied(records).await?;
    wait_archived(
        pool,
        &archiver_group,
        &pipeline.outcomes_topic,
        records + skus as u64,
        || archiver.check_running(),
    )
    .await?;
    let seconds = started.elapsed().as_secs_f64();
    let [applier_rss, archiver_rss] = peak_rss(&pipeline, &archiver)?;
    archiver.stop().await?;
    let (topic, prefix) = (pipeline.topic.clone(), pipeline.prefix.clone());
    pipeline.stop().await?;
    let failed = contract_differs(g, pool, &topic, &prefix, records + skus as u64).await?;
    Ok(Measurement {
        scenario: "memory",
        records,
        seconds,
        setup: format!(
            "e2e-uniform over {skus} SKUs, applied and archived by separate processes: peak RSS applier {applier_rss:.1} MiB, archiver {archiver_rss:.1} MiB"
        ),
        latency_ms: None,
        peak_rss_mib: Some([applier_rss, archiver_rss]),
        failed,
    })
}

/// The scale scenario: `records` commands over `skus` SKUs applied and
/// archived by `stockledger apply` and `stockledger archive` processes, in
/// three steps (a tenth, half, all), each one's peak RSS read after every
/// step; then the whole log replayed into a fresh prefix, its rate read
/// as it passes each step.
async fn scale(
    g: &Global,
    pool: &sqlx::PgPool,
    args: &BenchArgs,
    run_id: &str,
    skus: usize,
    records: u64,
) -> anyhow::Result<Vec<Measurement>> {
    let (pipeline, archiver, archiver_group) =
        with_processes(g, args, run_id, "scale", skus, records).await?;
    let steps = [records / 10, records / 2, records];
    let mut results = Vec::new();
    let (started, mut from) = (Instant::now(), 0);
    for step in steps {
        pipeline.publish_range(from..step, args.in_flight).await?;
        from = step;
        pipeline.wait_applied(step).await?;
        wait_archived(
            pool,
            &archiver_group,
            &pipeline.outcomes_topic,
            step + skus as u64,
            || archiver.check_running(),
        )
        .await?;
        let [applier_rss, archiver_rss] = peak_rss(&pipeline, &archiver)?;
        // The contract check once, at the end: it reads the whole log.
        let failed = if step == records {
            let log = step + skus as u64;
            contract_differs(g, pool, &pipeline.topic, &pipeline.prefix, log).await?
        } else {
            None
        };
        let m = Measurement {
            scenario: "memory",
            records: step,
            seconds: started.elapsed().as_secs_f64(),
            setup: format!(
                "scale: the first {step} of {records} records over {skus} SKUs, applied and archived by separate processes: peak RSS applier {applier_rss:.1} MiB, archiver {archiver_rss:.1} MiB"
            ),
            latency_ms: None,
            peak_rss_mib: Some([applier_rss, archiver_rss]),
            failed,
        };
        print_measurement(&m);
        results.push(m);
    }
    archiver.stop().await?;
    let topic = pipeline.topic.clone();
    pipeline.stop().await?;
    // The whole log replayed; the time it passes each step, read from its
    // progress reports (a few a second).
    let target = format!("{}:{run_id}:scale-replay", g.prefix);
    let config = ReplayConfig::new(g.kafka(), g.redis_url.clone(), topic, target);
    let log = records + skus as u64;
    let mut passed: Vec<(u64, f64)> = Vec::new();
    let report = stockledger_applier::replay::replay(config, std::future::pending(), |p| {
        for step in steps {
            if p.records >= step && !passed.iter().any(|&(s, _)| s == step) {
                passed.push((step, p.elapsed.as_secs_f64()));
            }
        }
    })
    .await?;
    anyhow::ensure!(
        report.records == log,
        "the replay read {} records of a {log}-record log",
        report.records
    );
    for (step, seconds) in passed {
        let m = Measurement {
            scenario: "replay",
            records: step,
            seconds,
            setup: format!(
                "scale: the first {step} records of a {log}-record log ({} SKUs), timed from the replay's start",
                report.skus
            ),
            latency_ms: None,
            peak_rss_mib: None,
            failed: None,
        };
        print_measurement(&m);
        results.push(m);
    }
    Ok(results)
}

/// A pipeline for `records` commands over `skus` SKUs whose applier is a
/// `stockledger apply` process, with a `stockledger archive` process on its
/// outcomes (and that archiver's group), so each one's memory can be read.
async fn with_processes(
    g: &Global,
    args: &BenchArgs,
    run_id: &str,
    name: &str,
    skus: usize,
    records: u64,
) -> anyhow::Result<(Pipeline, Component, String)> {
    let per_sku = (records / skus as u64 + 1) as i64;
    let pipeline = Pipeline::start(g, args, run_id, name, skus, per_sku, false).await?;
    let group = format!("{run_id}-{name}-archiver");
    let archiver = Component::start(
        g,
        &[
            ("STOCKLEDGER_OUTCOMES_TOPIC", &pipeline.outcomes_topic),
            ("STOCKLEDGER_ARCHIVER_GROUP", &group),
            ("STOCKLEDGER_PAGE_SIZE", &args.page_size.max(1).to_string()),
            (
                "STOCKLEDGER_ARCHIVE_WRITERS",
                &args.writers.max(1).to_string(),
            ),
        ],
        "archive",
    )?;
    Ok((pipeline, archiver, group))
}

/// The peak resident set, in MiB, of the applier and archiver processes.
fn peak_rss(pipeline: &Pipeline, archiver: &Component) -> anyhow::Result<[f64; 2]> {
    let applier = match &pipeline.applier {
        Applier::Process(p) => p.peak_rss_mib(),
        Applier::Task { .. } => None,
    };
    match (applier, archiver.peak_rss_mib()) {
        (Some(applier), Some(archiver)) => Ok([applier, archiver]),
        _ => anyhow::bail!(
            "no peak RSS of the applier and archiver processes in /proc (needs Linux)"
        ),
    }
}

/// Where a scenario's applier runs.
enum Applier {
    /// A task of the bench process.
    Task {
        stop: oneshot::Sender<()>,
        task: tokio::task::JoinHandle<
            Result<stockledger_applier::ApplierStats, stockledger_applier::ApplierError>,
        >,
    },
    /// A `stockledger apply` process, so its memory can be read alone.
    Process(Component),
}

/// Topics, an applier and a producer for one scenario, with every SKU
/// restocked and the restocks applied.
struct Pipeline {
    kafka: stockledger_kafka::KafkaConfig,
    topic: String,
    outcomes_topic: String,
    group: String,
    prefix: String,
    skus: usize,
    producer: LedgerProducer,
    restocks: i64,
    applier: Applier,
}

impl Pipeline {
    async fn start(
        g: &Global,
        args: &BenchArgs,
        run_id: &str,
        name: &str,
        skus: usize,
        per_sku: i64,
        in_process: bool,
    ) -> anyhow::Result<Self> {
        let topic = format!("{run_id}.{name}.ledger");
        let outcomes_topic = format!("{run_id}.{name}.outcomes");
        let dlq_topic = format!("{run_id}.{name}.dlq");
        let kafka = g.kafka();
        let topics = LedgerTopics {
            commands: &topic,
            outcomes: &outcomes_topic,
            dead_letters: &dlq_topic,
        };
        let specs = ledger_topic_specs(topics, args.partitions, 1, Retention::default());
        create_topics(&kafka, &specs).await?;
        let mut config = applier_config(g);
        config.topic = topic.clone();
        config.outcomes_topic = outcomes_topic.clone();
        config.dlq_topic = dlq_topic;
        config.prefix = format!("{}:{run_id}:{name}", g.prefix);
        config.group_id = format!("{run_id}-{name}-applier");
        config.batch_size = args.batch_size.max(1);
        config.batch_wait = Duration::from_millis(args.batch_wait_ms);
        let (group, prefix) = (config.group_id.clone(), config.prefix.clone());
        let applier = if in_process {
            let (stop, stopped) = oneshot::channel::<()>();
            let task = tokio::spawn(stockledger_applier::run(config, async {
                let _ = stopped.await;
            }));
            Applier::Task { stop, task }
        } else {
            Applier::Process(Component::start(
                g,
                &[
                    ("STOCKLEDGER_TOPIC", &config.topic),
                    ("STOCKLEDGER_OUTCOMES_TOPIC", &config.outcomes_topic),
                    ("STOCKLEDGER_DLQ_TOPIC", &config.dlq_topic),
                    ("STOCKLEDGER_PREFIX", &config.prefix),
                    ("STOCKLEDGER_APPLIER_GROUP", &config.group_id),
                    ("STOCKLEDGER_BATCH_SIZE", &config.batch_size.to_string()),
                    ("STOCKLEDGER_BATCH_WAIT_MS", &args.batch_wait_ms.to_string()),
                ],
                "apply",
            )?)
        };
        let producer = LedgerProducer::new(&kafka, topic.clone())?;
        let pipeline = Self {
            kafka,
            topic,
            outcomes_topic,
            group,
            prefix,
            skus,
            producer,
            restocks: skus as i64,
            applier,
        };
        stream::iter(0..skus as u64)
            .map(|i| {
                let p = &pipeline;
                async move {
                    p.producer
                        .restock(&p.sku(i), "initial", RestockMode::Set, per_sku)
                        .await
                }
            })
            .buffer_unordered(args.in_flight)
            .collect::<Vec<_>>()
            .await
            .into_iter()
            .collect::<Result<Vec<_>, _>>()?;
        pipeline.wait_applied(0).await?;
        Ok(pipeline)
    }

    /// The SKU of the `i`-th command.
    fn sku(&self, i: u64) -> String {
        format!("SKU-{:05}", i % self.skus as u64)
    }

    /// Waits until the restocks and `records` more are applied and committed.
    async fn wait_applied(&self, records: u64) -> anyhow::Result<()> {
        let records = self.restocks + records as i64;
        let deadline = Instant::now() + Duration::from_secs(600);
        loop {
            let done: i64 = committed_offsets(&self.kafka, &self.group, &self.topic)
                .await?
                .values()
                .sum();
            if done >= records {
                return Ok(());
            }
            if let Applier::Process(p) = &self.applier {
                p.check_running()?;
            }
            anyhow::ensure!(
                Instant::now() < deadline,
                "{} committed {done} of {records} records in 10 minutes",
                self.group
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Sends `records` commands, `in_flight` at a time, and returns when the
    /// broker holds them all. Nine in ten are deducts of one unit; every
    /// tenth is the rollback of an order deducted at least `in_flight`
    /// commands earlier (a cancelled or unpaid order), so by the time it is
    /// sent its deduct is already queued ahead of it on the SKU's partition.
    async fn publish(&self, records: u64, in_flight: usize) -> anyhow::Result<()> {
        self.publish_range(0..records, in_flight).await
    }

    /// [`Pipeline::publish`] of the commands numbered `range` (a scenario
    /// publishing in steps gets the same commands as one publishing at once).
    async fn publish_range(
        &self,
        range: std::ops::Range<u64>,
        in_flight: usize,
    ) -> anyhow::Result<()> {
        let lag = (in_flight as u64).min(range.end / 2) / ROLLBACK_EVERY * ROLLBACK_EVERY
            + ROLLBACK_EVERY;
        stream::iter(range)
            .map(|i| async move {
                if i % ROLLBACK_EVERY == 0 && i >= lag {
                    let order = i - lag + 1;
                    self.producer
                        .rollback(&self.sku(order), &format!("order-{order}"), None)
                        .await
                } else {
                    self.producer
                        .deduct(&self.sku(i), &format!("order-{i}"), 1)
                        .await
                }
            })
            .buffer_unordered(in_flight)
            .collect::<Vec<_>>()
            .await
            .into_iter()
            .collect::<Result<Vec<_>, _>>()?;
        Ok(())
    }

    async fn stop(self) -> anyhow::Result<()> {
        match self.applier {
            Applier::Task { stop, task } => {
                let _ = stop.send(());
                task.await.context("applier task")??;
            }
            Applier::Process(process) => process.stop().await?,
        }
        Ok(())
    }
}

/// Deducts and rollbacks over `skus` SKUs through Kafka, the applier and
/// Redis.
async fn e2e(
    g: &Global,
    pool: &sqlx::PgPool,
    args: &BenchArgs,
    run_id: &str,
    name: &str,
    skus: usize,
    records: u64,
) -> anyhow::Result<(Measurement, Ledger)> {
    let per_sku = (records / skus as u64 + 1) as i64;
    let pipeline = Pipeline::start(g, args, run_id, name, skus, per_sku, true).await?;
    let redis = stockledger_redis::RedisConn::connect(&g.redis_url).await?;
    let cpu = cpu::CpuTimes::now(&redis).await?;
    let started = Instant::now();
    pipeline.publish(records, args.in_flight).await?;
    let produced = started.elapsed().as_secs_f64();
    pipeline.wait_applied(records).await?;
    let seconds = started.elapsed().as_secs_f64();
    let cpu = cpu.per_record(&redis, records).await?;
    let (topic, outcomes_topic, prefix) = (
        pipeline.topic.clone(),
        pipeline.outcomes_topic.clone(),
        pipeline.prefix.clone(),
    );
    pipeline.stop().await?;
    let log_records = records + skus as u64;
    let mut failures = Vec::new();
    if let Some(failure) = projection_differs(g, &topic, &prefix, log_records).await? {
        failures.push(failure);
    }
    let mut archive = archive(
        g,
        args,
        pool,
        &format!("{run_id}-{name}"),
        &topic,
        &outcomes_topic,
        log_records,
    )
    .await?;
    if let Some(failure) = &archive.failed {
        failures.push(failure.clone());
    }
    let measurement = Measurement {
        scenario: if skus == 1 { "e2e-hot" } else { "e2e-uniform" },
        records,
        seconds,
        setup: format!(
            "{skus} SKUs, {} partitions, {} in flight, batches of {}; all produced after {produced:.2} s; {cpu}; contract checked",
            args.partitions, args.in_flight, args.batch_size
        ),
        latency_ms: None,
        peak_rss_mib: None,
        failed: (!failures.is_empty()).then(|| failures.join("; ")),
    };
    archive.setup = format!("the {} outcomes, {}", measurement.scenario, archive.setup);
    let ledger = Ledger { topic, archive };
    Ok((measurement, ledger))
}

/// The contract check's first half: `None` when the projection under
/// `prefix` is exactly the reference fold of `topic` (`log_records`
/// records, which bound how long reading it may take), else what differs.
async fn projection_differs(
    g: &Global,
    topic: &str,
    prefix: &str,
    log_records: u64,
) -> anyhow::Result<Option<String>> {
    let kafka = g.kafka();
    // A minute, and a minute more per million records: the 10M-record
    // scale log is read and folded well within that here, so only a
    // broker that stops serving runs it out.
    let within = Duration::from_secs(60 + 60 * log_records / 1_000_000);
    let log = stockledger_kafka::topic::read_topic(&kafka, topic, within).await?;
    let partitions = stockledger_kafka::topic::partition_count(&kafka, topic).await?;
    let reference = stockledger_applier::check::fold(&log, partitions);
    let projection = stockledger_projection::Projection::connect(&g.redis_url, prefix).await?;
    let mismatches = stockledger_applier::check::compare(&projection, &reference).await?;
    Ok(mismatches.first().map(|first| {
        format!(
            "Redis differs from the fold of the log in {} SKUs (first {first})",
            mismatches.len()
        )
    }))
}

/// The contract check's second half: `None` when the archive holds exactly
/// one row per record of `topic` (`log_records` of them), else how many.
async fn archive_differs(
    pool: &sqlx::PgPool,
    topic: &str,
    log_records: u64,
) -> anyhow::Result<Option<String>> {
    let rows = stockledger_analysts::query::count_rows(pool, topic).await? as u64;
    Ok(
        (rows != log_records)
            .then(|| format!("{rows} archived rows for {log_records} log records")),
    )
}

/// Both halves of the contract check, for a pipeline whose archiver has
/// already archived everything: `None` when both hold, else what failed.
async fn contract_differs(
    g: &Global,
    pool: &sqlx::PgPool,
    topic: &str,
    prefix: &str,
    log_records: u64,
) -> anyhow::Result<Option<String>> {
    let failures: Vec<String> = [
        projection_differs(g, topic, prefix, log_records).await?,
        archive_differs(pool, topic, log_records).await?,
    ]
    .into_iter()
    .flatten()
    .collect();
    Ok((!failures.is_empty()).then(|| failures.join("; ")))
}

/// Commands offered at a fixed rate; each one timed from the produce call
/// until its decision is visible to the order service (`OutcomeReader`).
async fn latency(
    g: &Global,
    args: &BenchArgs,
    run_id: &str,
    scenario: &'static str,
    rate: u64,
    records: u64,
) -> anyhow::Result<Measurement> {
    let pipeline = Pipeline::start(g, args, run_id, scenario, 100, records as i64, true).await?;
    let reader =
        stockledger_client::OutcomeReader::connect(&g.redis_url, pipeline.prefix.clone()).await?;
    let mut ticker = tokio::time::interval(Duration::from_secs_f64(1.0 / rate as f64));
    let mut timings = tokio::task::JoinSet::new();
    let started = Instant::now();
    for i in 0..records {
        ticker.tick().await;
        let (producer, reader, sku) = (pipeline.producer.clone(), reader.clone(), pipeline.sku(i));
        timings.spawn(async move {
            let sent = Instant::now();
            let receipt = producer.deduct(&sku, &format!("order-{i}"), 1).await?;
            let acknowledged = sent.elapsed();
            reader.wait(&receipt, Duration::from_secs(60)).await?;
            anyhow::Ok((acknowledged, sent.elapsed()))
        });
    }
    // Microseconds, 3 significant figures: far finer than the spread.
    let mut acks = Histogram::<u64>::new(3)?;
    let mut latencies = Histogram::<u64>::new(3)?;
    while let Some(timing) = timings.join_next().await {
        let (ack, total) = timing.context("latency task")??;
        acks.record(ack.as_micros() as u64)?;
        latencies.record(total.as_micros() as u64)?;
    }
    let seconds = started.elapsed().as_secs_f64();
    pipeline.stop().await?;
    let ms = |h: &Histogram<u64>, q: f64| h.value_at_quantile(q) as f64 / 1000.0;
    let (p50, p99, p999) = (
        ms(&latencies, 0.50),
        ms(&latencies, 0.99),
        ms(&latencies, 0.999),
    );
    let ack_p50 = ms(&acks, 0.50);
    Ok(Measurement {
        scenario,
        records,
        seconds,
        setup: format!(
            "offered {rate}/s over 100 SKUs: p50 {p50:.1} ms, p99 {p99:.1} ms, p999 {p999:.1} ms (broker ack p50 {ack_p50:.1} ms)"
        ),
        latency_ms: Some([p50, p99, p999]),
        peak_rss_mib: None,
        failed: None,
    })
}

async fn replay(g: &Global, run_id: &str, ledger: &Ledger) -> anyhow::Result<Measurement> {
    let target = format!("{}:{run_id}:replay", g.prefix);
    let config = ReplayConfig::new(g.kafka(), g.redis_url.clone(), ledger.topic.clone(), target);
    let redis = stockledger_redis::RedisConn::connect(&g.redis_url).await?;
    let cpu = cpu::CpuTimes::now(&redis).await?;
    let started = Instant::now();
    let report =
        stockledger_applier::replay::replay(config, std::future::pending(), |_| {}).await?;
    let seconds = started.elapsed().as_secs_f64();
    let cpu = cpu.per_record(&redis, report.records).await?;
    Ok(Measurement {
        scenario: "replay",
        records: report.records,
        seconds,
        setup: format!("the e2e-uniform log, {} SKUs; {cpu}", report.skus),
        latency_ms: None,
        peak_rss_mib: None,
        failed: None,
    })
}

/// Waits until archiver group `group` has archived the first `messages`
/// messages of `outcomes_topic`, by its progress rows (cheap to read,
/// unlike counting the archive while it grows); fails after 10 minutes,
/// or as soon as `running` says the archiver is gone.
async fn wait_archived(
    pool: &sqlx::PgPool,
    group: &str,
    outcomes_topic: &str,
    messages: u64,
    running: impl Fn() -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    let what = format!("{messages} archived outcomes of {outcomes_topic}");
    wait_until(&what, Duration::from_secs(600), || async {
        let archived: i64 = sqlx::query_scalar(
            "SELECT coalesce(sum(next_offset), 0)::bigint FROM archiver_progress
             WHERE consumer_group = $1 AND topic = $2",
        )
        .bind(group)
        .bind(outcomes_topic)
        .fetch_one(pool)
        .await?;
        running()?;
        Ok((archived as u64 >= messages).then_some(()))
    })
    .await
}

/// Archives the outcomes of command topic `topic` (`records` records)
/// with an in-process archiver; the contract check's second half fails
/// unless exactly one row per record is archived.
async fn archive(
    g: &Global,
    args: &BenchArgs,
    pool: &sqlx::PgPool,
    group: &str,
    topic: &str,
    outcomes_topic: &str,
    records: u64,
) -> anyhow::Result<Measurement> {
    let mut config = archiver_config(g);
    config.outcomes_topic = outcomes_topic.to_owned();
    let group = format!("{group}-archiver");
    config.group_id = group.clone();
    config.page_size = args.page_size.max(1);
    config.writers = args.writers.max(1);
    let (page_size, writers) = (config.page_size, config.writers);
    let assignment = config.assignment.clone();
    let (stop, stopped) = oneshot::channel::<()>();
    let archiver = tokio::spawn(stockledger_archiver::run(config, async {
        let _ = stopped.await;
    }));
    // Timed from when the group has given the archiver its partitions:
    // joining takes seconds on some brokers, and is not archiving.
    wait_until(
        "the archiver's partitions",
        Duration::from_secs(120),
        || async {
            anyhow::ensure!(!archiver.is_finished(), "the archiver stopped early");
            Ok((assignment.count() > 0).then_some(()))
        },
    )
    .await?;
    let started = Instant::now();
    wait_archived(pool, &group, outcomes_topic, records, || {
        anyhow::ensure!(!archiver.is_finished(), "the archiver stopped early");
        Ok(())
    })
    .await?;
    let seconds = started.elapsed().as_secs_f64();
    let _ = stop.send(());
    archiver.await.context("archiver task")??;
    Ok(Measurement {
        scenario: "archive",
        records,
        seconds,
        setup: format!(
            "pages of {page_size}, {writers} writers, timed from the group's assignment"
        ),
        latency_ms: None,
        peak_rss_mib: None,
        failed: archive_differs(pool, topic, records).await?,
    })
}

/// Removes what the run wrote: Redis projections under `<prefix>:<run>:…`,
/// the baseline's `<run>:…` keys, and the archive's rows and progress for
/// the run's `<run>.…` topics. Returns the keys and rows removed.
async fn clean_up(g: &Global, pool: &sqlx::PgPool, run_id: &str) -> anyhow::Result<(usize, u64)> {
    let conn = stockledger_redis::RedisConn::connect(&g.redis_url).await?;
    let mut removed = 0;
    for pattern in [format!("{}:{run_id}:*", g.prefix), format!("{run_id}:*")] {
        let keys = conn.scan_all(&pattern).await?;
        for chunk in keys.chunks(1000) {
            let unlinks: Vec<redis::Cmd> = chunk.iter().map(redis::Cmd::unlink).collect();
            let _: Vec<u64> = conn.query_each(unlinks).await?;
            removed += chunk.len();
        }
    }
    // The run's topics are named `<run>.…`; the broker lists them, and
    // deleting by exact topic uses the archive's primary key.
    let topics =
        stockledger_kafka::topic::topics_starting_with(&g.kafka(), &format!("{run_id}.")).await?;
    let rows = sqlx::query("DELETE FROM ledger_entries WHERE topic = ANY($1)")
        .bind(&topics)
        .execute(pool)
        .await?
        .rows_affected();
    sqlx::query("DELETE FROM ledger_hourly WHERE topic = ANY($1)")
        .bind(&topics)
        .execute(pool)
        .await?;
    sqlx::query("DELETE FROM archiver_progress WHERE topic = ANY($1)")
        .bind(&topics)
        .execute(pool)
        .await?;
    Ok((removed, rows))
}
