//! `--metrics-addr` of the long-running commands: Prometheus metrics,
//! `/healthz` and `/readyz` on their own port while the command runs.

use std::net::SocketAddr;

use anyhow::Context;
use clap::Args;
use stockledger_http::{Probes, Recorder};
use tokio::task::JoinHandle;

#[derive(Debug, Args)]
pub struct MetricsArgs {
    /// Serve Prometheus metrics at /metrics, and /healthz and /readyz, on
    /// this address (e.g. 0.0.0.0:9464). Off when not given.
    #[arg(long, env = "STOCKLEDGER_METRICS_ADDR")]
    pub metrics_addr: Option<SocketAddr>,
}

/// The metrics endpoint, stopped when dropped.
#[derive(Debug)]
pub struct Endpoint(Option<JoinHandle<()>>);

impl Drop for Endpoint {
    fn drop(&mut self) {
        if let Some(task) = self.0.take() {
            task.abort();
        }
    }
}

/// Installs the metrics recorder and serves the endpoints if asked to;
/// `probes` builds the readiness checks.
pub async fn start(
    args: &MetricsArgs,
    probes: impl FnOnce() -> Probes,
) -> anyhow::Result<Endpoint> {
    let Some(addr) = args.metrics_addr else {
        return Ok(Endpoint(None));
    };
    let recorder = Recorder::install().map_err(anyhow::Error::msg)?;
    let listener =
        stockledger_http::server::listen(addr).with_context(|| format!("--metrics-addr {addr}"))?;
    tracing::info!(address = %listener.local_addr()?, "serving /metrics, /healthz and /readyz");
    let probes = probes();
    let task = tokio::spawn(stockledger_http::observe::serve(
        listener,
        recorder,
        probes,
        std::future::pending(),
    ));
    Ok(Endpoint(Some(task)))
}
