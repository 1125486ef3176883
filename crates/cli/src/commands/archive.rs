//! `stockledger archive`: run the archiver until Ctrl-C or SIGTERM.

use std::process::ExitCode;
use std::time::Duration;

use clap::Args as ClapArgs;
use stockledger_http::Probes;

use super::membership::MembershipArgs;
use super::observe::{self, MetricsArgs};
use crate::{archiver_config, shutdown_signal, Global};

#[derive(Debug, ClapArgs)]
pub struct Args {
    /// Consumer group of the archivers.
    #[arg(
        long,
        env = "STOCKLEDGER_ARCHIVER_GROUP",
        default_value = stockledger_kafka::names::ARCHIVER_GROUP
    )]
    pub group: String,
    #[command(flatten)]
    pub membership: MembershipArgs,
    /// Most outcomes written in one transaction (bounds memory).
    #[arg(long, env = "STOCKLEDGER_PAGE_SIZE", default_value_t = 5000)]
    pub page_size: usize,
    /// PostgreSQL connections writing a page at once, each a transaction
    /// over its share of the page's SKUs, the page's progress after them
    /// (one connection's PostgreSQL backend bounds the archive rate).
    #[arg(long, env = "STOCKLEDGER_ARCHIVE_WRITERS", default_value_t = 2, value_parser = clap::value_parser!(u16).range(1..=64))]
    pub writers: u16,
    /// Milliseconds a page waits to fill after its first outcome.
    #[arg(long, env = "STOCKLEDGER_PAGE_WAIT_MS", default_value_t = 100)]
    pub page_wait_ms: u64,
    /// Seconds between progress logs.
    #[arg(long, env = "STOCKLEDGER_STATS_INTERVAL_S", default_value_t = 10)]
    pub stats_interval_s: u64,
    #[command(flatten)]
    pub metrics: MetricsArgs,
}

pub async fn run(g: &Global, args: Args) -> anyhow::Result<ExitCode> {
    let mut config = archiver_config(g);
    config.group_id = args.group;
    args.membership.configure(&mut config.instance_id);
    config.page_size = args.page_size.max(1);
    config.writers = usize::from(args.writers);
    config.page_wait = Duration::from_millis(args.page_wait_ms);
    config.stats_interval = Duration::from_secs(args.stats_interval_s.max(1));
    let _endpoint = observe::start(&args.metrics, || {
        Probes::new()
            .kafka(&config.kafka, &config.outcomes_topic)
            .postgres_url(&config.database_url)
            .partitions(config.assignment.clone())
    })
    .await?;
    let stats = stockledger_archiver::run(config, shutdown_signal()).await?;
    println!("archived {} outcomes in {} pages", stats.rows, stats.pages);
    Ok(ExitCode::SUCCESS)
}
