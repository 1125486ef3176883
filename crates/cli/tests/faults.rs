//! Faults: crashes, restarts, rebalances and outages, against real services
//! on 127.0.0.1. Every scenario is bounded in count and time and ends with
//! the contract checked against the reference fold of the log
//! (`Harness::assert_contract`).

mod common;

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use common::{spawn, terminate};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use stockledger_client::producer::ProducerError;
use stockledger_client::{KafkaConfig, LedgerProducer};
use stockledger_io::topic::committed_offsets;
use stockledger_testkit::fault::{address_of, via_port, Proxy};
use stockledger_testkit::harness::CATCH_UP;
use stockledger_testkit::services::{signal_broker, start_own_broker};
use stockledger_testkit::{poison, wait_until, Harness};

const SKUS: [&str; 8] = ["F0", "F1", "F2", "F3", "F4", "F5", "F6", "F7"];

/// How long an outage lasts: long enough for several retries.
const OUTAGE: Duration = Duration::from_secs(2);

/// One applier at a time: a killed member's session ends within seconds.
const APPLY: [&str; 9] = [
    "apply",
    "--batch-size",
    "40",
    "--stats-interval-s",
    "1",
    "-X",
    "session.timeout.ms=2000",
    "-X",
    "heartbeat.interval.ms=300",
];

/// Two appliers in one group. The session is longer because tansu 0.6
/// counts the time a member spends in a rebalance against it, and with two
/// members a 2-second session keeps the group rebalancing.
const APPLY_PAIR: [&str; 9] = [
    "apply",
    "--batch-size",
    "40",
    "--stats-interval-s",
    "1",
    "-X",
    "session.timeout.ms=10000",
    "-X",
    "heartbeat.interval.ms=1000",
];

/// A killed member never leaves its group. Apache Kafka's coordinator
/// expires it after `session.timeout.ms` and rebalances; tansu 0.6 drops it
/// only when another member joins after that, so a replacement is started
/// once the session has run out.
async fn outlive_dead_session(session_ms: u64) {
    tokio::time::sleep(Duration::from_millis(session_ms + 500)).await;
}

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
    wait_until(&format!("{records} records applied"), CATCH_UP, || async {
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
        let mut child = Running(spawn(&h, &APPLY)?);
        last = wait_until(&format!("progress in cycle {cycle}"), CATCH_UP, || async {
            let now = h.applied(&SKUS).await?;
            Ok((now > last || traffic.is_finished()).then_some(now))
        })
        .await?;
        // Kill at a random moment of the batches in flight.
        tokio::time::sleep(Duration::from_millis(rng.gen_range(0..60))).await;
        child.0.kill()?;
        child.0.wait()?;
        outlive_dead_session(2000).await;
    }
    traffic.await??;
    let applier = h.start_applier();
    h.assert_contract().await?;
    applier.stop().await?;
    archiver.stop().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_appliers_share_the_partitions_and_per_sku_order_holds_through_rebalances(
) -> anyhow::Result<()> {
    let h = Harness::new("two-appliers", 4).await?;
    let archiver = h.start_archiver();
    let mut a = Running(spawn(&h, &APPLY_PAIR)?);
    let mut b = Running(spawn(&h, &APPLY_PAIR)?);
    let mut sent = restock(&h.producer).await? + traffic(&h.producer, 0, 200).await?;
    wait_applied(&h, sent).await?;

    // One is killed mid-stream; a replacement joins and the group
    // rebalances its partitions over the survivor and the newcomer.
    let more = tokio::spawn({
        let producer = h.producer.clone();
        async move { traffic(&producer, 200, 200).await }
    });
    wait_applied(&h, sent + 20).await?;
    a.0.kill()?;
    a.0.wait()?;
    outlive_dead_session(10_000).await;
    let mut replacement = Running(spawn(&h, &APPLY_PAIR)?);
    sent += more.await??;
    wait_applied(&h, sent).await?;

    // The replacement leaves (SIGTERM): the survivor takes every partition.
    terminate(&replacement.0)?;
    assert!(wait_exit(&mut replacement.0, Duration::from_secs(20))
        .await?
        .success());
    sent += traffic(&h.producer, 400, 200).await?;
    wait_applied(&h, sent).await?;

    // And comes back: the group rebalances once more.
    a = Running(spawn(&h, &APPLY_PAIR)?);
    sent += traffic(&h.producer, 600, 200).await?;
    wait_applied(&h, sent).await?;
    terminate(&a.0)?;
    terminate(&b.0)?;
    assert!(wait_exit(&mut a.0, Duration::from_secs(20))
        .await?
        .success());
    assert!(wait_exit(&mut b.0, Duration::from_secs(20))
        .await?
        .success());

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
