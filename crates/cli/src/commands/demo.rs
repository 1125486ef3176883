//! `stockledger demo`: the flash sale of [`crate::demo`] through the whole
//! pipeline, in one process, against the configured services, ending with
//! the contract's checks.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Args;
use stockledger_archiver::query;
use stockledger_client::{LedgerProducer, OutcomeReader};
use stockledger_core::{RestockMode, ResultCode};
use stockledger_io::admin::{create_topics, ledger_topic_specs, LedgerTopics, Retention};
use tokio::sync::oneshot;

use crate::demo::{self, Workload, HOT_SKU};
use crate::Global;

#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Orders placed in total.
    #[arg(long, default_value_t = 5000)]
    pub orders: usize,
    /// Concurrent buyers (tasks) placing them.
    #[arg(long, default_value_t = 200)]
    pub buyers: usize,
    /// Units of the hot SKU put on sale.
    #[arg(long, default_value_t = 1000)]
    pub stock: i64,
    /// Percent of orders cancelled after their deduct (rolled back).
    #[arg(long, default_value_t = 10)]
    pub cancel_percent: u32,
    /// Percent of orders whose deduct is sent twice (a client retry).
    #[arg(long, default_value_t = 5)]
    pub duplicate_percent: u32,
    /// Percent of orders whose rollback is sent before their deduct.
    #[arg(long, default_value_t = 3)]
    pub early_rollback_percent: u32,
    /// Partitions of the demo's topics.
    #[arg(long, default_value_t = 8)]
    pub partitions: i32,
    /// Seed of the workload's random choices.
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// Seconds to wait for the pipeline to catch up before failing.
    #[arg(long, default_value_t = 120)]
    pub timeout: u64,
}

pub async fn run(g: &Global, args: DemoArgs) -> anyhow::Result<ExitCode> {
    anyhow::ensure!(args.buyers > 0, "--buyers must be at least 1");
    anyhow::ensure!(args.stock > 0, "--stock must be at least 1");
    let run_id = format!("demo-{}", &uuid::Uuid::new_v4().simple().to_string()[..8]);
    let topic = format!("{run_id}.{}", g.topic);
    let outcomes_topic = format!("{run_id}.{}", g.outcomes_topic);
    let dlq_topic = format!("{run_id}.{}", g.dlq_topic);
    let prefix = format!("{}:{run_id}", g.prefix);
    println!("stockledger demo {run_id}");
    println!(
        "  topics   {topic}, {outcomes_topic}, {dlq_topic} ({} partitions)",
        args.partitions
    );
    println!("  redis    prefix {prefix}");

    let kafka = g.kafka();
    let topics = LedgerTopics {
        commands: &topic,
        outcomes: &outcomes_topic,
        dead_letters: &dlq_topic,
    };
    let specs = ledger_topic_specs(topics, args.partitions, 1, Retention::default());
    create_topics(&kafka, &specs)
        .await
        .with_context(|| format!("creating topics on {}", g.brokers))?;
    let pool = crate::connect_archive(g, 2).await?;

    let mut applier = crate::applier_config(g);
    applier.topic = topic.clone();
    applier.outcomes_topic = outcomes_topic.clone();
    applier.dlq_topic = dlq_topic.clone();
    applier.prefix = prefix.clone();
    applier.group_id = format!("{run_id}-applier");
    let mut archiver = crate::archiver_config(g);
    archiver.outcomes_topic = outcomes_topic.clone();
    archiver.group_id = format!("{run_id}-archiver");
    archiver.page_wait = Duration::from_millis(20);
    let (stop_applier, applier_stopped) = oneshot::channel::<()>();
    let (stop_archiver, archiver_stopped) = oneshot::channel::<()>();
    let applier_task = tokio::spawn(stockledger_applier::run(applier, async {
        let _ = applier_stopped.await;
    }));
    let archiver_task = tokio::spawn(stockledger_archiver::run(archiver, async {
        let _ = archiver_stopped.await;
    }));

    let producer = LedgerProducer::new(&kafka, topic.clone())?;
    let reader = OutcomeReader::connect(&g.redis_url, prefix.clone()).await?;
    let timeout = Duration::from_secs(args.timeout);
    let restock = producer
        .restock(
            HOT_SKU,
            &format!("{run_id}-initial"),
            RestockMode::Set,
            args.stock,
        )
        .await?;
    let decision = reader
        .wait(&restock, timeout)
        .await
        .context("waiting for the applier to take the initial restock")?;
    anyhow::ensure!(
        decision.result == ResultCode::Applied,
        "initial restock: {decision:?}"
    );

    let started = Instant::now();
    let workload = Workload {
        orders: args.orders,
        buyers: args.buyers,
        cancel_percent: args.cancel_percent,
        duplicate_percent: args.duplicate_percent,
        early_rollback_percent: args.early_rollback_percent,
        seed: args.seed,
    };
    let sent = demo::buy(&producer, &workload).await?;
    let produced_in = started.elapsed();
    let expected_rows = sent.records as i64 + 1; // + the initial restock

    let deadline = Instant::now() + timeout;
    let archived = loop {
        let rows = query::count_rows(&pool, &topic).await?;
        if rows >= expected_rows || Instant::now() >= deadline {
            break rows;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let end_to_end = started.elapsed();
    let _ = stop_applier.send(());
    let _ = stop_archiver.send(());
    applier_task.await.context("applier task")??;
    archiver_task.await.context("archiver task")??;

    println!(
        "  workload {} orders from {} buyers on {HOT_SKU} ({} units): {} cancelled, {} duplicated, {} rolled back before their deduct",
        args.orders, args.buyers, args.stock, sent.cancelled, sent.duplicated, sent.early_rollbacks
    );
    let rate = |n: u64, d: Duration| (n as f64 / d.as_secs_f64()).round();
    println!(
        "  log      {} records: produced in {:.2} s ({}/s), decided and archived in {:.2} s ({}/s)",
        expected_rows,
        produced_in.as_secs_f64(),
        rate(sent.records, produced_in),
        end_to_end.as_secs_f64(),
        rate(sent.records, end_to_end),
    );

    let by_result = query::count_by_result(&pool, &topic).await?;
    let counts = query::count_by_command_and_result(&pool, &topic, HOT_SKU).await?;
    let count = |command: &str, result: ResultCode| {
        counts
            .iter()
            .filter(|(c, r, _)| c.as_deref() == Some(command) && r == result.as_str())
            .map(|(_, _, n)| n)
            .sum::<i64>()
    };
    println!();
    let lines = [
        (
            "orders applied (stock taken)",
            "DEDUCT",
            ResultCode::Applied,
        ),
        (
            "orders refused: sold out",
            "DEDUCT",
            ResultCode::RejectedInsufficient,
        ),
        (
            "orders refused: cancelled first",
            "DEDUCT",
            ResultCode::RejectedCancelled,
        ),
        ("duplicate deducts ignored", "DEDUCT", ResultCode::Duplicate),
        ("cancellations rolled back", "ROLLBACK", ResultCode::Applied),
        (
            "rollbacks before deduct (tombstones)",
            "ROLLBACK",
            ResultCode::IgnoredNoDeduction,
        ),
    ];
    for (label, command, result) in lines {
        println!("  {label:<37} {:>6}", count(command, result));
    }
    println!(
        "  rows by result: {}",
        by_result
            .iter()
            .map(|(r, n)| format!("{r}={n}"))
            .collect::<Vec<_>>()
            .join(", ")
    );

    let projection =
        stockledger_projection::Projection::connect(&g.redis_url, prefix.clone()).await?;
    let state = projection.read_sku(HOT_SKU).await?;
    match &state {
        Some(s) => println!(
            "  stock left {} of {} ({} held by orders)",
            s.available,
            s.total,
            s.held()
        ),
        None => println!("  stock left: no state in Redis"),
    }
    println!();

    let run = demo::Run {
        kafka: &kafka,
        pool: &pool,
        projection: &projection,
        topic: &topic,
        archived,
    };
    let mut all_pass = true;
    for check in demo::check_contract(&run, timeout).await? {
        all_pass &= check.ok;
        println!(
            "  {}  {}",
            if check.ok { "PASS" } else { "FAIL" },
            check.what
        );
    }
    Ok(if all_pass {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
