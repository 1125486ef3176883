//! Waiting for the sale to settle, and the contract's checks once it has:
//! what the log, Redis and the archive hold, compared with each other and
//! with what the buyers were told.

use std::time::Duration;

use sqlx::PgPool;
use stockledger_analysts::query;
use stockledger_core::{OrderStatus, ResultCode};
use stockledger_kafka::topic;
use stockledger_kafka::KafkaConfig;
use stockledger_projection::Projection;
use tokio::time::Instant;

use crate::workload::{SeatsSent, BASKET_SKUS, HOT_SKU, SHOW_SKU};

/// Waits until no hold of [`HOT_SKU`] or [`BASKET_SKUS`] is left (abandoned ones expire by
/// the applier's expire records) and the archive has a row for every
/// record of `topic`; returns the rows archived, or what was reached when
/// `timeout` ran out (the checks then say what is missing).
pub async fn settle(
    kafka: &KafkaConfig,
    pool: &PgPool,
    projection: &Projection,
    topic: &str,
    timeout: Duration,
) -> anyhow::Result<i64> {
    let deadline = Instant::now() + timeout;
    loop {
        let mut held = 0;
        for sku in [HOT_SKU, SHOW_SKU].into_iter().chain(BASKET_SKUS) {
            held += projection.read_sku(sku).await?.map_or(0, |s| s.reserved);
        }
        let rows = query::count_rows(pool, topic).await?;
        let done = held == 0 && rows >= topic::record_count(kafka, topic).await?;
        if done || Instant::now() >= deadline {
            return Ok(rows);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
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
    /// The baskets the shoppers used (none: no basket check).
    pub baskets: &'a [stockledger_core::BasketId],
    /// What the cinema's parties were told (`None`: no show, no check).
    pub seats: Option<&'a SeatsSent>,
    /// When the hot SKU's sale window opened (`None`: no window, no check).
    pub opens_at: Option<i64>,
}

/// The contract, once the sale has settled: stock never below zero
/// (archive and Redis), Redis equal to the reference fold of the whole log,
/// one archived row per log record, every reservation ended (confirmed,
/// released or expired), no user above the per-user limit; and, when the
/// run had baskets, every basket sold whole or not at all.
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
    let reference = stockledger_maintenance::check::fold(&records, partitions);
    let mismatches = stockledger_maintenance::check::compare(run.projection, &reference).await?;
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
    checks.push(check_reservations(run, state.as_ref()).await?);
    let limit = state.as_ref().and_then(|s| s.limit);
    let highest = state
        .as_ref()
        .and_then(|s| s.users.values().max().copied())
        .unwrap_or(0);
    checks.push(Check {
        ok: limit.is_none_or(|l| highest <= l),
        what: format!(
            "no user above the per-user limit (highest {highest}, limit {})",
            limit.map_or("none".into(), |l| l.to_string())
        ),
    });
    if !run.baskets.is_empty() {
        checks.push(check_baskets(run).await?);
    }
    if let Some(seats) = run.seats {
        checks.push(check_seats(run.projection, seats).await?);
    }
    if let Some(opens_at) = run.opens_at {
        checks.push(check_opening(&records, state.as_ref(), opens_at));
    }
    Ok(checks)
}

/// No reservation of the hot SKU was granted before its sale opened, by
/// the log's own timestamps, as Redis decided them; and some came before
/// the opening (refused), or the check would prove nothing.
fn check_opening(
    records: &[topic::LogRecord],
    state: Option<&stockledger_core::SkuState>,
    opens_at: i64,
) -> Check {
    let (mut early_granted, mut refused) = (0, 0);
    for record in records {
        let hot = record.key.as_deref() == Some(HOT_SKU.as_bytes());
        let deduct = hot
            && (record.payload.as_deref())
                .and_then(|p| stockledger_core::codec::decode_command(p).ok())
                .is_some_and(|c| matches!(c.body, stockledger_core::CommandBody::Deduct(_)));
        let decision = state.and_then(|s| s.decisions.get(&record.offset));
        let (Some(decision), true) = (decision, deduct) else {
            continue;
        };
        let early = record.timestamp.is_some_and(|t| t < opens_at);
        match decision.result {
            ResultCode::Applied if early => early_granted += 1,
            ResultCode::RejectedNotOpen => refused += 1,
            _ => {}
        }
    }
    Check {
        ok: early_granted == 0 && refused > 0,
        what: format!(
            "no order granted before the sale opened at {} ({refused} reservations came \
             early and were refused REJECTED_NOT_OPEN, {early_granted} granted early)",
            stockledger_runtime::clock::rfc3339_ms(opens_at)
        ),
    }
}

/// Every reservation of the hot SKU granted ended confirmed, released or
/// expired; none is still held.
async fn check_reservations(
    run: &Run<'_>,
    state: Option<&stockledger_core::SkuState>,
) -> anyhow::Result<Check> {
    let counts = query::count_by_command_and_result(run.pool, run.topic, HOT_SKU).await?;
    let granted: i64 = counts
        .iter()
        .filter(|(c, r, _)| c.as_deref() == Some("DEDUCT") && r == ResultCode::Applied.as_str())
        .map(|(_, _, n)| n)
        .sum();
    let status = |wanted: OrderStatus| {
        state.map_or(0, |s| {
            s.orders
                .values()
                .filter(|o| o.expires_at.is_some() && o.status == wanted)
                .count() as i64
        })
    };
    let (held, confirmed, released, expired) = (
        status(OrderStatus::Reserved),
        status(OrderStatus::Confirmed),
        status(OrderStatus::RolledBack),
        status(OrderStatus::Expired),
    );
    Ok(Check {
        ok: held == 0 && confirmed + released + expired == granted,
        what: format!(
            "every reservation ended confirmed, released or expired ({granted} granted = \
             {confirmed} confirmed + {released} released + {expired} expired; {held} still held)"
        ),
    })
}

/// Every seat of the show is free or sold to the one party told it bought
/// it; none is still held, none was sold twice.
async fn check_seats(projection: &Projection, told: &SeatsSent) -> anyhow::Result<Check> {
    use stockledger_core::Unit;
    let map = projection.units(SHOW_SKU).await?;
    let (mut free, mut sold, mut held, mut wrong) = (0, 0, 0, Vec::new());
    for (seat, unit) in &map {
        let buyer = told.sold.get(seat);
        match unit {
            Unit::Available if buyer.is_none() => free += 1,
            Unit::Sold(order) if buyer == Some(order) => sold += 1,
            Unit::Held(_) => held += 1,
            other => wrong.push(format!("{seat} is {other:?}, its party was told {buyer:?}")),
        }
    }
    let unseen = told.sold.len() - sold.min(told.sold.len());
    Ok(Check {
        ok: wrong.is_empty() && held == 0 && told.sold_twice.is_empty() && unseen == 0,
        what: format!(
            "every seat free or sold to the one party told so ({} seats = {free} free + {sold} \
             sold; {held} still held; {} sold twice; {} seats disagree{})",
            map.len(),
            told.sold_twice.len(),
            wrong.len() + unseen,
            wrong
                .first()
                .map(|w| format!(", first {w}"))
                .unwrap_or_default()
        ),
    })
}

/// Every basket of the run sold whole or not at all, and none still held.
async fn check_baskets(run: &Run<'_>) -> anyhow::Result<Check> {
    use stockledger_client::basket::{self, BasketStatus, LineState};
    let (mut whole, mut none, mut partial, mut held) = (0, 0, Vec::new(), 0);
    for id in run.baskets {
        let Some(b) = basket::read(run.projection, id).await? else {
            none += 1;
            continue;
        };
        held += (b.lines.iter())
            .filter(|l| l.state == LineState::Held)
            .count();
        // Where it stands as the core's judge of baskets says (held lines
        // are counted apart: none may be left).
        match b.status {
            BasketStatus::Confirmed => whole += 1,
            BasketStatus::Partial | BasketStatus::Failed => partial.push(id.to_string()),
            BasketStatus::Held
            | BasketStatus::Pending
            | BasketStatus::Refused
            | BasketStatus::Released => none += 1,
        }
    }
    Ok(Check {
        ok: partial.is_empty() && held == 0,
        what: format!(
            "every basket sold whole or not at all ({} baskets = {whole} sold whole + {none} \
             not sold; {} partly sold{}; {held} lines still held)",
            run.baskets.len(),
            partial.len(),
            partial
                .first()
                .map(|p| format!(", first {p}"))
                .unwrap_or_default()
        ),
    })
}
