//! The applier, replay, snapshot and reconcile against a Redis Cluster of
//! three masters started on loopback ports, checked against the same log
//! applied to a single Redis.

use std::future::pending;

use stockledger_client::RedisDecisions;
use stockledger_core::codec;
use stockledger_core::ids::MAX_ID_LEN;
use stockledger_core::{
    Command, CommandBody, CommandId, Deduct, OrderId, Quantity, RestockMode, Sku,
};
use stockledger_kafka::admin::{create_topics, TopicSpec};
use stockledger_kafka::names::DLQ_REASON_HEADER;
use stockledger_maintenance::reconcile::reconcile;
use stockledger_maintenance::replay::replay;
use stockledger_maintenance::snapshot;
use stockledger_projection::keys::SkuKeys;
use stockledger_projection::Projection;
use stockledger_redis::RedisConn;
use stockledger_testkit::cluster::RedisCluster;
use stockledger_testkit::harness::CATCH_UP;
use stockledger_testkit::ids;
use stockledger_testkit::redis_dump::{delete_prefix, hashes_under};
use stockledger_testkit::{traffic, wait_until, Harness};

/// Enough SKUs that every master serves some of them.
const SKU_COUNT: usize = 24;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_cluster_ends_equal_to_a_single_redis_through_apply_replay_and_reconcile(
) -> anyhow::Result<()> {
    let cluster = RedisCluster::start(3).await?;
    let h = Harness::with_redis("cluster", 4, cluster.url()).await?;
    let redis = h.projection.connection();
    assert!(redis.is_cluster(), "the seed list gives a cluster client");
    let names: Vec<String> = (0..SKU_COUNT).map(|i| format!("C{i}")).collect();
    let skus: Vec<&str> = names.iter().map(String::as_str).collect();

    // The applier on the cluster, with traffic that makes it refuse orders
    // (sold out), cancel before deduct and roll back.
    let applier = h.start_applier();
    let archiver = h.start_archiver();
    let records = traffic::restock_all(&h.ledger, &skus, 12).await?
        + traffic::orders(&h.ledger, &skus, 0, 400).await?;
    h.assert_contract().await?;
    applier.stop().await?;
    archiver.stop().await?;
    assert_eq!(h.applied(&skus).await?, records);
    let on_cluster = hashes_under(&redis, &h.ns.prefix).await?;
    let holds = on_cluster.keys().filter(|k| k.contains(":holds:")).count();
    assert_eq!(
        on_cluster.len() - holds,
        SKU_COUNT * 3 + 1,
        "three hashes per SKU (the stock hash holds the decisions) and the marker"
    );
    assert!(holds > 0, "the traffic's live holds are indexed");
    for port in &cluster.ports {
        let node = RedisConn::connect(&format!("redis://127.0.0.1:{port}")).await;
        // Each node alone is a cluster node: the client must see it as one.
        assert!(node?.is_cluster());
        let mut single = redis::Client::open(format!("redis://127.0.0.1:{port}"))?
            .get_multiplexed_async_connection()
            .await?;
        let keys: u64 = redis::cmd("DBSIZE").query_async(&mut single).await?;
        assert!(keys > 0, "node {port} holds none of the SKUs");
    }

    // The same log applied to the single Redis, by a second group with its
    // own prefix and outcome topics: the same hashes, field for field.
    let single_prefix = format!("t:{}-single", h.ns.id);
    let mut config = h.applier_config();
    config.redis_url = h.services.redis_url.clone();
    config.prefix = single_prefix.clone();
    config.group_id = format!("{}-single", h.ns.applier_group);
    config.outcomes_topic = format!("{}-single", h.ns.outcomes_topic);
    config.dlq_topic = format!("{}-single", h.ns.dlq_topic);
    create_topics(
        &h.kafka,
        &[&config.outcomes_topic, &config.dlq_topic].map(|name| TopicSpec {
            name: name.clone(),
            partitions: 4,
            replication: 1,
            configs: Vec::new(),
        }),
    )
    .await?;
    let single = Projection::connect(&h.services.redis_url, single_prefix.clone()).await?;
    let single_applier = h.start_applier_with(config);
    wait_until("the single-Redis applier to catch up", CATCH_UP, || async {
        let mut applied = 0;
        for sku in &skus {
            applied += single.read_sku(sku).await?.map_or(0, |s| s.decisions.len());
        }
        Ok((applied as u64 == records).then_some(()))
    })
    .await?;
    single_applier.stop().await?;
    let on_single = hashes_under(&single.connection(), &single_prefix).await?;
    let differing: Vec<_> = on_cluster
        .keys()
        .chain(on_single.keys())
        .filter(|k| on_cluster.get(*k) != on_single.get(*k))
        .map(|k| (k, on_cluster.get(k), on_single.get(k)))
        .collect();
    assert!(
        differing.is_empty(),
        "cluster and single Redis differ: {differing:#?}"
    );
    delete_prefix(&single.connection(), &single_prefix).await?;

    // Snapshot reads each SKU in one MULTI on its own node.
    let start = snapshot::committed_offsets(&h.kafka, &h.ns.applier_group, &h.ns.topic).await?;
    let snap = snapshot::take(
        &h.pool,
        &redis,
        &h.ns.prefix,
        &h.ns.topic,
        &start,
        5,
        |_| {},
    )
    .await?;
    assert_eq!(snap.skus, SKU_COUNT as i64);

    // Replay after a wipe: every key comes back as it was, on every node.
    delete_prefix(&redis, &h.ns.prefix).await?;
    assert!(hashes_under(&redis, &h.ns.prefix).await?.is_empty());
    let report = replay(h.replay_swap_config(true), pending(), |_| {}).await?;
    assert_eq!(report.records, records);
    assert_eq!(report.swapped, SKU_COUNT);
    assert_eq!(hashes_under(&redis, &h.ns.prefix).await?, on_cluster);

    // Reconcile agrees, then names exactly the SKUs corrupted on the cluster.
    let clean = reconcile(&redis, &h.ns.prefix, &h.pool, &h.ns.topic, 7, |_| {}).await?;
    assert_eq!(clean.skus_checked, SKU_COUNT as u64);
    assert!(clean.differences.is_empty(), "{:?}", clean.differences);
    let _: () = redis::cmd("HINCRBY")
        .arg(SkuKeys::new(&h.ns.prefix, "C5").stock)
        .arg("available")
        .arg(3)
        .query_async(&mut redis.clone())
        .await?;
    let _: () = redis::cmd("DEL")
        .arg(SkuKeys::new(&h.ns.prefix, "C17").stock)
        .query_async(&mut redis.clone())
        .await?;
    let dirty = reconcile(&redis, &h.ns.prefix, &h.pool, &h.ns.topic, 7, |_| {}).await?;
    let named: Vec<(&str, &str)> = dirty
        .differences
        .iter()
        .map(|d| (d.sku.as_str(), d.field))
        .collect();
    assert_eq!(named, [("C5", "available"), ("C17", "presence")]);
    Ok(())
}

/// A record whose SKU would give its keys no common hash tag (`}x`), and one
/// whose key is longer than any SKU, are dead-lettered on a cluster; the
/// records after them are applied, before and after a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sku_with_a_brace_or_an_oversized_key_is_dead_lettered_and_never_stops_the_applier(
) -> anyhow::Result<()> {
    let cluster = RedisCluster::start(3).await?;
    let h = Harness::with_redis("cluster-keys", 2, cluster.url()).await?;
    let reader = RedisDecisions::connect(&h.redis_url, &h.ns.prefix).await?;
    h.ledger
        .restock(&ids::sku("K1"), &ids::adjustment("r"), RestockMode::Set, 10)
        .await?;
    // The library refuses such a SKU outright, naming the field.
    let refused = Sku::new("}x").unwrap_err();
    assert_eq!(refused.field, "sku", "{refused}");

    // A producer that is not ours sends it anyway: the bytes of a valid
    // deduct of `Qx` with the SKU's first byte turned into `}`.
    let valid = codec::encode_command(&deduct("Qx", "o-1"))?;
    let at = valid
        .windows(2)
        .position(|w| w == b"Qx")
        .expect("the SKU is in the datum");
    let mut brace = valid.clone();
    brace[at] = b'}';
    let long_key = "k".repeat(10_000);
    h.send_raw("}x", &brace).await?;
    h.send_raw(&long_key, &valid).await?;
    let after = h
        .ledger
        .deduct(&ids::sku("K1"), &ids::order("after"), ids::qty(1), None)
        .await?;

    let applier = h.start_applier();
    let archiver = h.start_archiver();
    let decided = reader.wait(&after, CATCH_UP).await?;
    assert_eq!((decided.result.as_str(), decided.available), ("APPLIED", 9));
    let dead = wait_until("two dead letters", CATCH_UP, || async {
        let dead = h.read(&h.ns.dlq_topic).await?;
        Ok((dead.len() >= 2).then_some(dead))
    })
    .await?;
    let reasons: Vec<String> = dead
        .iter()
        .map(|r| {
            let (_, reason) = r
                .headers
                .iter()
                .find(|(k, _)| k == DLQ_REASON_HEADER)
                .expect("a reason header");
            String::from_utf8_lossy(reason).into_owned()
        })
        .collect();
    assert_eq!(
        reasons,
        [
            "invalid sku: must not contain '}' (braces delimit the Redis Cluster hash tag)",
            "record key is 10000 bytes; a sku is at most 128",
        ]
    );
    // The dead letter keeps the key; the outcome carries only its start.
    assert_eq!(dead[1].key.as_deref(), Some(long_key.as_bytes()));
    let outcomes = h.read(&h.ns.outcomes_topic).await?;
    let longest = outcomes
        .iter()
        .filter_map(|r| r.key.as_ref())
        .map(Vec::len)
        .max();
    assert!(
        longest <= Some(MAX_ID_LEN + 3),
        "an outcome key of {longest:?} bytes"
    );
    applier.stop().await?;

    // A restart does not stop on them again.
    let applier = h.start_applier();
    let again = h
        .ledger
        .deduct(
            &ids::sku("K1"),
            &ids::order("after-restart"),
            ids::qty(1),
            None,
        )
        .await?;
    let decided = reader.wait(&again, CATCH_UP).await?;
    assert_eq!((decided.result.as_str(), decided.available), ("APPLIED", 8));
    h.assert_contract().await?;
    applier.stop().await?;
    archiver.stop().await?;
    Ok(())
}

fn deduct(sku: &str, order: &str) -> Command {
    Command {
        command_id: CommandId::new(format!("c-{order}")).unwrap_or_else(|e| panic!("{e}")),
        sku: Sku::new(sku).unwrap_or_else(|e| panic!("{e}")),
        occurred_at: 1_700_000_000_000,
        body: CommandBody::Deduct(Deduct::new(
            OrderId::new(order).unwrap_or_else(|e| panic!("{e}")),
            Quantity::new(1).unwrap_or_else(|e| panic!("{e}")),
        )),
    }
}
