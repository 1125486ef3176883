//! The contract check that ends every scenario which writes a log: Redis
//! equals the reference fold of the log, and archiving the outcomes leaves
//! one row per record. A scenario that fails it reports FAIL, not a figure.

use std::time::{Duration, Instant};

use anyhow::Context;
use stockledger_cli::{archiver_config, Global};
use stockledger_testkit::wait_until;
use tokio::sync::oneshot;

use crate::{BenchArgs, Measurement};

/// The contract check's first half: `None` when the projection under
/// `prefix` is exactly the reference fold of `topic` (`log_records`
/// records, which bound how long reading it may take), else what differs.
pub(crate) async fn projection_differs(
    g: &Global,
    topic: &str,
    prefix: &str,
    log_records: u64,
) -> anyhow::Result<Option<String>> {
    let kafka = g.kafka();
    // A minute, and a minute more per million records: the 10M-record
    // scale log is read and folded well within that here, so only a
    // broker that stops serving runs it out.
    let within = Duration::from_secs(60 + 60 * log_records / 1_000_000);
    let log = stockledger_kafka::topic::read_topic(&kafka, topic, within).await?;
    let partitions = stockledger_kafka::topic::partition_count(&kafka, topic).await?;
    let reference = stockledger_maintenance::check::fold(&log, partitions);
    let projection = stockledger_projection::Projection::connect(&g.redis_url, prefix).await?;
    let mismatches = stockledger_maintenance::check::compare(&projection, &reference).await?;
    Ok(mismatches.first().map(|first| {
        format!(
            "Redis differs from the fold of the log in {} SKUs (first {first})",
            mismatches.len()
        )
    }))
}

/// The contract check's second half: `None` when the archive holds exactly
/// one row per record of `topic` (`log_records` of them), else how many.
pub(crate) async fn archive_differs(
    pool: &sqlx::PgPool,
    topic: &str,
    log_records: u64,
) -> anyhow::Result<Option<String>> {
    let rows = stockledger_analysts::query::count_rows(pool, topic).await? as u64;
    Ok(
        (rows != log_records)
            .then(|| format!("{rows} archived rows for {log_records} log records")),
    )
}

/// Both halves of the contract check, for a pipeline whose archiver has
/// already archived everything: `None` when both hold, else what failed.
pub(crate) async fn contract_differs(
    g: &Global,
    pool: &sqlx::PgPool,
    topic: &str,
    prefix: &str,
    log_records: u64,
) -> anyhow::Result<Option<String>> {
    let failures: Vec<String> = [
        projection_differs(g, topic, prefix, log_records).await?,
        archive_differs(pool, topic, log_records).await?,
    ]
    .into_iter()
    .flatten()
    .collect();
    Ok((!failures.is_empty()).then(|| failures.join("; ")))
}

/// Waits until archiver group `group` has archived the first `messages`
/// messages of `outcomes_topic`, by its progress rows (cheap to read,
/// unlike counting the archive while it grows); fails after 10 minutes,
/// or as soon as `running` says the archiver is gone.
pub(crate) async fn wait_archived(
    pool: &sqlx::PgPool,
    group: &str,
    outcomes_topic: &str,
    messages: u64,
    running: impl Fn() -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    let what = format!("{messages} archived outcomes of {outcomes_topic}");
    wait_until(&what, Duration::from_secs(600), || async {
        let archived: i64 = sqlx::query_scalar(
            "SELECT coalesce(sum(next_offset), 0)::bigint FROM archiver_progress
             WHERE consumer_group = $1 AND topic = $2",
        )
        .bind(group)
        .bind(outcomes_topic)
        .fetch_one(pool)
        .await?;
        running()?;
        Ok((archived as u64 >= messages).then_some(()))
    })
    .await
}

/// Archives the outcomes of command topic `topic` (`records` records)
/// with an in-process archiver; the contract check's second half fails
/// unless exactly one row per record is archived.
pub(crate) async fn archive(
    g: &Global,
    args: &BenchArgs,
    pool: &sqlx::PgPool,
    group: &str,
    topic: &str,
    outcomes_topic: &str,
    records: u64,
) -> anyhow::Result<Measurement> {
    let mut config = archiver_config(g);
    config.outcomes_topic = outcomes_topic.to_owned();
    let group = format!("{group}-archiver");
    config.group_id = group.clone();
    config.page_size = args.page_size.max(1);
    config.writers = args.writers.max(1);
    let (page_size, writers) = (config.page_size, config.writers);
    let assignment = config.assignment.clone();
    let (stop, stopped) = oneshot::channel::<()>();
    let archiver = tokio::spawn(stockledger_archiver::run(config, async {
        let _ = stopped.await;
    }));
    // Timed from when the group has given the archiver its partitions:
    // joining takes seconds on some brokers, and is not archiving.
    wait_until(
        "the archiver's partitions",
        Duration::from_secs(120),
        || async {
            anyhow::ensure!(!archiver.is_finished(), "the archiver stopped early");
            Ok((assignment.count() > 0).then_some(()))
        },
    )
    .await?;
    let started = Instant::now();
    let machine = crate::cpu::MachineCpu::now();
    wait_archived(pool, &group, outcomes_topic, records, || {
        anyhow::ensure!(!archiver.is_finished(), "the archiver stopped early");
        Ok(())
    })
    .await?;
    let (seconds, machine_cpu) = (started.elapsed().as_secs_f64(), machine.since());
    let _ = stop.send(());
    archiver.await.context("archiver task")??;
    Ok(Measurement {
        scenario: "archive",
        records,
        seconds,
        setup: format!(
            "pages of {page_size}, {writers} writers, timed from the group's assignment"
        ),
        latency_ms: None,
        peak_rss_mib: None,
        failed: archive_differs(pool, topic, records).await?,
        instructions: None,
        machine_cpu,
        hops: None,
    })
}
