//! `stockledger apply`: run the ordered applier until Ctrl-C or SIGTERM.

use std::process::ExitCode;
use std::time::Duration;

use clap::Args as ClapArgs;
use stockledger_http::Probes;

use super::membership::MembershipArgs;
use super::observe::{self, MetricsArgs};
use crate::{applier_config, shutdown_signal, Global};

#[derive(Debug, ClapArgs)]
pub struct Args {
    /// Consumer group of the appliers.
    #[arg(
        long,
        env = "STOCKLEDGER_APPLIER_GROUP",
        default_value = stockledger_kafka::names::APPLIER_GROUP
    )]
    pub group: String,
    #[command(flatten)]
    pub membership: MembershipArgs,
    /// Run even though the command topic has a finite retention.ms or
    /// retention.bytes (the broker will delete records; snapshots must cover
    /// them). Refused by default.
    #[arg(long, env = "STOCKLEDGER_ALLOW_FINITE_RETENTION")]
    pub allow_finite_retention: bool,
    /// Most records applied in one batch.
    #[arg(long, env = "STOCKLEDGER_BATCH_SIZE", default_value_t = 10_000)]
    pub batch_size: usize,
    /// Most milliseconds a batch waits to fill after its first record, and
    /// only while Redis is applying the batch before (records already
    /// received are taken in any case).
    #[arg(long, env = "STOCKLEDGER_BATCH_WAIT_MS", default_value_t = 1)]
    pub batch_wait_ms: u64,
    /// `linger.ms` of the applier's producer (outcomes, dead letters,
    /// stock events). A batch is handed over whole; 0 gives readers of the
    /// outcomes topic their outcome about 1 ms sooner at 5,000 commands/s,
    /// for 1-2 µs more machine CPU a record at full load.
    #[arg(long, env = "STOCKLEDGER_OUTCOME_LINGER_MS", default_value_t = 0)]
    pub outcome_linger_ms: u32,
    /// Most SKUs the applier keeps between batches, so a batch reads only
    /// what is not kept (0: none; about 550 bytes each for the stock hash).
    #[arg(long, env = "STOCKLEDGER_CACHED_SKUS", default_value_t = stockledger_projection::DEFAULT_CACHED_SKUS)]
    pub cached_skus: usize,
    /// Most fields of the kept SKUs' orders and adjustments hashes held
    /// whole in memory, over all SKUs (an order, a user's count, a restock
    /// id: each a field); past it, SKUs are kept by their stock hash alone.
    #[arg(long, env = "STOCKLEDGER_CACHED_FIELDS", default_value_t = stockledger_projection::DEFAULT_CACHED_FIELDS)]
    pub cached_fields: usize,
    /// Seconds between progress logs (throughput, lag).
    #[arg(long, env = "STOCKLEDGER_STATS_INTERVAL_S", default_value_t = 10)]
    pub stats_interval_s: u64,
    /// Publish no stock events (decisions still name them): for a ledger
    /// nobody follows them on. Events of records applied meanwhile are
    /// never published, not even once this is lifted.
    #[arg(long, env = "STOCKLEDGER_NO_STOCK_EVENTS")]
    pub no_stock_events: bool,
    #[command(flatten)]
    pub metrics: MetricsArgs,
}

pub async fn run(g: &Global, args: Args) -> anyhow::Result<ExitCode> {
    let mut config = applier_config(g);
    config.group_id = args.group;
    args.membership.configure(&mut config.instance_id);
    config.allow_finite_retention = args.allow_finite_retention;
    config.batch_size = args.batch_size.max(1);
    config.batch_wait = Duration::from_millis(args.batch_wait_ms);
    config.outcome_linger_ms = args.outcome_linger_ms;
    config.stats_interval = Duration::from_secs(args.stats_interval_s.max(1));
    config.cached_skus = args.cached_skus;
    config.cached_fields = args.cached_fields;
    config.stock_events = !args.no_stock_events;
    let _endpoint = observe::start(&args.metrics, || {
        Probes::new()
            .kafka(&config.kafka, &config.topic)
            .redis_url(&config.redis_url)
            .partitions(config.assignment.clone())
    })
    .await?;
    let stats = stockledger_applier::run(config, shutdown_signal()).await?;
    println!(
        "applied {} records ({} dead-lettered)",
        stats.records, stats.dead_lettered
    );
    Ok(ExitCode::SUCCESS)
}
