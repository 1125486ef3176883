//! The nemesis: the whole pipeline on a replicated log (three Apache Kafka
//! nodes, topics replicated three times with two in sync), its processes
//! run as `stockledger apply | archive | serve`, Redis a Redis Cluster with
//! a replica per master (or one Redis behind a proxy), PostgreSQL behind a
//! proxy, under a mixed workload from library, basket and HTTP callers while a
//! seeded schedule ([`stockledger_testkit::nemesis::Schedule`]) kills,
//! pauses, cuts and fails over. At the end everything is healed and the
//! history is checked against the pure fold of the log.
//!
//! The suite runs a short run of each Redis with a fixed seed;
//! `deploy/local/nemesis.sh --minutes M --seed S` runs the on-demand one,
//! which a failing seed replays with the same schedule.

mod common;
#[path = "nemesis/workload.rs"]
mod workload;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::process::Child;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use common::{log_path, stockledger, Running};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use stockledger_client::basket::{self, LineState};
use stockledger_core::partition::home_partition;
use stockledger_core::{codec, Command, CommandKind, ResultCode};
use stockledger_kafka::topic;
use stockledger_testkit::cluster::RedisCluster;
use stockledger_testkit::contract::Differences;
use stockledger_testkit::fault::{address_of, via_port, Proxy};
use stockledger_testkit::ids;
use stockledger_testkit::kafka_cluster::KafkaCluster;
use stockledger_testkit::nemesis::{Fault, Path, Process, Schedule, Since, Step, QUIET};
use stockledger_testkit::services::free_port;
use stockledger_testkit::{wait_until, Harness};
use tokio::time::Instant;
use workload::{Ack, Baskets};

const PARTITIONS: i32 = 3;
/// Callers sending through the library, and through the gateway.
const LIBRARY_CALLERS: u64 = 3;
const HTTP_CALLERS: u64 = 1;
/// Callers checking out baskets of two SKUs through the library.
const BASKET_CALLERS: u64 = 1;
/// How long, after a fault heals, decisions may take to flow again before
/// the recovery is reported as not seen.
const RECOVERY_LIMIT: Duration = Duration::from_secs(180);
/// How long the healed pipeline may take to decide, expire and archive
/// everything at the end.
const QUIESCENCE: Duration = Duration::from_secs(300);

/// One run at a time: each starts three Kafka nodes of its own.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_short_nemesis_run_with_a_fixed_seed_keeps_the_contract() -> anyhow::Result<()> {
    let _alone = ONE_AT_A_TIME.lock().await;
    let report = run(20_261_125, Duration::from_secs(150), Redis::One).await?;
    report.ensure()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_short_nemesis_run_on_a_redis_cluster_failing_over_keeps_the_contract(
) -> anyhow::Result<()> {
    let _alone = ONE_AT_A_TIME.lock().await;
    let report = run(20_261_126, Duration::from_secs(120), Redis::Cluster).await?;
    report.ensure()
}

/// The on-demand run: `STOCKLEDGER_NEMESIS_SEED` (default: drawn from the
/// clock, and printed), `STOCKLEDGER_NEMESIS_MINUTES` (default 30) and
/// `STOCKLEDGER_NEMESIS_REDIS` (`cluster`, the default, or `one`).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "on demand: deploy/local/nemesis.sh --minutes M --seed S"]
async fn nemesis() -> anyhow::Result<()> {
    let seed = match std::env::var("STOCKLEDGER_NEMESIS_SEED") {
        Ok(s) => s
            .parse()
            .with_context(|| format!("STOCKLEDGER_NEMESIS_SEED={s}: not a whole number"))?,
        Err(_) => std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)?
            .as_secs(),
    };
    let minutes: f64 = match std::env::var("STOCKLEDGER_NEMESIS_MINUTES") {
        Ok(m) => m
            .parse()
            .ok()
            .filter(|m: &f64| *m > 0.0 && *m <= 24.0 * 60.0)
            .with_context(|| format!("STOCKLEDGER_NEMESIS_MINUTES={m}: minutes from 0 to 1440"))?,
        Err(_) => 30.0,
    };
    let redis = match std::env::var("STOCKLEDGER_NEMESIS_REDIS").as_deref() {
        Ok("cluster") | Err(_) => Redis::Cluster,
        Ok("one") => Redis::One,
        Ok(other) => anyhow::bail!("STOCKLEDGER_NEMESIS_REDIS={other}: `cluster` or `one`"),
    };
    let report = run(seed, Duration::from_secs_f64(minutes * 60.0), redis).await?;
    report.ensure()
}

/// What the pipeline's Redis is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Redis {
    /// The shared one, behind a proxy that cuts it off.
    One,
    /// A Redis Cluster of the run's own, three masters each with a
    /// replica, whose masters fail over.
    Cluster,
}

/// What a run found.
struct Report {
    run: Run,
    /// How long decisions stopped, for each fault alone and over the run.
    availability: Availability,
    acknowledged: usize,
    records: usize,
    /// Acknowledged commands not in the log at their position, or without
    /// a decision.
    lost: Vec<String>,
    /// Effects taken twice: an order's take (or end, or a restock) applied
    /// at two positions, or one position decided two ways.
    doubled: Vec<String>,
    /// Units still held once every hold's deadline has passed.
    held: i64,
    /// Baskets the basket callers tried to hold, and those held.
    baskets: usize,
    baskets_held: usize,
    /// Baskets with some lines sold and others not.
    partial_baskets: Vec<String>,
    /// Outcomes and archived rows compared by content with the fold.
    differences: Differences,
    /// The contract check's failure, if it failed.
    contract: Option<String>,
    /// Processes that exited when nobody asked them to (restarted, as an
    /// orchestrator would): reported, not a breach by themselves.
    exits: Vec<String>,
}

/// What a run must have done for its verdict to mean something: commands
/// acknowledged per second of the run, baskets held, and how often a
/// scarce SKU sold out.
const ACKNOWLEDGED_PER_SECOND: f64 = 20.0;
const BASKETS_HELD: usize = 5;
const SOLD_OUT_CROSSINGS: usize = 20;

impl Report {
    fn ensure(&self) -> anyhow::Result<()> {
        for exit in &self.exits {
            println!("exited by itself: {exit}");
        }
        println!("{}", self.figures());
        println!("{}", self.summary());
        let d = &self.differences;
        anyhow::ensure!(
            self.lost.is_empty()
                && self.doubled.is_empty()
                && self.held == 0
                && self.partial_baskets.is_empty()
                && d.oversold.is_empty()
                && d.outcomes.is_empty()
                && d.rows.is_empty()
                && self.contract.is_none(),
            "the nemesis of seed {} broke the contract; lost: {:?}; doubled: {:?}; \
             {} units still held; baskets partly sold: {:?}; oversold: {:?}; \
             outcomes differ: {:?}; rows differ: {:?}; contract: {:?}\n{}",
            self.run.seed,
            first(&self.lost),
            first(&self.doubled),
            self.held,
            first(&self.partial_baskets),
            first(&d.oversold),
            first(&d.outcomes),
            first(&d.rows),
            self.contract,
            self.run.schedule
        );
        let short = self.short_of();
        anyhow::ensure!(
            short.is_empty(),
            "the nemesis of seed {} proved too little: {short:?}",
            self.run.seed
        );
        Ok(())
    }

    /// The minimums this run fell short of.
    fn short_of(&self) -> Vec<String> {
        let mut short = Vec::new();
        let wanted = (ACKNOWLEDGED_PER_SECOND * self.run.length.as_secs_f64()) as usize;
        if self.acknowledged < wanted {
            short.push(format!(
                "{} acknowledged, {wanted} wanted",
                self.acknowledged
            ));
        }
        if self.baskets_held < BASKETS_HELD {
            short.push(format!(
                "{} baskets held, {BASKETS_HELD} wanted",
                self.baskets_held
            ));
        }
        let crossings = self.differences.sold_out_crossings;
        if crossings < SOLD_OUT_CROSSINGS {
            short.push(format!(
                "{crossings} sold-out crossings, {SOLD_OUT_CROSSINGS} wanted"
            ));
        }
        for (kind, injected) in self.run.schedule.counts() {
            let healed = (self.run.recoveries.iter())
                .filter(|r| r.kind == kind && r.took.is_some())
                .count();
            if injected == 0 || healed < injected {
                short.push(format!(
                    "{kind}: {injected} injected, {healed} after which decisions flowed again"
                ));
            }
        }
        short
    }

    /// Per kind: faults injected, and the time from healing until
    /// decisions flowed again on every partition (p50 and max) by the
    /// probes; then, for the faults scheduled alone, the longest a
    /// partition went without a decision from the strike until the fault's
    /// goal (p50 and max) against that goal ([`Fault::goal`]), and how
    /// many partitions' leaders moved in those windows; then each window
    /// that missed its goal, with the moves seen in it.
    fn figures(&self) -> String {
        let mut out = format!(
            "{:<14} {:>8} {:>18} {:>7} {:>18} {:>10} {:>12}\n",
            "fault",
            "injected",
            "recovery p50/max",
            "alone",
            "stopped p50/max",
            "goal met",
            "leader moves"
        );
        let recoveries = &self.run.recoveries;
        for (kind, injected) in self.run.schedule.counts() {
            let all: Vec<&Recovery> = recoveries.iter().filter(|r| r.kind == kind).collect();
            let alone: Vec<&Alone> = (self.availability.alone.iter())
                .filter(|a| a.kind == kind)
                .collect();
            let mut stopped: Vec<f64> = alone.iter().map(|a| a.stopped).collect();
            stopped.sort_by(f64::total_cmp);
            let stopped = match (
                stopped.get(stopped.len().saturating_sub(1) / 2),
                stopped.last(),
            ) {
                (Some(p50), Some(max)) => format!("{p50:.1}/{max:.1}s"),
                _ => "-".to_owned(),
            };
            let goal = alone.first().map_or("-".to_owned(), |a| {
                let met = alone.iter().filter(|a| a.met()).count();
                format!("{met}/{} ≤{:.0}s", alone.len(), a.goal)
            });
            let moves: usize = alone.iter().map(|a| a.moves.len()).sum();
            out += &format!(
                "{kind:<14} {injected:>8} {:>18} {:>7} {stopped:>18} {goal:>10} {moves:>12}\n",
                spread(&all),
                alone.len()
            );
        }
        for missed in self.availability.alone.iter().filter(|a| !a.met()) {
            out += &missed.described(self.availability.started_ms);
        }
        out += &format!(
            "leaders moved {} times in the run (the faults' and the controller's own elections)\n",
            self.run.moves.len()
        );
        out += &format!(
            "longest stretch without a decision on a partition: {:.1}s",
            self.availability.longest
        );
        out
    }

    fn summary(&self) -> String {
        let d = &self.differences;
        format!(
            "nemesis: seed {}, {:.1} min, {} faults, {} acknowledged, {} records, lost {}, \
             doubled {}, held {}, baskets {} (held {}, partly sold {}), sold-out crossings {}, \
             oversold {}, outcomes differ {}, rows differ {}, exits {}, contract {}",
            self.run.seed,
            self.run.length.as_secs_f64() / 60.0,
            self.run.schedule.steps.len(),
            self.acknowledged,
            self.records,
            self.lost.len(),
            self.doubled.len(),
            self.held,
            self.baskets,
            self.baskets_held,
            self.partial_baskets.len(),
            d.sold_out_crossings,
            d.oversold.len(),
            d.outcomes.len(),
            d.rows.len(),
            self.exits.len(),
            if self.contract.is_none() {
                "held"
            } else {
                "BROKEN"
            }
        )
    }
}

/// How long decisions stopped: for each fault scheduled alone, and the
/// longest stretch of the run.
struct Availability {
    /// The run's start, in milliseconds since the Unix epoch.
    started_ms: i64,
    alone: Vec<Alone>,
    /// The longest a partition went without a decision during the run,
    /// in seconds.
    longest: f64,
}

/// A fault alone: the longest a partition went without a decision from
/// its strike until its goal (and [`QUIET`] after), against the goal, all
/// in seconds; and the leaders that moved in that window.
struct Alone {
    kind: &'static str,
    /// When it struck, in seconds from the start of the run.
    struck: f64,
    stopped: f64,
    goal: f64,
    /// Leaders that moved while it was judged: a stop in a window where
    /// none of its own fault moved a leader (a PostgreSQL cut, say) may be
    /// the controller's doing (its preferred-leader election every five
    /// minutes, once a killed node is back), not the fault's.
    moves: Vec<Move>,
}

/// A partition's leader seen to change during the run.
#[derive(Debug, Clone)]
struct Move {
    /// Milliseconds since the Unix epoch, as record timestamps are.
    at_ms: i64,
    topic: String,
    partition: i32,
    from: i32,
    to: i32,
}

/// Asks the cluster for its partitions' leaders every half second until
/// `until`, through one client on a thread of its own, and gives the
/// changes of the topics a decision passes through (the command and
/// outcome topics, and the groups' coordinators in `__consumer_offsets`).
async fn watch_leaders(
    cluster: KafkaCluster,
    topics: [String; 2],
    until: Instant,
) -> anyhow::Result<Vec<Move>> {
    let until = until.into_std();
    let watched =
        move |topic: &str| topics.iter().any(|t| t == topic) || topic == "__consumer_offsets";
    tokio::task::spawn_blocking(move || {
        let leaders = cluster.leaders()?;
        let mut moves = Vec::new();
        let mut known: BTreeMap<(String, i32), i32> = BTreeMap::new();
        while std::time::Instant::now() < until {
            // A node down or slow to answer is no move: asked again next time.
            if let Ok(now) = leaders.now() {
                let at_ms = stockledger_runtime::clock::now_ms();
                for ((topic, partition), to) in now {
                    if !watched(&topic) {
                        continue;
                    }
                    match known.insert((topic.clone(), partition), to) {
                        Some(from) if from != to => moves.push(Move {
                            at_ms,
                            topic,
                            partition,
                            from,
                            to,
                        }),
                        _ => {}
                    }
                }
            }
            std::thread::sleep(Duration::from_millis(500));
        }
        Ok(moves)
    })
    .await?
}

impl Alone {
    fn met(&self) -> bool {
        self.stopped <= self.goal
    }

    /// A line saying how long decisions stopped and which leaders moved
    /// meanwhile (times in seconds from `started_ms`, the run's start).
    fn described(&self, started_ms: i64) -> String {
        let moves: Vec<String> = (self.moves.iter())
            .map(|m| {
                let at = (m.at_ms - started_ms) as f64 / 1000.0;
                format!(
                    "{}/{} {}→{} at {at:.1}s",
                    m.topic, m.partition, m.from, m.to
                )
            })
            .collect();
        format!(
            "{} at {:.1}s stopped decisions {:.1}s (goal {:.0}s); leaders moved meanwhile: {}\n",
            self.kind,
            self.struck,
            self.stopped,
            self.goal,
            if moves.is_empty() {
                "none".to_owned()
            } else {
                moves.join(", ")
            }
        )
    }
}

impl Availability {
    /// From each partition's decision times (epoch milliseconds, in
    /// order) and the run's start.
    fn of(run: &Run, started_ms: i64, decided_at: &BTreeMap<i32, Vec<i64>>) -> Self {
        let at = |d: Duration| started_ms + d.as_millis() as i64;
        // Each step's recovery, in the schedule's order: its window runs
        // from when it really struck, as long as the schedule planned.
        let alone = (run.schedule.steps.iter())
            .zip(&run.recoveries)
            .filter(|(step, _)| step.alone)
            .map(|(step, recovery)| {
                let (goal, since) = step.fault.goal();
                let goal = match since {
                    Since::Strike => goal,
                    Since::Heal => goal + step.lasting,
                };
                let late = recovery.struck.saturating_sub(step.at);
                let window = (at(step.at + late), at(step.due_at() + late + QUIET));
                let inside = |m: &&Move| m.at_ms > window.0 && m.at_ms < window.1;
                Alone {
                    kind: step.fault.kind(),
                    struck: recovery.struck.as_secs_f64(),
                    stopped: longest_gap(decided_at, window),
                    goal: goal.as_secs_f64(),
                    moves: run.moves.iter().filter(inside).cloned().collect(),
                }
            })
            .collect();
        let longest = longest_gap(decided_at, (started_ms, at(run.length)));
        Self {
            started_ms,
            alone,
            longest,
        }
    }
}

/// The longest time, in seconds, that a partition went without a decision
/// within `(from, to)` (epoch milliseconds), its edges counted as gaps'.
fn longest_gap(decided_at: &BTreeMap<i32, Vec<i64>>, (from, to): (i64, i64)) -> f64 {
    let mut longest = 0;
    for times in decided_at.values() {
        let inside = times.iter().copied().filter(|&t| t > from && t < to);
        let edges = std::iter::once(from)
            .chain(inside)
            .chain(std::iter::once(to));
        let stops: Vec<i64> = edges.collect();
        longest = stops
            .windows(2)
            .map(|w| w[1] - w[0])
            .fold(longest, i64::max);
    }
    longest as f64 / 1000.0
}

/// `p50/max` of the recoveries' times, in seconds; a recovery not seen
/// within the limit counts as the limit, marked `>`.
fn spread(recoveries: &[&Recovery]) -> String {
    let mut took: Vec<Duration> = recoveries
        .iter()
        .map(|r| r.took.unwrap_or(RECOVERY_LIMIT))
        .collect();
    took.sort();
    let (Some(p50), Some(max)) = (took.get(took.len().saturating_sub(1) / 2), took.last()) else {
        return "-".into();
    };
    let unseen = if recoveries.iter().any(|r| r.took.is_none()) {
        ">"
    } else {
        ""
    };
    format!("{:.1}/{unseen}{:.1}s", p50.as_secs_f64(), max.as_secs_f64())
}

fn first(items: &[String]) -> &[String] {
    &items[..items.len().min(5)]
}

/// How one fault's healing went.
#[derive(Debug, Clone, Copy)]
struct Recovery {
    kind: &'static str,
    /// When it struck, from the start of the run.
    struck: Duration,
    /// From the healing until a deduct on each partition was decided
    /// (`None`: not within [`RECOVERY_LIMIT`]).
    took: Option<Duration>,
}

/// A `stockledger` process the nemesis kills, pauses and starts again.
struct Managed {
    args: Vec<String>,
    env: Vec<(String, String)>,
    log: std::path::PathBuf,
    child: Option<Child>,
    /// Whether it should be running now: an orchestrator starts it again
    /// if it exits by itself ([`World::supervise`]).
    wanted: bool,
    /// How it exited when nobody asked it to.
    exits: Vec<String>,
}

impl Managed {
    fn new(h: &Harness, args: &[&str], env: &[(&str, &str)]) -> Self {
        Self {
            args: args.iter().map(|a| (*a).to_owned()).collect(),
            env: env
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            log: log_path(h, &[&format!("nemesis-{}", args.join("-"))]),
            child: None,
            wanted: false,
            exits: Vec::new(),
        }
    }

    fn start(&mut self, h: &Harness) -> anyhow::Result<()> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)?;
        let child = stockledger(h)
            .args(&self.args)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .env(
                "RUST_LOG",
                std::env::var("STOCKLEDGER_NEMESIS_LOG").unwrap_or_else(|_| "info".into()),
            )
            .stdout(std::process::Stdio::null())
            .stderr(log)
            .spawn()
            .with_context(|| format!("starting stockledger {}", self.args.join(" ")))?;
        self.child = Some(child);
        self.wanted = true;
        Ok(())
    }

    fn signal(&self, signal: Signal) -> anyhow::Result<()> {
        let child = self.child.as_ref().context("the process is not running")?;
        kill(Pid::from_raw(i32::try_from(child.id())?), signal)?;
        Ok(())
    }

    /// `kill -9`, and reaped.
    fn kill(&mut self) -> anyhow::Result<()> {
        self.wanted = false;
        if let Some(mut child) = self.child.take() {
            child.kill()?;
            child.wait()?;
        }
        Ok(())
    }

    /// SIGTERM, as an orchestrator scaling down does; reaped in the
    /// background of the next start or of the end.
    fn terminate(&mut self) -> anyhow::Result<()> {
        self.wanted = false;
        self.signal(Signal::SIGTERM)?;
        if let Some(child) = self.child.take() {
            // Dropped into a guard that kills it should it hang.
            std::thread::spawn(move || {
                let mut running = Running(child);
                let deadline = std::time::Instant::now() + Duration::from_secs(30);
                while std::time::Instant::now() < deadline {
                    if matches!(running.0.try_wait(), Ok(Some(_))) {
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(50));
                }
            });
        }
        Ok(())
    }

    /// Starts it again if it is wanted and has exited by itself, noting
    /// how it exited.
    fn restart_if_exited(&mut self, h: &Harness) -> anyhow::Result<()> {
        let exited = match self.child.as_mut() {
            Some(child) => child.try_wait()?.map(|status| status.to_string()),
            None => Some("not started".into()),
        };
        if let (true, Some(status)) = (self.wanted, exited) {
            eprintln!(
                "stockledger {} exited by itself ({status}); started again, log {}",
                self.args.join(" "),
                self.log.display()
            );
            self.exits.push(status);
            self.start(h)?;
        }
        Ok(())
    }
}

impl Drop for Managed {
    fn drop(&mut self) {
        let _ = self.signal(Signal::SIGCONT);
        let _ = self.kill();
    }
}

/// Everything the faults act on.
struct World {
    h: Harness,
    cluster: KafkaCluster,
    /// The proxy in front of the one Redis, or the Redis Cluster.
    redis: Option<Proxy>,
    redis_cluster: Option<RedisCluster>,
    postgres: Proxy,
    applier: Mutex<Managed>,
    second_applier: Mutex<Managed>,
    archiver: Mutex<Managed>,
    gateway: Mutex<Managed>,
    gateway_url: String,
    /// The Redis the processes are given (through the proxy, for one Redis).
    redis_url: String,
    /// SKUs whose orders tell that decisions flow, one per partition.
    probes: Vec<String>,
    probe_count: AtomicU64,
    /// The probes the ledger acknowledged.
    probe_acks: Mutex<Vec<Ack>>,
    /// One lock per fault target, held from a strike until its healing is
    /// complete (a restarted node back in its cluster): the schedule keeps
    /// two faults on one target apart by their planned lengths, and a
    /// healing that takes longer must not meet the next fault there.
    targets: BTreeMap<&'static str, tokio::sync::Mutex<()>>,
    /// When the schedule's clock started, and the same moment in
    /// milliseconds since the Unix epoch (as record timestamps are).
    started: Instant,
    started_ms: i64,
}

impl World {
    async fn start(kind: Redis) -> anyhow::Result<Arc<Self>> {
        let cluster = KafkaCluster::start(3).await?;
        let (h, redis, redis_cluster, redis_url) = match kind {
            Redis::One => {
                let h = Harness::with_replicated_kafka("nemesis", PARTITIONS, cluster.kafka(), 3)
                    .await?;
                let proxy = Proxy::start(address_of(&h.redis_url)?).await?;
                let url = via_port(&h.redis_url, proxy.port());
                (h, Some(proxy), None, url)
            }
            Redis::Cluster => {
                let redis = RedisCluster::start_replicated(3).await?;
                let h = Harness::with_replicated_kafka_and_redis(
                    "nemesis",
                    PARTITIONS,
                    cluster.kafka(),
                    3,
                    redis.url(),
                )
                .await?;
                let url = redis.url();
                (h, None, Some(redis), url)
            }
        };
        let postgres = Proxy::start(address_of(&h.services.database_url)?).await?;
        let database_url = via_port(&h.services.database_url, postgres.port());
        let through = [
            ("REDIS_URL", redis_url.as_str()),
            ("DATABASE_URL", database_url.as_str()),
        ];
        let member = |id: &'static str| {
            [
                ("REDIS_URL", redis_url.as_str()),
                ("DATABASE_URL", database_url.as_str()),
                ("STOCKLEDGER_INSTANCE_ID", id),
            ]
        };
        let gateway_addr = format!("127.0.0.1:{}", free_port()?);
        let world = Self {
            applier: Mutex::new(Managed::new(&h, &["apply"], &member("nemesis-1"))),
            // The member that joins and leaves is dynamic, as
            // docs/operators.md advises for members added and removed
            // often: a static one stopped on purpose keeps its partitions
            // for a session.
            second_applier: Mutex::new(Managed::new(
                &h,
                &["apply", "--stats-interval-s", "60", "--dynamic-membership"],
                &through,
            )),
            archiver: Mutex::new(Managed::new(&h, &["archive"], &member("nemesis-archiver"))),
            gateway: Mutex::new(Managed::new(
                &h,
                &["serve", "--listen", &gateway_addr],
                &through,
            )),
            gateway_url: format!("http://{gateway_addr}"),
            redis_url: redis_url.clone(),
            probes: (0..PARTITIONS).map(probe_sku).collect(),
            probe_count: AtomicU64::new(0),
            probe_acks: Mutex::new(Vec::new()),
            targets: Fault::ALL
                .iter()
                .map(|f| (f.target(), tokio::sync::Mutex::new(())))
                .collect(),
            started: Instant::now(),
            started_ms: stockledger_runtime::clock::now_ms(),
            h,
            cluster,
            redis,
            redis_cluster,
            postgres,
        };
        for managed in [&world.applier, &world.archiver, &world.gateway] {
            lock(managed)?.start(&world.h)?;
        }
        workload::stock(&world.h.ledger, &world.probes).await?;
        Ok(Arc::new(Self {
            started: Instant::now(),
            started_ms: stockledger_runtime::clock::now_ms(),
            ..world
        }))
    }

    /// Seconds since the schedule's clock started.
    fn since_start(&self) -> f64 {
        self.started.elapsed().as_secs_f64()
    }

    fn process(&self, process: Process) -> &Mutex<Managed> {
        match process {
            Process::Applier => &self.applier,
            Process::Archiver => &self.archiver,
            Process::Gateway => &self.gateway,
        }
    }

    fn proxy(&self, path: Path) -> anyhow::Result<&Proxy> {
        match path {
            Path::Redis => self
                .redis
                .as_ref()
                .context("a Redis Cluster run has no path to cut"),
            Path::Postgres => Ok(&self.postgres),
        }
    }

    /// Strikes `step`, waits its length, heals it, and returns how long
    /// decisions then took to flow again.
    async fn strike(&self, index: usize, step: Step) -> anyhow::Result<Recovery> {
        let target =
            (self.targets.get(step.fault.target())).context("a fault whose target has no lock")?;
        let held = target.lock().await;
        // Later than planned when the target's last fault is still healing.
        let struck = self.started.elapsed();
        println!("{:>7.1}s strikes {step}", struck.as_secs_f64());
        self.strike_and_heal(index, step).await?;
        drop(held);
        let healed = self.since_start();
        let took = self.recovery().await;
        println!(
            "{healed:>7.1}s healed {step}; decisions flow {}",
            took.map_or(format!("not within {RECOVERY_LIMIT:?}"), |d| format!(
                "{:.1}s later",
                d.as_secs_f64()
            ))
        );
        Ok(Recovery {
            kind: step.fault.kind(),
            struck,
            took,
        })
    }

    async fn strike_and_heal(&self, index: usize, step: Step) -> anyhow::Result<()> {
        let fault = step.fault;
        match fault {
            Fault::Kill(process) => lock(self.process(process))?.kill()?,
            Fault::KillBroker { leader } => {
                let node = if leader {
                    // The metadata may be a moment behind a restart: asked
                    // again until a node answers with a leader.
                    let topic = &self.h.ns.topic;
                    let (partition, leader) = wait_until(
                        "the leader of the busiest partition",
                        RECOVERY_LIMIT,
                        || async {
                            let Ok(partition) = self.busiest().await else {
                                return Ok(None);
                            };
                            let leader = self.cluster.leader(topic, partition).ok();
                            Ok(leader.map(|leader| (partition, leader)))
                        },
                    )
                    .await?;
                    println!("node {leader} leads {topic}/{partition}, the busiest partition");
                    leader
                } else {
                    1 + (index % self.cluster.nodes.len()) as i32
                };
                self.cluster.kill(node)?;
                tokio::time::sleep(step.lasting).await;
                return self.cluster.restart(node).await;
            }
            Fault::PauseApplier => lock(&self.applier)?.signal(Signal::SIGSTOP)?,
            Fault::Cut(path) => self.proxy(path)?.pause(),
            Fault::Rebalance => lock(&self.second_applier)?.start(&self.h)?,
            Fault::FailoverRedis => {
                self.redis_cluster()?.failover(index).await?;
            }
            Fault::KillRedis => {
                let redis = self.redis_cluster()?;
                let (killed, promoted) = redis.kill_master(index).await?;
                println!("Redis node {killed} killed; node {promoted} leads in its place");
                tokio::time::sleep(step.lasting).await;
                return redis.restart(killed).await;
            }
        }
        tokio::time::sleep(step.lasting).await;
        match fault {
            Fault::Kill(process) => lock(self.process(process))?.start(&self.h)?,
            Fault::PauseApplier => lock(&self.applier)?.signal(Signal::SIGCONT)?,
            Fault::Cut(path) => self.proxy(path)?.resume(),
            Fault::Rebalance => lock(&self.second_applier)?.terminate()?,
            Fault::KillBroker { .. } | Fault::FailoverRedis | Fault::KillRedis => {}
        }
        Ok(())
    }

    fn redis_cluster(&self) -> anyhow::Result<&RedisCluster> {
        (self.redis_cluster.as_ref()).context("a run on one Redis has no replica to take over")
    }

    /// The partition of the command topic that holds the most records.
    async fn busiest(&self) -> anyhow::Result<i32> {
        let marks = topic::watermarks_of(&self.h.kafka, &self.h.ns.topic).await?;
        marks
            .into_iter()
            .max_by_key(|&(_, (low, high))| high - low)
            .map(|(partition, _)| partition)
            .context("the command topic has no partition")
    }

    /// How long until a deduct sent now on each partition is decided. A
    /// send that fails (a broker down) is sent again, as a caller would,
    /// and a read of the decision that fails is made again: the time is
    /// the ledger's, not one probe's bad luck.
    async fn recovery(&self) -> Option<Duration> {
        let started = Instant::now();
        let n = self.probe_count.fetch_add(1, Ordering::SeqCst);
        let order = ids::order(format!("probe-{n}"));
        let sent = async {
            for sku in self.probes.iter().map(ids::sku) {
                let receipt = loop {
                    match self.h.ledger.deduct(&sku, &order, ids::qty(1), None).await {
                        Ok(receipt) => break receipt,
                        Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
                    }
                };
                lock_acks(&self.probe_acks)?.push(Ack::from(receipt));
            }
            // A read that fails (a Redis master being replaced) is made
            // again, as one that finds no order is.
            wait_until("decisions on every partition", RECOVERY_LIMIT, || async {
                for sku in &self.probes {
                    let read = self.h.projection.order(sku, order.as_str()).await;
                    if !matches!(read, Ok(Some(_))) {
                        return Ok(None);
                    }
                }
                Ok(Some(()))
            })
            .await
        };
        match tokio::time::timeout(RECOVERY_LIMIT, sent).await {
            Ok(Ok(())) => Some(started.elapsed()),
            _ => None,
        }
    }

    /// As an orchestrator does, until `until`: a wanted process that
    /// exited by itself is started again (and the exit noted).
    async fn supervise(&self, until: Instant) -> anyhow::Result<()> {
        while Instant::now() < until {
            for managed in self.all() {
                lock(managed)?.restart_if_exited(&self.h)?;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        Ok(())
    }

    fn all(&self) -> [&Mutex<Managed>; 4] {
        [
            &self.applier,
            &self.second_applier,
            &self.archiver,
            &self.gateway,
        ]
    }

    /// The probes the ledger acknowledged so far.
    fn probe_acks(&self) -> anyhow::Result<Vec<Ack>> {
        Ok(lock_acks(&self.probe_acks)?.clone())
    }

    /// Exits nobody asked for, per process.
    fn exits(&self) -> anyhow::Result<Vec<String>> {
        let mut exits = Vec::new();
        for managed in self.all() {
            let managed = lock(managed)?;
            for status in &managed.exits {
                exits.push(format!("{} {status}", managed.args[0]));
            }
        }
        Ok(exits)
    }
}

fn lock(m: &Mutex<Managed>) -> anyhow::Result<std::sync::MutexGuard<'_, Managed>> {
    m.lock()
        .map_err(|_| anyhow::anyhow!("a fault task panicked holding a process"))
}

fn lock_acks(m: &Mutex<Vec<Ack>>) -> anyhow::Result<std::sync::MutexGuard<'_, Vec<Ack>>> {
    m.lock()
        .map_err(|_| anyhow::anyhow!("a probe panicked writing down its receipt"))
}

/// A SKU whose home is `partition`.
fn probe_sku(partition: i32) -> String {
    (0..)
        .map(|i| format!("P-{partition}-{i}"))
        .find(|sku| home_partition(sku.as_bytes(), PARTITIONS) == partition)
        .unwrap_or_default()
}

async fn run(seed: u64, length: Duration, redis: Redis) -> anyhow::Result<Report> {
    let kinds = Fault::drawn_on(redis == Redis::Cluster);
    let schedule = Schedule::generate(seed, length, &kinds);
    println!("nemesis of seed {seed} for {length:?} on {redis:?} Redis\n{schedule}");
    let world = World::start(redis).await?;
    let started = world.started;
    let until = started + length;

    let mut callers = Vec::new();
    for caller in 0..LIBRARY_CALLERS {
        let ledger = world.h.ledger.clone();
        let called = workload::library_caller(ledger, caller, seed, until);
        callers.push(tokio::spawn(called));
    }
    for caller in 0..HTTP_CALLERS {
        let base = world.gateway_url.clone();
        callers.push(tokio::spawn(workload::http_caller(
            base, caller, seed, until,
        )));
    }
    let shelf = workload::shelf_caller(world.h.ledger.clone(), seed, until);
    callers.push(tokio::spawn(shelf));
    let mut basket_callers = Vec::new();
    for caller in 0..BASKET_CALLERS {
        let settler = (world.h.ledger_builder())
            .decisions_from_redis(&world.redis_url, &world.h.ns.prefix)
            .decision_timeout(Duration::from_secs(5))
            .build()
            .await?;
        let give_up = until + QUIESCENCE / 2;
        let called = workload::basket_caller(settler, caller, seed, until, give_up);
        basket_callers.push(tokio::spawn(called));
    }
    // Watched until the last fault's window has closed.
    let leaders = tokio::spawn(watch_leaders(
        world.cluster.clone(),
        [world.h.ns.topic.clone(), world.h.ns.outcomes_topic.clone()],
        until + QUIET,
    ));
    let supervisor = {
        let world = world.clone();
        tokio::spawn(async move { world.supervise(until).await })
    };
    let mut faults = Vec::new();
    for (index, step) in schedule.steps.iter().copied().enumerate() {
        let world = world.clone();
        faults.push(tokio::spawn(async move {
            tokio::time::sleep_until(started + step.at).await;
            world
                .strike(index, step)
                .await
                .with_context(|| format!("striking {step}"))
        }));
    }
    let mut recoveries = Vec::new();
    for fault in faults {
        recoveries.push(fault.await??);
    }
    let mut acks = Vec::new();
    for caller in callers {
        acks.extend(caller.await?);
    }
    let mut baskets = Baskets::default();
    for caller in basket_callers {
        let done = caller.await??;
        baskets.used.extend(done.used);
        baskets.held += done.held;
        acks.extend(done.acks);
    }
    // Every fault has healed by the end of the schedule; what exited by
    // itself is started once more.
    supervisor.await??;
    for managed in world.all() {
        lock(managed)?.restart_if_exited(&world.h)?;
    }
    acks.extend(world.probe_acks()?);
    println!(
        "{:>7.1}s healed; {} acknowledged; waiting for quiescence",
        started.elapsed().as_secs_f64(),
        acks.len()
    );
    let run = Run {
        seed,
        length,
        schedule,
        recoveries,
        moves: leaders.await??,
    };
    check(&world, run, acks, baskets).await
}

/// What a run did before it was checked.
struct Run {
    seed: u64,
    length: Duration,
    schedule: Schedule,
    recoveries: Vec<Recovery>,
    /// Partitions' leaders seen to move, in the order seen.
    moves: Vec<Move>,
}

/// Waits until every record is decided and every hold has ended, then
/// checks the history.
async fn check(
    world: &World,
    run: Run,
    acks: Vec<Ack>,
    baskets: Baskets,
) -> anyhow::Result<Report> {
    let h = &world.h;
    let mut skus: Vec<&str> = workload::skus().collect();
    skus.extend(world.probes.iter().map(String::as_str));
    // Holds end by expiry records the applier appends, so the log grows
    // until the last one is decided.
    let quiet = wait_until(
        "every record decided and every hold ended",
        QUIESCENCE,
        || async {
            let ledger = h.fold_log().await?;
            let held: i64 = ledger.skus.values().map(|s| s.reserved).sum();
            let records = h.read(&h.ns.topic).await?.len() as u64;
            Ok((held == 0 && h.applied(&skus).await? >= records).then_some(()))
        },
    )
    .await;
    let log = h.read(&h.ns.topic).await?;
    let held: i64 = h.fold_log().await?.skus.values().map(|s| s.reserved).sum();
    let contract = match quiet {
        Err(e) => {
            // How each partition stands, for whoever reads the failure.
            let status = stockledger(h)
                .args(["status", "--format", "json"])
                .output()?;
            println!("{}", String::from_utf8_lossy(&status.stdout));
            Some(format!("{e:#}"))
        }
        Ok(()) => h.assert_contract().await.err().map(|e| format!("{e:#}")),
    };
    let differences = h.differences().await?;

    let logged: BTreeMap<(i32, i64), Command> = log
        .iter()
        .filter_map(|r| {
            let command = codec::decode_command(r.payload.as_deref()?).ok()?;
            Some(((r.partition, r.offset), command))
        })
        .collect();
    let mut decided: BTreeMap<(i32, i64), BTreeSet<ResultCode>> = BTreeMap::new();
    // (SKU, kind, order or adjustment id) → the positions that applied it.
    type Effect = (String, &'static str, String);
    let mut applied: BTreeMap<Effect, BTreeSet<(i32, i64)>> = BTreeMap::new();
    // When each partition's decisions were published, in order.
    let mut decided_at: BTreeMap<i32, Vec<i64>> = BTreeMap::new();
    for record in h.read(&h.ns.outcomes_topic).await? {
        let outcome = codec::decode_outcome(record.payload.as_deref().unwrap_or_default())?;
        let at = (outcome.position.partition, outcome.position.offset);
        if let Some(ms) = record.timestamp {
            decided_at.entry(at.0).or_default().push(ms);
        }
        decided
            .entry(at)
            .or_default()
            .insert(outcome.decision.result);
        if let (ResultCode::Applied, Some(kind)) = (outcome.decision.result, outcome.kind) {
            let id = outcome
                .order_id
                .or(outcome.adjustment_id)
                .unwrap_or_default();
            if kind != CommandKind::Limit {
                applied
                    .entry((outcome.sku, kind.as_str(), id))
                    .or_default()
                    .insert(at);
            }
        }
    }
    let lost = lost(&acks, &logged, &decided);
    let mut doubled: Vec<String> = decided
        .iter()
        .filter(|(_, results)| results.len() > 1)
        .map(|(at, results)| format!("{at:?} decided {results:?}"))
        .collect();
    doubled.extend(
        applied
            .iter()
            .filter(|(_, at)| at.len() > 1)
            .map(|((sku, kind, id), at)| format!("{kind} {sku}/{id} applied at {at:?}")),
    );
    let mut partial_baskets = Vec::new();
    for id in &baskets.used {
        let Some(now) = basket::read(&h.projection, id).await? else {
            continue;
        };
        let sold = now
            .lines
            .iter()
            .filter(|l| l.state == LineState::Confirmed)
            .count();
        if sold > 0 && sold < now.lines.len() {
            partial_baskets.push(format!("{id}: {now:?}"));
        }
    }
    for times in decided_at.values_mut() {
        times.sort_unstable();
    }
    let availability = Availability::of(&run, world.started_ms, &decided_at);
    Ok(Report {
        availability,
        run,
        acknowledged: acks.len(),
        records: log.len(),
        lost,
        doubled,
        held,
        baskets: baskets.used.len(),
        baskets_held: baskets.held,
        partial_baskets,
        differences,
        contract,
        exits: world.exits()?,
    })
}

/// The acknowledged commands that are not in the log where their answer
/// said, or not at all, or have no decision.
fn lost(
    acks: &[Ack],
    logged: &BTreeMap<(i32, i64), Command>,
    decided: &BTreeMap<(i32, i64), BTreeSet<ResultCode>>,
) -> Vec<String> {
    let by_id: HashMap<&str, (i32, i64)> = logged
        .iter()
        .map(|(at, command)| (command.command_id.as_str(), *at))
        .collect();
    let mut lost = Vec::new();
    for ack in acks {
        let (at, what) = match ack {
            Ack::At {
                partition,
                offset,
                command_id,
            } => {
                let at = (*partition, *offset);
                match logged.get(&at) {
                    Some(c) if c.command_id.as_str() == command_id => (at, command_id.clone()),
                    Some(c) => {
                        let other = c.command_id.as_str();
                        lost.push(format!(
                            "{command_id} acknowledged at {at:?}, where the log holds {other}"
                        ));
                        continue;
                    }
                    None => {
                        lost.push(format!(
                            "{command_id} acknowledged at {at:?}, not in the log"
                        ));
                        continue;
                    }
                }
            }
            Ack::Id(command_id) => match by_id.get(command_id.as_str()) {
                Some(at) => (*at, command_id.clone()),
                None => {
                    lost.push(format!("{command_id} acknowledged, not in the log"));
                    continue;
                }
            },
            Ack::Repeat { sku, order } => {
                let held = logged.iter().find(|(_, c)| {
                    c.sku.as_str() == sku && c.body.order_id().map(|o| o.as_str()) == Some(order)
                });
                match held {
                    Some((at, _)) => (*at, format!("order {sku}/{order}")),
                    None => {
                        lost.push(format!("a repeat of {sku}/{order}, which the log lacks"));
                        continue;
                    }
                }
            }
        };
        if !decided.contains_key(&at) {
            lost.push(format!("{what} at {at:?} has no decision"));
        }
    }
    lost
}
