//! The baskets' settler: no basket stays partly sold.
//!
//! A basket's confirm sends one confirm per line; a caller that dies
//! half-way, or whose confirm of one line fails after another was sold,
//! leaves the basket partly sold until it asks again. So the applier
//! settles it: the fold keeps every basket among the open ones, scored by
//! its holds' deadline ([`keys::open_baskets_key`]). Past the deadline
//! each line is sold or given back, or about to be (its expire is on the
//! way). About once a second the settler reads each due basket's lines
//! and asks the core's judge of baskets
//! ([`stockledger_core::basket::settlement`]):
//!
//! - a line still held, or in the log and not decided: not settled yet,
//!   looked at again after [`RECHECK_MS`];
//! - every line sold, or none: settled, taken off the open ones;
//! - some sold and some given back (expired, rolled back, refused): a
//!   refund of everything is appended for each sold line, stamped now, and
//!   the basket is looked at again, until none is sold. A line sold and
//!   then refunded counts as neither: an operator may refund one line of a
//!   basket sold whole, and that is not undone.
//!
//! A refund is a running total, so one sent twice (by two appliers, or
//! after a crash) refunds once. A line given back can never be sold again
//! (its order is ended), so undoing the sold lines is the only way to a
//! whole basket.
//!
//! [`keys::open_baskets_key`]: stockledger_projection::keys::open_baskets_key

use std::time::Duration;

use rdkafka::producer::{BaseRecord, ThreadedProducer};
use stockledger_core::codec;

use crate::deliveries::{Reports, UNTRACKED};
use stockledger_core::basket::{settlement, LineStanding, Settlement};
use stockledger_core::report::Chain;
use stockledger_core::{Command, CommandBody, CommandId, OrderId, Refund, Sku};
use stockledger_projection::{Projection, ProjectionError};
use tracing::{debug, warn};

/// How often the settler looks for due baskets.
pub const INTERVAL: Duration = Duration::from_secs(1);

/// How long a basket not settled yet waits before it is looked at again.
pub const RECHECK_MS: i64 = 2_000;

/// Most baskets looked at per look.
const PAGE: usize = 200;

/// Counter: refunds the settler appended for lines of baskets partly sold.
pub const REFUNDS_METRIC: &str = "stockledger_applier_basket_refunds_sent_total";

/// The refund of everything `order` bought of `sku`, stamped `now`; its
/// command id names the partition, the instant and `seq`.
pub fn refund_command(
    sku: &str,
    order: &str,
    partition: i32,
    now: i64,
    seq: usize,
) -> Option<Command> {
    Some(Command {
        command_id: CommandId::new(format!("basket-refund-{partition}-{now}-{seq}")).ok()?,
        sku: Sku::new(sku).ok()?,
        occurred_at: now,
        body: CommandBody::Refund(Refund {
            order_id: OrderId::new(order).ok()?,
            quantity: None,
        }),
    })
}

/// Settles the baskets due at `now` (see the module): returns how many
/// refunds were handed to the producer. Deliveries are not awaited: a
/// basket stays open until its lines show the refunds.
pub async fn settle_due(
    projection: &Projection,
    producer: &ThreadedProducer<Reports>,
    topic: &str,
    now: i64,
) -> Result<usize, ProjectionError> {
    let due = projection.due_baskets(now, PAGE).await?;
    if due.is_empty() {
        return Ok(0);
    }
    let (mut settled, mut open, mut refunds) = (Vec::new(), Vec::new(), 0);
    for basket in due {
        let lines = projection.basket(&basket).await?;
        let seen: Vec<LineStanding> = (lines.iter())
            .map(|l| LineStanding::of(l.order.as_ref(), l.refusal.is_some()))
            .collect();
        match settlement(&seen) {
            Settlement::Settled => settled.push(basket),
            Settlement::Wait => open.push(basket),
            Settlement::Undo(sold) => {
                for i in sold {
                    let line = &lines[i];
                    if send_refund(
                        producer,
                        topic,
                        &line.sku,
                        &basket,
                        line.partition,
                        now,
                        refunds,
                    ) {
                        refunds += 1;
                    }
                }
                open.push(basket);
            }
        }
    }
    metrics::counter!(REFUNDS_METRIC).increment(refunds as u64);
    projection
        .settle_baskets(&settled, &open, now + RECHECK_MS)
        .await?;
    Ok(refunds)
}

/// Hands the refund of `basket`'s line on `sku` to the producer; whether
/// it took it.
fn send_refund(
    producer: &ThreadedProducer<Reports>,
    topic: &str,
    sku: &str,
    basket: &str,
    partition: i32,
    now: i64,
    seq: usize,
) -> bool {
    let Some(command) = refund_command(sku, basket, partition, now, seq) else {
        warn!(%sku, %basket, "a basket's index names an invalid sku or basket; skipped");
        return false;
    };
    let payload = match codec::encode_command(&command) {
        Ok(payload) => payload,
        Err(e) => {
            warn!(error = %Chain(&e), "cannot encode a basket's refund");
            return false;
        }
    };
    let record = BaseRecord::with_opaque_to(topic, UNTRACKED)
        .partition(partition)
        .key(sku)
        .payload(&payload)
        .timestamp(now);
    match producer.send(record) {
        Ok(()) => {
            debug!(%sku, %basket, "refund of a basket partly sold sent");
            true
        }
        Err((e, _)) => {
            warn!(error = %Chain(&e), "cannot hand a basket's refund to the producer; trying again shortly");
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refund_names_its_order_and_is_stamped_now() {
        let c = refund_command("SKU-1", "cart-9", 2, 1_700_000_000_000, 3).unwrap();
        assert_eq!(c.command_id.as_str(), "basket-refund-2-1700000000000-3");
        assert!(matches!(&c.body, CommandBody::Refund(r)
            if r.order_id.as_str() == "cart-9" && r.quantity.is_none()));
        assert!(refund_command("S{", "o", 0, 1, 0).is_none());
    }
}
