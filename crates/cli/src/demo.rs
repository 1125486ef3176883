//! The flash sale of `stockledger demo`, as a library the tests use too:
//! the buyers' workload and the contract's checks.

use std::time::Duration;

use futures::future::try_join_all;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use sqlx::PgPool;
use stockledger_archiver::query;
use stockledger_client::LedgerProducer;
use stockledger_io::topic;
use stockledger_io::KafkaConfig;
use stockledger_projection::Projection;

/// The SKU every buyer wants.
pub const HOT_SKU: &str = "DEMO-HOT";

/// Who buys, and how they misbehave.
#[derive(Debug, Clone, Copy)]
pub struct Workload {
    /// Orders placed in total.
    pub orders: usize,
    /// Concurrent buyers placing them (order `i` is buyer `i % buyers`'s).
    pub buyers: usize,
    /// Percent of orders cancelled after their deduct (rolled back).
    pub cancel_percent: u32,
    /// Percent of orders whose deduct is sent twice (a client retry).
    pub duplicate_percent: u32,
    /// Percent of orders whose rollback is sent before their deduct.
    pub early_rollback_percent: u32,
    /// Seed of each buyer's random choices.
    pub seed: u64,
}

/// What the buyers sent.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Sent {
    pub records: u64,
    pub cancelled: u64,
    pub duplicated: u64,
    pub early_rollbacks: u64,
}

impl std::ops::AddAssign for Sent {
    fn add_assign(&mut self, o: Self) {
        self.records += o.records;
        self.cancelled += o.cancelled;
        self.duplicated += o.duplicated;
        self.early_rollbacks += o.early_rollbacks;
    }
}

/// Lets `workload.buyers` concurrent buyers place their orders of one unit
/// of [`HOT_SKU`] through `producer`; returns what they sent.
pub async fn buy(producer: &LedgerProducer, workload: &Workload) -> anyhow::Result<Sent> {
    anyhow::ensure!(workload.buyers > 0, "buyers must be at least 1");
    let buyers = (0..workload.buyers).map(|buyer| async move {
        let w = workload;
        let mut rng = StdRng::seed_from_u64(w.seed.wrapping_add(buyer as u64));
        let mut sent = Sent::default();
        for order in (buyer..w.orders).step_by(w.buyers) {
            let order_id = format!("order-{order}");
            let roll: u32 = rng.gen_range(0..100);
            if roll < w.early_rollback_percent {
                producer
                    .rollback(HOT_SKU, &order_id, Some("cancelled before paying"))
                    .await?;
                producer.deduct(HOT_SKU, &order_id, 1).await?;
                sent.early_rollbacks += 1;
                sent.records += 2;
            } else if roll < w.early_rollback_percent + w.cancel_percent {
                producer.deduct(HOT_SKU, &order_id, 1).await?;
                producer
                    .rollback(HOT_SKU, &order_id, Some("cancelled"))
                    .await?;
                sent.cancelled += 1;
                sent.records += 2;
            } else if roll < w.early_rollback_percent + w.cancel_percent + w.duplicate_percent {
                producer.deduct(HOT_SKU, &order_id, 1).await?;
                producer.deduct(HOT_SKU, &order_id, 1).await?;
                sent.duplicated += 1;
                sent.records += 2;
            } else {
                producer.deduct(HOT_SKU, &order_id, 1).await?;
                sent.records += 1;
            }
        }
        Ok::<_, anyhow::Error>(sent)
    });
    let mut sent = Sent::default();
    for s in try_join_all(buyers).await? {
        sent += s;
    }
    Ok(sent)
}

/// One of the contract's checks, passed or failed, and what it compared.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Check {
    pub ok: bool,
    pub what: String,
}

/// Where a run's log, projection and archive are.
#[derive(Debug)]
pub struct Run<'a> {
    pub kafka: &'a KafkaConfig,
    pub pool: &'a PgPool,
    pub projection: &'a Projection,
    /// The command topic.
    pub topic: &'a str,
    /// Rows archived for it when the pipeline caught up.
    pub archived: i64,
}

/// The contract, once the pipeline has caught up: stock never below zero
/// (archive and Redis), Redis equal to the reference fold of the whole log,
/// one archived row per log record.
pub async fn check_contract(run: &Run<'_>, timeout: Duration) -> anyhow::Result<Vec<Check>> {
    let mut checks = Vec::new();
    let lowest = query::min_available(run.pool, run.topic).await?;
    let state = run.projection.read_sku(HOT_SKU).await?;
    let redis_available = state.as_ref().map_or(0, |s| s.available);
    checks.push(Check {
        ok: lowest.is_some_and(|l| l >= 0) && redis_available >= 0,
        what: format!(
            "stock never below zero (lowest archived {}, Redis {redis_available})",
            lowest.map_or("none".into(), |l| l.to_string())
        ),
    });
    let records = topic::read_topic(run.kafka, run.topic, timeout).await?;
    let partitions = topic::partition_count(run.kafka, run.topic).await?;
    let reference = stockledger_applier::check::fold(&records, partitions);
    let mismatches = stockledger_applier::check::compare(run.projection, &reference).await?;
    checks.push(Check {
        ok: mismatches.is_empty(),
        what: format!(
            "Redis equals the reference fold of the log ({} SKU, {} records){}",
            reference.skus.len(),
            records.len(),
            mismatches
                .iter()
                .map(|m| format!("\n        {m}"))
                .collect::<String>()
        ),
    });
    checks.push(Check {
        ok: run.archived == records.len() as i64,
        what: format!(
            "archive rows equal log records ({} = {})",
            run.archived,
            records.len()
        ),
    });
    Ok(checks)
}
