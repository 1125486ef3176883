//! `stockledger serve` as a child process on a free port, and oha, the
//! load generator the throughput scenarios drive it with.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Context;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use stockledger_cli::Global;

use crate::pipeline::Pipeline;
use crate::process::Component;

/// The oha binary: `STOCKLEDGER_OHA`, else where bench.sh installs it,
/// else `oha` on the PATH.
pub(super) fn oha() -> anyhow::Result<PathBuf> {
    if let Some(path) = std::env::var_os("STOCKLEDGER_OHA") {
        return Ok(PathBuf::from(path));
    }
    let installed = crate::stack_home().map(|h| h.join("oha/bin/oha"));
    if let Some(installed) = installed.filter(|p| p.exists()) {
        return Ok(installed);
    }
    std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
        .map(|dir| dir.join("oha"))
        .find(|p| p.exists())
        .context("no oha binary: deploy/local/bench.sh installs it, or set STOCKLEDGER_OHA")
}

/// A gateway serving the pipeline's topic and prefix on a free port.
pub(super) struct Gateway {
    pub(super) process: Component,
    pub(super) port: u16,
}

impl Gateway {
    pub(super) async fn start(g: &Global, pipeline: &Pipeline) -> anyhow::Result<Self> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let listen = format!("127.0.0.1:{port}");
        let process = Component::start(
            g,
            &[
                ("STOCKLEDGER_TOPIC", &pipeline.topic),
                ("STOCKLEDGER_PREFIX", &pipeline.prefix),
                ("STOCKLEDGER_LISTEN", &listen),
            ],
            "serve",
        )?;
        let gateway = Self { process, port };
        let deadline = Instant::now() + Duration::from_secs(60);
        while !gateway.ready().await {
            gateway.process.check_running()?;
            anyhow::ensure!(
                Instant::now() < deadline,
                "the gateway was not ready within 60 s"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Ok(gateway)
    }

    /// Whether `/readyz` answers 200.
    pub(super) async fn ready(&self) -> bool {
        let ask = async {
            let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", self.port)).await?;
            stream
                .write_all(b"GET /readyz HTTP/1.1\r\nHost: bench\r\nConnection: close\r\n\r\n")
                .await?;
            let mut reply = Vec::new();
            stream.read_to_end(&mut reply).await?;
            std::io::Result::Ok(reply.starts_with(b"HTTP/1.1 200"))
        };
        matches!(
            tokio::time::timeout(Duration::from_secs(5), ask).await,
            Ok(Ok(true))
        )
    }

    /// Runs oha with `options` against deducts of fresh random orders (so
    /// none is a repeat) over the pipeline's SKUs; its JSON report.
    /// `query` is part of oha's URL regex (escape its `?`).
    pub(super) async fn load(&self, options: &[String], query: &str) -> anyhow::Result<Report> {
        let url = format!(
            "http://127.0.0.1:{}/v1/skus/SKU-000[0-9]{{2}}/orders/o[a-z0-9]{{24}}/deduct{query}",
            self.port
        );
        let deducts = [
            "--rand-regex-url",
            "-m",
            "POST",
            "-T",
            "application/json",
            "-d",
            r#"{"quantity":1}"#,
        ];
        run_oha(
            deducts
                .iter()
                .map(|a| a.to_string())
                .chain(options.iter().cloned()),
            url,
        )
        .await
    }

    /// Runs oha with `options` against `/healthz`, which publishes nothing
    /// and asks no other service: what the HTTP exchange alone costs.
    pub(super) async fn floor(&self, options: &[String]) -> anyhow::Result<Report> {
        let url = format!("http://127.0.0.1:{}/healthz", self.port);
        run_oha(options.iter().cloned(), url).await
    }

    pub(super) async fn stop(self) -> anyhow::Result<()> {
        self.process.stop().await
    }
}

/// Runs oha with `args` against `url`; its JSON report.
pub(super) async fn run_oha(
    args: impl Iterator<Item = String>,
    url: String,
) -> anyhow::Result<Report> {
    let output = tokio::process::Command::new(oha()?)
        .args(["--no-tui", "--output-format", "json"])
        .args(args)
        .arg(url)
        .output()
        .await
        .context("running oha")?;
    anyhow::ensure!(
        output.status.success(),
        "oha failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    Report::parse(&output.stdout)
}

/// What one oha run measured.
pub(super) struct Report {
    pub(super) requests: u64,
    pub(super) seconds: f64,
    /// Milliseconds.
    pub(super) p50: f64,
    pub(super) p99: f64,
    /// Responses by status, e.g. `{"200": 19990, "202": 10}`.
    pub(super) statuses: String,
    /// Responses with the expected status.
    pub(super) ok: u64,
}

impl Report {
    pub(super) fn parse(json: &[u8]) -> anyhow::Result<Self> {
        let v: Value = serde_json::from_slice(json).context("oha's JSON report")?;
        let ms = |name: &str| v["latencyPercentiles"][name].as_f64().unwrap_or(f64::NAN) * 1000.0;
        let statuses = &v["statusCodeDistribution"];
        let count = |status: &str| statuses[status].as_u64().unwrap_or(0);
        let requests = statuses
            .as_object()
            .map(|m| m.values().filter_map(Value::as_u64).sum())
            .unwrap_or(0);
        Ok(Self {
            requests,
            seconds: v["summary"]["total"].as_f64().unwrap_or(f64::NAN),
            p50: ms("p50"),
            p99: ms("p99"),
            statuses: statuses.to_string(),
            ok: count("200") + count("202"),
        })
    }
}
