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

use std::collections::{BTreeMap, BTreeSet};
use std::process::Child;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use common::{log_path, stockledger, Running};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde_json::json;
use stockledger_client::basket::{self, BasketHold, BasketStatus, Line, LineState};
use stockledger_client::{Ledger, Receipt};
use stockledger_core::partition::home_partition;
use stockledger_core::{codec, BasketId, CommandKind, Quantity, RestockMode, ResultCode, Sku};
use stockledger_testkit::cluster::RedisCluster;
use stockledger_testkit::fault::{address_of, via_port, Proxy};
use stockledger_testkit::ids;
use stockledger_testkit::kafka_cluster::KafkaCluster;
use stockledger_testkit::nemesis::{Fault, Path, Process, Schedule, SplitMix64, Step};
use stockledger_testkit::services::free_port;
use stockledger_testkit::{wait_until, Harness};
use tokio::time::Instant;

/// The SKUs of the workload; six over three partitions.
const SKUS: [&str; 6] = ["N-0", "N-1", "N-2", "N-3", "N-4", "N-5"];
const PARTITIONS: i32 = 3;
/// Callers sending through the library, and through the gateway.
const LIBRARY_CALLERS: u64 = 3;
const HTTP_CALLERS: u64 = 1;
/// Callers checking out baskets of two SKUs through the library.
const BASKET_CALLERS: u64 = 1;
/// A caller's pause between commands: the load stays a few hundred
/// commands a second, so a long run's log is read back in seconds.
const PACE: Duration = Duration::from_millis(10);
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
    seed: u64,
    length: Duration,
    schedule: Schedule,
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
    /// Baskets the basket callers used.
    baskets: usize,
    /// Baskets with some lines sold and others not.
    partial_baskets: Vec<String>,
    /// The contract check's failure, if it failed.
    contract: Option<String>,
    /// Processes that exited when nobody asked them to (restarted, as an
    /// orchestrator would): reported, not a breach by themselves.
    exits: Vec<String>,
    recoveries: Vec<Recovery>,
}

impl Report {
    fn ensure(&self) -> anyhow::Result<()> {
        for exit in &self.exits {
            println!("exited by itself: {exit}");
        }
        println!("{}", self.figures());
        println!("{}", self.summary());
        anyhow::ensure!(
            self.lost.is_empty()
                && self.doubled.is_empty()
                && self.held == 0
                && self.partial_baskets.is_empty()
                && self.contract.is_none(),
            "the nemesis of seed {} broke the contract; lost: {:?}; doubled: {:?}; \
             {} units still held; baskets partly sold: {:?}; contract: {:?}\n{}",
            self.seed,
            first(&self.lost),
            first(&self.doubled),
            self.held,
            first(&self.partial_baskets),
            self.contract,
            self.schedule
        );
        Ok(())
    }

    /// Per kind: faults injected, and the time from healing until
    /// decisions flowed again on every partition (p50 and max), over all
    /// of them and over those no other fault overlapped (from the strike
    /// until decisions flowed again).
    fn figures(&self) -> String {
        let mut out = format!(
            "{:<14} {:>8} {:>18} {:>18}\n",
            "fault", "injected", "recovery p50/max", "alone: n p50/max"
        );
        for (kind, injected) in self.schedule.counts() {
            let all: Vec<&Recovery> = self.recoveries.iter().filter(|r| r.kind == kind).collect();
            let alone: Vec<&Recovery> = all.iter().copied().filter(|r| r.alone).collect();
            out += &format!(
                "{kind:<14} {injected:>8} {:>18} {:>18}\n",
                spread(&all),
                format!("{} {}", alone.len(), spread(&alone))
            );
        }
        out
    }

    fn summary(&self) -> String {
        format!(
            "nemesis: seed {}, {:.1} min, {} faults, {} acknowledged, {} records, lost {}, \
             doubled {}, held {}, baskets {} (partly sold {}), exits {}, contract {}",
            self.seed,
            self.length.as_secs_f64() / 60.0,
            self.schedule.steps.len(),
            self.acknowledged,
            self.records,
            self.lost.len(),
            self.doubled.len(),
            self.held,
            self.baskets,
            self.partial_baskets.len(),
            self.exits.len(),
            if self.contract.is_none() {
                "held"
            } else {
                "BROKEN"
            }
        )
    }
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
    /// From the healing until a deduct on each partition was decided
    /// (`None`: not within [`RECOVERY_LIMIT`]).
    took: Option<Duration>,
    /// When it struck, and when decisions flowed again (seconds from the
    /// start).
    struck: f64,
    flowing: f64,
    /// No other fault struck or was in force from this one's strike until
    /// decisions flowed again: the time is this fault's own.
    alone: bool,
}

/// Marks each recovery that no other fault overlapped.
fn mark_alone(recoveries: &mut [Recovery]) {
    let spans: Vec<(f64, f64)> = recoveries.iter().map(|r| (r.struck, r.flowing)).collect();
    for (i, r) in recoveries.iter_mut().enumerate() {
        r.alone = spans
            .iter()
            .enumerate()
            .all(|(j, &(from, to))| j == i || to <= r.struck || from >= r.flowing);
    }
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
    /// When the schedule's clock started.
    started: Instant,
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
            second_applier: Mutex::new(Managed::new(
                &h,
                &["apply", "--stats-interval-s", "60"],
                &member("nemesis-2"),
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
            started: Instant::now(),
            h,
            cluster,
            redis,
            redis_cluster,
            postgres,
        };
        for managed in [&world.applier, &world.archiver, &world.gateway] {
            lock(managed)?.start(&world.h)?;
        }
        for sku in SKUS
            .iter()
            .copied()
            .chain(world.probes.iter().map(String::as_str))
        {
            world
                .h
                .ledger
                .restock(
                    &ids::sku(sku),
                    &ids::adjustment("initial"),
                    RestockMode::Set,
                    1_000_000,
                )
                .await?;
        }
        Ok(Arc::new(Self {
            started: Instant::now(),
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
    /// decisions then took to flow again, and whether it healed with no
    /// other fault still in force.
    async fn strike(&self, index: usize, step: Step) -> anyhow::Result<Recovery> {
        let struck = self.since_start();
        self.strike_and_heal(index, step).await?;
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
            took,
            struck,
            flowing: healed + took.unwrap_or(RECOVERY_LIMIT).as_secs_f64(),
            alone: false,
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
                    wait_until("the leader of partition 0", RECOVERY_LIMIT, || async {
                        Ok(self.cluster.leader(&self.h.ns.topic, 0).ok())
                    })
                    .await?
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
                let redis = self
                    .redis_cluster
                    .as_ref()
                    .context("a run on one Redis has no replica to fail over to")?;
                redis.failover(index).await?;
            }
        }
        tokio::time::sleep(step.lasting).await;
        match fault {
            Fault::Kill(process) => lock(self.process(process))?.start(&self.h)?,
            Fault::PauseApplier => lock(&self.applier)?.signal(Signal::SIGCONT)?,
            Fault::Cut(path) => self.proxy(path)?.resume(),
            Fault::Rebalance => lock(&self.second_applier)?.terminate()?,
            Fault::KillBroker { .. } | Fault::FailoverRedis => {}
        }
        Ok(())
    }

    /// How long until a deduct sent now on each partition is decided.
    async fn recovery(&self) -> Option<Duration> {
        let started = Instant::now();
        let n = self.probe_count.fetch_add(1, Ordering::SeqCst);
        let order = format!("probe-{n}");
        let sent = async {
            for sku in &self.probes {
                self.h
                    .ledger
                    .deduct(&ids::sku(sku), &ids::order(&order), ids::qty(1), None)
                    .await?;
            }
            wait_until("decisions on every partition", RECOVERY_LIMIT, || async {
                for sku in &self.probes {
                    if self.h.projection.order(sku, &order).await?.is_none() {
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

/// A SKU whose home is `partition`.
fn probe_sku(partition: i32) -> String {
    (0..)
        .map(|i| format!("P-{partition}-{i}"))
        .find(|sku| home_partition(sku.as_bytes(), PARTITIONS) == partition)
        .unwrap_or_default()
}

/// A command the ledger acknowledged: where it is and what it was.
#[derive(Debug, Clone)]
struct Ack {
    partition: i32,
    offset: i64,
    command_id: String,
}

impl From<Receipt> for Ack {
    fn from(r: Receipt) -> Self {
        Self {
            partition: r.position.partition,
            offset: r.position.offset,
            command_id: r.command_id.as_str().to_owned(),
        }
    }
}

/// The numbers of caller `stream` (library callers from 1, HTTP callers
/// from 101), drawn from the run's seed.
fn caller_rng(seed: u64, stream: u64) -> SplitMix64 {
    SplitMix64::new(seed ^ stream.wrapping_mul(0x2545_F491_4F6C_DD1D))
}

/// One library caller until `until`: deducts, rollbacks before their
/// deducts, holds of one to four seconds (confirmed, rolled back or left
/// to expire), refunds after confirms, restocks. A send that fails is
/// given up (it may or may not be in the log; it was not acknowledged).
async fn library_caller(producer: Ledger, caller: u64, seed: u64, until: Instant) -> Vec<Ack> {
    let mut rng = caller_rng(seed, caller + 1);
    let mut acks = Vec::new();
    let mut i = 0u64;
    while Instant::now() < until {
        i += 1;
        let sku = SKUS[rng.below(SKUS.len() as u64) as usize];
        let order = format!("c{caller}-{i}");
        let quantity = rng.between(1, 3) as i64;
        let mut sent: Vec<Result<Receipt, _>> = Vec::new();
        match rng.below(100) {
            0..=34 => {
                sent.push(
                    producer
                        .deduct(
                            &ids::sku(sku),
                            &ids::order(&order),
                            ids::qty(quantity),
                            None,
                        )
                        .await,
                );
                if rng.chance(25) {
                    sent.push(
                        producer
                            .rollback(&ids::sku(sku), &ids::order(&order), Some("cancelled"))
                            .await,
                    );
                }
            }
            35..=44 => {
                sent.push(
                    producer
                        .rollback(&ids::sku(sku), &ids::order(&order), None)
                        .await,
                );
                sent.push(
                    producer
                        .deduct(
                            &ids::sku(sku),
                            &ids::order(&order),
                            ids::qty(quantity),
                            None,
                        )
                        .await,
                );
            }
            45..=89 => {
                let hold = rng.between(1_000, 4_000) as i64;
                let user = format!("u{}", rng.below(5));
                sent.push(
                    producer
                        .reserve_until(
                            &ids::sku(sku),
                            &ids::order(&order),
                            ids::qty(quantity),
                            ids::at_ms(stockledger_runtime::clock::now_ms() + hold),
                            Some(&ids::user(&user)),
                        )
                        .await,
                );
                match rng.below(3) {
                    0 => {
                        sent.push(producer.confirm(&ids::sku(sku), &ids::order(&order)).await);
                        if rng.chance(50) {
                            sent.push(
                                producer
                                    .refund(&ids::sku(sku), &ids::order(&order), None)
                                    .await,
                            );
                        }
                    }
                    1 => sent.push(
                        producer
                            .rollback(&ids::sku(sku), &ids::order(&order), None)
                            .await,
                    ),
                    _ => {} // left to expire
                }
            }
            _ => {
                let adjustment = format!("r{caller}-{i}");
                sent.push(
                    producer
                        .restock(
                            &ids::sku(sku),
                            &ids::adjustment(&adjustment),
                            RestockMode::Add,
                            20,
                        )
                        .await,
                );
            }
        }
        acks.extend(sent.into_iter().flatten().map(Ack::from));
        tokio::time::sleep(PACE).await;
    }
    acks
}

/// One caller through the gateway until `until`: deducts and holds, each
/// retried with the same order id while the gateway is away or answers
/// 5xx, as an order service retries (the ledger decides a repeat
/// `DUPLICATE`, so the effect stays once).
async fn http_caller(base: String, caller: u64, seed: u64, until: Instant) -> Vec<Ack> {
    let mut rng = caller_rng(seed, caller + 101);
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(20))
        .build()
        .unwrap_or_default();
    let mut acks = Vec::new();
    let mut i = 0u64;
    while Instant::now() < until {
        i += 1;
        let sku = SKUS[rng.below(SKUS.len() as u64) as usize];
        let order = format!("h{caller}-{i}");
        let quantity = rng.between(1, 3);
        let body = if rng.chance(50) {
            json!({"quantity": quantity, "hold_ms": rng.between(1_000, 4_000)})
        } else {
            json!({"quantity": quantity})
        };
        let url = format!("{base}/v1/skus/{sku}/orders/{order}/deduct?wait_ms=1000");
        for _attempt in 0..40 {
            let answer = client.post(&url).json(&body).send().await;
            let Ok(answer) = answer else {
                tokio::time::sleep(Duration::from_millis(500)).await;
                continue;
            };
            let status = answer.status().as_u16();
            if status >= 500 || status == 429 {
                tokio::time::sleep(Duration::from_millis(500)).await;
                continue;
            }
            let Ok(body) = answer.json::<serde_json::Value>().await else {
                break;
            };
            if let (Some(position), Some(command_id)) =
                (body.get("position"), body["command_id"].as_str())
            {
                acks.push(Ack {
                    partition: position["partition"].as_i64().unwrap_or(-1) as i32,
                    offset: position["offset"].as_i64().unwrap_or(-1),
                    command_id: command_id.to_owned(),
                });
            }
            break;
        }
        tokio::time::sleep(PACE).await;
    }
    acks
}

/// One caller of baskets until `until`: two SKUs, one to three units each,
/// held one to four seconds, then confirmed (60 %), released (20 %) or
/// left to expire. A confirm or release that cannot settle a line is
/// asked again, as the protocol tells callers to, until it does; a hold
/// that cannot is left (its lines expire). Returns the baskets used.
async fn basket_caller(
    settler: Ledger,
    caller: u64,
    seed: u64,
    until: Instant,
) -> anyhow::Result<Vec<BasketId>> {
    let mut rng = caller_rng(seed, caller + 201);
    let give_up = until + QUIESCENCE / 2;
    let mut baskets = Vec::new();
    let mut i = 0u64;
    while Instant::now() < until {
        i += 1;
        let first = rng.below(SKUS.len() as u64) as usize;
        let second = (first + 1 + rng.below(SKUS.len() as u64 - 1) as usize) % SKUS.len();
        let lines = [first, second]
            .into_iter()
            .map(|k| {
                Ok(Line {
                    sku: Sku::new(SKUS[k])?,
                    quantity: Quantity::new(rng.between(1, 3) as i64)?,
                })
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        let id = BasketId::new(format!("k{caller}-{i}"))?;
        let deadline = stockledger_runtime::clock::now_ms() + rng.between(1_000, 4_000) as i64;
        let hold = BasketHold::new(id.clone(), None, deadline, lines)?;
        baskets.push(id.clone());
        let Ok(held) = basket::hold(&settler, &hold).await else {
            continue;
        };
        if held.status != BasketStatus::Held {
            continue;
        }
        let skus: Vec<Sku> = held.lines.iter().map(|l| l.sku.clone()).collect();
        let then = rng.below(5);
        while then < 4 && Instant::now() < give_up {
            let settled = if then < 3 {
                basket::confirm(&settler, &id, &skus).await
            } else {
                basket::release(&settler, &id, &skus, None).await
            };
            if settled.is_ok() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        tokio::time::sleep(PACE).await;
    }
    Ok(baskets)
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
        let producer = world.h.ledger.clone();
        callers.push(tokio::spawn(library_caller(producer, caller, seed, until)));
    }
    for caller in 0..HTTP_CALLERS {
        let base = world.gateway_url.clone();
        callers.push(tokio::spawn(http_caller(base, caller, seed, until)));
    }
    let mut basket_callers = Vec::new();
    for caller in 0..BASKET_CALLERS {
        let settler = (world.h.ledger_builder())
            .decisions_from_redis(&world.redis_url, &world.h.ns.prefix)
            .decision_timeout(Duration::from_secs(5))
            .build()
            .await?;
        basket_callers.push(tokio::spawn(basket_caller(settler, caller, seed, until)));
    }
    let supervisor = {
        let world = world.clone();
        tokio::spawn(async move { world.supervise(until).await })
    };
    let mut faults = Vec::new();
    for (index, step) in schedule.steps.iter().copied().enumerate() {
        let world = world.clone();
        faults.push(tokio::spawn(async move {
            tokio::time::sleep_until(started + step.at).await;
            println!("{:>7.1}s strikes {step}", world.since_start());
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
    mark_alone(&mut recoveries);
    let mut acks = Vec::new();
    for caller in callers {
        acks.extend(caller.await?);
    }
    let mut baskets = Vec::new();
    for caller in basket_callers {
        baskets.extend(caller.await??);
    }
    // Every fault has healed by the end of the schedule; what exited by
    // itself is started once more.
    supervisor.await??;
    for managed in world.all() {
        lock(managed)?.restart_if_exited(&world.h)?;
    }
    println!(
        "{:>7.1}s healed; {} acknowledged; waiting for quiescence",
        started.elapsed().as_secs_f64(),
        acks.len()
    );
    check(&world, seed, length, schedule, acks, baskets, recoveries).await
}

/// Waits until every record is decided and every hold has ended, then
/// checks the history.
async fn check(
    world: &World,
    seed: u64,
    length: Duration,
    schedule: Schedule,
    acks: Vec<Ack>,
    baskets: Vec<BasketId>,
    recoveries: Vec<Recovery>,
) -> anyhow::Result<Report> {
    let h = &world.h;
    let skus: Vec<&str> = SKUS
        .iter()
        .copied()
        .chain(world.probes.iter().map(String::as_str))
        .collect();
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

    let logged: BTreeMap<(i32, i64), String> = log
        .iter()
        .filter_map(|r| {
            let command = codec::decode_command(r.payload.as_deref()?).ok()?;
            Some((
                (r.partition, r.offset),
                command.command_id.as_str().to_owned(),
            ))
        })
        .collect();
    let mut decided: BTreeMap<(i32, i64), BTreeSet<ResultCode>> = BTreeMap::new();
    // (SKU, kind, order or adjustment id) → the positions that applied it.
    type Effect = (String, &'static str, String);
    let mut applied: BTreeMap<Effect, BTreeSet<(i32, i64)>> = BTreeMap::new();
    for record in h.read(&h.ns.outcomes_topic).await? {
        let outcome = codec::decode_outcome(record.payload.as_deref().unwrap_or_default())?;
        let at = (outcome.position.partition, outcome.position.offset);
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
    let mut lost = Vec::new();
    for ack in &acks {
        let at = (ack.partition, ack.offset);
        match logged.get(&at) {
            Some(id) if *id == ack.command_id => {
                if !decided.contains_key(&at) {
                    lost.push(format!("{} at {at:?} has no decision", ack.command_id));
                }
            }
            Some(other) => lost.push(format!(
                "{} acknowledged at {at:?}, where the log holds {other}",
                ack.command_id
            )),
            None => lost.push(format!(
                "{} acknowledged at {at:?}, not in the log",
                ack.command_id
            )),
        }
    }
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
    for id in &baskets {
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
    Ok(Report {
        seed,
        length,
        schedule,
        acknowledged: acks.len(),
        records: log.len(),
        lost,
        doubled,
        held,
        baskets: baskets.len(),
        partial_baskets,
        contract,
        exits: world.exits()?,
        recoveries,
    })
}
