//! Scale-out from measurement: the same log applied by 1, 2 and 4
//! `stockledger apply` processes in one group (the topic's partitions
//! shared among them) and archived by a `stockledger archive` process,
//! with the rate and the CPU each service spent per million records: the
//! inputs of the capacity model in docs/BENCHMARKS.md.

use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use stockledger_cli::Global;

use crate::contract::contract_differs;
use crate::cpu::ServiceCpu;
use crate::pipeline::{publish_and_wait, with_processes, Pipeline};
use crate::{print_measurement, BenchArgs, Measurement};

/// Applier processes of each step, and its scenario's name.
const STEPS: [(usize, &str); 3] = [(1, "scale-out-1"), (2, "scale-out-2"), (4, "scale-out-4")];

/// `records` commands over `skus` SKUs through each step's appliers and
/// one archiver, each step on topics of its own; a figure per step, or
/// FAIL where its contract check fails.
pub(crate) async fn scale_out(
    g: &Global,
    pool: &sqlx::PgPool,
    args: &BenchArgs,
    run_id: &str,
    skus: usize,
    records: u64,
) -> anyhow::Result<Vec<Measurement>> {
    let redis = stockledger_redis::RedisConn::connect(&g.redis_url).await?;
    let mut results = Vec::new();
    for (appliers, scenario) in STEPS {
        let (mut pipeline, archiver, archiver_group) =
            with_processes(g, args, run_id, scenario, skus, records).await?;
        for _ in 1..appliers {
            pipeline.add_applier(g)?;
        }
        wait_for_members(&pipeline, appliers).await?;
        let pids = pipeline.applier_pids();
        let before = ServiceCpu::now(&redis, &pids, archiver.pid()).await?;
        let archiving = (&archiver, archiver_group.as_str());
        let taken =
            publish_and_wait(pool, &pipeline, archiving, 0..records, skus, args.in_flight).await?;
        let (applied, archived) = (taken.applied.as_secs_f64(), taken.archived.as_secs_f64());
        let log = records + skus as u64;
        let cpu = before.per_million(
            &ServiceCpu::now(&redis, &pids, archiver.pid()).await?,
            records,
        );
        archiver.stop().await?;
        let (topic, prefix) = (pipeline.topic.clone(), pipeline.prefix.clone());
        pipeline.stop().await?;
        let failed = contract_differs(g, pool, &topic, &prefix, log).await?;
        let m = Measurement {
            scenario,
            records,
            seconds: applied,
            setup: format!(
                "{appliers} × `stockledger apply` sharing {} partitions, {skus} SKUs; archived too after {archived:.2} s ({:.0} rows/s); CPU seconds per million records: {cpu}",
                args.partitions,
                log as f64 / archived
            ),
            latency_ms: None,
            peak_rss_mib: None,
            failed,
            instructions: None,
            machine_cpu: None,
            hops: None,
        };
        print_measurement(&m);
        results.push(m);
    }
    Ok(results)
}

/// Waits until the applier group is stable with `count` members, each
/// holding partitions, so no rebalance falls inside the timed run.
async fn wait_for_members(pipeline: &Pipeline, count: usize) -> anyhow::Result<()> {
    let consumer: BaseConsumer = pipeline.kafka.client_config(&[]).create()?;
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let (state, members, holding, reported) = {
            let groups =
                consumer.fetch_group_list(Some(&pipeline.group), Duration::from_secs(10))?;
            match groups.groups().first() {
                Some(group) => {
                    let assignments: Vec<&[u8]> = group
                        .members()
                        .iter()
                        .filter_map(|m| m.assignment())
                        .filter(|a| !a.is_empty())
                        .collect();
                    (
                        group.state().to_owned(),
                        group.members().len(),
                        assignments.iter().filter(|a| holds_partitions(a)).count(),
                        !assignments.is_empty(),
                    )
                }
                None => (String::from("unknown"), 0, 0, false),
            }
        };
        // Some brokers (tansu 0.6) describe a group's members without their
        // assignments: there, a stable group of `count` members will do.
        let settled = if reported { holding } else { members };
        if state == "Stable" && settled == count {
            return Ok(());
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "the applier group {} was {state} with {members} members ({holding} holding partitions), not {count}, after 120 s",
            pipeline.group
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Whether a member's assignment (Kafka's consumer protocol: a version,
/// then the count of topics, big-endian) names any topic.
fn holds_partitions(assignment: &[u8]) -> bool {
    assignment
        .get(2..6)
        .and_then(|b| <[u8; 4]>::try_from(b).ok())
        .is_some_and(|count| i32::from_be_bytes(count) > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_assignment_holds_partitions_when_it_names_a_topic() {
        let empty = [0, 3, 0, 0, 0, 0, 255, 255, 255, 255];
        let one = [0, 3, 0, 0, 0, 1, 0, 1, b't', 0, 0, 0, 1, 0, 0, 0, 4];
        assert!(!holds_partitions(&empty));
        assert!(holds_partitions(&one));
        assert!(!holds_partitions(&[0, 3]));
    }
}
