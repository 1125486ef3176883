//! Faults: crashes, restarts, rebalances and outages, against real services
//! on 127.0.0.1. Every scenario is bounded in count and time and ends with
//! the contract checked against the reference fold of the log
//! (`Harness::assert_contract`).

mod common;

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use common::{log_path, spawn, terminate};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use stockledger_client::producer::ProducerError;
use stockledger_client::{KafkaConfig, LedgerProducer};
use stockledger_io::admin::topic_config;
use stockledger_io::topic::{committed_offsets, record_count};
use stockledger_testkit::fault::{address_of, via_port, Proxy};
use stockledger_testkit::harness::CATCH_UP;
use stockledger_testkit::services::{signal_broker, start_own_broker};
use stockledger_testkit::{poison, wait_until, Harness};

const SKUS: [&str; 8] = ["F0", "F1", "F2", "F3", "F4", "F5", "F6", "F7"];

/// How long an outage lasts: long enough for several retries.
const OUTAGE: Duration = Duration::from_secs(2);

/// The applier as an operator runs it: default group settings (a 45-second
/// session, static membership under the host's name), frequent progress.
const APPLY: [&str; 5] = ["apply", "--batch-size", "40", "--stats-interval-s", "1"];

/// How soon after its last restart a member must be working again.
const RECOVERY: Duration = Duration::from_secs(45 + 10);

/// How soon the partitions of a member that stopped for good must be taken
/// over: its session, then the group watch's own patience and period
/// (`stockledger_io::group`), then a rebalance or two.
const TAKEOVER: Duration = Duration::from_secs(45 + 5 + 5 + 45);

/// A child process killed when dropped, so a failing test leaves nothing
/// running.
struct Running(std::process::Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

async fn restock(producer: &LedgerProducer) -> anyhow::Result<u64> {
    stockledger_testkit::traffic::restock_all(producer, &SKUS, 200).await
}

async fn traffic(producer: &LedgerProducer, first: usize, orders: usize) -> anyhow::Result<u64> {
    stockledger_testkit::traffic::orders(producer, &SKUS, first, orders).await
}

async fn wait_applied(h: &Harness, records: u64) -> anyhow::Result<()> {
    wait_applied_within(h, records, CATCH_UP).await
}

async fn wait_applied_within(h: &Harness, records: u64, within: Duration) -> anyhow::Result<()> {
    wait_until(&format!("{records} records applied"), within, || async {
        Ok((h.applied(&SKUS).await? >= records).then_some(()))
    })
    .await
}

async fn committed(h: &Harness) -> anyhow::Result<i64> {
    Ok(
        committed_offsets(&h.kafka, &h.ns.applier_group, &h.ns.topic)
            .await?
            .values()
            .sum(),
    )
}

async fn wait_exit(
    child: &mut std::process::Child,
    within: Duration,
) -> anyhow::Result<std::process::ExitStatus> {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(status);
        }
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "the process did not exit within {within:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_applier_killed_ten_times_while_producers_run_loses_and_doubles_nothing(
) -> anyhow::Result<()> {
    let h = Harness::new("kill-applier", 4).await?;
    let archiver = h.start_archiver();
    restock(&h.producer).await?;
    let producer = h.producer.clone();
    let traffic = tokio::spawn(async move { traffic(&producer, 0, 1200).await });
    let mut rng = StdRng::seed_from_u64(11);
    let mut last = 0;
    for cycle in 0..10 {
        // Restarted at once, as an orchestrator does: it takes the dead
        // member's place in the group.
        let mut child = Running(spawn(&h, &APPLY)?);
        last = wait_until(&format!("progress in cycle {cycle}"), RECOVERY, || async {
            let now = h.applied(&SKUS).await?;
            Ok((now > last || traffic.is_finished()).then_some(now))
        })
        .await?;
        // Kill at a random moment of the batches in flight.
        tokio::time::sleep(Duration::from_millis(rng.gen_range(0..60))).await;
        child.0.kill()?;
        child.0.wait()?;
    }
    traffic.await??;
    let applier = h.start_applier();
    h.assert_contract().await?;
    applier.stop().await?;
    archiver.stop().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_appliers_share_the_partitions_and_per_sku_order_holds_through_rebalances(
) -> anyhow::Result<()> {
    let h = Harness::new("three-appliers", 6).await?;
    let archiver = h.start_archiver();
    let member = |id: &'static str| spawn(&h, &[&APPLY[..], &["--instance-id", id]].concat());
    let mut a = Running(member("a")?);
    let mut b = Running(member("b")?);
    let mut c = Running(member("c")?);
    let mut sent = restock(&h.producer).await? + traffic(&h.producer, 0, 200).await?;
    wait_applied(&h, sent).await?;

    // One is killed mid-stream and restarted at once under its own name:
    // it takes its partitions back without waiting out its old session.
    let more = tokio::spawn({
        let producer = h.producer.clone();
        async move { traffic(&producer, 200, 200).await }
    });
    wait_applied(&h, sent + 20).await?;
    a.0.kill()?;
    a.0.wait()?;
    a = Running(member("a")?);
    sent += more.await??;
    wait_applied_within(&h, sent, RECOVERY).await?;

    // It stops for good (SIGTERM): a static member does not leave its
    // group, so the survivors take its partitions once the stopped
    // member's session is over.
    terminate(&a.0)?;
    assert!(wait_exit(&mut a.0, Duration::from_secs(20))
        .await?
        .success());
    sent += traffic(&h.producer, 400, 200).await?;
    wait_applied_within(&h, sent, TAKEOVER).await?;

    // And comes back: the group rebalances once more.
    a = Running(member("a")?);
    sent += traffic(&h.producer, 600, 200).await?;
    wait_applied(&h, sent).await?;
    for member in [&mut a, &mut b, &mut c] {
        terminate(&member.0)?;
    }
    for member in [&mut a, &mut b, &mut c] {
        assert!(wait_exit(&mut member.0, Duration::from_secs(20))
            .await?
            .success());
    }

    h.assert_contract().await?;
    // In application order (the outcomes topic, first copy of each
    // position), each SKU's offsets strictly increase.
    let mut seen = HashSet::new();
    let mut last: HashMap<String, i64> = HashMap::new();
    for record in h.read(&h.ns.outcomes_topic).await? {
        let o =
            stockledger_core::codec::decode_outcome(record.payload.as_deref().unwrap_or_default())?;
        if !seen.insert((o.position.partition, o.position.offset)) {
            continue;
        }
        if let Some(previous) = last.insert(o.sku.clone(), o.position.offset) {
            assert!(
                o.position.offset > previous,
                "{}: {} after {previous}",
                o.sku,
                o.position.offset
            );
        }
    }
    archiver.stop().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_away_for_a_while_the_applier_retries_and_commits_nothing_meanwhile(
) -> anyhow::Result<()> {
    let h = Harness::new("redis-outage", 2).await?;
    let proxy = Proxy::start(address_of(&h.redis_url)?).await?;
    let mut config = h.applier_config();
    config.redis_url = via_port(&h.redis_url, proxy.port());
    let applier = h.start_applier_with(config);
    let archiver = h.start_archiver();
    let first = restock(&h.producer).await? + traffic(&h.producer, 0, 60).await?;
    wait_until("the first records committed", CATCH_UP, || async {
        Ok((committed(&h).await? == first as i64).then_some(()))
    })
    .await?;

    proxy.pause();
    traffic(&h.producer, 60, 60).await?;
    tokio::time::sleep(OUTAGE).await;
    assert_eq!(
        committed(&h).await?,
        first as i64,
        "nothing committed while Redis is away"
    );
    assert!(
        !applier.is_finished(),
        "the applier waits for Redis instead of failing"
    );
    proxy.resume();

    h.assert_contract().await?;
    applier.stop().await?;
    archiver.stop().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_away_for_a_while_the_archiver_retries_without_gap_or_duplicate(
) -> anyhow::Result<()> {
    let h = Harness::new("pg-outage", 2).await?;
    let proxy = Proxy::start(address_of(&h.services.database_url)?).await?;
    let mut config = h.archiver_config();
    config.database_url = via_port(&h.services.database_url, proxy.port());
    let archiver = h.start_archiver_with(config);
    let applier = h.start_applier();
    let first = restock(&h.producer).await? + traffic(&h.producer, 0, 60).await?;
    h.wait_for_archive(first as i64).await?;
    let before = h.archiver_progress().await?;

    proxy.pause();
    let second = traffic(&h.producer, 60, 60).await?;
    wait_applied(&h, first + second).await?;
    tokio::time::sleep(OUTAGE).await;
    assert_eq!(h.archived_rows().await?, first as i64);
    assert_eq!(
        h.archiver_progress().await?,
        before,
        "progress does not advance while PostgreSQL is away"
    );
    assert!(
        !archiver.is_finished(),
        "the archiver waits for PostgreSQL instead of failing"
    );
    proxy.resume();

    h.assert_contract().await?;
    applier.stop().await?;
    archiver.stop().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_outage_surfaces_undelivered_commands_and_everyone_reconnects(
) -> anyhow::Result<()> {
    let port = start_own_broker().await?;
    let h = Harness::with_kafka(
        "broker-outage",
        2,
        KafkaConfig::new(format!("127.0.0.1:{port}")),
    )
    .await?;
    let applier = h.start_applier();
    let archiver = h.start_archiver();
    let first = restock(&h.producer).await? + traffic(&h.producer, 0, 40).await?;
    h.wait_for_archive(first as i64).await?;

    signal_broker(port, "STOP")?;
    let mut impatient = h.kafka.clone();
    impatient
        .properties
        .push(("message.timeout.ms".into(), "2000".into()));
    let producer = LedgerProducer::new(&impatient, h.ns.topic.clone())?;
    let failed = producer.deduct("F1", "during-the-outage", 1).await;
    signal_broker(port, "CONT")?;
    match failed {
        Err(ProducerError::Delivery(failure)) => {
            assert!(!failure.payload.is_empty(), "the command is handed back");
            assert_eq!(failure.sku, "F1");
        }
        other => panic!("expected a delivery error, got {other:?}"),
    }
    // librdkafka moved the producer's epoch on the timeout; a broker that
    // does not follow (tansu 0.6) fences it, and the producer goes on with
    // a new producer id rather than failing every later command.
    let after = producer.deduct("F1", "after-the-outage", 1).await;
    assert!(
        after.is_ok(),
        "the producer recovers after the outage: {after:?}"
    );

    traffic(&h.producer, 40, 40).await?;
    h.assert_contract().await?;
    applier.stop().await?;
    archiver.stop().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn poison_records_are_dead_lettered_with_their_reason_and_the_rest_applies(
) -> anyhow::Result<()> {
    let h = Harness::new("poison", 2).await?;
    let applier = h.start_applier();
    let archiver = h.start_archiver();
    restock(&h.producer).await?;
    let valid = h.producer.deduct("F1", "valid", 1).await?;
    let mut rng = StdRng::seed_from_u64(3);
    let mut poisons: Vec<Vec<u8>> = (0..20)
        .map(|_| (0..rng.gen_range(0..64)).map(|_| rng.gen()).collect())
        .collect();
    let mut truncated = stockledger_core::codec::encode_command(&stockledger_core::Command {
        command_id: "c".parse()?,
        sku: "F1".parse()?,
        occurred_at: 0,
        body: stockledger_core::CommandBody::Rollback(stockledger_core::Rollback::new(
            "o".parse()?,
            None,
        )?),
    })?;
    truncated.truncate(truncated.len() - 2);
    poisons.push(truncated);
    poisons.push(poison::deduct_with("F1", "negative", -5)?);
    poisons.push(poison::deduct_with("", "empty-sku", 1)?);
    for (i, payload) in poisons.iter().enumerate() {
        h.send_raw("F1", payload).await?;
        h.producer
            .deduct(SKUS[i % SKUS.len()], &format!("between-{i}"), 1)
            .await?;
    }
    h.assert_contract().await?;

    let dead = h.read(&h.ns.dlq_topic).await?;
    assert_eq!(dead.len(), poisons.len());
    let reasons: Vec<String> = dead
        .iter()
        .map(|r| {
            r.headers
                .iter()
                .find(|(k, _)| k == stockledger_applier::applier::DLQ_REASON_HEADER)
                .map(|(_, v)| String::from_utf8_lossy(v).into_owned())
                .unwrap_or_default()
        })
        .collect();
    assert!(reasons.iter().all(|r| !r.is_empty()), "{reasons:?}");
    assert!(
        reasons
            .iter()
            .any(|r| r.contains("quantity: must be at least 1")),
        "{reasons:?}"
    );
    assert!(
        reasons.iter().any(|r| r.contains("sku: must not be empty")),
        "{reasons:?}"
    );
    assert_eq!(valid.position.topic, h.ns.topic);
    applier.stop().await?;
    archiver.stop().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_finishes_the_batch_commits_and_exits_zero() -> anyhow::Result<()> {
    let h = Harness::new("sigterm", 2).await?;
    let mut applier = Running(spawn(&h, &["apply"])?);
    let mut archiver = Running(spawn(&h, &["archive"])?);
    let sent = restock(&h.producer).await? + traffic(&h.producer, 0, 150).await?;
    h.wait_for_archive(sent as i64).await?;

    terminate(&applier.0)?;
    terminate(&archiver.0)?;
    assert!(wait_exit(&mut applier.0, Duration::from_secs(15))
        .await?
        .success());
    assert!(wait_exit(&mut archiver.0, Duration::from_secs(15))
        .await?
        .success());
    assert_eq!(
        committed(&h).await?,
        sent as i64,
        "the applier committed all it applied"
    );
    h.assert_projection_matches_log().await?;
    Ok(())
}

/// Kills a freshly started `args` process with SIGKILL five times within a
/// few seconds, as a crash-looping deployment does, then starts it for good.
async fn crash_loop(h: &Harness, args: &[&str]) -> anyhow::Result<Running> {
    for _ in 0..5 {
        let mut child = Running(spawn(h, args)?);
        tokio::time::sleep(Duration::from_millis(600)).await;
        child.0.kill()?;
        child.0.wait()?;
    }
    Ok(Running(spawn(h, args)?))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_applier_in_a_crash_loop_applies_again_within_a_session_of_its_last_start(
) -> anyhow::Result<()> {
    let h = Harness::new("crash-loop-applier", 4).await?;
    let archiver = h.start_archiver();
    let mut first = Running(spawn(&h, &APPLY)?);
    let sent = restock(&h.producer).await? + traffic(&h.producer, 0, 100).await?;
    wait_applied(&h, sent).await?;
    first.0.kill()?;
    first.0.wait()?;

    let more = traffic(&h.producer, 100, 100).await?;
    let mut last = crash_loop(&h, &APPLY).await?;
    // On Apache Kafka a static member restarted under its instance id gets
    // its partitions back at once, so the short-lived ones may have applied
    // all of it: only records sent after the last start show that the last
    // one works.
    let started = tokio::time::Instant::now();
    let after = traffic(&h.producer, 200, 100).await?;
    wait_applied_within(&h, sent + more + after, RECOVERY).await?;
    eprintln!(
        "applier: everything applied {:?} after its last start",
        started.elapsed()
    );
    terminate(&last.0)?;
    assert!(wait_exit(&mut last.0, Duration::from_secs(20))
        .await?
        .success());
    h.assert_contract().await?;
    archiver.stop().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_archiver_in_a_crash_loop_archives_again_within_a_session_of_its_last_start(
) -> anyhow::Result<()> {
    let h = Harness::new("crash-loop-archiver", 4).await?;
    let applier = h.start_applier();
    let archive = ["archive", "--stats-interval-s", "1"];
    let mut first = Running(spawn(&h, &archive)?);
    let sent = restock(&h.producer).await? + traffic(&h.producer, 0, 100).await?;
    h.wait_for_archive(sent as i64).await?;
    first.0.kill()?;
    first.0.wait()?;

    let more = traffic(&h.producer, 100, 100).await?;
    wait_applied(&h, sent + more).await?;
    let mut last = crash_loop(&h, &archive).await?;
    // Rows decided after the last start: only the last archiver can write them.
    let started = tokio::time::Instant::now();
    let after = traffic(&h.producer, 200, 100).await?;
    wait_applied(&h, sent + more + after).await?;
    let total = (sent + more + after) as i64;
    wait_until(&format!("{total} rows archived"), RECOVERY, || async {
        Ok((h.archived_rows().await? >= total).then_some(()))
    })
    .await?;
    eprintln!(
        "archiver: everything archived {:?} after its last start",
        started.elapsed()
    );
    terminate(&last.0)?;
    assert!(wait_exit(&mut last.0, Duration::from_secs(20))
        .await?
        .success());
    h.assert_contract().await?;
    applier.stop().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_broker_unreachable_sigterm_still_ends_apply_and_archive_in_bounded_time(
) -> anyhow::Result<()> {
    let port = start_own_broker().await?;
    let h = Harness::with_kafka(
        "stop-without-broker",
        2,
        KafkaConfig::new(format!("127.0.0.1:{port}")),
    )
    .await?;
    let mut applier = Running(spawn(&h, &["apply"])?);
    let mut archiver = Running(spawn(&h, &["archive"])?);
    let sent = restock(&h.producer).await? + traffic(&h.producer, 0, 40).await?;
    h.wait_for_archive(sent as i64).await?;

    signal_broker(port, "STOP")?;
    terminate(&applier.0)?;
    terminate(&archiver.0)?;
    // The final commit waits at most SHUTDOWN_GRACE (10 s).
    let applier_exit = wait_exit(&mut applier.0, Duration::from_secs(20)).await;
    let archiver_exit = wait_exit(&mut archiver.0, Duration::from_secs(20)).await;
    signal_broker(port, "CONT")?;
    assert!(applier_exit?.success());
    assert!(archiver_exit?.success());
    for args in [["apply"], ["archive"]] {
        let log = std::fs::read_to_string(log_path(&h, &args))?;
        assert!(
            log.contains("the final offset commit did not happen in time"),
            "{args:?} says its final commit did not happen: {log}"
        );
    }

    // Restarted once the broker serves again (their logs go on in the same
    // files), they get what was not committed again and skip it. Apache
    // Kafka resumed from a pause first fences itself for missed heartbeats
    // and answers admin requests late for a while: an operator restarts
    // into a broker that answers.
    wait_until("the broker to serve the topics again", CATCH_UP, || async {
        for topic in [&h.ns.topic, &h.ns.outcomes_topic] {
            if topic_config(&h.kafka, topic).await.is_err()
                || record_count(&h.kafka, topic).await.is_err()
            {
                return Ok(None);
            }
        }
        Ok(Some(()))
    })
    .await?;
    let mut applier = Running(spawn(&h, &["apply"])?);
    let mut archiver = Running(spawn(&h, &["archive"])?);
    traffic(&h.producer, 40, 40).await?;
    h.assert_contract().await?;
    for process in [&mut applier, &mut archiver] {
        terminate(&process.0)?;
        assert!(wait_exit(&mut process.0, Duration::from_secs(20))
            .await?
            .success());
    }
    Ok(())
}
