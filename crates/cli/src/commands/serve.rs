//! `stockledger serve`: the HTTP gateway, until Ctrl-C or SIGTERM.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::Args as ClapArgs;
use stockledger_http::gateway::auth::ApiKeys;
use stockledger_http::{GatewayConfig, Limits, Probes, Tls};
use tracing::{info, warn};

use super::observe::{self, MetricsArgs};
use crate::exit::{fail, Exit};
use crate::{shutdown_signal, Global};

#[derive(Debug, ClapArgs)]
pub struct Args {
    /// Address the JSON API listens on (also serving /metrics, /healthz,
    /// /readyz, /openapi.json and the console at /console).
    #[arg(long, env = "STOCKLEDGER_LISTEN", default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,
    /// The keys file (see `stockledger keys new`): every route but
    /// /healthz, /readyz and /openapi.json then needs `Authorization: Bearer
    /// TOKEN` of a key whose role may use it. Re-read on SIGHUP. Without
    /// it, the gateway listens on loopback only.
    #[arg(long, env = "STOCKLEDGER_API_KEYS", value_name = "FILE")]
    pub api_keys: Option<PathBuf>,
    /// Serve HTTPS with this PEM certificate chain (the server's first);
    /// needs --tls-key.
    #[arg(
        long,
        env = "STOCKLEDGER_TLS_CERT",
        value_name = "FILE",
        requires = "tls_key"
    )]
    pub tls_cert: Option<PathBuf>,
    /// The PEM private key of --tls-cert (PKCS#8, PKCS#1 or SEC1).
    #[arg(
        long,
        env = "STOCKLEDGER_TLS_KEY",
        value_name = "FILE",
        requires = "tls_cert"
    )]
    pub tls_key: Option<PathBuf>,
    /// An origin a browser front end may call the API from (CORS), e.g.
    /// https://shop.example.com. Repeatable; in the environment, separate
    /// them with ','. None by default: browsers on other origins are refused.
    #[arg(long = "cors-origin", env = "STOCKLEDGER_CORS_ORIGINS", value_name = "ORIGIN",
          value_delimiter = ',', value_parser = parse_origin)]
    pub cors_origins: Vec<String>,
    /// Longest wait_ms a request may ask for.
    #[arg(
        long,
        env = "STOCKLEDGER_MAX_WAIT_MS",
        default_value_t = stockledger_http::gateway::DEFAULT_MAX_WAIT_MS
    )]
    pub max_wait_ms: u64,
    /// Connections open at once; more clients wait until one closes.
    #[arg(long, env = "STOCKLEDGER_MAX_CONNECTIONS", default_value_t = 10_000)]
    pub max_connections: usize,
    /// Event streams (/v1/events, /v1/skus/{sku}/events) open at once, in
    /// all; more are answered 429. Default: half of --max-connections, so
    /// streams never take the connections other requests need.
    #[arg(long, env = "STOCKLEDGER_MAX_STREAMS", value_name = "N")]
    pub max_streams: Option<usize>,
    /// Event streams one API key may hold open at once; more are answered
    /// 429. Default: a quarter of --max-streams.
    #[arg(long, env = "STOCKLEDGER_MAX_STREAMS_PER_KEY", value_name = "N")]
    pub max_streams_per_key: Option<usize>,
    /// Milliseconds a client has to send a request's headers, and its body.
    #[arg(long, env = "STOCKLEDGER_READ_TIMEOUT_MS", default_value_t = 10_000)]
    pub read_timeout_ms: u64,
    /// Milliseconds a kept-alive connection may stay silent between requests.
    #[arg(long, env = "STOCKLEDGER_IDLE_TIMEOUT_MS", default_value_t = 60_000)]
    pub idle_timeout_ms: u64,
    /// Refuse a deduct of a SKU with nothing available and nothing held
    /// before it reaches the log: 409 with `field` `sold_out`, not logged,
    /// counted in stockledger_client_sold_out_refusals_total.
    #[arg(long, env = "STOCKLEDGER_SOLD_OUT_FAST_PATH")]
    pub sold_out_fast_path: bool,
    /// The groups whose progress the console's status reports (it counts
    /// as behind what `stockledger status` does by default).
    #[command(flatten)]
    pub groups: super::status::Groups,
    /// The API's port serves /metrics, /healthz and /readyz; this serves
    /// them on another address as well (e.g. one only Prometheus reaches).
    #[command(flatten)]
    pub metrics: MetricsArgs,
}

pub async fn run(g: &Global, args: Args) -> anyhow::Result<ExitCode> {
    if args.api_keys.is_none() && !args.listen.ip().is_loopback() {
        return Err(fail(
            Exit::Usage,
            format!(
                "--listen {}: without --api-keys the gateway lets anyone restock, refund and \
                 lift limits, so it listens on loopback only; make keys with `stockledger keys \
                 new` and pass --api-keys FILE, or listen on 127.0.0.1",
                args.listen
            ),
        ));
    }
    let api_keys = match &args.api_keys {
        Some(path) => {
            let keys = ApiKeys::load(path).context("--api-keys")?;
            if keys.is_empty() {
                warn!(path = %path.display(), "the keys file has no keys: every request but the probes is refused");
            }
            reload_on_hangup(keys.clone())?;
            Some(keys)
        }
        None => None,
    };
    let mut config = GatewayConfig::new(g.kafka(), g.redis_url.clone(), g.database_url.clone());
    config.prefix = g.prefix.clone();
    config.topic = g.topic.clone();
    config.events_topic = Some(g.events_topic());
    config.max_wait = Duration::from_millis(args.max_wait_ms);
    config.body_timeout = Duration::from_millis(args.read_timeout_ms);
    config.sold_out_fast_path = args.sold_out_fast_path;
    config.api_keys = api_keys;
    config.cors_origins = args.cors_origins;
    let names = args.groups.names(g);
    config.outcomes_topic = names.outcomes_topic;
    config.dlq_topic = names.dlq_topic;
    config.applier_group = names.applier_group;
    config.archiver_group = names.archiver_group;
    if let (Some(cert), Some(key)) = (&args.tls_cert, &args.tls_key) {
        config.tls = Some(Tls::from_pem_files(cert, key).context("--tls-cert/--tls-key")?);
    }
    let connections = Limits::with_connections(args.max_connections);
    let max_streams = args.max_streams.unwrap_or(connections.max_streams).max(1);
    config.limits = Limits {
        header_timeout: Duration::from_millis(args.read_timeout_ms),
        idle_timeout: Duration::from_millis(args.idle_timeout_ms),
        max_streams,
        max_streams_per_key: args
            .max_streams_per_key
            .unwrap_or((max_streams / 4).max(1))
            .max(1),
        ..connections
    };
    let _endpoint = observe::start(&args.metrics, || {
        Probes::new()
            .kafka(&config.kafka, &config.topic)
            .redis_url(&config.redis_url)
    })
    .await?;
    let listener = stockledger_http::server::listen(args.listen)
        .with_context(|| format!("listening on {}", args.listen))?;
    // Printed for scripts and tests that ask for port 0.
    let scheme = if config.tls.is_some() {
        "https"
    } else {
        "http"
    };
    println!("listening on {scheme}://{}", listener.local_addr()?);
    stockledger_http::gateway::run(config, listener, shutdown_signal()).await?;
    Ok(ExitCode::SUCCESS)
}

/// An origin as browsers send it: scheme, host and port only.
fn parse_origin(s: &str) -> Result<String, String> {
    let (scheme, rest) = s
        .split_once("://")
        .ok_or_else(|| format!("{s:?} is not an origin (e.g. https://shop.example.com)"))?;
    let bad = |c: char| c == '/' || c.is_whitespace() || c.is_control();
    if !matches!(scheme, "http" | "https") || rest.is_empty() || rest.contains(bad) {
        return Err(format!(
            "{s:?} is not an origin: http(s)://host[:port], with no path"
        ));
    }
    Ok(s.to_owned())
}

/// Re-reads the keys file on each SIGHUP; a file that does not parse keeps
/// the keys in use, and the log says why.
fn reload_on_hangup(keys: ApiKeys) -> anyhow::Result<()> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut hangups = signal(SignalKind::hangup()).context("listening for SIGHUP")?;
    tokio::spawn(async move {
        while hangups.recv().await.is_some() {
            match keys.reload() {
                Ok(count) => {
                    info!(path = %keys.path().display(), keys = count, "re-read the API keys")
                }
                Err(e) => {
                    warn!(error = %anyhow::Error::from(e), "the keys file was not taken up; the keys in use stay")
                }
            }
        }
    });
    Ok(())
}
