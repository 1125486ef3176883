//! The command log stays the truth: a topic that would delete records and
//! a topic whose partition count changed are refused with the way out, and
//! that way out (`repartition`, then `replay`) rebuilds the fold of the log.

mod common;

use std::collections::HashMap;

use common::{spawn, stockledger, terminate};
use stockledger_applier::{check, ApplierError};
use stockledger_client::LedgerProducer;
use stockledger_io::admin::{create_topics, TopicSpec};
use stockledger_io::topic::{committed_offsets, LogRecord};
use stockledger_projection::Projection;
use stockledger_testkit::harness::CATCH_UP;
use stockledger_testkit::{traffic, wait_until, Harness};

const SKUS: [&str; 12] = [
    "G0", "G1", "G2", "G3", "G4", "G5", "G6", "G7", "G8", "G9", "G10", "G11",
];

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Each SKU's command ids in the order they were written: by record time,
/// then partition and offset.
fn per_sku(records: &[LogRecord]) -> anyhow::Result<HashMap<String, Vec<String>>> {
    let mut order: HashMap<String, Vec<String>> = HashMap::new();
    let mut sorted: Vec<&LogRecord> = records.iter().collect();
    sorted.sort_by_key(|r| (r.timestamp, r.partition, r.offset));
    for r in sorted {
        let command =
            stockledger_core::codec::decode_command(r.payload.as_deref().unwrap_or_default())?;
        order
            .entry(command.sku.to_string())
            .or_default()
            .push(command.command_id.to_string());
    }
    Ok(order)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grown_command_topic_is_refused_and_repartition_then_replay_rebuild_its_fold(
) -> anyhow::Result<()> {
    let h = Harness::new("grow", 4).await?;
    let applier = h.start_applier();
    let mut sent = traffic::restock_all(&h.producer, &SKUS, 500).await?;
    sent += traffic::orders(&h.producer, &SKUS, 0, 150).await?;
    wait_until("the first records applied", CATCH_UP, || async {
        Ok((h.applied(&SKUS).await? >= sent).then_some(()))
    })
    .await?;
    applier.stop().await?;

    // The operator adds partitions; the applier refuses to go on, naming
    // the way out, and touches neither Redis nor the group's offsets.
    h.grow_command_topic(8).await?;
    let offsets = committed_offsets(&h.kafka, &h.ns.applier_group, &h.ns.topic).await?;
    let refused = stockledger_applier::run(h.applier_config(), std::future::pending()).await;
    match refused {
        Err(
            e @ ApplierError::PartitionsChanged {
                marked: 4, now: 8, ..
            },
        ) => {
            let message = e.to_string();
            assert!(
                message.contains("stockledger repartition --to"),
                "{message}"
            );
        }
        other => panic!("expected PartitionsChanged 4 -> 8, got {other:?}"),
    }
    assert_eq!(
        committed_offsets(&h.kafka, &h.ns.applier_group, &h.ns.topic).await?,
        offsets
    );
    let before = check::fold(&h.read(&h.ns.topic).await?, 4);
    assert!(check::compare(&h.projection, &before).await?.is_empty());

    // Producers go on: their SKUs now map over 8 partitions.
    let grown = LedgerProducer::new(&h.kafka, h.ns.topic.clone())?;
    traffic::orders(&grown, &SKUS, 150, 150).await?;
    let log = h.read(&h.ns.topic).await?;

    // The way out: copy into a new topic, rebuild a new prefix from it,
    // and apply there.
    let new_topic = format!("{}.by8", h.ns.topic);
    let new_prefix = format!("{}:by8", h.ns.prefix);
    let out = stockledger(&h)
        .args(["repartition", "--to", &new_topic, "--partitions", "8"])
        .output()?;
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains(&format!("copied {} records", log.len())),
        "{}",
        text(&out.stdout)
    );
    let copy = h.read(&new_topic).await?;
    assert_eq!(copy.len(), log.len());
    for r in &copy {
        let key = r.key.as_deref().unwrap_or_default();
        assert_eq!(
            r.partition,
            stockledger_core::partition::home_partition(key, 8),
            "every record on its SKU's home partition"
        );
    }
    assert_eq!(per_sku(&copy)?, per_sku(&log)?, "per-SKU order preserved");

    let out = stockledger(&h)
        .args(["--topic", &new_topic, "replay", "--into", &new_prefix])
        .output()?;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let mut config = h.applier_config();
    config.topic = new_topic.clone();
    config.prefix = new_prefix.clone();
    config.group_id = format!("{}.by8", h.ns.applier_group);
    let applier = h.start_applier_with(config);
    let moved = LedgerProducer::new(&h.kafka, new_topic.clone())?;
    traffic::orders(&moved, &SKUS, 300, 100).await?;

    let rebuilt = Projection::connect(&h.redis_url, new_prefix).await?;
    let settled = wait_until(
        "the new prefix to equal the fold of the new log",
        CATCH_UP,
        || async {
            let records = h.read(&new_topic).await?;
            Ok(check::compare(&rebuilt, &check::fold(&records, 8))
                .await?
                .is_empty()
                .then_some(()))
        },
    )
    .await;
    if settled.is_err() {
        let records = h.read(&new_topic).await?;
        let mismatches = check::compare(&rebuilt, &check::fold(&records, 8)).await?;
        panic!("the new prefix differs from the fold of the new log: {mismatches:#?}");
    }
    applier.stop().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_topic_with_finite_retention_is_refused_unless_allowed() -> anyhow::Result<()> {
    let h = Harness::new("retention", 1).await?;
    let finite = format!("{}.weekly", h.ns.topic);
    create_topics(
        &h.kafka,
        &[TopicSpec {
            name: finite.clone(),
            partitions: 1,
            replication: 1,
            configs: vec![("retention.ms".into(), "86400000".into())],
        }],
    )
    .await?;

    for args in [
        vec!["--topic", &finite, "apply"],
        vec!["--topic", &finite, "replay", "--into", "x"],
    ] {
        let out = stockledger(&h).args(&args).output()?;
        assert!(!out.status.success(), "{args:?} must be refused");
        let stderr = text(&out.stderr);
        for expected in ["retention.ms=86400000", "--allow-finite-retention", &finite] {
            assert!(stderr.contains(expected), "{args:?}: {stderr}");
        }
    }
    assert_eq!(h.projection.marker().await?, None, "Redis untouched");
    assert!(
        committed_offsets(&h.kafka, &h.ns.applier_group, &finite)
            .await?
            .is_empty(),
        "no offsets committed"
    );

    // Allowed explicitly, it runs.
    let mut applier = spawn(
        &h,
        &["--topic", &finite, "apply", "--allow-finite-retention"],
    )?;
    let marked = wait_until("the applier to mark the projection", CATCH_UP, || async {
        Ok(h.projection.marker().await?)
    })
    .await;
    terminate(&applier)?;
    let status = applier.wait()?;
    assert_eq!(marked?.topic, finite);
    assert!(status.success());
    let out = stockledger(&h)
        .args([
            "--topic",
            &finite,
            "replay",
            "--into",
            &format!("{}:copy", h.ns.prefix),
            "--allow-finite-retention",
        ])
        .output()?;
    assert!(out.status.success(), "{}", text(&out.stderr));
    Ok(())
}
