//! The scenarios through an in-process applier: e2e throughput (with the
//! contract check), latency at a fixed rate, and replay of the e2e log.

use std::time::{Duration, Instant};

use stockledger_cli::Global;
use stockledger_client::decisions::{DecisionSource, TopicDecisions};
use stockledger_client::RedisDecisions;
use stockledger_maintenance::replay::ReplayConfig;
use stockledger_testkit::ids;

use anyhow::Context;

use crate::contract::{archive, projection_differs};
use crate::cpu::Steal;
use crate::hops::{self, Caller, Hops};
use crate::pipeline::Pipeline;
use crate::{cpu, print_measurement, timeline, BenchArgs, DecisionsVia, Ledger, Measurement};

/// Deducts and rollbacks over `skus` SKUs through Kafka, the applier and
/// Redis.
pub(crate) async fn e2e(
    g: &Global,
    pool: &sqlx::PgPool,
    args: &BenchArgs,
    run_id: &str,
    name: &str,
    skus: usize,
    records: u64,
) -> anyhow::Result<(Measurement, Ledger)> {
    let per_sku = (records / skus as u64 + 1) as i64;
    let pipeline = Pipeline::start(g, args, run_id, name, skus, per_sku, true).await?;
    let redis = stockledger_redis::RedisConn::connect(&g.redis_url).await?;
    let cpu = cpu::CpuTimes::now(&redis).await?;
    let started = Instant::now();
    let machine = cpu::MachineCpu::now();
    pipeline.publish(records, args.in_flight).await?;
    let produced = started.elapsed().as_secs_f64();
    pipeline.wait_applied(records).await?;
    let (seconds, machine_cpu) = (started.elapsed().as_secs_f64(), machine.since());
    let cpu = cpu.per_record(&redis, records).await?;
    let log = crate::kstreams::DecidedLog::of(&pipeline);
    let (topic, outcomes_topic, prefix) = (
        log.topic.clone(),
        log.outcomes_topic.clone(),
        pipeline.prefix.clone(),
    );
    let log_records = records + pipeline.restocks as u64;
    pipeline.stop().await?;
    let mut failures = Vec::new();
    if let Some(failure) = projection_differs(g, &topic, &prefix, log_records).await? {
        failures.push(failure);
    }
    let mut archive = archive(
        g,
        args,
        pool,
        &format!("{run_id}-{name}"),
        &topic,
        &outcomes_topic,
        log_records,
    )
    .await?;
    if let Some(failure) = &archive.failed {
        failures.push(failure.clone());
    }
    let measurement = Measurement {
        scenario: if skus == 1 { "e2e-hot" } else { "e2e-uniform" },
        records,
        seconds,
        setup: format!(
            "{skus} SKUs{}, {} partitions, {} in flight, batches of {}; all produced after {produced:.2} s; {cpu}; contract checked",
            if args.sale_windows { " each with a sale window" } else { "" },
            args.partitions, args.in_flight, args.batch_size
        ),
        latency_ms: None,
        peak_rss_mib: None,
        failed: (!failures.is_empty()).then(|| failures.join("; ")),
        instructions: None,
        machine_cpu,
        hops: None,
    };
    archive.setup = format!("the {} outcomes, {}", measurement.scenario, archive.setup);
    let ledger = Ledger { log, archive };
    Ok((measurement, ledger))
}

/// The cost of publishing stock events: the same commands, each raising
/// one ([`Pipeline::publish_flips`]: the worst case), through an applier
/// that publishes none, then one that publishes them. Each run ends with
/// its contract check: Redis equals the fold of the log and, with events,
/// the events topic holds one event per record.
pub(crate) async fn events_cost(
    g: &Global,
    args: &BenchArgs,
    run_id: &str,
    skus: usize,
    records: u64,
) -> anyhow::Result<Vec<Measurement>> {
    let mut results: Vec<Measurement> = Vec::new();
    for (scenario, stock_events) in [("events-off", false), ("events-on", true)] {
        let pipeline =
            Pipeline::start_with_events(g, args, run_id, scenario, skus, 1, true, stock_events)
                .await?;
        let redis = stockledger_redis::RedisConn::connect(&g.redis_url).await?;
        let cpu = cpu::CpuTimes::now(&redis).await?;
        let started = Instant::now();
        let machine = cpu::MachineCpu::now();
        pipeline.publish_flips(records, args.in_flight).await?;
        pipeline.wait_applied(records).await?;
        let (seconds, machine_cpu) = (started.elapsed().as_secs_f64(), machine.since());
        let cpu = cpu.per_record(&redis, records).await?;
        let (topic, prefix) = (pipeline.topic.clone(), pipeline.prefix.clone());
        pipeline.stop().await?;
        // The restocks (each brings its SKU back in stock) and the records.
        let log_records = records + skus as u64;
        let mut failures = Vec::new();
        if let Some(failure) = projection_differs(g, &topic, &prefix, log_records).await? {
            failures.push(failure);
        }
        let events_topic = stockledger_kafka::admin::default_events_topic(&topic);
        let events = match stockledger_kafka::topic::record_count(&g.kafka(), &events_topic).await {
            Ok(n) => n as u64,
            Err(stockledger_kafka::topic::LogError::NoSuchTopic(_)) => 0,
            Err(e) => return Err(e.into()),
        };
        let expected = if stock_events { log_records } else { 0 };
        if events != expected {
            failures.push(format!(
                "the events topic holds {events} events, not {expected}"
            ));
        }
        let cost = results
            .first()
            .map(|off| {
                format!(
                    "; throughput {:+.1} % against events-off",
                    100.0 * ((records as f64 / seconds) / off.rate() - 1.0)
                )
            })
            .unwrap_or_default();
        let measurement = Measurement {
            scenario,
            records,
            seconds,
            setup: format!(
                "{skus} SKUs of one unit, each record a stock event ({events} published), {} partitions, batches of {}; {cpu}; contract checked{cost}",
                args.partitions, args.batch_size
            ),
            latency_ms: None,
            peak_rss_mib: None,
            failed: (!failures.is_empty()).then(|| failures.join("; ")),
            instructions: None,
            machine_cpu,
            hops: None,
        };
        print_measurement(&measurement);
        results.push(measurement);
    }
    Ok(results)
}

/// Commands offered open loop at a fixed rate, after a second of the same
/// rate that is not counted (the broker's and clients' warm-up); each one
/// timed from when it was due until its decision is visible to the order
/// service (`RedisDecisions`). Draws `<out>/<scenario>.svg`, the run over
/// time.
pub(crate) async fn latency(
    g: &Global,
    args: &BenchArgs,
    run_id: &str,
    scenario: &'static str,
    rate: u64,
    records: u64,
) -> anyhow::Result<Measurement> {
    let warm_up = rate;
    let per_sku = (warm_up + records) as i64;
    let mut pipeline = Pipeline::start_timed(g, args, run_id, scenario, 100, per_sku).await?;
    let steps = pipeline
        .take_hops()
        .context("a timed pipeline reports its steps")?;
    let decisions = match args.decisions {
        DecisionsVia::Redis => DecisionSource::Redis(
            RedisDecisions::connect(&g.redis_url, pipeline.prefix.clone()).await?,
        ),
        DecisionsVia::Outcomes => DecisionSource::Outcomes(
            TopicDecisions::start(&pipeline.kafka, &pipeline.outcomes_topic).await?,
        ),
    };
    let producer = pipeline.waiting_ledger(None).await?;
    let offer = |i: u64| {
        let (producer, decisions, sku) = (producer.clone(), decisions.clone(), pipeline.sku(i));
        async move {
            let receipt = producer
                .deduct(
                    &ids::sku(&sku),
                    &ids::order(format!("order-{i}")),
                    ids::qty(1),
                    None,
                )
                .await?;
            let acknowledged = tokio::time::Instant::now();
            decisions.wait(&receipt, Duration::from_secs(60)).await?;
            anyhow::Ok(timeline::Answer {
                acked: Some(acknowledged),
                position: Some((receipt.position.partition, receipt.position.offset)),
            })
        }
    };
    timeline::open_loop(rate, 0, warm_up, offer).await?;
    let steal = Steal::now();
    let run = timeline::open_loop(rate, warm_up, records, offer).await?;
    let steal = steal.percent_since();
    pipeline.stop().await?;
    let (through, caller) = match args.decisions {
        DecisionsVia::Redis => ("the library", Caller::Redis),
        DecisionsVia::Outcomes => (
            "the library, decisions from the outcomes topic",
            Caller::Outcomes,
        ),
    };
    let hops = Hops::of(&run.samples, &hops::steps(&steps), caller, steal)?;
    Ok(hops.add_to(latency_measurement(args, scenario, rate, &run, through)?))
}

/// A latency scenario's figure from its run, with its plot drawn.
pub(crate) fn latency_measurement(
    args: &BenchArgs,
    scenario: &'static str,
    rate: u64,
    run: &timeline::Run,
    through: &str,
) -> anyhow::Result<Measurement> {
    let [p50, p99, p999] = crate::percentiles_ms(&run.totals()?);
    let acks = run.acks()?;
    let ack = if acks.is_empty() {
        String::new()
    } else {
        format!(
            "; broker ack p50 {:.1} ms, p99 {:.1} ms",
            crate::quantile_ms(&acks, 0.50),
            crate::quantile_ms(&acks, 0.99)
        )
    };
    std::fs::create_dir_all(&args.out)?;
    timeline::plot(
        &args.out.join(format!("{scenario}.svg")),
        &format!("{scenario}: {rate}/s offered through {through}, p50 {p50:.1} p99 {p99:.1} p999 {p999:.1} ms"),
        run,
    )?;
    Ok(Measurement::of_latency(
        scenario,
        run,
        [p50, p99, p999],
        format!(
            "offered {rate}/s open loop over 100 SKUs, timed from each one's due time: p50 {p50:.1} ms, p99 {p99:.1} ms, p999 {p999:.1} ms{ack}"
        ),
    ))
}

pub(crate) async fn replay(
    g: &Global,
    run_id: &str,
    ledger: &Ledger,
) -> anyhow::Result<Measurement> {
    let target = format!("{}:{run_id}:replay", g.prefix);
    let config = ReplayConfig::new(
        g.kafka(),
        g.redis_url.clone(),
        ledger.log.topic.clone(),
        target,
    );
    let redis = stockledger_redis::RedisConn::connect(&g.redis_url).await?;
    let cpu = cpu::CpuTimes::now(&redis).await?;
    let started = Instant::now();
    let machine = cpu::MachineCpu::now();
    let report =
        stockledger_maintenance::replay::replay(config, std::future::pending(), |_| {}).await?;
    let (seconds, machine_cpu) = (started.elapsed().as_secs_f64(), machine.since());
    let cpu = cpu.per_record(&redis, report.records).await?;
    Ok(Measurement {
        scenario: "replay",
        records: report.records,
        seconds,
        setup: format!("the e2e-uniform log, {} SKUs; {cpu}", report.skus),
        latency_ms: None,
        peak_rss_mib: None,
        failed: None,
        instructions: None,
        machine_cpu,
        hops: None,
    })
}
