//! The `stockledger` command line.
//!
//! - [`Cli`]: flags (each with an environment variable) and subcommands.
//! - [`run`]: wires the library crates for one subcommand.
//! - [`demo`]: the end-to-end flash-sale demonstration with its checks.
//! - [`bench`]: throughput scenarios next to same-run baselines.

pub mod bench;
pub mod demo;

use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::{Args, Parser, Subcommand, ValueEnum};
use stockledger_applier::ApplierConfig;
use stockledger_archiver::query::{self, HistoryOf};
use stockledger_archiver::ArchiverConfig;
use stockledger_client::{KafkaConfig, LedgerProducer, OutcomeReader, Receipt};
use stockledger_core::ids::{AdjustmentId, OrderId, Quantity, Sku};
use stockledger_core::RestockMode;
use stockledger_io::admin::{create_topics, TopicSpec};
use stockledger_io::kafka::parse_property;
use stockledger_projection::Projection;

/// An event-sourced stock ledger: Kafka log, Redis projection, PostgreSQL archive.
#[derive(Debug, Parser)]
#[command(name = "stockledger", version, about, long_about = None)]
pub struct Cli {
    #[command(flatten)]
    pub global: Global,
    #[command(subcommand)]
    pub command: Command,
}

impl Cli {
    /// The log filter when `RUST_LOG` is not set: the long-running
    /// components report progress; one-shot commands and the demo stay quiet.
    pub fn default_log_filter(&self) -> &'static str {
        match self.command {
            Command::Apply(_) | Command::Archive(_) => "info",
            _ => "warn",
        }
    }
}

/// Connection settings and names shared by every subcommand.
#[derive(Debug, Args)]
pub struct Global {
    /// Kafka bootstrap servers (host:port, comma-separated).
    #[arg(
        long,
        global = true,
        env = "KAFKA_BROKERS",
        default_value = "127.0.0.1:9092"
    )]
    pub brokers: String,

    /// librdkafka property passed through as is, e.g. -X security.protocol=SASL_SSL.
    /// Repeatable; in the environment, separate them with ';'.
    #[arg(
        short = 'X',
        global = true,
        value_name = "KEY=VALUE",
        env = "KAFKA_PROPERTIES",
        value_delimiter = ';',
        hide_env_values = true,
        value_parser = parse_property
    )]
    pub kafka_properties: Vec<(String, String)>,

    /// Redis holding the projection: one URL, or the seed nodes of a Redis
    /// Cluster separated by commas (a single URL of a cluster node works too).
    #[arg(
        long,
        global = true,
        env = "REDIS_URL",
        default_value = "redis://127.0.0.1:6379",
        hide_env_values = true
    )]
    pub redis_url: String,

    /// PostgreSQL holding the archive.
    #[arg(
        long,
        global = true,
        env = "DATABASE_URL",
        default_value = "postgres://postgres@127.0.0.1:5432/stockledger",
        hide_env_values = true
    )]
    pub database_url: String,

    /// The command topic (record key = SKU).
    #[arg(
        long,
        global = true,
        env = "STOCKLEDGER_TOPIC",
        default_value = "stock.ledger"
    )]
    pub topic: String,

    /// The topic of outcomes, one per command record.
    #[arg(
        long,
        global = true,
        env = "STOCKLEDGER_OUTCOMES_TOPIC",
        default_value = "stock.ledger.outcomes"
    )]
    pub outcomes_topic: String,

    /// The dead-letter topic for records that are not valid commands.
    #[arg(
        long,
        global = true,
        env = "STOCKLEDGER_DLQ_TOPIC",
        default_value = "stock.ledger.dlq"
    )]
    pub dlq_topic: String,

    /// Key prefix of the projection in Redis.
    #[arg(
        long,
        global = true,
        env = "STOCKLEDGER_PREFIX",
        default_value = "stockledger"
    )]
    pub prefix: String,

    /// Log format on stderr; the level is set with RUST_LOG (e.g. RUST_LOG=debug).
    #[arg(
        long,
        global = true,
        env = "STOCKLEDGER_LOG_FORMAT",
        value_enum,
        default_value = "text"
    )]
    pub log_format: LogFormat,
}

impl Global {
    pub fn kafka(&self) -> KafkaConfig {
        KafkaConfig {
            brokers: self.brokers.clone(),
            properties: self.kafka_properties.clone(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Manage the ledger's topics.
    #[command(subcommand)]
    Topics(TopicsCommand),
    /// Run the ordered applier: fold the command topic into Redis and publish outcomes.
    Apply(ApplyArgs),
    /// Run the archiver: copy outcomes into PostgreSQL in pages.
    Archive(ArchiveArgs),
    /// Take stock for an order.
    Deduct(DeductArgs),
    /// Give back what an order took (before its deduction: refuse that deduction).
    Rollback(RollbackArgs),
    /// Add to, or set, a SKU's stock.
    Restock(RestockArgs),
    /// Show a SKU's stock from Redis.
    Stock {
        #[arg(value_parser = parse_sku)]
        sku: Sku,
    },
    /// Show one order of a SKU from Redis.
    Order {
        #[arg(value_parser = parse_sku)]
        sku: Sku,
        #[arg(value_parser = parse_order_id)]
        order_id: OrderId,
    },
    /// Show archived decisions of a SKU or an order on the command topic, oldest first.
    History(HistoryArgs),
    /// Rebuild the projection from the log into a fresh prefix (and swap it in).
    Replay(ReplayArgs),
    /// Write every SKU's state and last-applied offset to PostgreSQL.
    Snapshot(SnapshotArgs),
    /// Prune archived history older than the retention window from Redis.
    Compact(CompactArgs),
    /// Compare Redis with the archive, SKU by SKU; exit 1 on any difference.
    Reconcile(ReconcileArgs),
    /// Measure throughput scenarios next to baselines, writing JSON and Markdown.
    Bench(bench::BenchArgs),
    /// Run a flash sale end to end against the configured services and check the contract.
    Demo(demo::DemoArgs),
}

#[derive(Debug, Subcommand)]
pub enum TopicsCommand {
    /// Create the command, outcomes and dead-letter topics (existing ones are kept).
    Create {
        /// Partitions of the command and outcomes topics.
        #[arg(long, env = "STOCKLEDGER_PARTITIONS", default_value_t = 12)]
        partitions: i32,
        /// Replication factor.
        #[arg(long, env = "STOCKLEDGER_REPLICATION", default_value_t = 1)]
        replication: i32,
    },
}

#[derive(Debug, Args)]
pub struct ApplyArgs {
    /// Consumer group of the appliers.
    #[arg(
        long,
        env = "STOCKLEDGER_APPLIER_GROUP",
        default_value = "stockledger-applier"
    )]
    pub group: String,
    /// Most records applied in one batch.
    #[arg(long, env = "STOCKLEDGER_BATCH_SIZE", default_value_t = 10_000)]
    pub batch_size: usize,
    /// Milliseconds a batch waits to fill after its first record (records
    /// already received are taken in any case).
    #[arg(long, env = "STOCKLEDGER_BATCH_WAIT_MS", default_value_t = 1)]
    pub batch_wait_ms: u64,
    /// Seconds between progress logs (throughput, lag).
    #[arg(long, env = "STOCKLEDGER_STATS_INTERVAL_S", default_value_t = 10)]
    pub stats_interval_s: u64,
}

#[derive(Debug, Args)]
pub struct ReplayArgs {
    /// The prefix to rebuild into; it must be empty [default: <prefix>:rebuild].
    #[arg(long, value_name = "PREFIX")]
    pub into: Option<String>,
    /// Keep applying new records after reaching the end of the log.
    #[arg(long, conflicts_with = "swap")]
    pub follow: bool,
    /// Once caught up, swap the rebuilt state in for the live prefix, SKU by
    /// SKU and atomically; SKUs the live applier has moved past are caught
    /// up first.
    #[arg(long)]
    pub swap: bool,
    /// With --swap: where the replaced live keys are kept [default: <prefix>:replaced].
    #[arg(
        long,
        value_name = "PREFIX",
        requires = "swap",
        conflicts_with = "drop_old"
    )]
    pub old_prefix: Option<String>,
    /// With --swap: delete the replaced live keys instead of keeping them.
    #[arg(long, requires = "swap")]
    pub drop_old: bool,
    /// Start from the newest snapshot (see `stockledger snapshot`) and
    /// replay only the records after it.
    #[arg(long)]
    pub from_snapshot: bool,
    /// Records applied per script round trip.
    #[arg(long, default_value_t = 5000)]
    pub batch_size: usize,
}

#[derive(Debug, Args)]
pub struct SnapshotArgs {
    /// The applier group whose committed offsets say where a replay from
    /// this snapshot starts.
    #[arg(
        long,
        env = "STOCKLEDGER_APPLIER_GROUP",
        default_value = "stockledger-applier"
    )]
    pub applier_group: String,
    /// SKUs read and written per page (bounds memory).
    #[arg(long, default_value_t = 1000)]
    pub page_size: usize,
}

#[derive(Debug, Args)]
pub struct CompactArgs {
    /// Keep history whose records occurred within this many days.
    #[arg(long, env = "STOCKLEDGER_RETENTION_DAYS", default_value_t = 7.0)]
    pub retention_days: f64,
    /// SKUs handled per page (bounds memory).
    #[arg(long, default_value_t = 1000)]
    pub page_size: usize,
}

#[derive(Debug, Args)]
pub struct ReconcileArgs {
    /// SKUs read per page (bounds memory).
    #[arg(long, default_value_t = 1000)]
    pub page_size: usize,
    /// One JSON object per difference, then a summary object.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct ArchiveArgs {
    /// Consumer group of the archivers.
    #[arg(
        long,
        env = "STOCKLEDGER_ARCHIVER_GROUP",
        default_value = "stockledger-archiver"
    )]
    pub group: String,
    /// Most outcomes written in one transaction (bounds memory).
    #[arg(long, env = "STOCKLEDGER_PAGE_SIZE", default_value_t = 1000)]
    pub page_size: usize,
    /// Milliseconds a page waits to fill after its first outcome.
    #[arg(long, env = "STOCKLEDGER_PAGE_WAIT_MS", default_value_t = 100)]
    pub page_wait_ms: u64,
    /// Seconds between progress logs.
    #[arg(long, env = "STOCKLEDGER_STATS_INTERVAL_S", default_value_t = 10)]
    pub stats_interval_s: u64,
}

/// Waiting for the decision after sending.
#[derive(Debug, Args)]
pub struct WaitArgs {
    /// Wait up to this many seconds for the applier's decision and print it
    /// (exit 1 if it does not come in time).
    #[arg(long, value_name = "SECONDS")]
    pub wait: Option<f64>,
}

#[derive(Debug, Args)]
pub struct DeductArgs {
    #[arg(value_parser = parse_sku)]
    pub sku: Sku,
    #[arg(value_parser = parse_order_id)]
    pub order_id: OrderId,
    #[arg(value_parser = parse_quantity, allow_negative_numbers = true)]
    pub quantity: Quantity,
    #[command(flatten)]
    pub wait: WaitArgs,
}

#[derive(Debug, Args)]
pub struct RollbackArgs {
    #[arg(value_parser = parse_sku)]
    pub sku: Sku,
    #[arg(value_parser = parse_order_id)]
    pub order_id: OrderId,
    /// Why the order is rolled back (kept in the log).
    #[arg(long)]
    pub reason: Option<String>,
    #[command(flatten)]
    pub wait: WaitArgs,
}

#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("mode").required(true).args(["add", "set"])))]
pub struct RestockArgs {
    #[arg(value_parser = parse_sku)]
    pub sku: Sku,
    /// Add this many units to what is available (negative to remove).
    #[arg(long, allow_negative_numbers = true)]
    pub add: Option<i64>,
    /// Make the total stock this number; units held by orders stay held.
    #[arg(long)]
    pub set: Option<i64>,
    /// Names this adjustment so that sending it twice applies it once
    /// (default: a fresh id).
    #[arg(long, value_parser = parse_adjustment_id)]
    pub adjustment_id: Option<AdjustmentId>,
    #[command(flatten)]
    pub wait: WaitArgs,
}

#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("of").required(true).args(["sku", "order"])))]
pub struct HistoryArgs {
    /// History of this SKU (or, with --order, the order's entries for this SKU only).
    #[arg(long, value_parser = parse_sku)]
    pub sku: Option<Sku>,
    /// History of this order.
    #[arg(long, value_parser = parse_order_id)]
    pub order: Option<OrderId>,
    /// Most entries shown.
    #[arg(long, default_value_t = 100)]
    pub limit: i64,
    /// One JSON object per line instead of a table.
    #[arg(long)]
    pub json: bool,
}

fn parse_sku(s: &str) -> Result<Sku, String> {
    Sku::new(s).map_err(|e| e.to_string())
}

fn parse_order_id(s: &str) -> Result<OrderId, String> {
    OrderId::new(s).map_err(|e| e.to_string())
}

fn parse_adjustment_id(s: &str) -> Result<AdjustmentId, String> {
    AdjustmentId::new(s).map_err(|e| e.to_string())
}

fn parse_quantity(s: &str) -> Result<Quantity, String> {
    let n: i64 = s
        .parse()
        .map_err(|_| format!("quantity: {s:?} is not a whole number"))?;
    Quantity::new(n).map_err(|e| e.to_string())
}

/// Resolves once Ctrl-C or SIGTERM arrives.
pub async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(term) => term,
                Err(_) => {
                    let _ = ctrl_c.await;
                    return;
                }
            };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = ctrl_c.await;
    }
}

/// Runs the parsed command line.
pub async fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    let g = &cli.global;
    match cli.command {
        Command::Topics(TopicsCommand::Create {
            partitions,
            replication,
        }) => {
            let specs = [
                (&g.topic, partitions),
                (&g.outcomes_topic, partitions),
                (&g.dlq_topic, 1),
            ]
            .map(|(name, partitions)| TopicSpec {
                name: name.clone(),
                partitions,
                replication,
            });
            let created = create_topics(&g.kafka(), &specs).await?;
            for spec in &specs {
                let state = if created.contains(&spec.name) {
                    "created"
                } else {
                    "exists"
                };
                println!("{state:8} {} ({} partitions)", spec.name, spec.partitions);
            }
        }
        Command::Apply(args) => {
            let mut config = applier_config(g);
            config.group_id = args.group;
            config.batch_size = args.batch_size.max(1);
            config.batch_wait = Duration::from_millis(args.batch_wait_ms);
            config.stats_interval = Duration::from_secs(args.stats_interval_s.max(1));
            let stats = stockledger_applier::run(config, shutdown_signal()).await?;
            println!(
                "applied {} records ({} dead-lettered)",
                stats.records, stats.dead_lettered
            );
        }
        Command::Archive(args) => {
            let mut config = archiver_config(g);
            config.group_id = args.group;
            config.page_size = args.page_size.max(1);
            config.page_wait = Duration::from_millis(args.page_wait_ms);
            config.stats_interval = Duration::from_secs(args.stats_interval_s.max(1));
            let stats = stockledger_archiver::run(config, shutdown_signal()).await?;
            println!("archived {} outcomes in {} pages", stats.rows, stats.pages);
        }
        Command::Deduct(args) => {
            let producer = LedgerProducer::new(&g.kafka(), g.topic.clone())?;
            let receipt = producer
                .deduct(
                    args.sku.as_str(),
                    args.order_id.as_str(),
                    args.quantity.get(),
                )
                .await?;
            return report_sent(g, &receipt, &args.wait).await;
        }
        Command::Rollback(args) => {
            let producer = LedgerProducer::new(&g.kafka(), g.topic.clone())?;
            let receipt = producer
                .rollback(
                    args.sku.as_str(),
                    args.order_id.as_str(),
                    args.reason.as_deref(),
                )
                .await?;
            return report_sent(g, &receipt, &args.wait).await;
        }
        Command::Restock(args) => {
            let (mode, quantity) = match (args.add, args.set) {
                (Some(n), _) => (RestockMode::Add, n),
                (None, Some(n)) => (RestockMode::Set, n),
                (None, None) => anyhow::bail!("restock needs --add or --set"),
            };
            let adjustment = match args.adjustment_id {
                Some(id) => id,
                None => AdjustmentId::new(uuid::Uuid::new_v4().to_string())?,
            };
            let producer = LedgerProducer::new(&g.kafka(), g.topic.clone())?;
            let receipt = producer
                .restock(args.sku.as_str(), adjustment.as_str(), mode, quantity)
                .await?;
            return report_sent(g, &receipt, &args.wait).await;
        }
        Command::Stock { sku } => {
            let projection = Projection::connect(&g.redis_url, g.prefix.clone()).await?;
            match projection.read_sku(sku.as_str()).await? {
                Some(s) => println!(
                    "{sku}: available {}, total {}, held {}, last offset {}",
                    s.available,
                    s.total,
                    s.held(),
                    s.last_offset.map_or("-".into(), |o| o.to_string())
                ),
                None => {
                    println!(
                        "{sku}: no state under prefix {} (never restocked?)",
                        g.prefix
                    );
                    return Ok(ExitCode::from(1));
                }
            }
        }
        Command::Order { sku, order_id } => {
            let projection = Projection::connect(&g.redis_url, g.prefix.clone()).await?;
            let entry = projection
                .read_sku(sku.as_str())
                .await?
                .and_then(|s| s.orders.get(order_id.as_str()).cloned());
            match entry {
                Some(e) => println!(
                    "{sku} / {order_id}: {}, quantity {}, at offset {}",
                    e.status.as_str(),
                    e.quantity,
                    e.offset
                ),
                None => {
                    println!("{sku} / {order_id}: unknown (no deduct or rollback applied)");
                    return Ok(ExitCode::from(1));
                }
            }
        }
        Command::History(args) => {
            let of = match (args.order, args.sku) {
                (Some(order), sku) => HistoryOf::Order {
                    order_id: order.into_string(),
                    sku: sku.map(Sku::into_string),
                },
                (None, Some(sku)) => HistoryOf::Sku(sku.into_string()),
                (None, None) => anyhow::bail!("history needs --sku or --order"),
            };
            let pool = connect_archive(g, 1).await?;
            let entries = query::history(&pool, &g.topic, &of, args.limit.max(1)).await?;
            print_history(&entries, args.json);
        }
        Command::Replay(args) => return replay(g, args).await,
        Command::Snapshot(args) => {
            use stockledger_archiver::snapshot;
            let pool = connect_archive(g, 2).await?;
            let projection = Projection::connect(&g.redis_url, g.prefix.clone()).await?;
            let start =
                snapshot::committed_offsets(&g.kafka(), &args.applier_group, &g.topic).await?;
            let taken = snapshot::take(
                &pool,
                &projection.connection(),
                &g.prefix,
                &g.topic,
                &start,
                args.page_size.max(1),
            )
            .await?;
            let mut starts: Vec<_> = taken.start.iter().collect();
            starts.sort();
            println!(
                "snapshot {} of {}: {} SKUs; a replay from it starts at {}",
                taken.id,
                g.prefix,
                taken.skus,
                if starts.is_empty() {
                    "the beginning of every partition".to_owned()
                } else {
                    starts
                        .iter()
                        .map(|(p, o)| format!("{p}@{o}"))
                        .collect::<Vec<_>>()
                        .join(", ")
                }
            );
        }
        Command::Compact(args) => {
            anyhow::ensure!(
                args.retention_days.is_finite() && args.retention_days >= 0.0,
                "--retention-days must be a number of days, 0 or more"
            );
            let pool = connect_archive(g, 2).await?;
            let projection = Projection::connect(&g.redis_url, g.prefix.clone()).await?;
            let retention = Duration::from_secs_f64(args.retention_days * 86_400.0);
            let report = stockledger_archiver::compact::compact(
                &projection.connection(),
                &g.prefix,
                &pool,
                &g.topic,
                retention,
                args.page_size.max(1),
            )
            .await?;
            println!(
                "checked {} SKUs: removed {} finished orders and {} decisions older than {} days",
                report.skus_checked,
                report.orders_removed,
                report.decisions_removed,
                args.retention_days
            );
        }
        Command::Reconcile(args) => {
            let pool = connect_archive(g, 2).await?;
            let projection = Projection::connect(&g.redis_url, g.prefix.clone()).await?;
            let report = stockledger_archiver::reconcile::reconcile(
                &projection.connection(),
                &g.prefix,
                &pool,
                &g.topic,
                args.page_size.max(1),
            )
            .await?;
            for d in &report.differences {
                if args.json {
                    let line = serde_json::json!({
                        "sku": d.sku, "field": d.field, "redis": d.redis,
                        "archive": d.archive, "offset": d.offset,
                    });
                    println!("{line}");
                } else {
                    let at = d
                        .offset
                        .map(|o| format!(" (offset {o})"))
                        .unwrap_or_default();
                    println!(
                        "{}: {}: Redis {}, archive {}{at}",
                        d.sku, d.field, d.redis, d.archive
                    );
                }
            }
            if args.json {
                let summary = serde_json::json!({
                    "skus_checked": report.skus_checked,
                    "differences": report.differences.len(),
                });
                println!("{summary}");
            } else {
                println!(
                    "checked {} SKUs: {}",
                    report.skus_checked,
                    match report.differences.len() {
                        0 => "Redis and the archive agree".to_owned(),
                        n => format!("{n} differences"),
                    }
                );
            }
            if !report.differences.is_empty() {
                return Ok(ExitCode::from(1));
            }
        }
        Command::Demo(args) => return demo::run(g, args).await,
        Command::Bench(args) => return bench::run(g, args).await,
    }
    Ok(ExitCode::SUCCESS)
}

async fn replay(g: &Global, args: ReplayArgs) -> anyhow::Result<ExitCode> {
    use std::io::{IsTerminal, Write};
    use stockledger_applier::replay::{ReplayConfig, SwapConfig};

    let target = args.into.unwrap_or_else(|| format!("{}:rebuild", g.prefix));
    let mut config = ReplayConfig::new(
        g.kafka(),
        g.redis_url.clone(),
        g.topic.clone(),
        target.clone(),
    );
    config.follow = args.follow;
    config.batch_size = args.batch_size.max(1);
    if args.swap {
        config.swap = Some(SwapConfig {
            live_prefix: g.prefix.clone(),
            old_prefix: (!args.drop_old).then(|| {
                args.old_prefix
                    .unwrap_or_else(|| format!("{}:replaced", g.prefix))
            }),
        });
    }
    if args.from_snapshot {
        use stockledger_archiver::snapshot;
        let target_projection = Projection::connect(&g.redis_url, target.clone()).await?;
        let existing = target_projection.skus().await?.len();
        anyhow::ensure!(
            existing == 0,
            "prefix {target} already holds {existing} SKUs; replay into an empty prefix"
        );
        let pool = connect_archive(g, 2).await?;
        let Some(snap) = snapshot::latest(&pool, &g.topic).await? else {
            anyhow::bail!(
                "no complete snapshot of {}; take one with `stockledger snapshot`",
                g.topic
            );
        };
        let restored =
            snapshot::restore(&pool, &snap, &target_projection.connection(), &target, 1000).await?;
        eprintln!(
            "restored snapshot {} ({restored} SKUs) into {target}",
            snap.id
        );
        config.start = snap.start;
        config.require_empty_target = false;
    }
    let terminal = std::io::stderr().is_terminal();
    let mut last_line = std::time::Instant::now();
    let report = stockledger_applier::replay::replay(config, shutdown_signal(), |p| {
        let line = format!(
            "replay {target}: {} records, {:.0}/s, lag {}{}",
            p.records,
            p.rate(),
            p.lag,
            if p.caught_up { " (caught up)" } else { "" }
        );
        if terminal {
            eprint!("\r{line}\x1b[K");
            let _ = std::io::stderr().flush();
        } else if last_line.elapsed() >= Duration::from_secs(2) {
            eprintln!("{line}");
            last_line = std::time::Instant::now();
        }
    })
    .await?;
    if terminal {
        eprintln!();
    }
    println!(
        "replayed {} records into {target}: {} SKUs{}",
        report.records,
        report.skus,
        if args.swap {
            format!(", {} swapped into {}", report.swapped, g.prefix)
        } else {
            String::new()
        }
    );
    if !report.live_only.is_empty() {
        println!(
            "{} live SKUs have no record in the log and were left as they are: {}",
            report.live_only.len(),
            report.live_only.join(", ")
        );
    }
    if report.interrupted {
        println!("interrupted before the end; {target} is incomplete");
        return Ok(ExitCode::from(1));
    }
    Ok(ExitCode::SUCCESS)
}

/// The archive database, migrated, with the (redacted) URL in any error.
pub async fn connect_archive(g: &Global, max_connections: u32) -> anyhow::Result<sqlx::PgPool> {
    stockledger_archiver::connect(&g.database_url, max_connections)
        .await
        .with_context(|| {
            format!(
                "connecting to {}",
                stockledger_io::redact_url(&g.database_url)
            )
        })
}

pub fn applier_config(g: &Global) -> ApplierConfig {
    let mut c = ApplierConfig::new(g.kafka(), g.redis_url.clone());
    c.prefix = g.prefix.clone();
    c.topic = g.topic.clone();
    c.outcomes_topic = g.outcomes_topic.clone();
    c.dlq_topic = g.dlq_topic.clone();
    c
}

pub fn archiver_config(g: &Global) -> ArchiverConfig {
    let mut c = ArchiverConfig::new(g.kafka(), g.database_url.clone());
    c.outcomes_topic = g.outcomes_topic.clone();
    c
}

async fn report_sent(g: &Global, receipt: &Receipt, wait: &WaitArgs) -> anyhow::Result<ExitCode> {
    println!(
        "sent {} for {} to {}",
        receipt.command_id, receipt.sku, receipt.position
    );
    let Some(seconds) = wait.wait else {
        return Ok(ExitCode::SUCCESS);
    };
    let reader = OutcomeReader::connect(&g.redis_url, g.prefix.clone()).await?;
    let timeout = Duration::try_from_secs_f64(seconds.max(0.0)).unwrap_or(Duration::MAX);
    let d = reader.wait(receipt, timeout).await?;
    println!(
        "{}: delta {}, available {}, total {}{}",
        d.result,
        d.delta,
        d.available,
        d.total,
        d.reason.map(|r| format!(" ({r})")).unwrap_or_default()
    );
    Ok(ExitCode::SUCCESS)
}

fn print_history(entries: &[query::Entry], json: bool) {
    if json {
        for e in entries {
            let line = serde_json::json!({
                "topic": e.topic, "partition": e.partition, "offset": e.log_offset,
                "sku": e.sku, "command": e.command, "order_id": e.order_id,
                "adjustment_id": e.adjustment_id, "quantity": e.quantity, "result": e.result,
                "delta": e.delta, "available_after": e.available_after,
                "total_after": e.total_after, "reason": e.reason, "occurred_at": e.occurred_at,
            });
            println!("{line}");
        }
        return;
    }
    println!(
        "{:<24} {:<14} {:<9} {:<16} {:<22} {:>6} {:>9} {:>9}  reason",
        "occurred_at",
        "position",
        "command",
        "order/adjustment",
        "result",
        "delta",
        "available",
        "total"
    );
    for e in entries {
        println!(
            "{:<24} {:<14} {:<9} {:<16} {:<22} {:>6} {:>9} {:>9}  {}",
            e.occurred_at,
            format!("{}@{}", e.partition, e.log_offset),
            e.command.as_deref().unwrap_or("-"),
            e.order_id
                .as_deref()
                .or(e.adjustment_id.as_deref())
                .unwrap_or("-"),
            e.result,
            e.delta,
            e.available_after,
            e.total_after,
            e.reason.as_deref().unwrap_or("")
        );
    }
    if entries.is_empty() {
        println!("(no archived entries)");
    }
}
