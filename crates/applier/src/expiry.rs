//! The expirer: turns reservations whose deadline has passed into
//! `Expire` records on the command log.
//!
//! The applier never compares a deadline with its own clock. Instead, a few
//! times a second, it looks up in Redis the holds of its partitions whose
//! deadline is before now and appends an `Expire` for each, stamped now, to
//! the hold's own partition. The applier then decides it against that
//! record's timestamp like any other record, so the expiry is in the log:
//! a replay decides it identically, on any day, and a confirm that reached
//! the log first still wins. A hold whose expire did not end it (lost, or
//! still on its way) is tried again after [`RETRY_MS`].

use std::time::Duration;
use stockledger_core::report::Chain;

use rdkafka::producer::{BaseRecord, ThreadedProducer};
use stockledger_core::codec;

use crate::deliveries::{Reports, UNTRACKED};
use stockledger_core::{Command, CommandBody, CommandId, Expire, OrderId, Sku};
use stockledger_projection::{Projection, ProjectionError};
use tracing::{debug, warn};

/// How often the expirer looks for due holds: a hold ends well within a
/// second of its deadline while the applier keeps up.
pub const INTERVAL: Duration = Duration::from_millis(200);

/// How long an expire is given to end its hold before another is sent.
pub const RETRY_MS: i64 = 5_000;

/// Most expires sent per partition per look.
const PAGE: usize = 1_000;

/// Counter: expire records the expirer appended to the command log.
pub const EXPIRES_METRIC: &str = "stockledger_applier_expires_sent_total";

/// Gauge: at the expirer's last look, how long past its deadline (or past
/// the time its lost expire was to be sent again) the most overdue hold
/// was, in seconds; 0 when none was due. While the applier keeps up it
/// stays under a second.
pub const HOLD_OVERDUE_METRIC: &str = "stockledger_applier_hold_overdue_seconds";

pub use stockledger_runtime::clock::now_ms;

/// The expire record for `order_id` of `sku`, stamped `now`; its command
/// id names the partition, the instant and `seq` (its place among the
/// expires sent then), as an order id may already take 128 bytes.
pub fn expire_command(
    sku: &str,
    order_id: &str,
    partition: i32,
    now: i64,
    seq: usize,
) -> Option<Command> {
    Some(Command {
        command_id: CommandId::new(format!("expire-{partition}-{now}-{seq}")).ok()?,
        sku: Sku::new(sku).ok()?,
        occurred_at: now,
        body: CommandBody::Expire(Expire {
            order_id: OrderId::new(order_id).ok()?,
        }),
    })
}

/// Appends an expire for every due hold of `partitions` of `topic`;
/// returns how many were handed to the producer. Deliveries are not
/// awaited: a lost one is retried after [`RETRY_MS`].
pub async fn expire_due(
    projection: &Projection,
    producer: &ThreadedProducer<Reports>,
    topic: &str,
    partitions: &[i32],
) -> Result<usize, ProjectionError> {
    let now = now_ms();
    let mut sent_total = 0;
    let due_by_partition = projection.due_holds(partitions, now, PAGE).await?;
    let earliest = (due_by_partition.iter().flatten())
        .map(|(_, _, deadline)| *deadline)
        .min();
    let overdue_ms = earliest.map_or(0, |deadline| (now - deadline).max(0));
    metrics::gauge!(HOLD_OVERDUE_METRIC).set(overdue_ms as f64 / 1000.0);
    for (&partition, due) in partitions.iter().zip(due_by_partition) {
        if due.is_empty() {
            continue;
        }
        let mut sent = Vec::with_capacity(due.len());
        for (seq, (sku, order, deadline)) in due.into_iter().enumerate() {
            let Some(command) = expire_command(&sku, &order, partition, now, seq) else {
                warn!(%sku, %order, "a hold in the index names an invalid sku or order; skipped");
                continue;
            };
            let payload = match codec::encode_command(&command) {
                Ok(payload) => payload,
                Err(e) => {
                    warn!(error = %Chain(&e), "cannot encode an expire");
                    continue;
                }
            };
            let record = BaseRecord::with_opaque_to(topic, UNTRACKED)
                .partition(partition)
                .key(sku.as_str())
                .payload(&payload)
                .timestamp(now);
            match producer.send(record) {
                Ok(()) => {
                    debug!(%sku, %order, deadline, "expire sent");
                    sent.push((sku, order));
                }
                Err((e, _)) => {
                    warn!(error = %Chain(&e), "cannot hand an expire to the producer; trying again shortly");
                    break;
                }
            }
        }
        sent_total += sent.len();
        metrics::counter!(EXPIRES_METRIC).increment(sent.len() as u64);
        projection
            .defer_holds(partition, &sent, now + RETRY_MS)
            .await?;
    }
    Ok(sent_total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_expire_names_its_order_and_is_stamped_now() {
        let c = expire_command("SKU-1", "o-1", 3, 1_700_000_000_000, 7).unwrap();
        assert_eq!(c.command_id.as_str(), "expire-3-1700000000000-7");
        assert_eq!(c.sku.as_str(), "SKU-1");
        assert_eq!(c.occurred_at, 1_700_000_000_000);
        assert!(matches!(&c.body, CommandBody::Expire(e) if e.order_id.as_str() == "o-1"));
        assert!(expire_command("S", &"é".repeat(64), 0, 1, 0).is_some());
        assert!(expire_command("S{", "o", 0, 1, 0).is_none());
    }
}
