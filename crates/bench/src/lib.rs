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
//! - `latency-5k` / `latency-20k`: commands offered open loop at a fixed
//!   rate, each timed from when it was due until its decision is visible
//!   to the order service; p50, p99, p999 and a plot over time, and each
//!   decision broken into its hops (the caller's clock for the send and
//!   the answer, the in-process applier's for its steps, `hops_ms`), with
//!   the CPU time stolen from the machine during the run.
//! - `replay`: rebuilding a fresh prefix from the e2e-uniform log.
//! - `archive`: archiving the e2e-uniform outcomes into PostgreSQL (the
//!   contract check's archiving, timed).
//! - `memory`: e2e-uniform at a tenth of its records and at all of them,
//!   applied and archived by `stockledger apply` and `stockledger archive`
//!   processes, with each one's peak resident set (Linux `VmHWM`).
//! - `gateway-5k`: deducts through the HTTP gateway (`stockledger serve`)
//!   offered the same way at 5,000/s over keep-alive connections, each
//!   waiting for its decision.
//! - `gateway-max`: as many deducts as the gateway takes, without waiting,
//!   next to the producer library's rate on the same topic, with the CPU
//!   each process spent a request; then as many `/healthz` requests to
//!   the same gateway, the HTTP exchange alone.
//! - `gateway-pipelined`: the same deducts 1, 4 and 16 to a keep-alive
//!   connection at a time (HTTP/1.1 pipelining), 256 in flight in each
//!   step, by the bench's own client; the rate and the gateway's CPU.
//! - `scale-out`: the e2e-uniform commands applied by 1, 2 and 4
//!   `stockledger apply` processes in one group and archived by a
//!   `stockledger archive` process; the rate and each service's CPU
//!   seconds per million records (appliers, archiver, Redis, PostgreSQL,
//!   the broker, the producers).
//! - `scale` (on demand, not in the default set): a long log (10M records)
//!   applied and archived by processes in three steps, each one's peak RSS
//!   read after each step (the last one ends with the contract check), then
//!   replayed whole, its rate read as it passes each step.
//! - `kstreams`: the peer a team on Kafka would pick, an inventory service
//!   written as a Kafka Streams application (`crates/bench/kstreams`,
//!   RocksDB stores with changelogs), over the e2e-uniform log with
//!   `exactly_once_v2` and with `at_least_once`, and over the e2e-hot log;
//!   timed from when it runs until its outcomes topic holds a committed
//!   decision for every record, each compared with the ledger's (after a
//!   small log that sells out, repeats and leaves tombstones). The results
//!   table's `× kstreams` is against its exactly-once e2e-uniform rate.
//! - Every throughput scenario also reports the whole machine's CPU a
//!   record over its timed part (`/proc/stat`: the broker, Redis,
//!   PostgreSQL, the bench, the JVM, all together).
//! - `redis-floor`: Redis's CPU a record when a batch writes nothing but
//!   each record's decision and its SKU's stock fields, then the order's
//!   entry besides in the orders hash (today's layout) or in the stock
//!   hash, in the e2e-uniform shape: a floor under the applier's Redis
//!   figure (no reads, no fence, no holds), not a design.
//! - Baselines: `redis-lua-direct` (seed 001: one script call per request
//!   straight to Redis), `pg-row` (one row, `UPDATE … WHERE available >= $1`
//!   plus a flow-record insert per request) and `pg-buckets` (the same over
//!   8 bucket rows, seed 000).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, ValueEnum};

use stockledger_cli::{connect_archive, Global};

use crate::baselines::{pg_rows, redis_floor, redis_lua_direct};
use crate::report::{memory_growth, write_results};

mod analyst;
mod baselines;
mod basket;
mod contract;
mod cpu;
mod e2e;
mod floor;
mod gateway;
mod hops;
mod kstreams;
mod memory;
mod pipeline;
mod process;
mod report;
mod scaleout;
mod seatmap;
pub mod stages;
mod timeline;

/// One command in this many of the e2e scenarios is a rollback.
const ROLLBACK_EVERY: u64 = 10;

#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Directory to write results.json, results.md and results.svg into (and
    /// each latency scenario's plot over time, `<scenario>.svg`).
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
    /// Give every SKU of the e2e scenarios a sale window (open from an hour
    /// ago for a day) before the clock starts, so every deduct is checked
    /// against one: the window's cost.
    #[arg(long)]
    pub sale_windows: bool,
    /// Keep the topics, Redis keys and archived rows the run wrote (by
    /// default they are removed at the end, so later runs and tests do not
    /// scan past them, insert into ever larger indexes, or fill the disk).
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
    /// How the library's latency scenarios await each decision: read from
    /// Redis when the applier announces its batch (`RedisDecisions`), or
    /// from the outcomes topic by one consumer the callers share
    /// (`TopicDecisions`).
    #[arg(long, value_enum, default_value_t = DecisionsVia::Redis)]
    pub decisions: DecisionsVia,
}

/// Where a waiting caller learns its decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum DecisionsVia {
    Redis,
    Outcomes,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Scenario {
    E2eUniform,
    E2eHot,
    /// The floor under the latency scenarios' acknowledgement: a bare
    /// librdkafka producer with the ledger's contract settings, 5,000/s
    /// offered open loop, with `linger.ms` 0 and 1.
    KafkaFloor,
    #[value(name = "latency-5k")]
    Latency5k,
    #[value(name = "latency-20k")]
    Latency20k,
    Replay,
    Archive,
    RedisLuaDirect,
    /// What Redis's CPU a record comes down to when a batch writes only
    /// each record's decision and its SKU's stock fields (`redis-floor`),
    /// then the order's entry besides, in the orders hash
    /// (`redis-floor-orders`) or in the stock hash (`redis-floor-merged`):
    /// the applier's writes with none of its other work.
    RedisFloor,
    PgRow,
    PgBuckets,
    Memory,
    #[value(name = "gateway-5k")]
    Gateway5k,
    GatewayMax,
    /// HTTP/1.1 pipelining: gateway-max's deducts 1, 4 and 16 to a
    /// connection at a time, 256 in flight each, by the bench's own client.
    GatewayPipelined,
    /// Baskets of three lines on uniform SKUs, held then confirmed.
    Basket,
    /// Stock events fanned out to 1,000 open event streams (SSE) of the
    /// gateway: delivery latency.
    #[value(name = "sse-fanout")]
    SseFanout,
    /// Every record raising a stock event, through an applier publishing
    /// none and then one publishing them: the cost of events.
    Events,
    /// Reads of a show's seat map (300 named seats), concurrently.
    #[value(name = "seat-map")]
    SeatMap,
    /// The archive's queries on a large archive (its own database).
    Analyst,
    /// The e2e-uniform log applied by 1, 2 and 4 applier processes in one
    /// group and archived by an archiver process: the rate and each
    /// service's CPU seconds per million records.
    ScaleOut,
    /// The peer a team on Kafka would pick: an inventory service in Kafka
    /// Streams (exactly-once and at-least-once) over the e2e-uniform and
    /// e2e-hot logs, every decision compared with the ledger's.
    Kstreams,
    /// A long log (`--scale-records`, 10M by default): the applier's and
    /// archiver's peak RSS and the replay rate at a tenth, half and all of
    /// it. Run on demand only: not part of the default set.
    Scale,
    /// The instructions a record costs in each stage of the apply path
    /// (decode, decide, encode the outcome, build the write) and in the
    /// order service's reading of its outcome, counted by callgrind over
    /// a fixed set of records: figures no neighbour moves.
    Stages,
}

impl Scenario {
    const ALL: [Scenario; 23] = [
        Self::Stages,
        Self::RedisLuaDirect,
        Self::RedisFloor,
        Self::PgRow,
        Self::PgBuckets,
        Self::E2eUniform,
        Self::E2eHot,
        Self::Kstreams,
        Self::KafkaFloor,
        Self::Latency5k,
        Self::Latency20k,
        Self::Events,
        Self::SseFanout,
        Self::Gateway5k,
        Self::GatewayMax,
        Self::GatewayPipelined,
        Self::Basket,
        Self::SeatMap,
        Self::Replay,
        Self::Archive,
        Self::Memory,
        Self::ScaleOut,
        Self::Analyst,
    ];

    fn name(self) -> &'static str {
        match self {
            Self::E2eUniform => "e2e-uniform",
            Self::E2eHot => "e2e-hot",
            Self::KafkaFloor => "kafka-floor",
            Self::Latency5k => "latency-5k",
            Self::Latency20k => "latency-20k",
            Self::Replay => "replay",
            Self::Archive => "archive",
            Self::RedisLuaDirect => "redis-lua-direct",
            Self::RedisFloor => "redis-floor",
            Self::PgRow => "pg-row",
            Self::PgBuckets => "pg-buckets",
            Self::Memory => "memory",
            Self::Gateway5k => "gateway-5k",
            Self::GatewayMax => "gateway-max",
            Self::GatewayPipelined => "gateway-pipelined",
            Self::Basket => "basket",
            Self::Events => "events",
            Self::SseFanout => "sse-fanout",
            Self::SeatMap => "seat-map",
            Self::Analyst => "analyst",
            Self::ScaleOut => "scale-out",
            Self::Kstreams => "kstreams",
            Self::Scale => "scale",
            Self::Stages => "stages",
        }
    }
}

/// One scenario's figure.
#[derive(Debug, Clone, Default)]
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
    /// Busy CPU seconds of the whole machine over the timed part
    /// ([`cpu::MachineCpu`]), for throughput scenarios.
    machine_cpu: Option<f64>,
    /// Instructions a record in each stage of the apply path, for the
    /// stages scenario ([`stages`]).
    instructions: Option<Vec<(&'static str, f64)>>,
    /// Each hop of a decision's time, for latency scenarios ([`hops`]).
    hops: Option<hops::Hops>,
}

impl Measurement {
    /// A latency scenario's figure: `run`'s count and length, its answer
    /// times' p50, p99 and p999 (`latency`), told in `setup`.
    fn of_latency(
        scenario: &'static str,
        run: &timeline::Run,
        latency: [f64; 3],
        setup: String,
    ) -> Self {
        Self {
            scenario,
            records: run.samples.len() as u64,
            seconds: run.seconds,
            setup,
            latency_ms: Some(latency),
            peak_rss_mib: None,
            failed: None,
            instructions: None,
            machine_cpu: None,
            hops: None,
        }
    }

    fn rate(&self) -> f64 {
        self.records as f64 / self.seconds.max(1e-9)
    }

    /// The whole machine's CPU microseconds a record.
    fn machine_cpu_us(&self) -> Option<f64> {
        Some(self.machine_cpu? * 1e6 / self.records.max(1) as f64)
    }
}

/// The local stack's state directory, where `deploy/local` keeps the
/// broker's process id and the tools it installs: `$STOCKLEDGER_HOME`, by
/// default `~/.stockledger`.
pub(crate) fn stack_home() -> Option<PathBuf> {
    std::env::var_os("STOCKLEDGER_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".stockledger")))
}

/// The `q` quantile of `h` (microseconds) in milliseconds.
pub(crate) fn quantile_ms(h: &hdrhistogram::Histogram<u64>, q: f64) -> f64 {
    h.value_at_quantile(q) as f64 / 1000.0
}

/// p50, p99 and p999 of `h` (microseconds) in milliseconds.
pub(crate) fn percentiles_ms(h: &hdrhistogram::Histogram<u64>) -> [f64; 3] {
    [0.50, 0.99, 0.999].map(|q| quantile_ms(h, q))
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

impl Counts {
    fn new(args: &BenchArgs) -> Self {
        let (records, latency, skus) = if args.quick {
            (2_000, 500, 200)
        } else {
            (200_000, 20_000, 10_000)
        };
        Self {
            records: args.records.unwrap_or(records).max(10),
            latency,
            skus,
        }
    }
}

/// What e2e-uniform and e2e-hot leave for the replay, archive and
/// kstreams scenarios.
struct Ledger {
    log: kstreams::DecidedLog,
    /// Archiving its outcomes, done by the contract check.
    archive: Measurement,
}

pub async fn run(g: &Global, args: BenchArgs) -> anyhow::Result<ExitCode> {
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
    let mut bench = Bench {
        g,
        pool: connect_archive(g, args.concurrency.min(50) as u32 + 2).await?,
        counts: Counts::new(&args),
        args: &args,
        run_id: &run_id,
        uniform: None,
        hot: None,
    };
    warn_of_leftovers(g).await?;
    let mut results: Vec<Measurement> = Vec::new();
    let mut stopped = None;
    for scenario in selected {
        match bench.measure(scenario).await {
            Ok(measured) => results.extend(measured),
            Err(e) => {
                stopped = Some(e.context(format!("scenario {}", scenario.name())));
                break;
            }
        }
    }
    print!("{}", memory_growth(&results));
    write_results(&args.out, &run_id, args.quick, &results)?;
    // Also after a scenario failed: what a run leaves in Redis slows the
    // next one down.
    if !args.keep {
        let (keys, rows) = clean_up(g, &bench.pool, &run_id).await?;
        println!(
            "removed the run's topics, {keys} Redis keys and {rows} archived rows (--keep keeps them)"
        );
    }
    if let Some(e) = stopped {
        return Err(e);
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

/// One run of the bench: what every scenario needs, and the e2e-uniform
/// log once a scenario has written it.
struct Bench<'a> {
    g: &'a Global,
    pool: sqlx::PgPool,
    args: &'a BenchArgs,
    run_id: &'a str,
    counts: Counts,
    uniform: Option<Ledger>,
    hot: Option<Ledger>,
}

impl Bench<'_> {
    /// Runs `scenario`, printing each figure as it is measured.
    async fn measure(&mut self, scenario: Scenario) -> anyhow::Result<Vec<Measurement>> {
        if let Some(steps) = self.measure_steps(scenario).await? {
            return Ok(steps);
        }
        let m = self.measure_one(scenario).await?;
        print_measurement(&m);
        Ok(vec![m])
    }

    /// The scenarios that measure in steps, each step printed as it is
    /// measured; `None` for the others.
    async fn measure_steps(
        &mut self,
        scenario: Scenario,
    ) -> anyhow::Result<Option<Vec<Measurement>>> {
        let (g, args, run_id, counts) = (self.g, self.args, self.run_id, &self.counts);
        let pool = &self.pool;
        Ok(Some(match scenario {
            Scenario::RedisFloor => redis_floor(g, run_id, counts, args.batch_size).await?,
            Scenario::KafkaFloor => {
                floor::kafka_floor(g, args, run_id, 5_000, counts.latency).await?
            }
            Scenario::Memory => {
                let mut results = Vec::new();
                for records in [counts.records / 10, counts.records] {
                    let m = memory::memory(g, pool, args, run_id, counts.skus, records).await?;
                    print_measurement(&m);
                    results.push(m);
                }
                results
            }
            Scenario::Scale => {
                let records = args
                    .scale_records
                    .unwrap_or(if args.quick { 100_000 } else { 10_000_000 })
                    .max(1000);
                // Printed as each step is measured: the scenario takes minutes.
                memory::scale(g, pool, args, run_id, counts.skus, records).await?
            }
            Scenario::ScaleOut => {
                scaleout::scale_out(g, pool, args, run_id, counts.skus, counts.records).await?
            }
            Scenario::GatewayPipelined => {
                gateway::pipelined(g, args, run_id, counts.records).await?
            }
            Scenario::Events => {
                e2e::events_cost(g, args, run_id, counts.skus, counts.records).await?
            }
            Scenario::Analyst => {
                let (rows, samples) = if args.quick {
                    (100_000, 20)
                } else {
                    (10_000_000, 200)
                };
                let rows = args.analyst_rows.unwrap_or(rows).max(analyst::MIN_ROWS);
                let results = analyst::analyst(g, run_id, rows, samples, args.keep).await?;
                results.iter().for_each(print_measurement);
                results
            }
            Scenario::Kstreams => {
                if self.uniform.is_none() {
                    self.uniform = Some(self.e2e_uniform().await?.1);
                }
                if self.hot.is_none() {
                    self.hot = Some(self.e2e_hot().await?.1);
                }
                let (Some(uniform), Some(hot)) = (&self.uniform, &self.hot) else {
                    unreachable!("both logs were just written");
                };
                kstreams::kstreams(g, args, run_id, &uniform.log, &hot.log).await?
            }
            _ => return Ok(None),
        }))
    }

    /// The scenarios that measure one figure.
    async fn measure_one(&mut self, scenario: Scenario) -> anyhow::Result<Measurement> {
        let (g, args, run_id, counts) = (self.g, self.args, self.run_id, &self.counts);
        let pool = &self.pool;
        let name = scenario.name();
        Ok(match scenario {
            Scenario::Stages => stages::stages(counts.records)?,
            Scenario::SseFanout => {
                let (streams, events) = if args.quick { (50, 50) } else { (1_000, 2_000) };
                gateway::sse_fanout(g, args, run_id, streams, events, 100).await?
            }
            Scenario::RedisLuaDirect => {
                redis_lua_direct(g, run_id, counts, args.concurrency).await?
            }
            Scenario::PgRow | Scenario::PgBuckets => {
                let rows = if scenario == Scenario::PgRow { 1 } else { 8 };
                pg_rows(pool, run_id, name, rows, counts.records, args.concurrency).await?
            }
            Scenario::E2eUniform => {
                let (m, ledger) = self.e2e_uniform().await?;
                self.uniform = Some(ledger);
                m
            }
            Scenario::E2eHot => {
                let (m, ledger) = self.e2e_hot().await?;
                self.hot = Some(ledger);
                m
            }
            Scenario::Latency5k => {
                e2e::latency(g, args, run_id, name, 5_000, counts.latency).await?
            }
            Scenario::Latency20k => {
                e2e::latency(g, args, run_id, name, 20_000, 4 * counts.latency).await?
            }
            Scenario::Gateway5k => {
                gateway::fixed_rate(g, args, run_id, name, 5_000, counts.latency).await?
            }
            Scenario::GatewayMax => {
                gateway::throughput(g, args, run_id, name, counts.records).await?
            }
            Scenario::Basket => {
                // Six records a basket: as many records as the e2e scenarios.
                basket::basket(g, args, run_id, counts.skus, (counts.records / 6).max(1)).await?
            }
            Scenario::SeatMap => {
                seatmap::seat_map(g, run_id, counts.records, args.concurrency).await?
            }
            Scenario::Replay | Scenario::Archive => {
                let ledger = match self.uniform.take() {
                    Some(ledger) => ledger,
                    None => self.e2e_uniform().await?.1,
                };
                let ledger = &*self.uniform.insert(ledger);
                if scenario == Scenario::Replay {
                    e2e::replay(self.g, self.run_id, ledger).await?
                } else {
                    ledger.archive.clone()
                }
            }
            Scenario::Memory
            | Scenario::RedisFloor
            | Scenario::KafkaFloor
            | Scenario::Scale
            | Scenario::ScaleOut
            | Scenario::GatewayPipelined
            | Scenario::Events
            | Scenario::Analyst
            | Scenario::Kstreams => anyhow::bail!("{name} measures in steps"),
        })
    }

    async fn e2e_hot(&self) -> anyhow::Result<(Measurement, Ledger)> {
        let name = Scenario::E2eHot.name();
        let records = self.counts.records;
        e2e::e2e(self.g, &self.pool, self.args, self.run_id, name, 1, records).await
    }

    async fn e2e_uniform(&self) -> anyhow::Result<(Measurement, Ledger)> {
        let (records, skus) = (self.counts.records, self.counts.skus);
        let name = Scenario::E2eUniform.name();
        e2e::e2e(
            self.g,
            &self.pool,
            self.args,
            self.run_id,
            name,
            skus,
            records,
        )
        .await
    }
}

pub(crate) fn print_measurement(m: &Measurement) {
    if let Some(failure) = &m.failed {
        println!("  {:<18} FAIL: {failure}", m.scenario);
        return;
    }
    let machine = m.machine_cpu_us().map_or(String::new(), |us| {
        format!(", machine CPU {us:.1} µs a record")
    });
    println!(
        "  {:<18} {:>9} records in {:>7.2} s = {:>10.0} /s{machine}   ({})",
        m.scenario,
        m.records,
        m.seconds,
        m.rate(),
        m.setup
    );
}

/// Says how many keys earlier bench runs left in Redis (a run stopped
/// before it cleaned up, or run with `--keep`): a Redis holding hundreds of
/// thousands of them took twice the CPU a record to replay.
async fn warn_of_leftovers(g: &Global) -> anyhow::Result<()> {
    let conn = stockledger_redis::RedisConn::connect(&g.redis_url).await?;
    let pattern = format!("{}:bench-*", g.prefix);
    let left = conn.scan_all(&pattern).await?.len();
    if left > 0 {
        println!(
            "note: Redis holds {left} keys of earlier bench runs ({pattern}); they slow Redis down, \
             so remove them before measuring (redis-cli --scan --pattern '{pattern}' lists them)"
        );
    }
    Ok(())
}

/// Removes what the run wrote: Redis projections under `<prefix>:<run>:…`,
/// the baseline's `<run>:…` keys, the archive's rows and progress for the
/// run's `<run>.…` topics, and those topics. Returns the keys and rows
/// removed.
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
    // And the topics themselves: a full run writes gigabytes of log.
    stockledger_kafka::admin::delete_topics(&g.kafka(), &topics).await?;
    Ok((removed, rows))
}
