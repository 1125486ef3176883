//! The peer a team on Kafka would pick: an inventory service written as a
//! Kafka Streams application (`crates/bench/kstreams`, Java), run as a JVM
//! child process over logs the ledger has decided, timed from the moment
//! it runs until its outcomes topic holds a committed decision for every
//! record, and checked record by record against the ledger's decisions.
//!
//! Before the timed runs it decides a small log of its own that can break
//! the rules it shares with the ledger: SKUs that sell out, repeated order
//! and adjustment ids, rollbacks before their deducts and the late deducts
//! they refuse, restocks refused below what orders hold.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::Context;
use futures::stream::{self, StreamExt};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::{Message, Offset, TopicPartitionList};
use stockledger_cli::Global;
use stockledger_core::{codec, RestockMode};
use stockledger_kafka::admin::{create_topics, TopicSpec};
use stockledger_kafka::topic::{partition_count, read_topic, record_count, replication_of};
use stockledger_testkit::ids;
use tokio::io::{AsyncBufReadExt, BufReader};

use crate::cpu::{broker_pid, pid_cpu, shown_per_million, MachineCpu};
use crate::pipeline::Pipeline;
use crate::{print_measurement, stack_home, BenchArgs, Measurement};

/// The peer's scenario the results table compares every other with
/// (`× kstreams`): exactly-once, on the e2e-uniform log.
pub(crate) const PEER: &str = "kstreams-eos";

/// How long the JVM may take from its start until the application runs.
const START_WAIT: Duration = Duration::from_secs(180);

/// `processing.guarantee`.
#[derive(Debug, Clone, Copy)]
enum Guarantee {
    ExactlyOnceV2,
    AtLeastOnce,
}

impl Guarantee {
    fn as_str(self) -> &'static str {
        match self {
            Self::ExactlyOnceV2 => "exactly_once_v2",
            Self::AtLeastOnce => "at_least_once",
        }
    }
}

/// A command topic the ledger has decided, and the outcomes it wrote.
#[derive(Debug, Clone)]
pub(crate) struct DecidedLog {
    pub(crate) topic: String,
    pub(crate) outcomes_topic: String,
}

impl DecidedLog {
    pub(crate) fn of(pipeline: &Pipeline) -> Self {
        Self {
            topic: pipeline.topic.clone(),
            outcomes_topic: pipeline.outcomes_topic.clone(),
        }
    }
}

/// What decided one record: its result and the stock after it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Decided {
    result: String,
    delta: i64,
    available: i64,
    total: i64,
}

impl std::fmt::Display for Decided {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} (delta {}, available {}, total {})",
            self.result, self.delta, self.available, self.total
        )
    }
}

/// Decisions by the position (partition, offset) of the record decided.
type Decisions = HashMap<(i32, i64), Decided>;

/// The peer's decision as it writes it: `"partition offset RESULT delta
/// available total"`.
fn parse_peer(text: &str) -> Option<((i32, i64), Decided)> {
    let mut fields = text.split(' ');
    let mut next = || fields.next();
    let position = (next()?.parse().ok()?, next()?.parse().ok()?);
    let result = next()?.to_owned();
    let mut number = || next()?.parse::<i64>().ok();
    let decided = Decided {
        result,
        delta: number()?,
        available: number()?,
        total: number()?,
    };
    Some((position, decided))
}

/// The peer over the e2e-uniform log (exactly-once, then at-least-once)
/// and the e2e-hot log (exactly-once), after its check on the rules log.
pub(crate) async fn kstreams(
    g: &Global,
    args: &BenchArgs,
    run_id: &str,
    uniform: &DecidedLog,
    hot: &DecidedLog,
) -> anyhow::Result<Vec<Measurement>> {
    build().await?;
    let rules = rules_log(g, args, run_id).await?;
    let checked = run(g, run_id, "kstreams-rules", &rules, Guarantee::AtLeastOnce).await?;
    let rules_failed = differs(g, &rules, &checked.decided).await?;
    let mut results = Vec::new();
    for (name, log, guarantee, which) in [
        (PEER, uniform, Guarantee::ExactlyOnceV2, "e2e-uniform"),
        (
            "kstreams-alos",
            uniform,
            Guarantee::AtLeastOnce,
            "e2e-uniform",
        ),
        ("kstreams-eos-hot", hot, Guarantee::ExactlyOnceV2, "e2e-hot"),
    ] {
        let peer = run(g, run_id, name, log, guarantee).await?;
        let failures: Vec<String> = [
            differs(g, log, &peer.decided).await?,
            rules_failed
                .as_ref()
                .map(|f| format!("on the rules log: {f}")),
        ]
        .into_iter()
        .flatten()
        .collect();
        let m = Measurement {
            scenario: name,
            records: peer.records,
            seconds: peer.seconds,
            setup: format!(
                "Kafka Streams 4.3.1, {}, {} stream threads, RocksDB stores with changelogs, over \
                 the {which} log, timed from RUNNING until every decision was read committed; \
                 {}; every decision equal to the ledger's, and on a {}-record rules log (sold \
                 out, repeats, tombstones, refused restocks)",
                guarantee.as_str(),
                threads(),
                peer.cpu,
                checked.records
            ),
            latency_ms: None,
            peak_rss_mib: None,
            failed: (!failures.is_empty()).then(|| failures.join("; ")),
            instructions: None,
            machine_cpu: peer.machine_cpu,
            hops: None,
        };
        print_measurement(&m);
        results.push(m);
    }
    Ok(results)
}

/// The peer's sources, beside this file's crate.
fn peer_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("kstreams")
}

/// Stream threads: one a core, as a team sizing the application would.
fn threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Builds the peer (once; again when a source changes) before anything is
/// timed.
async fn build() -> anyhow::Result<()> {
    let status = tokio::process::Command::new(peer_dir().join("run.sh"))
        .arg("--build-only")
        .stdin(Stdio::null())
        .status()
        .await
        .context("building the Kafka Streams peer (needs Java 17 and Maven)")?;
    anyhow::ensure!(
        status.success(),
        "building the Kafka Streams peer: {status}"
    );
    Ok(())
}

/// A log to break the shared rules on, decided by the ledger: per SKU
/// (holding 3 units), in order,
/// deduct o1 2 (applied), deduct o2 2 (short), deduct o1 1 (a repeat),
/// rollback o3 (no deduction: a tombstone), deduct o3 1 (refused by it),
/// rollback o1 (applied), rollback o1 (a repeat), deduct o2 2 (applied),
/// restock "initial" again (a repeat), restock "more" ADD 2 (applied),
/// restock "less" SET 1 (below the 2 held: refused), deduct o4 3
/// (applied: sold out), deduct o5 1 (short).
async fn rules_log(g: &Global, args: &BenchArgs, run_id: &str) -> anyhow::Result<DecidedLog> {
    const SKUS: usize = 20;
    let pipeline = Pipeline::start(g, args, run_id, "kstreams-rules", SKUS, 3, true).await?;
    let per_sku = stream::iter(0..SKUS as u64)
        .map(|i| {
            let (p, sku) = (&pipeline.producer, pipeline.sku(i));
            async move {
                p.deduct(&ids::sku(&sku), &ids::order("o1"), ids::qty(2), None)
                    .await?;
                p.deduct(&ids::sku(&sku), &ids::order("o2"), ids::qty(2), None)
                    .await?;
                p.deduct(&ids::sku(&sku), &ids::order("o1"), ids::qty(1), None)
                    .await?;
                p.rollback(&ids::sku(&sku), &ids::order("o3"), None).await?;
                p.deduct(&ids::sku(&sku), &ids::order("o3"), ids::qty(1), None)
                    .await?;
                p.rollback(&ids::sku(&sku), &ids::order("o1"), None).await?;
                p.rollback(&ids::sku(&sku), &ids::order("o1"), None).await?;
                p.deduct(&ids::sku(&sku), &ids::order("o2"), ids::qty(2), None)
                    .await?;
                p.restock(
                    &ids::sku(&sku),
                    &ids::adjustment("initial"),
                    RestockMode::Set,
                    3,
                )
                .await?;
                p.restock(
                    &ids::sku(&sku),
                    &ids::adjustment("more"),
                    RestockMode::Add,
                    2,
                )
                .await?;
                p.restock(
                    &ids::sku(&sku),
                    &ids::adjustment("less"),
                    RestockMode::Set,
                    1,
                )
                .await?;
                p.deduct(&ids::sku(&sku), &ids::order("o4"), ids::qty(3), None)
                    .await?;
                p.deduct(&ids::sku(&sku), &ids::order("o5"), ids::qty(1), None)
                    .await?;
                anyhow::Ok(13u64)
            }
        })
        .buffer_unordered(SKUS)
        .collect::<Vec<_>>()
        .await;
    let mut sent = 0;
    for each in per_sku {
        sent += each?;
    }
    pipeline.wait_applied(sent).await?;
    let log = DecidedLog::of(&pipeline);
    pipeline.stop().await?;
    Ok(log)
}

/// One run of the peer.
struct PeerRun {
    records: u64,
    seconds: f64,
    machine_cpu: Option<f64>,
    /// What the JVM and the broker spent a record.
    cpu: String,
    decided: Decisions,
}

/// Runs the peer as `name` over `log` until it has decided every record.
async fn run(
    g: &Global,
    run_id: &str,
    name: &str,
    log: &DecidedLog,
    guarantee: Guarantee,
) -> anyhow::Result<PeerRun> {
    anyhow::ensure!(
        g.kafka_properties.is_empty(),
        "the Kafka Streams peer runs on a plaintext listener only; KAFKA_PROPERTIES is set"
    );
    let kafka = g.kafka();
    let records = record_count(&kafka, &log.topic).await? as u64;
    // Named `<run>.…`, as are the changelogs Kafka Streams makes from the
    // application id: the run's clean-up removes them all.
    let application = format!("{run_id}.{name}");
    let outcomes = format!("{application}.decisions");
    create_topics(
        &kafka,
        &[TopicSpec {
            name: outcomes.clone(),
            partitions: partition_count(&kafka, &log.topic).await?,
            replication: replication_of(&kafka, &log.topic).await?,
            configs: Vec::new(),
        }],
    )
    .await?;
    let state = stack_home()
        .context("no home directory for the peer's state")?
        .join("bench-kstreams")
        .join("state")
        .join(&application);
    let mut child = start(g, log, &outcomes, &application, guarantee, &state).await?;
    let jvm = child.id();
    let processes = || (jvm.and_then(pid_cpu), broker_pid().and_then(pid_cpu));
    let before = processes();
    let started = Instant::now();
    let machine = MachineCpu::now();
    let wait = Duration::from_secs(300).max(Duration::from_millis(records));
    let reading = {
        let (kafka, outcomes) = (kafka.clone(), outcomes.clone());
        tokio::task::spawn_blocking(move || read_decisions(&kafka, &outcomes, records, wait))
    };
    let read = tokio::select! {
        read = reading => read.context("reading the peer's decisions")?,
        exited = child.wait() => anyhow::bail!("the peer exited while deciding: {}", exited?),
    };
    let (decided, last) = read?;
    let machine_cpu = machine.since();
    let after = processes();
    // CPU seconds per million records are microseconds per record.
    let cpu = format!(
        "CPU per record: the JVM {} µs, the broker {} µs",
        shown_per_million(before.0, after.0, records),
        shown_per_million(before.1, after.1, records)
    );
    let seconds = last.saturating_duration_since(started).as_secs_f64();
    stop(&mut child).await?;
    let _ = std::fs::remove_dir_all(&state);
    Ok(PeerRun {
        records,
        seconds,
        machine_cpu,
        cpu,
        decided,
    })
}

/// Starts the peer as `application` over `log`, writing its decisions to
/// `outcomes`, and returns once it runs (its JVM started, its group
/// joined, its stores restored).
async fn start(
    g: &Global,
    log: &DecidedLog,
    outcomes: &str,
    application: &str,
    guarantee: Guarantee,
    state: &Path,
) -> anyhow::Result<tokio::process::Child> {
    let mut child = tokio::process::Command::new(peer_dir().join("run.sh"))
        .args(["--brokers", &g.brokers, "--topic", &log.topic])
        .args([
            "--outcomes-topic",
            outcomes,
            "--application-id",
            application,
        ])
        .args(["--guarantee", guarantee.as_str()])
        .arg("--state-dir")
        .arg(state)
        .args(["--threads", &threads().to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .context("starting the Kafka Streams peer")?;
    let stdout = child.stdout.take().context("the peer's standard output")?;
    let mut lines = BufReader::new(stdout).lines();
    let running = async {
        while let Some(line) = lines.next_line().await? {
            if line.trim() == "RUNNING" {
                return anyhow::Ok(());
            }
        }
        anyhow::bail!("the peer exited before it ran")
    };
    tokio::time::timeout(START_WAIT, running)
        .await
        .with_context(|| format!("the peer did not run within {START_WAIT:?}"))??;
    // Read to its end, so the peer never writes to a closed pipe.
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    Ok(child)
}

/// Reads `topic` with `read_committed` until it holds a decision for
/// `records` distinct records; returns them and when the last was read.
fn read_decisions(
    kafka: &stockledger_kafka::KafkaConfig,
    topic: &str,
    records: u64,
    wait: Duration,
) -> anyhow::Result<(Decisions, Instant)> {
    let consumer: BaseConsumer = kafka
        .client_config(&[
            ("group.id", "stockledger-bench-kstreams-reader"),
            ("enable.auto.commit", "false"),
            ("isolation.level", "read_committed"),
        ])
        .create()?;
    let mut assignment = TopicPartitionList::new();
    for partition in stockledger_kafka::topic::partitions_of(&consumer, topic)? {
        assignment.add_partition_offset(topic, partition, Offset::Beginning)?;
    }
    consumer.assign(&assignment)?;
    let deadline = Instant::now() + wait;
    let mut decided = Decisions::with_capacity(records as usize);
    let mut last = Instant::now();
    while (decided.len() as u64) < records {
        anyhow::ensure!(
            Instant::now() < deadline,
            "the peer decided {} of {records} records within {wait:?}",
            decided.len()
        );
        let Some(message) = consumer.poll(Duration::from_millis(100)) else {
            continue;
        };
        let message = message?;
        let text = std::str::from_utf8(message.payload().unwrap_or_default())?;
        let (position, decision) =
            parse_peer(text).with_context(|| format!("an unreadable decision {text:?}"))?;
        decided.entry(position).or_insert(decision);
        last = Instant::now();
    }
    Ok((decided, last))
}

/// SIGTERM (Kafka Streams closes cleanly), a kill after a minute.
async fn stop(child: &mut tokio::process::Child) -> anyhow::Result<()> {
    if let Some(pid) = child.id() {
        let pid = Pid::from_raw(i32::try_from(pid).context("a process id beyond i32")?);
        let _ = kill(pid, Signal::SIGTERM);
    }
    if tokio::time::timeout(Duration::from_secs(60), child.wait())
        .await
        .is_err()
    {
        child.kill().await?;
    }
    Ok(())
}

/// How the peer's decisions differ from the ledger's on `log`, if they
/// do: every record, every field the peer decides.
async fn differs(g: &Global, log: &DecidedLog, peer: &Decisions) -> anyhow::Result<Option<String>> {
    let outcomes = read_topic(&g.kafka(), &log.outcomes_topic, Duration::from_secs(300)).await?;
    let mut ledger: Decisions = HashMap::new();
    for record in outcomes {
        let outcome = codec::decode_outcome(record.payload.as_deref().unwrap_or_default())?;
        if outcome.position.topic != log.topic {
            continue;
        }
        let d = outcome.decision;
        ledger
            .entry((outcome.position.partition, outcome.position.offset))
            .or_insert(Decided {
                result: d.result.as_str().to_owned(),
                delta: d.delta,
                available: d.available,
                total: d.total,
            });
    }
    Ok(compare(&log.topic, &ledger, peer))
}

/// The records of `topic` whose decisions in `ledger` and `peer` are not
/// equal (or are missing on one side), summed up with the first of them.
fn compare(topic: &str, ledger: &Decisions, peer: &Decisions) -> Option<String> {
    let mut positions: Vec<&(i32, i64)> = ledger.keys().chain(peer.keys()).collect();
    positions.sort();
    positions.dedup();
    let shown = |d: Option<&Decided>| d.map_or("nothing".to_owned(), Decided::to_string);
    let wrong: Vec<String> = positions
        .iter()
        .filter(|p| peer.get(p) != ledger.get(p))
        .map(|&&(partition, offset)| {
            let at = (partition, offset);
            format!(
                "{topic}/{partition}@{offset}: the ledger {}, kstreams {}",
                shown(ledger.get(&at)),
                shown(peer.get(&at))
            )
        })
        .collect();
    let first = wrong.first()?;
    Some(format!(
        "{} of {} records decided otherwise, first {first}",
        wrong.len(),
        positions.len()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_peer_decision_names_its_record_and_the_stock_after_it() {
        assert_eq!(
            parse_peer("3 1207 REJECTED_INSUFFICIENT 0 2 10"),
            Some((
                (3, 1207),
                Decided {
                    result: "REJECTED_INSUFFICIENT".into(),
                    delta: 0,
                    available: 2,
                    total: 10,
                }
            ))
        );
        assert_eq!(parse_peer("3 1207 APPLIED -1 2"), None, "a field short");
        assert_eq!(parse_peer("x 1207 APPLIED -1 2 3"), None);
    }

    #[test]
    fn every_field_of_every_record_is_compared() {
        let decided = |result: &str, available| Decided {
            result: result.into(),
            delta: -1,
            available,
            total: 10,
        };
        let ledger: HashMap<_, _> = [
            ((0, 0), decided("APPLIED", 9)),
            ((0, 1), decided("APPLIED", 8)),
            ((1, 0), decided("DUPLICATE", 5)),
        ]
        .into();
        assert_eq!(compare("t", &ledger, &ledger.clone()), None);
        let mut peer = ledger.clone();
        peer.insert((0, 1), decided("APPLIED", 7));
        assert_eq!(
            compare("t", &ledger, &peer).as_deref(),
            Some(
                "1 of 3 records decided otherwise, first t/0@1: the ledger APPLIED (delta -1, \
                 available 8, total 10), kstreams APPLIED (delta -1, available 7, total 10)"
            )
        );
        peer.remove(&(1, 0));
        peer.insert((2, 0), decided("APPLIED", 1));
        let summary = compare("t", &ledger, &peer).unwrap_or_default();
        assert!(summary.starts_with("3 of 4 records"), "{summary}");
    }
}
