//! The HTTP gateway under load: `stockledger serve` driven over loopback by
//! oha (a maintained HTTP load generator, installed by
//! `deploy/local/bench.sh`), next to the producer library on the same
//! pipeline.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use hdrhistogram::Histogram;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use stockledger_cli::Global;
use stockledger_client::Ledger;
use stockledger_redis::RedisConn;

mod http1;
mod serve;

use http1::{deduct_path, pipelined_load, Connections};
use serve::Gateway;

use crate::cpu::{shown, shown_per_million, ServiceCpu, Steal};
use crate::hops::{self, Caller, Hops};
use crate::pipeline::Pipeline;
use crate::{timeline, BenchArgs, Measurement};

/// SKUs the gateway scenarios spread their orders over (`SKU-00000` …).
const SKUS: usize = 100;

/// Deducts offered open loop at `rate` per second through the gateway, each
/// waiting for its decision (`?wait_ms=`), after a second of the same rate
/// that is not counted: the HTTP counterpart of the library's latency
/// scenario, timed the same way.
pub(crate) async fn fixed_rate(
    g: &Global,
    args: &BenchArgs,
    run_id: &str,
    scenario: &'static str,
    rate: u64,
    records: u64,
) -> anyhow::Result<Measurement> {
    let warm_up = rate;
    let per_sku = (warm_up + records) as i64;
    let mut pipeline = Pipeline::start_timed(g, args, run_id, scenario, SKUS, per_sku).await?;
    let steps = pipeline
        .take_hops()
        .context("a timed pipeline reports its steps")?;
    let gateway = Gateway::start(g, &pipeline).await?;
    let run = async {
        let connections = Arc::new(Connections::open(gateway.port, 200).await?);
        let offer = |i: u64| {
            let connections = connections.clone();
            async move {
                let path = format!("{}?wait_ms=10000", deduct_path(i));
                let answer = connections.post(&path, r#"{"quantity":1}"#, 200).await?;
                anyhow::Ok(timeline::Answer {
                    acked: None,
                    position: position_of(&answer),
                })
            }
        };
        timeline::open_loop(rate, 0, warm_up, offer).await?;
        let steal = Steal::now();
        let run = timeline::open_loop(rate, warm_up, records, offer).await?;
        anyhow::Ok((run, steal.percent_since()))
    }
    .await;
    gateway.stop().await?;
    pipeline.stop().await?;
    let (run, steal) = run?;
    let hops = Hops::of(&run.samples, &hops::steps(&steps), Caller::Redis, steal)?;
    let measurement = crate::e2e::latency_measurement(
        args,
        scenario,
        rate,
        &run,
        "the gateway (200 keep-alive connections)",
    )?;
    Ok(hops.add_to(measurement))
}

/// The command's partition and offset in a gateway's answer to it.
fn position_of(answer: &[u8]) -> Option<(i32, i64)> {
    let answer: Value = serde_json::from_slice(answer).ok()?;
    let position = &answer["position"];
    Some((
        i32::try_from(position["partition"].as_i64()?).ok()?,
        position["offset"].as_i64()?,
    ))
}

/// Connections the throughput scenario's HTTP clients keep open, and the
/// commands the library keeps in flight for the comparison at equal
/// concurrency.
const CLIENTS: usize = 256;

/// As many deducts as the gateway takes (answered `202` once in the log),
/// after the producer library publishes the same number on the same
/// pipeline, with as many commands in flight as the gateway has clients
/// (tuned as the gateway's producer is) and with the e2e scenarios'
/// `--in-flight` (as a bulk loader): the rates side by side, with the CPU
/// the gateway and oha each spent a request.
pub(crate) async fn throughput(
    g: &Global,
    args: &BenchArgs,
    run_id: &str,
    scenario: &'static str,
    records: u64,
) -> anyhow::Result<Measurement> {
    let pipeline =
        Pipeline::start(g, args, run_id, scenario, SKUS, 3 * records as i64, true).await?;
    // At the gateway's concurrency the library is tuned as the gateway's
    // producer is (for latency); at the e2e scenarios' as a bulk loader.
    let like_the_gateway = pipeline.waiting_ledger(None).await?;
    let mut library = Vec::new();
    for (producer, in_flight) in [
        (&like_the_gateway, CLIENTS),
        (&pipeline.producer, args.in_flight),
    ] {
        let started = Instant::now();
        pipeline.publish_by(producer, 0..records, in_flight).await?;
        library.push(records as f64 / started.elapsed().as_secs_f64());
    }
    drop(like_the_gateway);
    // The applier catches up first, so the gateway does not share the CPU
    // with the library's backlog.
    pipeline.wait_applied(2 * records).await?;
    let redis = RedisConn::connect(&g.redis_url).await?;
    let gateway = Gateway::start(g, &pipeline).await?;
    let options = [
        "-n".into(),
        records.to_string(),
        "-c".into(),
        CLIENTS.to_string(),
    ];
    let spent = Spent::now(&gateway, &redis).await?;
    let machine = crate::cpu::MachineCpu::now();
    let report = gateway.load(&options, "").await;
    let machine_cpu = machine.since();
    let deducts_spent = Spent::now(&gateway, &redis).await?;
    let floor = gateway.floor(&options).await;
    let floor_spent = Spent::now(&gateway, &redis).await?;
    gateway.stop().await?;
    pipeline.stop().await?;
    let (report, floor) = (report?, floor?);
    let rate = report.ok as f64 / report.seconds;
    let cpu = format!(
        "; CPU s per million requests: {}; /healthz on the same gateway (the HTTP exchange \
         alone: nothing published, no Redis) {:.0}/s, p50 {:.1} ms, CPU s per million: the \
         gateway {}, oha {}",
        spent.per_million(&deducts_spent, report.requests),
        floor.ok as f64 / floor.seconds,
        floor.p50,
        shown_per_million(deducts_spent.gateway, floor_spent.gateway, floor.requests),
        shown_per_million(deducts_spent.oha, floor_spent.oha, floor.requests),
    );
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
             flight (same topic, same run); p50 {:.1} ms, p99 {:.1} ms; statuses {}{cpu}",
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
        instructions: None,
        machine_cpu,
        hops: None,
    })
}

/// CPU seconds so far of the gateway, of oha (the only child of the bench
/// process that ends meanwhile) and of the services behind the gateway.
struct Spent {
    gateway: Option<f64>,
    oha: Option<f64>,
    services: ServiceCpu,
}

impl Spent {
    async fn now(gateway: &Gateway, redis: &RedisConn) -> anyhow::Result<Self> {
        Ok(Self {
            gateway: gateway.process.pid().and_then(crate::cpu::pid_cpu),
            oha: crate::cpu::ended_children_cpu(),
            services: ServiceCpu::now(redis, &[], None).await?,
        })
    }

    /// What each process spent from `self` to `later` per million of
    /// `requests`, named.
    fn per_million(&self, later: &Self, requests: u64) -> String {
        let services = self.services.per_million(&later.services, requests);
        format!(
            "the gateway {}, oha {}, the applier (the bench process) {:.1}, Redis {:.1}, \
             the broker {}",
            shown_per_million(self.gateway, later.gateway, requests),
            shown_per_million(self.oha, later.oha, requests),
            services.producers,
            services.redis,
            shown(services.broker),
        )
    }
}

/// Each step of the pipelining scenario: the requests a connection writes
/// before reading their answers, and the step's name.
const DEPTHS: [(usize, &str); 3] = [
    (1, "gateway-pipelined-1"),
    (4, "gateway-pipelined-4"),
    (16, "gateway-pipelined-16"),
];

/// HTTP/1.1 pipelining as a lever: the deducts of gateway-max (answered
/// `202` once in the log), [`CLIENTS`] in flight in every step, sent by
/// this bench's own client (so the client costs the same in each step)
/// over `CLIENTS / depth` keep-alive connections, each writing `depth`
/// requests at once and then reading their answers. The rate and the
/// gateway's CPU a request of each step.
pub(crate) async fn pipelined(
    g: &Global,
    args: &BenchArgs,
    run_id: &str,
    records: u64,
) -> anyhow::Result<Vec<Measurement>> {
    // Each connection's first request is not timed: the gateway's first
    // produce (metadata, connections) belongs to no step.
    let warm_up = CLIENTS as u64;
    let sent = warm_up + records * DEPTHS.len() as u64;
    let pipeline = Pipeline::start(
        g,
        args,
        run_id,
        "gateway-pipelined",
        SKUS,
        sent as i64,
        true,
    )
    .await?;
    let gateway = Gateway::start(g, &pipeline).await?;
    let steps = async {
        pipelined_load(gateway.port, CLIENTS, 1, 0..warm_up)
            .await
            .context("warming up")?;
        let mut results = Vec::new();
        let mut from = warm_up;
        for (depth, scenario) in DEPTHS {
            let cpu_before = gateway.process.pid().and_then(crate::cpu::pid_cpu);
            let started = Instant::now();
            let machine = crate::cpu::MachineCpu::now();
            pipelined_load(gateway.port, CLIENTS / depth, depth, from..from + records)
                .await
                .context(scenario)?;
            let (seconds, machine_cpu) = (started.elapsed().as_secs_f64(), machine.since());
            let cpu_after = gateway.process.pid().and_then(crate::cpu::pid_cpu);
            from += records;
            let cpu = shown_per_million(cpu_before, cpu_after, records);
            let m = Measurement {
                scenario,
                records,
                seconds,
                setup: format!(
                    "{} connections × {depth} pipelined requests, no wait (202 once in the log), this bench's client; the gateway's CPU {cpu} s per million requests",
                    CLIENTS / depth
                ),
                latency_ms: None,
                peak_rss_mib: None,
                failed: None,
                instructions: None,
                machine_cpu,
                hops: None,
            };
            crate::print_measurement(&m);
            results.push(m);
        }
        anyhow::Ok(results)
    }
    .await;
    gateway.stop().await?;
    pipeline.stop().await?;
    steps
}

/// SKUs the fan-out scenario's streams follow, a share each.
const FANOUT_SKUS: usize = 10;

/// Sends `records` commands of [`Pipeline::flip`], one every `1/rate` s,
/// one after another (a SKU's rollback never overtakes its deduct),
/// through `producer`. Returns when
/// each was sent, by its position in the log.
async fn flip_at(
    pipeline: &Pipeline,
    producer: &Ledger,
    rate: u64,
    records: u64,
) -> anyhow::Result<HashMap<(i32, i64), Instant>> {
    let mut sent = HashMap::new();
    let mut ticker = tokio::time::interval(Duration::from_secs_f64(1.0 / rate as f64));
    for i in 0..records {
        ticker.tick().await;
        let at = Instant::now();
        let receipt = pipeline.flip(producer, i).await?;
        sent.insert((receipt.position.partition, receipt.position.offset), at);
    }
    Ok(sent)
}

/// Stock events fanned out to `streams` open event streams of the gateway
/// (`GET /v1/skus/{sku}/events`, a tenth of them on each of 10 SKUs):
/// `events` commands offered at `rate` per second, each selling out or
/// bringing back a SKU of one unit; every delivery timed from the produce
/// call to the event's arrival on the stream. Fails unless every stream
/// gets each of its SKU's events exactly once.
pub(crate) async fn sse_fanout(
    g: &Global,
    args: &BenchArgs,
    run_id: &str,
    streams: usize,
    events: u64,
    rate: u64,
) -> anyhow::Result<Measurement> {
    let name = "sse-fanout";
    let pipeline = Pipeline::start(g, args, run_id, name, FANOUT_SKUS, 1, true).await?;
    let gateway = Gateway::start(g, &pipeline).await?;
    let port = gateway.port;
    // Every stream open and past its opening snapshot before the clock starts.
    let per_sku = events / FANOUT_SKUS as u64;
    let mut clients = Vec::with_capacity(streams);
    let (opened, mut open) = tokio::sync::mpsc::channel::<()>(streams);
    for j in 0..streams {
        let sku = pipeline.sku(j as u64);
        let opened = opened.clone();
        clients.push(tokio::spawn(follow(port, sku, per_sku, opened)));
    }
    drop(opened);
    for _ in 0..streams {
        tokio::time::timeout(Duration::from_secs(60), open.recv())
            .await
            .context("the streams did not all open within 60 s")?
            .context("a stream failed to open")?;
    }
    let producer = pipeline.waiting_ledger(None).await?;
    let started = Instant::now();
    let sent = flip_at(&pipeline, &producer, rate, per_sku * FANOUT_SKUS as u64).await?;
    let mut latencies = Histogram::<u64>::new(3)?;
    let mut failures = Vec::new();
    let mut deliveries = 0u64;
    for client in clients {
        match client.await.context("stream task")? {
            Ok(received) => {
                for (position, at) in received {
                    match sent.get(&position) {
                        Some(sent_at) => {
                            latencies.record(at.duration_since(*sent_at).as_micros() as u64)?;
                            deliveries += 1;
                        }
                        None => failures.push(format!("an event of no command sent: {position:?}")),
                    }
                }
            }
            Err(e) => failures.push(format!("{e:#}")),
        }
    }
    let seconds = started.elapsed().as_secs_f64();
    gateway.stop().await?;
    pipeline.stop().await?;
    failures.dedup();
    let [p50, p99, p999] = crate::percentiles_ms(&latencies);
    Ok(Measurement {
        scenario: name,
        records: deliveries,
        seconds,
        setup: format!(
            "{streams} streams over {FANOUT_SKUS} SKUs, {} events offered at {rate}/s, each to {} streams: delivery p50 {p50:.1} ms, p99 {p99:.1} ms, p999 {p999:.1} ms (produce call to arrival)",
            per_sku * FANOUT_SKUS as u64,
            streams / FANOUT_SKUS
        ),
        latency_ms: Some([p50, p99, p999]),
        peak_rss_mib: None,
        failed: (!failures.is_empty()).then(|| failures.into_iter().take(3).collect::<Vec<_>>().join("; ")),
        instructions: None,
        machine_cpu: None,
        hops: None,
    })
}

/// One event stream of `sku` (HTTP/1.0, so the body is the bare stream):
/// says when its opening snapshot came, then returns when each of the
/// `expected` events arrived, by its causing record's position; fails on an
/// event twice, or on fewer within a minute of the last.
async fn follow(
    port: u16,
    sku: String,
    expected: u64,
    opened: tokio::sync::mpsc::Sender<()>,
) -> anyhow::Result<Vec<((i32, i64), Instant)>> {
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
    let request = format!(
        "GET /v1/skus/{sku}/events HTTP/1.0\r\nHost: bench\r\nAccept: text/event-stream\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).await?;
    let mut buffer: Vec<u8> = Vec::with_capacity(8192);
    let mut received = Vec::new();
    let mut seen = std::collections::HashSet::new();
    let mut head_done = false;
    let mut chunk = [0u8; 8192];
    while (received.len() as u64) < expected {
        let n = tokio::time::timeout(Duration::from_secs(60), stream.read(&mut chunk))
            .await
            .with_context(|| {
                format!(
                    "{sku}: {} of {expected} events, then silence",
                    received.len()
                )
            })??;
        anyhow::ensure!(
            n > 0,
            "{sku}: the stream ended after {} events",
            received.len()
        );
        let at = Instant::now();
        buffer.extend_from_slice(&chunk[..n]);
        if !head_done {
            let Some(end) = buffer.windows(4).position(|w| w == b"\r\n\r\n") else {
                continue;
            };
            anyhow::ensure!(
                buffer.starts_with(b"HTTP/1.0 200") || buffer.starts_with(b"HTTP/1.1 200"),
                "{sku}: {}",
                String::from_utf8_lossy(&buffer[..end])
            );
            buffer.drain(..end + 4);
            head_done = true;
        }
        while let Some(end) = buffer.windows(2).position(|w| w == b"\n\n") {
            let message: Vec<u8> = buffer.drain(..end + 2).collect();
            let text = String::from_utf8_lossy(&message);
            let field = |name: &str| {
                text.lines()
                    .find_map(|l| l.strip_prefix(name))
                    .map(|v| v.trim_start().to_owned())
            };
            match field("event:").as_deref() {
                Some("stock") => {
                    let _ = opened.send(()).await;
                }
                Some(_) => {
                    let data: Value = serde_json::from_str(&field("data:").unwrap_or_default())?;
                    let position = (
                        data["position"]["partition"].as_i64().unwrap_or(-1) as i32,
                        data["position"]["offset"].as_i64().unwrap_or(-1),
                    );
                    anyhow::ensure!(
                        seen.insert(position),
                        "{sku}: the event of {position:?} twice"
                    );
                    received.push((position, at));
                }
                // A comment (the greeting, a keep-alive).
                None => {}
            }
        }
    }
    Ok(received)
}
