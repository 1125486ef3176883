//! The seat-map scenario: concurrent readers of a show's seat map (the
//! cinema seed's hottest query), straight from the projection.

use std::time::Instant;

use hdrhistogram::Histogram;
use stockledger_cli::Global;
use stockledger_core::{
    AdjustmentId, Command, CommandBody, CommandId, Confirm, Deduct, OrderId, Restock, ResultCode,
    Sku,
};
use stockledger_demo::seat_name;
use stockledger_projection::{Entry, Projection};

use crate::Measurement;

/// Seats of the benchmarked hall: a large cinema hall.
const SEATS: usize = 300;

/// Seats per order of the hall's state: a third of the hall is held or
/// sold in parties of this size before the readers start.
const PARTY: usize = 2;

/// `reads` reads of the seat map of one show of [`SEATS`] seats (a third
/// of them held or sold), by `clients` concurrent readers each on its own
/// connection; the rate is seat maps per second, the latencies each
/// read's as the reader sees it.
pub(crate) async fn seat_map(
    g: &Global,
    run_id: &str,
    reads: u64,
    clients: usize,
) -> anyhow::Result<Measurement> {
    let name = "seat-map";
    let prefix = format!("{}:{run_id}:{name}", g.prefix);
    let sku = "SHOW-1";
    let projection = Projection::connect(&g.redis_url, prefix.clone()).await?;
    projection.mark("bench", 1).await?;
    let commands = hall(sku)?;
    let entries = commands.iter().enumerate().map(|(offset, c)| Entry {
        partition: 0,
        offset: offset as i64,
        timestamp: stockledger_runtime::clock::now_ms(),
        command: Some(c),
    });
    let decisions = projection.apply(&projection.prepare(entries, 1)).await?;
    anyhow::ensure!(
        decisions
            .iter()
            .all(|d| matches!(d.result, ResultCode::Applied | ResultCode::Confirmed)),
        "the hall was not set up: {decisions:?}"
    );
    let clients = clients.clamp(1, reads.max(1) as usize);
    let started = Instant::now();
    let tasks = (0..clients).map(|c| {
        let prefix = prefix.clone();
        async move {
            // A connection of its own, as each gateway or reader would have.
            let reader = Projection::connect(&g.redis_url, prefix).await?;
            let mut latencies = Histogram::<u64>::new(3)?;
            for _ in (c as u64..reads).step_by(clients) {
                let sent = Instant::now();
                let map = reader.seat_map(sku).await?;
                latencies.record(sent.elapsed().as_micros() as u64)?;
                anyhow::ensure!(map.len() == SEATS, "a seat map of {} seats", map.len());
            }
            anyhow::Ok(latencies)
        }
    });
    let mut latencies = Histogram::<u64>::new(3)?;
    for h in futures::future::try_join_all(tasks).await? {
        latencies.add(h)?;
    }
    let seconds = started.elapsed().as_secs_f64();
    let [p50, p99, p999] = crate::percentiles_ms(&latencies);
    Ok(Measurement {
        scenario: name,
        records: reads,
        seconds,
        setup: format!(
            "seat maps/s, not records: one show of {SEATS} named seats (a third held or sold), \
             {clients} readers each on its own connection, one HMGET of two fields a read; \
             p50 {p50:.2} ms, p99 {p99:.2} ms, p999 {p999:.2} ms"
        ),
        latency_ms: Some([p50, p99, p999]),
        peak_rss_mib: None,
        failed: None,
        instructions: None,
        machine_cpu: None,
        hops: None,
    })
}

/// The show's commands: its seats (named as the demo's hall) put on sale, then a third of them held
/// in parties of [`PARTY`], every other party confirmed.
fn hall(sku: &str) -> anyhow::Result<Vec<Command>> {
    let seats: Vec<String> = (0..SEATS).map(seat_name).collect();
    let mut bodies = vec![CommandBody::Restock(Restock::units(
        AdjustmentId::new("hall")?,
        &seats,
    )?)];
    let deadline = stockledger_runtime::clock::now_ms() + 3_600_000;
    for (party, taken) in seats[..SEATS / 3].chunks(PARTY).enumerate() {
        let order = OrderId::new(format!("party-{party}"))?;
        bodies.push(CommandBody::Deduct(Deduct {
            expires_at: Some(deadline),
            ..Deduct::for_units(order.clone(), taken)?
        }));
        if party % 2 == 0 {
            bodies.push(CommandBody::Confirm(Confirm { order_id: order }));
        }
    }
    bodies
        .into_iter()
        .enumerate()
        .map(|(i, body)| {
            Ok(Command {
                command_id: CommandId::new(format!("hall-{i}"))?,
                sku: Sku::new(sku)?,
                occurred_at: 0,
                body,
            })
        })
        .collect()
}
