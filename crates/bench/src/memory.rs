//! The memory and scale scenarios: the applier and the archiver as
//! processes of their own, each one's peak resident set read once the log
//! is applied and archived.

use std::time::Instant;

use stockledger_cli::Global;
use stockledger_maintenance::replay::ReplayConfig;

use crate::contract::contract_differs;
use crate::pipeline::{peak_rss, publish_and_wait, with_processes, Pipeline};
use crate::process::Component;
use crate::{print_measurement, BenchArgs, Measurement};

/// e2e-uniform with the applier and the archiver as processes of their
/// own, reporting each one's peak resident set once every record is
/// applied and archived.
pub(crate) async fn memory(
    g: &Global,
    pool: &sqlx::PgPool,
    args: &BenchArgs,
    run_id: &str,
    skus: usize,
    records: u64,
) -> anyhow::Result<Measurement> {
    let name = format!("memory-{records}");
    let (pipeline, archiver, archiver_group) =
        with_processes(g, args, run_id, &name, skus, records).await?;
    let started = Instant::now();
    let sent = 0..records;
    let [applier_rss, archiver_rss] = take(
        pool,
        &pipeline,
        &archiver,
        &archiver_group,
        sent,
        skus,
        args,
    )
    .await?;
    let seconds = started.elapsed().as_secs_f64();
    archiver.stop().await?;
    let (topic, prefix) = (pipeline.topic.clone(), pipeline.prefix.clone());
    pipeline.stop().await?;
    let failed = contract_differs(g, pool, &topic, &prefix, records + skus as u64).await?;
    Ok(Measurement {
        scenario: "memory",
        records,
        seconds,
        setup: format!(
            "e2e-uniform over {skus} SKUs, applied and archived by separate processes: peak RSS applier {applier_rss:.1} MiB, archiver {archiver_rss:.1} MiB"
        ),
        latency_ms: None,
        peak_rss_mib: Some([applier_rss, archiver_rss]),
        failed,
        instructions: None,
        machine_cpu: None,
        hops: None,
    })
}

/// The scale scenario: `records` commands over `skus` SKUs applied and
/// archived by `stockledger apply` and `stockledger archive` processes, in
/// three steps (a tenth, half, all), each one's peak RSS read after every
/// step; then the whole log replayed into a fresh prefix, its rate read
/// as it passes each step.
pub(crate) async fn scale(
    g: &Global,
    pool: &sqlx::PgPool,
    args: &BenchArgs,
    run_id: &str,
    skus: usize,
    records: u64,
) -> anyhow::Result<Vec<Measurement>> {
    let (pipeline, archiver, archiver_group) =
        with_processes(g, args, run_id, "scale", skus, records).await?;
    let steps = [records / 10, records / 2, records];
    let mut results = Vec::new();
    let (started, mut from) = (Instant::now(), 0);
    for step in steps {
        let sent = from..step;
        from = step;
        let [applier_rss, archiver_rss] = take(
            pool,
            &pipeline,
            &archiver,
            &archiver_group,
            sent,
            skus,
            args,
        )
        .await?;
        // The contract check once, at the end: it reads the whole log.
        let failed = if step == records {
            let log = step + skus as u64;
            contract_differs(g, pool, &pipeline.topic, &pipeline.prefix, log).await?
        } else {
            None
        };
        let m = Measurement {
            scenario: "memory",
            records: step,
            seconds: started.elapsed().as_secs_f64(),
            setup: format!(
                "scale: the first {step} of {records} records over {skus} SKUs, applied and archived by separate processes: peak RSS applier {applier_rss:.1} MiB, archiver {archiver_rss:.1} MiB"
            ),
            peak_rss_mib: Some([applier_rss, archiver_rss]),
            failed,
            ..Measurement::default()
        };
        print_measurement(&m);
        results.push(m);
    }
    archiver.stop().await?;
    let topic = pipeline.topic.clone();
    pipeline.stop().await?;
    // The whole log replayed; the time it passes each step, read from its
    // progress reports (a few a second).
    let target = format!("{}:{run_id}:scale-replay", g.prefix);
    let config = ReplayConfig::new(g.kafka(), g.redis_url.clone(), topic, target);
    let log = records + skus as u64;
    let mut passed: Vec<(u64, f64)> = Vec::new();
    let report = stockledger_maintenance::replay::replay(config, std::future::pending(), |p| {
        for step in steps {
            if p.records >= step && !passed.iter().any(|&(s, _)| s == step) {
                passed.push((step, p.elapsed.as_secs_f64()));
            }
        }
    })
    .await?;
    anyhow::ensure!(
        report.records == log,
        "the replay read {} records of a {log}-record log",
        report.records
    );
    for (step, seconds) in passed {
        let m = Measurement {
            scenario: "replay",
            records: step,
            seconds,
            setup: format!(
                "scale: the first {step} records of a {log}-record log ({} SKUs), timed from the replay's start",
                report.skus
            ),
            latency_ms: None,
            peak_rss_mib: None,
            failed: None,
            instructions: None,
            machine_cpu: None,
            hops: None,
        };
        print_measurement(&m);
        results.push(m);
    }
    Ok(results)
}

/// Sends the commands numbered `range` and waits until the applier and
/// archiver processes have taken every command up to its end (and the
/// restocks of the `skus` SKUs); their peak RSS then.
async fn take(
    pool: &sqlx::PgPool,
    pipeline: &Pipeline,
    archiver: &Component,
    archiver_group: &str,
    range: std::ops::Range<u64>,
    skus: usize,
    args: &BenchArgs,
) -> anyhow::Result<[f64; 2]> {
    let archiving = (archiver, archiver_group);
    publish_and_wait(pool, pipeline, archiving, range, skus, args.in_flight).await?;
    peak_rss(pipeline, archiver)
}
