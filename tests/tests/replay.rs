//! Rebuilding the projection from the log, against real services.

use std::future::pending;

use stockledger_client::Ledger;
use stockledger_core::RestockMode;
use stockledger_kafka::topic::{committed_offsets, record_count};
use stockledger_maintenance::replay::{replay, ReplayConfig};
use stockledger_testkit::harness::CATCH_UP;
use stockledger_testkit::ids;
use stockledger_testkit::redis_dump::{delete_prefix, dump_prefix};
use stockledger_testkit::{traffic, wait_until, Harness};

const SKUS: [&str; 4] = ["R0", "R1", "R2", "R3"];

async fn workload(producer: &Ledger, first: usize, orders: usize) -> anyhow::Result<u64> {
    traffic::orders(producer, &SKUS, first, orders).await
}

async fn restock_all(producer: &Ledger) -> anyhow::Result<u64> {
    traffic::restock_all(producer, &SKUS, 150).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_after_a_wipe_restores_every_key_byte_for_byte() -> anyhow::Result<()> {
    let h = Harness::new("replay-wipe", 3).await?;
    let applier = h.start_applier();
    let records = restock_all(&h.ledger).await? + workload(&h.ledger, 0, 120).await?;
    let redis = h.projection.connection();
    wait_until(
        "the applier to apply every record",
        stockledger_testkit::harness::CATCH_UP,
        || async { Ok((h.applied(&SKUS).await? == records).then_some(())) },
    )
    .await?;
    applier.stop().await?;
    let before = dump_prefix(&redis, &h.ns.prefix).await?;
    let holds = before.keys().filter(|k| k.contains(":holds:")).count();
    assert_eq!(
        before.len() - holds,
        SKUS.len() * 3 + 1,
        "three hashes per SKU (the stock hash holds the decisions) and the marker"
    );
    assert!(
        holds > 0,
        "the traffic's live holds are indexed (and must come back)"
    );

    delete_prefix(&redis, &h.ns.prefix).await?;
    assert!(dump_prefix(&redis, &h.ns.prefix).await?.is_empty());
    let mut reports = 0;
    let report = replay(h.replay_swap_config(true), pending(), |_| reports += 1).await?;

    assert!(reports > 0, "progress is reported");
    assert_eq!(report.records, records);
    assert_eq!(report.swapped, SKUS.len());
    assert!(report.live_only.is_empty());
    assert_eq!(dump_prefix(&redis, &h.ns.prefix).await?, before);
    assert!(dump_prefix(&redis, &format!("{}:rebuild", h.ns.prefix))
        .await?
        .is_empty());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_and_swap_while_the_applier_runs_loses_no_record() -> anyhow::Result<()> {
    let h = Harness::new("replay-live", 3).await?;
    let applier = h.start_applier();
    let archiver = h.start_archiver();
    let initial = restock_all(&h.ledger).await? + workload(&h.ledger, 0, 60).await?;
    h.wait_for_archive(initial as i64).await?;

    // Keep producing while the replay runs and swaps, and after it.
    let (stop, mut stopped) = tokio::sync::watch::channel(false);
    let traffic = tokio::spawn({
        let producer = h.ledger.clone();
        async move {
            let (mut sent, mut first) = (0, 60);
            // One chunk after the swap, whenever it comes; before it, at
            // most 5,000 orders, then a wait for the swap (a replay
            // chasing a live applier swaps once the traffic pauses).
            loop {
                let stopping = *stopped.borrow();
                sent += workload(&producer, first, 10).await?;
                first += 10;
                if stopping {
                    return anyhow::Ok(sent);
                }
                if first >= 5_060 {
                    stopped.wait_for(|s| *s).await?;
                }
            }
        }
    });
    wait_until("live traffic", CATCH_UP, || async {
        Ok((record_count(&h.kafka, &h.ns.topic).await? > initial as i64).then_some(()))
    })
    .await?;
    let before = record_count(&h.kafka, &h.ns.topic).await?;
    let report = replay(h.replay_swap_config(false), pending(), |_| {}).await?;
    let after = record_count(&h.kafka, &h.ns.topic).await?;
    stop.send_replace(true);
    let later = traffic.await??;
    let end = record_count(&h.kafka, &h.ns.topic).await?;
    // The log's end moved while the replay ran and again after its swap.
    assert!(
        before < after && after < end,
        "traffic overlapped the replay: log end {before} at its start, {after} at its end, {end} finally"
    );

    assert_eq!(report.swapped, SKUS.len());
    assert!(report.records >= initial);
    h.wait_for_archive((initial + later) as i64).await?;
    h.assert_projection_matches_log().await?;
    // The replaced live state is kept for inspection.
    let redis = h.projection.connection();
    assert!(!dump_prefix(&redis, &format!("{}:replaced", h.ns.prefix))
        .await?
        .is_empty());

    applier.stop().await?;
    archiver.stop().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconcile_names_exactly_the_corrupted_sku() -> anyhow::Result<()> {
    use stockledger_maintenance::reconcile::reconcile;
    use stockledger_projection::keys::SkuKeys;

    let h = Harness::new("reconcile", 2).await?;
    let applier = h.start_applier();
    let archiver = h.start_archiver();
    let records = restock_all(&h.ledger).await? + workload(&h.ledger, 0, 80).await?;
    h.wait_for_archive(records as i64).await?;
    let mut redis = h.projection.connection();

    let clean = reconcile(&redis, &h.ns.prefix, &h.pool, &h.ns.topic, 2, |_| {}).await?;
    assert_eq!(clean.skus_checked, SKUS.len() as u64);
    assert!(clean.differences.is_empty(), "{:?}", clean.differences);

    let state = h.projection.read_sku("R2").await?.expect("R2 has state");
    let _: () = redis::cmd("HSET")
        .arg(SkuKeys::new(&h.ns.prefix, "R2").stock)
        .arg("available")
        .arg(state.available + 7)
        .query_async(&mut redis)
        .await?;
    let _: () = redis::cmd("DEL")
        .arg(SkuKeys::new(&h.ns.prefix, "R3").stock)
        .query_async(&mut redis)
        .await?;
    let dirty = reconcile(&redis, &h.ns.prefix, &h.pool, &h.ns.topic, 2, |_| {}).await?;
    let named: Vec<(&str, &str)> = dirty
        .differences
        .iter()
        .map(|d| (d.sku.as_str(), d.field))
        .collect();
    assert_eq!(named, [("R2", "available"), ("R3", "presence")]);
    let d = &dirty.differences[0];
    assert_eq!(d.redis, (state.available + 7).to_string());
    assert_eq!(d.archive, state.available.to_string());
    assert_eq!(d.offset, state.last_offset);

    applier.stop().await?;
    archiver.stop().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_plus_the_tail_rebuilds_what_a_full_replay_does() -> anyhow::Result<()> {
    use stockledger_maintenance::snapshot;

    let h = Harness::new("snapshot", 3).await?;
    let applier = h.start_applier();
    let archiver = h.start_archiver();
    let before = restock_all(&h.ledger).await? + workload(&h.ledger, 0, 90).await?;
    h.wait_for_archive(before as i64).await?;
    let start = wait_until(
        "the applier to commit its offsets",
        stockledger_testkit::harness::CATCH_UP,
        || async {
            let committed =
                snapshot::committed_offsets(&h.kafka, &h.ns.applier_group, &h.ns.topic).await?;
            Ok((committed.values().sum::<i64>() == before as i64).then_some(committed))
        },
    )
    .await?;
    let redis = h.projection.connection();
    let snap = snapshot::take(
        &h.pool,
        &redis,
        &h.ns.prefix,
        &h.ns.topic,
        &start,
        2,
        |_| {},
    )
    .await?;
    assert_eq!(snap.skus, SKUS.len() as i64);
    let after = workload(&h.ledger, 90, 60).await?;
    h.wait_for_archive((before + after) as i64).await?;
    applier.stop().await?;
    archiver.stop().await?;

    let full_prefix = format!("{}:full", h.ns.prefix);
    let mut full = ReplayConfig::new(
        h.kafka.clone(),
        h.redis_url.clone(),
        h.ns.topic.clone(),
        full_prefix.clone(),
    );
    full.batch_size = 7;
    let full_report = replay(full, pending(), |_| {}).await?;

    let tail_prefix = format!("{}:tail", h.ns.prefix);
    let latest = snapshot::latest(&h.pool, &h.ns.topic)
        .await?
        .expect("the snapshot is complete");
    assert_eq!(latest, snap);
    snapshot::restore(&h.pool, &latest, &redis, &tail_prefix, 3).await?;
    let mut tail = ReplayConfig::new(
        h.kafka.clone(),
        h.redis_url.clone(),
        h.ns.topic.clone(),
        tail_prefix.clone(),
    );
    tail.start = latest.start.clone();
    tail.require_empty_target = false;
    let tail_report = replay(tail, pending(), |_| {}).await?;

    assert_eq!(full_report.records, before + after);
    assert_eq!(tail_report.records, after, "only the tail is read");
    let full = stockledger_projection::Projection::new(redis.clone(), full_prefix);
    let tail = stockledger_projection::Projection::new(redis.clone(), tail_prefix);
    for sku in SKUS {
        let mut f = full.read_sku(sku).await?.expect("full replay has the sku");
        let mut t = tail
            .read_sku(sku)
            .await?
            .expect("snapshot replay has the sku");
        // Decisions before the snapshot live in the archive, not the snapshot.
        assert!(t
            .decisions
            .iter()
            .all(|(o, d)| f.decisions.get(o) == Some(d)));
        f.decisions.clear();
        t.decisions.clear();
        assert_eq!(f, t, "{sku}");
        assert_eq!(
            Some(f.clone()),
            h.projection.read_sku(sku).await?.map(|mut live| {
                live.decisions.clear();
                live
            })
        );
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compaction_prunes_archived_finished_orders_and_a_late_deduct_is_a_new_order(
) -> anyhow::Result<()> {
    use std::time::Duration;
    use stockledger_client::RedisDecisions;
    use stockledger_core::ResultCode;
    use stockledger_maintenance::compact::compact;
    use stockledger_maintenance::reconcile::reconcile;

    let h = Harness::new("compact", 1).await?;
    let applier = h.start_applier();
    let archiver = h.start_archiver();
    let p = &h.ledger;
    p.restock(&ids::sku("C1"), &ids::adjustment("a"), RestockMode::Set, 10)
        .await?;
    p.rollback(&ids::sku("C1"), &ids::order("gone"), None)
        .await?; // tombstone
    p.deduct(&ids::sku("C1"), &ids::order("kept"), ids::qty(2), None)
        .await?;
    p.deduct(&ids::sku("C1"), &ids::order("cancel"), ids::qty(1), None)
        .await?;
    p.rollback(
        &ids::sku("C1"),
        &ids::order("cancel"),
        Some("payment failed"),
    )
    .await?;
    h.wait_for_archive(5).await?;
    let redis = h.projection.connection();

    // A long window prunes nothing.
    let none = compact(
        &redis,
        &h.ns.prefix,
        &h.pool,
        &h.ns.topic,
        Duration::from_secs(86_400),
        10,
        |_| {},
    )
    .await?;
    assert_eq!(
        (
            none.skus_checked,
            none.orders_removed,
            none.decisions_removed
        ),
        (1, 0, 0)
    );

    let report = compact(
        &redis,
        &h.ns.prefix,
        &h.pool,
        &h.ns.topic,
        Duration::ZERO,
        10,
        |_| {},
    )
    .await?;
    assert_eq!((report.orders_removed, report.decisions_removed), (2, 5));
    let state = h.projection.read_sku("C1").await?.expect("C1 has state");
    assert_eq!(state.orders.keys().collect::<Vec<_>>(), ["kept"]);
    assert!(state.decisions.is_empty());
    assert_eq!(
        (state.available, state.total, state.last_offset),
        (8, 10, Some(4))
    );
    let agree = reconcile(&redis, &h.ns.prefix, &h.pool, &h.ns.topic, 10, |_| {}).await?;
    assert!(agree.differences.is_empty(), "{:?}", agree.differences);

    // The archive keeps what compaction pruned from Redis: the stock as of
    // every offset is still answered, and what the commands said is there.
    {
        use stockledger_analysts::query::{history, stock_as_of, AsOf, HistoryOf, StockAsOf};
        for (offset, expected) in [(0, 10), (1, 10), (2, 8), (3, 7), (4, 8)] {
            match stock_as_of(&h.pool, &h.ns.topic, "C1", AsOf::Offset(offset)).await? {
                StockAsOf::Known { stock, .. } => {
                    assert_eq!(stock.available, expected, "as of offset {offset}")
                }
                other => panic!("as of offset {offset}: {other:?}"),
            }
        }
        let rows = history(&h.pool, &h.ns.topic, &HistoryOf::Sku("C1".into()), 10).await?;
        assert_eq!(rows[0].restock_mode.as_deref(), Some("SET"));
        assert_eq!(rows[4].rollback_reason.as_deref(), Some("payment failed"));
        assert_eq!(rows[1].rollback_reason, None);
    }

    // Documented: the tombstone is gone, so a late deduct is a new order;
    // the kept deduction can still be rolled back.
    let reader = RedisDecisions::connect(&h.redis_url, h.ns.prefix.clone()).await?;
    let wait = Duration::from_secs(30);
    let late = p
        .deduct(&ids::sku("C1"), &ids::order("gone"), ids::qty(1), None)
        .await?;
    assert_eq!(reader.wait(&late, wait).await?.result, ResultCode::Applied);
    let undo = p
        .rollback(&ids::sku("C1"), &ids::order("kept"), None)
        .await?;
    let undone = reader.wait(&undo, wait).await?;
    assert_eq!(
        (undone.result, undone.delta, undone.available),
        (ResultCode::Applied, 2, 9)
    );

    applier.stop().await?;
    archiver.stop().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_applier_refuses_a_redis_that_lost_its_state_until_a_replay_rebuilds_it(
) -> anyhow::Result<()> {
    use stockledger_testkit::harness::CATCH_UP;

    let h = Harness::new("state-lost", 2).await?;
    let applier = h.start_applier();
    let records = restock_all(&h.ledger).await? + workload(&h.ledger, 0, 20).await?;
    wait_until("every record applied", CATCH_UP, || async {
        Ok((h.applied(&SKUS).await? == records).then_some(()))
    })
    .await?;
    // The group's progress is what tells a lost state from a new
    // projection; the applier commits it asynchronously after the outcomes
    // are delivered, so it is awaited (a group without progress would
    // rightly fold the whole log onto the empty Redis).
    wait_until("the group to commit every record", CATCH_UP, || async {
        let committed = committed_offsets(&h.kafka, &h.ns.applier_group, &h.ns.topic).await?;
        Ok((committed.values().sum::<i64>() == records as i64).then_some(()))
    })
    .await?;
    let redis = h.projection.connection();
    // Redis "restarts empty": every key of the projection is gone.
    delete_prefix(&redis, &h.ns.prefix).await?;
    h.ledger
        .deduct(
            &ids::sku("R1"),
            &ids::order("after-the-loss"),
            ids::qty(1),
            None,
        )
        .await?;
    wait_until("the applier to stop by itself", CATCH_UP, || async {
        Ok(applier.is_finished().then_some(()))
    })
    .await?;
    let error = applier
        .stop()
        .await
        .expect_err("the applier must refuse to apply onto nothing");
    assert!(format!("{error:#}").contains("lost its state"), "{error:#}");
    assert!(
        dump_prefix(&redis, &h.ns.prefix).await?.is_empty(),
        "nothing was applied onto nothing"
    );

    // Restarting does not help: the group has progress, the projection has none.
    let restarted = h.start_applier();
    wait_until("the restarted applier to refuse", CATCH_UP, || async {
        Ok(restarted.is_finished().then_some(()))
    })
    .await?;
    let error = restarted
        .stop()
        .await
        .expect_err("a restarted applier refuses too");
    assert!(format!("{error:#}").contains("lost its state"), "{error:#}");

    // A replay rebuilds and re-marks it; the applier then resumes where it was.
    replay(h.replay_swap_config(true), pending(), |_| {}).await?;
    let resumed = h.start_applier();
    wait_until("the pending deduct to be applied", CATCH_UP, || async {
        let state = h.projection.read_sku("R1").await?;
        Ok(state
            .filter(|s| s.orders.contains_key("after-the-loss"))
            .map(|_| ()))
    })
    .await?;
    h.assert_projection_matches_log().await?;
    resumed.stop().await?;
    Ok(())
}
