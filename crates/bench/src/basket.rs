//! The basket scenario: concurrent buyers each hold a basket of three
//! lines on uniform SKUs and confirm it, the protocol of
//! `stockledger_client::basket` over an in-process applier.

use std::time::{Duration, Instant};

use anyhow::Context;
use hdrhistogram::Histogram;
use stockledger_cli::Global;
use stockledger_client::basket::{self, BasketHold, BasketStatus, Line};
use stockledger_client::Ledger;
use stockledger_core::{BasketId, Quantity, Sku};

use crate::contract::projection_differs;
use crate::pipeline::Pipeline;
use crate::{BenchArgs, Measurement};

/// Lines per basket.
const LINES: u64 = 3;

/// `baskets` baskets of [`LINES`] distinct SKUs among `skus`, held and
/// confirmed by `args.concurrency` buyers at once; the rate is baskets per
/// second (each six records), the latencies those of the hold and of the
/// confirm as the buyer sees them.
pub(crate) async fn basket(
    g: &Global,
    args: &BenchArgs,
    run_id: &str,
    skus: usize,
    baskets: u64,
) -> anyhow::Result<Measurement> {
    let skus = skus.max(LINES as usize);
    let name = "basket";
    // Twice the average: every hold is granted, so every basket is held.
    let per_sku = (2 * (baskets * LINES / skus as u64) + 10) as i64;
    let pipeline = Pipeline::start(g, args, run_id, name, skus, per_sku, true).await?;
    let settler = (pipeline.waiting_ledger(Some((&g.redis_url, Duration::from_secs(60))))).await?;
    let buyers = args.concurrency.clamp(1, baskets as usize);
    let started = Instant::now();
    let machine = crate::cpu::MachineCpu::now();
    let mut tasks = tokio::task::JoinSet::new();
    for buyer in 0..buyers as u64 {
        let (settler, run_id) = (settler.clone(), run_id.to_owned());
        let skus: Vec<String> = (0..skus as u64).map(|i| pipeline.sku(i)).collect();
        let numbers = (buyer..baskets).step_by(buyers);
        tasks.spawn(async move { buy(&settler, &run_id, &skus, numbers).await });
    }
    let (mut holds, mut confirms) = (Histogram::<u64>::new(3)?, Histogram::<u64>::new(3)?);
    while let Some(done) = tasks.join_next().await {
        let (h, c) = done.context("basket buyer")??;
        holds.add(h)?;
        confirms.add(c)?;
    }
    let (seconds, machine_cpu) = (started.elapsed().as_secs_f64(), machine.since());
    let (topic, prefix) = (pipeline.topic.clone(), pipeline.prefix.clone());
    pipeline.wait_applied(baskets * LINES * 2).await?;
    pipeline.stop().await?;
    let log_records = baskets * LINES * 2 + skus as u64;
    let failed = projection_differs(g, &topic, &prefix, log_records).await?;
    let [p50, p99, p999] = crate::percentiles_ms(&holds);
    let ms = crate::quantile_ms;
    Ok(Measurement {
        scenario: name,
        records: baskets,
        seconds,
        setup: format!(
            "baskets/s, not records: baskets of {LINES} lines over {skus} SKUs, {buyers} buyers each holding then confirming; \
             hold p50 {p50:.1} ms, p99 {p99:.1} ms, p999 {p999:.1} ms; confirm p50 {:.1} ms, p99 {:.1} ms; \
             {} records; contract checked",
            ms(&confirms, 0.50),
            ms(&confirms, 0.99),
            baskets * LINES * 2
        ),
        latency_ms: Some([p50, p99, p999]),
        peak_rss_mib: None,
        failed,
        instructions: None,
        machine_cpu,
        hops: None,
    })
}

/// One buyer: the baskets numbered `numbers`, each held and then
/// confirmed; how long the holds and the confirms took (µs).
async fn buy(
    settler: &Ledger,
    run_id: &str,
    skus: &[String],
    numbers: impl Iterator<Item = u64>,
) -> anyhow::Result<(Histogram<u64>, Histogram<u64>)> {
    let (mut holds, mut confirms) = (Histogram::<u64>::new(3)?, Histogram::<u64>::new(3)?);
    for n in numbers {
        // Three distinct SKUs, spread over the whole range.
        let first = (n * 7919) as usize % skus.len();
        let lines = (0..LINES as usize)
            .map(|k| {
                let sku = &skus[(first + k * (skus.len() / LINES as usize).max(1)) % skus.len()];
                Ok(Line {
                    sku: Sku::new(sku.as_str())?,
                    quantity: Quantity::new(1)?,
                })
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        let id = BasketId::new(format!("{run_id}-b{n}"))?;
        let deadline = stockledger_runtime::clock::now_ms() + 600_000;
        let hold = BasketHold::new(id.clone(), None, deadline, lines)?;
        let sent = Instant::now();
        let held = basket::hold(settler, &hold).await?;
        holds.record(sent.elapsed().as_micros() as u64)?;
        anyhow::ensure!(held.status == BasketStatus::Held, "{held:?}");
        let skus: Vec<Sku> = held.lines.iter().map(|l| l.sku.clone()).collect();
        let sent = Instant::now();
        let sold = basket::confirm(settler, &id, &skus).await?;
        confirms.record(sent.elapsed().as_micros() as u64)?;
        anyhow::ensure!(sold.status == BasketStatus::Confirmed, "{sold:?}");
    }
    Ok((holds, confirms))
}
