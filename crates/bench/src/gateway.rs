//! The HTTP gateway under load: `stockledger serve` driven over loopback by
//! oha (a maintained HTTP load generator, installed by
//! `deploy/local/bench.sh`), next to the producer library on the same
//! pipeline.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Context;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use stockledger_cli::Global;

use crate::pipeline::Pipeline;
use crate::process::Component;
use crate::{BenchArgs, Measurement};

/// SKUs the gateway scenarios spread their orders over (`SKU-00000` …).
const SKUS: usize = 100;

/// The oha binary: `STOCKLEDGER_OHA`, else where bench.sh installs it,
/// else `oha` on the PATH.
fn oha() -> anyhow::Result<PathBuf> {
    if let Some(path) = std::env::var_os("STOCKLEDGER_OHA") {
        return Ok(PathBuf::from(path));
    }
    let home = std::env::var_os("STOCKLEDGER_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".stockledger")));
    if let Some(installed) = home.map(|h| h.join("oha/bin/oha")).filter(|p| p.exists()) {
        return Ok(installed);
    }
    std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
        .map(|dir| dir.join("oha"))
        .find(|p| p.exists())
        .context("no oha binary: deploy/local/bench.sh installs it, or set STOCKLEDGER_OHA")
}

/// A gateway serving the pipeline's topic and prefix on a free port.
struct Gateway {
    process: Component,
    port: u16,
}

impl Gateway {
    async fn start(g: &Global, pipeline: &Pipeline) -> anyhow::Result<Self> {
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
    async fn ready(&self) -> bool {
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
    async fn load(&self, options: &[String], query: &str) -> anyhow::Result<Report> {
        let url = format!(
            "http://127.0.0.1:{}/v1/skus/SKU-000[0-9]{{2}}/orders/o[a-z0-9]{{24}}/deduct{query}",
            self.port
        );
        let output = tokio::process::Command::new(oha()?)
            .args(["--no-tui", "--output-format", "json", "--rand-regex-url"])
            .args([
                "-m",
                "POST",
                "-T",
                "application/json",
                "-d",
                r#"{"quantity":1}"#,
            ])
            .args(options)
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

    async fn stop(self) -> anyhow::Result<()> {
        self.process.stop().await
    }
}

/// What one oha run measured.
struct Report {
    requests: u64,
    seconds: f64,
    /// Milliseconds.
    p50: f64,
    p99: f64,
    p999: f64,
    /// Responses by status, e.g. `{"200": 19990, "202": 10}`.
    statuses: String,
    /// Responses with the expected status.
    ok: u64,
}

impl Report {
    fn parse(json: &[u8]) -> anyhow::Result<Self> {
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
            p999: ms("p99.9"),
            statuses: statuses.to_string(),
            ok: count("200") + count("202"),
        })
    }
}

/// Deducts offered at `rate` per second, each waiting for its decision
/// (`?wait_ms=`): the HTTP counterpart of the library's latency scenario.
pub(crate) async fn fixed_rate(
    g: &Global,
    args: &BenchArgs,
    run_id: &str,
    scenario: &'static str,
    rate: u64,
    records: u64,
) -> anyhow::Result<Measurement> {
    let pipeline = Pipeline::start(g, args, run_id, scenario, SKUS, records as i64, true).await?;
    let gateway = Gateway::start(g, &pipeline).await?;
    let report = gateway
        .load(
            &[
                "-q".into(),
                rate.to_string(),
                "-n".into(),
                records.to_string(),
                "-c".into(),
                "200".into(),
            ],
            r"\?wait_ms=10000",
        )
        .await;
    gateway.stop().await?;
    pipeline.stop().await?;
    let report = report?;
    Ok(Measurement {
        scenario,
        records: report.ok,
        seconds: report.seconds,
        setup: format!(
            "oha offering {rate}/s over {SKUS} SKUs, 200 connections, each waiting for its \
             decision: p50 {:.1} ms, p99 {:.1} ms, p999 {:.1} ms; statuses {}",
            report.p50, report.p99, report.p999, report.statuses
        ),
        latency_ms: Some([report.p50, report.p99, report.p999]),
        peak_rss_mib: None,
        failed: None,
    })
}

/// Connections the throughput scenario's HTTP clients keep open, and the
/// commands the library keeps in flight for the comparison at equal
/// concurrency.
const CLIENTS: usize = 256;

/// As many deducts as the gateway takes (answered `202` once in the log),
/// after the producer library publishes the same number on the same
/// pipeline, with as many commands in flight as the gateway has clients
/// and with the e2e scenarios' `--in-flight`: the rates side by side.
pub(crate) async fn throughput(
    g: &Global,
    args: &BenchArgs,
    run_id: &str,
    scenario: &'static str,
    records: u64,
) -> anyhow::Result<Measurement> {
    let pipeline =
        Pipeline::start(g, args, run_id, scenario, SKUS, 3 * records as i64, true).await?;
    let mut library = Vec::new();
    for in_flight in [CLIENTS, args.in_flight] {
        let started = Instant::now();
        pipeline.publish(records, in_flight).await?;
        library.push(records as f64 / started.elapsed().as_secs_f64());
    }
    // The applier catches up first, so the gateway does not share the CPU
    // with the library's backlog.
    pipeline.wait_applied(2 * records).await?;
    let gateway = Gateway::start(g, &pipeline).await?;
    let report = gateway
        .load(
            &[
                "-n".into(),
                records.to_string(),
                "-c".into(),
                CLIENTS.to_string(),
            ],
            "",
        )
        .await;
    gateway.stop().await?;
    pipeline.stop().await?;
    let report = report?;
    let rate = report.ok as f64 / report.seconds;
    anyhow::ensure!(
        report.requests == records,
        "oha sent {} of {records}",
        report.requests
    );
    Ok(Measurement {
        scenario,
        records: report.ok,
        seconds: report.seconds,
        setup: format!(
            "oha, {CLIENTS} connections, no wait (202 once in the log): {rate:.0}/s = {:.2}× \
             the library's {:.0}/s with {CLIENTS} in flight, {:.2}× its {:.0}/s with {} in \
             flight (same topic, same run); p50 {:.1} ms, p99 {:.1} ms; statuses {}",
            rate / library[0],
            library[0],
            rate / library[1],
            library[1],
            args.in_flight,
            report.p50,
            report.p99,
            report.statuses
        ),
        latency_ms: None,
        peak_rss_mib: None,
        failed: None,
    })
}
