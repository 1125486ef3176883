//! The pipeline on a replicated log: three Apache Kafka nodes, the ledger's
//! topics replicated three times with two in sync, and the leader of a busy
//! partition killed under traffic.

use stockledger_core::partition::home_partition;
use stockledger_testkit::harness::CATCH_UP;
use stockledger_testkit::kafka_cluster::KafkaCluster;
use stockledger_testkit::{wait_until, Harness};

const SKUS: [&str; 6] = ["R-0", "R-1", "R-2", "R-3", "R-4", "R-5"];
const PARTITIONS: i32 = 3;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_a_partition_leader_under_traffic_loses_and_doubles_no_acknowledged_command(
) -> anyhow::Result<()> {
    let cluster = KafkaCluster::start(3).await?;
    let h = Harness::with_replicated_kafka("replicated", PARTITIONS, cluster.kafka(), 3).await?;
    let applier = h.start_applier();
    let archiver = h.start_archiver();
    // kill -9 of the node leading R-0's partition once the load is under
    // way: its followers hold every acknowledged record (acks=all, two in
    // sync), and one of them leads from then on.
    let busy = home_partition(SKUS[0].as_bytes(), PARTITIONS);
    h.orders_through(&SKUS, || async {
        let leader = cluster.leader(&h.ns.topic, busy)?;
        cluster.kill(leader)?;
        wait_until("another leader elected", CATCH_UP, || async {
            let now = cluster.leader(&h.ns.topic, busy).ok();
            Ok(now.filter(|&l| l != leader).map(|_| ()))
        })
        .await?;
        cluster.restart(leader).await
    })
    .await?;
    // Redis equals the fold of the log, one archived row and one outcome
    // per record, stock never below zero.
    h.assert_contract().await?;
    applier.stop().await?;
    archiver.stop().await?;
    Ok(())
}
