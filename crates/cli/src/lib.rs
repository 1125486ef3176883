//! The `stockledger` command line: [`Cli`] parses the flags (each with an
//! environment variable) and the subcommand, [`run`] hands it to its module
//! in [`commands`] (one per subcommand: parse, call a library, print).

pub mod commands;
pub mod exit;
pub mod progress;
pub mod secrets;

use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::{Args, Parser, Subcommand, ValueEnum};
use stockledger_applier::ApplierConfig;
use stockledger_archiver::ArchiverConfig;
use stockledger_client::{KafkaConfig, Ledger, LedgerBuilder};
use stockledger_kafka::config::parse_property;
use stockledger_projection::keys;

use crate::commands::{
    alerts, apply, archive, basket, compact, confirm, deduct, dlq, export, history, limit, order,
    reconcile, refund, repartition, replay, report, restock, rollback, sale, serve, snapshot,
    status, stock, topics, transfer,
};

/// An event-sourced stock ledger: Kafka log, Redis projection, PostgreSQL archive.
#[derive(Debug, Parser)]
#[command(
    name = "stockledger",
    version,
    about,
    long_about = None,
    after_help = EXIT_CODES_HELP
)]
pub struct Cli {
    #[command(flatten)]
    pub global: Global,
    #[command(subcommand)]
    pub command: Command,
}

/// The exit-code table as `--help` prints it (the same as [`exit::Exit::ALL`];
/// a test keeps them equal).
const EXIT_CODES_HELP: &str = "Exit codes:
  0    ok
  1    failure: an error no other code names
  2    usage: a flag, argument or environment variable is wrong
  3    check failed: differences, lag, a broken rule, a refused command (--wait)
  4    not found: no such SKU, order, dead letter or topic; not archived yet
  65   data error: a record that cannot be decoded (dlq redrive)
  69   unavailable: Kafka, Redis or PostgreSQL did not answer
  75   timed out: waiting ran out; try again
  77   denied: credentials or permissions refused
  130  interrupted: stopped by Ctrl-C or SIGTERM before the end";

impl Cli {
    /// The log filter when `RUST_LOG` is not set: the long-running
    /// components report progress; one-shot commands and the demo stay quiet.
    pub fn default_log_filter(&self) -> &'static str {
        match self.command {
            Command::Apply(_) | Command::Archive(_) => "info",
            // Requests answered are logged at info under this target;
            // refused ones (401, 403) at warn.
            Command::Serve(_) => "info,stockledger_http::access=warn",
            _ => "warn",
        }
    }
}

/// Connection settings and names shared by every subcommand. Passwords
/// come from the environment ([`secrets`]); `Debug` hides them.
#[derive(Args)]
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
    /// Repeatable. In the environment, KAFKA_PROPERTIES holds them separated
    /// by ';' (blank ones skipped); -X adds to it and wins where they
    /// overlap. Secret ones (sasl.password, ssl.key.password, …) are refused
    /// here: set KAFKA_SASL_PASSWORD or KAFKA_SSL_KEY_PASSWORD (or …_FILE),
    /// or put them in KAFKA_PROPERTIES.
    // Not clap's `env`: it would refuse a blank KAFKA_PROPERTIES, let -X
    // replace the whole variable, and mix its secrets with those of -X
    // (see `prepare_global`).
    #[arg(
        short = 'X',
        global = true,
        value_name = "KEY=VALUE",
        value_parser = parse_property
    )]
    pub kafka_properties: Vec<(String, String)>,

    /// Redis holding the projection: one URL, or the seed nodes of a Redis
    /// Cluster separated by commas (a single URL of a cluster node works too).
    /// rediss:// for TLS. The password comes from REDIS_PASSWORD or
    /// REDIS_PASSWORD_FILE (or a whole URL in REDIS_URL), never from here.
    #[arg(
        long,
        global = true,
        env = "REDIS_URL",
        default_value = "redis://127.0.0.1:6379",
        hide_env_values = true
    )]
    pub redis_url: String,

    /// PostgreSQL holding the archive (?sslmode=verify-full&sslrootcert=FILE
    /// for TLS). The password comes from DATABASE_PASSWORD or
    /// DATABASE_PASSWORD_FILE (or a whole URL in DATABASE_URL), never from here.
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

    /// The stock events topic the applier writes (default: the command
    /// topic's name and `.events`, created by the applier when missing).
    #[arg(long, global = true, env = "STOCKLEDGER_EVENTS_TOPIC")]
    pub events_topic: Option<String>,

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
        default_value = "stockledger",
        value_parser = parse_prefix
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

impl std::fmt::Debug for Global {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        use stockledger_runtime::redact_url;
        f.debug_struct("Global")
            .field("kafka", &self.kafka())
            .field("redis_url", &redact_url(&self.redis_url))
            .field("database_url", &redact_url(&self.database_url))
            .field("topic", &self.topic)
            .field("outcomes_topic", &self.outcomes_topic)
            .field("dlq_topic", &self.dlq_topic)
            .field("events_topic", &self.events_topic)
            .field("prefix", &self.prefix)
            .field("log_format", &self.log_format)
            .finish()
    }
}

impl Global {
    /// The stock events topic: `--events-topic`, or the command topic's
    /// name and `.events`.
    pub fn events_topic(&self) -> String {
        self.events_topic
            .clone()
            .unwrap_or_else(|| stockledger_kafka::admin::default_events_topic(&self.topic))
    }

    pub fn kafka(&self) -> KafkaConfig {
        KafkaConfig {
            brokers: self.brokers.clone(),
            properties: self.kafka_properties.clone(),
        }
    }

    /// The ledger's client for a command that sends: these brokers, this
    /// command topic, and no decisions read unless asked for
    /// ([`Global::deciding`]).
    pub fn ledger(&self) -> LedgerBuilder {
        Ledger::builder()
            .kafka(self.kafka())
            .topic(self.topic.clone())
            .without_decisions()
    }

    /// `builder` reading decisions from the projection under `--prefix`,
    /// waiting up to `wait` for each.
    pub fn deciding(&self, builder: LedgerBuilder, wait: Duration) -> LedgerBuilder {
        builder
            .decisions_from_redis(&self.redis_url, &self.prefix)
            .decision_timeout(wait)
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
    Topics(topics::Command),
    /// Run the ordered applier: fold the command topic into Redis and publish outcomes.
    ///
    /// It runs until Ctrl-C or SIGTERM (exit 0). Kafka or Redis not
    /// answering, at start or later, is waited for and logged, not an exit.
    #[command(
        after_help = "Examples:\n  stockledger apply\n  stockledger apply --instance-id applier-1 --metrics-addr 0.0.0.0:9464"
    )]
    Apply(apply::Args),
    /// Run the archiver: copy outcomes into PostgreSQL in pages.
    ///
    /// It runs until Ctrl-C or SIGTERM (exit 0). Kafka or PostgreSQL not
    /// answering, at start or later, is waited for and logged, not an exit.
    #[command(
        after_help = "Examples:\n  stockledger archive\n  stockledger archive --writers 4 --metrics-addr 0.0.0.0:9465"
    )]
    Archive(archive::Args),
    /// Run the HTTP gateway: commands and reads as a JSON API (OpenAPI at /openapi.json), and the console at /console.
    #[command(
        after_help = "Examples:\n  stockledger serve --listen 127.0.0.1:8080\n  stockledger serve --api-keys keys.toml --tls-cert cert.pem --tls-key key.pem"
    )]
    Serve(serve::Args),
    /// Take stock for an order (with --hold: reserve it until confirmed).
    #[command(
        after_help = "Examples:\n  stockledger deduct SKU-1 order-17 2 --wait 5\n  stockledger deduct SKU-1 order-18 1 --user u-9 --hold 15m --wait 5 --format json"
    )]
    Deduct(deduct::Args),
    /// Sell what a reservation holds (on time up to its deadline).
    #[command(after_help = "Examples:\n  stockledger confirm SKU-1 order-18 --wait 5")]
    Confirm(confirm::Args),
    /// Hold several SKUs together, all or none; confirm or release them
    /// together; show a basket.
    #[command(
        after_help = "Examples:\n  stockledger basket hold cart-9 --line SKU-1=2 --line SKU-2=1 --hold 15m --user u-9\n  stockledger basket confirm cart-9\n  stockledger basket release cart-9 --reason payment-failed\n  stockledger basket show cart-9 --format json"
    )]
    Basket(basket::Args),
    /// Give back units a confirmed order bought.
    #[command(
        after_help = "Examples:\n  stockledger refund SKU-1 order-17 --wait 5\n  stockledger refund SKU-1 order-17 --total 1"
    )]
    Refund(refund::Args),
    /// Cap the units one user may hold and buy of a SKU.
    #[command(after_help = "Examples:\n  stockledger limit SKU-1 --per-user 2 --wait 5")]
    Limit(limit::Args),
    /// Set or lift a SKU's low-stock threshold (its decisions then say LOW_STOCK when crossed).
    #[command(
        after_help = "Examples:\n  stockledger alerts SKU-1 --low-stock-below 10 --wait 5\n  stockledger alerts SKU-1 --none"
    )]
    Alerts(alerts::Args),
    /// Set when a SKU sells (neither --opens-at nor --closes-at: lift the window): refused REJECTED_NOT_OPEN before the opening, REJECTED_CLOSED from the closing, by the records' times.
    #[command(
        after_help = "Examples:\n  stockledger window SKU-1 sale-1 --opens-at 2026-12-01T10:00:00Z --closes-at 2026-12-01T12:00:00Z --wait 5\n  stockledger window SKU-1 sale-2 --opens-at +10m\n  stockledger window SKU-1 sale-3 --wait 5"
    )]
    Window(sale::WindowArgs),
    /// Stop selling a SKU at once (REJECTED_PAUSED); holds still settle.
    #[command(after_help = "Examples:\n  stockledger pause SKU-1 stop-1 --wait 5")]
    Pause(sale::SwitchArgs),
    /// End a SKU's pause.
    #[command(after_help = "Examples:\n  stockledger resume SKU-1 go-1 --wait 5")]
    Resume(sale::SwitchArgs),
    /// Give back what an order took or holds (before its deduction: refuse that deduction).
    #[command(after_help = "Examples:\n  stockledger rollback SKU-1 order-17 --wait 5")]
    Rollback(rollback::Args),
    /// Add to, or set, a SKU's stock (at one location, if it keeps stock by location).
    #[command(
        after_help = "Examples:\n  stockledger restock SKU-1 --add 100 --wait 5\n  stockledger restock SKU-1 --set 40 --adjustment-id count-2026-11\n  stockledger restock MUG-1 --add 40 --location berlin --wait 5"
    )]
    Restock(restock::Args),
    /// Move available stock of a SKU between two of its locations, all or nothing.
    #[command(
        after_help = "Examples:\n  stockledger transfer MUG-1 3 --from berlin --to paris --wait 5\n  stockledger transfer MUG-1 10 --from berlin --to lyon --transfer-id tr-2026-11-26"
    )]
    Transfer(transfer::Args),
    /// Show a SKU's stock from Redis, or from the archive as it was (--as-of).
    #[command(
        after_help = "Examples:\n  stockledger stock SKU-1\n  stockledger stock SKU-1 --as-of -1h --format json"
    )]
    Stock(stock::Args),
    /// Show one order of a SKU from Redis.
    #[command(
        after_help = "Examples:\n  stockledger order SKU-1 order-17\n  stockledger order SKU-1 order-17 --format json"
    )]
    Order(order::Args),
    /// Show archived decisions of a SKU or an order, a page at a time (time range, results, newest first).
    #[command(
        after_help = "Examples:\n  stockledger history --sku SKU-1 --since -1d\n  stockledger history --order order-17 --format json\n  stockledger history --order order-17 --sku SKU-1\n  stockledger history --sku SHOW-1 --unit A12"
    )]
    History(history::Args),
    /// Per-SKU (or per-location) totals per interval from the archive: taken, returned, refused, lowest stock, sold out.
    #[command(
        after_help = "Examples:\n  stockledger report --since -7d --every 1d\n  stockledger report --since -1d --every 1h --format csv > hourly.csv\n  stockledger report --by location --sku MUG-1 --every 1d"
    )]
    Report(report::Args),
    /// Write archived rows of a time range to a CSV or Parquet file.
    #[command(
        after_help = "Examples:\n  stockledger export --since -30d --format parquet --out ledger.parquet"
    )]
    Export(export::Args),
    /// Rebuild the projection from the log into a fresh prefix (and swap it in).
    #[command(
        after_help = "Examples:\n  stockledger replay --into shop:rebuild\n  stockledger replay --from-snapshot --swap"
    )]
    Replay(replay::Args),
    /// Copy the command log into a new topic with another partition count
    /// (the way out after partitions were added), per-SKU order kept.
    #[command(
        after_help = "Examples:\n  stockledger repartition --to stock.ledger.v2 --partitions 24"
    )]
    Repartition(repartition::Args),
    /// Write every SKU's state and last-applied offset to PostgreSQL.
    #[command(
        after_help = "Examples:\n  stockledger snapshot\n  stockledger snapshot --format json | jq .replay_starts"
    )]
    Snapshot(snapshot::Args),
    /// Prune archived history older than the retention window from Redis.
    #[command(after_help = "Examples:\n  stockledger compact --retention-days 7")]
    Compact(compact::Args),
    /// Compare Redis with the archive, SKU by SKU; exit 3 on any difference.
    #[command(
        after_help = "Examples:\n  stockledger reconcile\n  stockledger reconcile --format json || echo \"differences: exit $?\""
    )]
    Reconcile(reconcile::Args),
    /// How far the applier and the archiver are behind, holds, dead letters (and the newest), the last minute's decisions, and which service does not answer.
    Status(status::Args),
    /// The records the applier dead-lettered: list them, show one, send them back.
    #[command(subcommand)]
    Dlq(dlq::Command),
    /// Make API keys for the gateway (serve --api-keys).
    #[command(subcommand)]
    Keys(commands::keys::Command),
    /// Run a flash sale end to end against the configured services and check the contract.
    #[command(
        after_help = "Examples:\n  stockledger demo\n  stockledger demo --orders 20000 --buyers 400 --sold-out-fast-path"
    )]
    Demo(commands::demo::DemoArgs),
}

/// Finishes what parsing leaves to do, before anything connects: see
/// [`prepare_global`].
pub fn prepare(cli: &mut Cli, matches: &clap::ArgMatches) -> anyhow::Result<()> {
    prepare_global(&mut cli.global, matches)
}

/// Finishes the connection settings parsed into `g` (from `matches`): a
/// secret given by -X is refused, the properties of `KAFKA_PROPERTIES`
/// come first and those of -X after them (so -X wins where they overlap),
/// then [`secrets::apply`] adds the passwords of the environment.
pub fn prepare_global(g: &mut Global, matches: &clap::ArgMatches) -> anyhow::Result<()> {
    secrets::refuse_command_line(g, matches)?;
    let from_env = match std::env::var("KAFKA_PROPERTIES") {
        Ok(value) => value,
        Err(std::env::VarError::NotPresent) => String::new(),
        Err(std::env::VarError::NotUnicode(_)) => {
            anyhow::bail!("KAFKA_PROPERTIES is not valid UTF-8")
        }
    };
    let mut merged = env_properties(&from_env)?;
    merged.append(&mut g.kafka_properties);
    g.kafka_properties = merged;
    secrets::apply(g)
}

/// The properties in a `KAFKA_PROPERTIES` value (`key=value;…`).
fn env_properties(value: &str) -> anyhow::Result<Vec<(String, String)>> {
    value
        .split(';')
        .filter(|p| !p.trim().is_empty())
        .map(|p| parse_property(p).map_err(|e| anyhow::anyhow!("KAFKA_PROPERTIES: {e}")))
        .collect()
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

/// Runs `main` on a multi-threaded runtime and turns its result into the
/// process's exit code, printing an error as one line with its causes
/// (its code is [`exit::Exit::of`] it).
pub fn block_on(main: impl std::future::Future<Output = anyhow::Result<ExitCode>>) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return exit::Exit::Failure.into();
        }
    };
    match runtime.block_on(main) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {}", stockledger_core::report::Chain(e.as_ref()));
            exit::Exit::of(&e).into()
        }
    }
}

/// Runs the parsed command line.
pub async fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    let g = &cli.global;
    match cli.command {
        Command::Topics(command) => topics::run(g, command).await,
        Command::Apply(args) => apply::run(g, args).await,
        Command::Archive(args) => archive::run(g, args).await,
        Command::Serve(args) => serve::run(g, args).await,
        Command::Deduct(args) => deduct::run(g, args).await,
        Command::Rollback(args) => rollback::run(g, args).await,
        Command::Confirm(args) => confirm::run(g, args).await,
        Command::Basket(args) => basket::run(g, args).await,
        Command::Refund(args) => refund::run(g, args).await,
        Command::Limit(args) => limit::run(g, args).await,
        Command::Alerts(args) => alerts::run(g, args).await,
        Command::Window(args) => sale::window(g, args).await,
        Command::Pause(args) => sale::pause(g, args).await,
        Command::Resume(args) => sale::resume(g, args).await,
        Command::Restock(args) => restock::run(g, args).await,
        Command::Transfer(args) => transfer::run(g, args).await,
        Command::Stock(args) => stock::run(g, args).await,
        Command::Order(args) => order::run(g, args).await,
        Command::History(args) => history::run(g, args).await,
        Command::Report(args) => report::run(g, args).await,
        Command::Export(args) => export::run(g, args).await,
        Command::Replay(args) => replay::run(g, args).await,
        Command::Repartition(args) => repartition::run(g, args).await,
        Command::Snapshot(args) => snapshot::run(g, args).await,
        Command::Compact(args) => compact::run(g, args).await,
        Command::Reconcile(args) => reconcile::run(g, args).await,
        Command::Status(args) => status::run(g, args).await,
        Command::Dlq(command) => dlq::run(g, command).await,
        Command::Keys(command) => commands::keys::run(command),
        Command::Demo(args) => commands::demo::run(g, args).await,
    }
}

/// The archive database, migrated, with the (redacted) URL in any error.
pub async fn connect_archive(g: &Global, max_connections: u32) -> anyhow::Result<sqlx::PgPool> {
    stockledger_archiver::connect(&g.database_url, max_connections)
        .await
        .with_context(|| {
            format!(
                "connecting to {}",
                stockledger_runtime::redact_url(&g.database_url)
            )
        })
}

/// The archive for reading, acting as the analysts' role (it cannot
/// write): checked with one connection, so a missing role or membership is
/// said plainly.
pub async fn connect_analyst(g: &Global, max_connections: u32) -> anyhow::Result<sqlx::PgPool> {
    use stockledger_archiver::DbRole;
    let url = stockledger_runtime::redact_url(&g.database_url).to_string();
    let pool = analyst_pool(g, max_connections)?;
    pool.acquire().await.with_context(|| {
        format!(
            "connecting to {url} as {role} (its migrations make the role: run `stockledger \
             archive` once; a login must be a member: GRANT {role} TO the user)",
            role = DbRole::Analyst.name()
        )
    })?;
    Ok(pool)
}

/// The archive for reading, as the analysts' role, connected on first
/// use: a PostgreSQL that is away fails the first query, not this.
pub fn analyst_pool(g: &Global, max_connections: u32) -> anyhow::Result<sqlx::PgPool> {
    let url = stockledger_runtime::redact_url(&g.database_url).to_string();
    stockledger_archiver::connect_as(
        &g.database_url,
        max_connections,
        std::time::Duration::from_secs(10),
        stockledger_archiver::DbRole::Analyst,
    )
    .with_context(|| format!("connecting to {url}"))
}

/// A Redis key prefix, checked as [`keys::check_prefix`] does.
fn parse_prefix(s: &str) -> Result<String, String> {
    keys::check_prefix(s)
        .map(|()| s.to_owned())
        .map_err(|e| e.problem)
}

/// A `group.instance.id`, checked as Kafka would.
fn parse_instance_id(s: &str) -> Result<String, String> {
    stockledger_kafka::group::check_instance_id(s).map(|()| s.to_owned())
}

pub fn applier_config(g: &Global) -> ApplierConfig {
    let mut c = ApplierConfig::new(g.kafka(), g.redis_url.clone());
    c.prefix = g.prefix.clone();
    c.topic = g.topic.clone();
    c.outcomes_topic = g.outcomes_topic.clone();
    c.dlq_topic = g.dlq_topic.clone();
    c.events_topic = g.events_topic.clone();
    c
}

pub fn archiver_config(g: &Global) -> ArchiverConfig {
    let mut c = ArchiverConfig::new(g.kafka(), g.database_url.clone());
    c.outcomes_topic = g.outcomes_topic.clone();
    c
}

#[cfg(test)]
mod tests {
    use clap::{CommandFactory, Parser};

    use super::*;

    /// Every `stockledger …` line of every `--help`'s examples, cut at the
    /// first pipe, `||` or redirection.
    fn examples(command: &clap::Command, out: &mut Vec<String>) {
        if let Some(help) = command.get_after_help() {
            for line in help.to_string().lines() {
                let line = line.trim();
                if line.starts_with("stockledger ") {
                    let end = line
                        .find(" |")
                        .or_else(|| line.find(" >"))
                        .unwrap_or(line.len());
                    out.push(line[..end].to_owned());
                }
            }
        }
        for sub in command.get_subcommands() {
            examples(sub, out);
        }
    }

    #[test]
    fn every_subcommand_has_examples_and_each_parses() {
        let root = Cli::command();
        let mut missing = Vec::new();
        let mut walk = vec![root.clone()];
        while let Some(c) = walk.pop() {
            let subs: Vec<clap::Command> = c.get_subcommands().cloned().collect();
            if subs.is_empty() && c.get_after_help().is_none() && c.get_name() != "help" {
                missing.push(c.get_name().to_owned());
            }
            walk.extend(subs);
        }
        assert!(
            missing.is_empty(),
            "subcommands without examples: {missing:?}"
        );
        let mut lines = Vec::new();
        examples(&root, &mut lines);
        assert!(lines.len() > 30, "{lines:?}");
        for line in lines {
            let words: Vec<String> = line
                .split_whitespace()
                .map(|w| w.trim_matches('"').to_owned())
                .collect();
            if let Err(e) = Cli::try_parse_from(&words) {
                panic!("{line}: {e}");
            }
        }
    }

    #[test]
    fn the_exit_code_table_in_help_is_the_one_the_code_uses() {
        let rows: Vec<(u8, String)> = EXIT_CODES_HELP
            .lines()
            .skip(1)
            .map(|l| {
                let (code, rest) = l.trim().split_once(' ').unwrap_or_default();
                let name = rest.trim().split(':').next().unwrap_or_default();
                (code.parse().unwrap_or(u8::MAX), name.to_owned())
            })
            .collect();
        let table: Vec<(u8, String)> = exit::Exit::ALL
            .iter()
            .map(|e| (e.code(), e.name().to_owned()))
            .collect();
        assert_eq!(rows, table);
    }
}
