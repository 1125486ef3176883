//! Order traffic for end-to-end and fault tests.

use stockledger_client::{Ledger, Receipt};
use stockledger_core::RestockMode;

/// How long [`orders`]' reservations hold: longer than any test runs.
const HOLD_MS: i64 = 10 * 60 * 1000;

/// Sets every SKU's stock to `units`; returns the records sent.
pub async fn restock_all(producer: &Ledger, skus: &[&str], units: i64) -> anyhow::Result<u64> {
    Ok(restock_all_receipts(producer, skus, units).await?.len() as u64)
}

/// [`restock_all`], returning the receipt of each record sent.
pub async fn restock_all_receipts(
    producer: &Ledger,
    skus: &[&str],
    units: i64,
) -> anyhow::Result<Vec<Receipt>> {
    let mut receipts = Vec::new();
    for sku in skus {
        let sku = crate::ids::sku(sku);
        let initial = crate::ids::adjustment("initial");
        receipts.push(
            producer
                .restock(&sku, &initial, RestockMode::Set, units)
                .await?,
        );
    }
    Ok(receipts)
}

/// Sends orders `first..first + orders` round-robin over `skus`: a deduct
/// of 1 to 3 units each, every ninth rolled back before its deduct, every
/// fourth rolled back after it. Every fifth (from the third) is instead a
/// reservation by one of seven users, held ten minutes (it never expires
/// within a test, so the log holds exactly the records sent); every other
/// one of those not rolled back is confirmed, and every other confirmed
/// one refunded. Returns the records sent.
pub async fn orders(
    producer: &Ledger,
    skus: &[&str],
    first: usize,
    orders: usize,
) -> anyhow::Result<u64> {
    Ok(order_receipts(producer, skus, first, orders).await?.len() as u64)
}

/// [`orders`], returning the receipt of each record sent.
pub async fn order_receipts(
    producer: &Ledger,
    skus: &[&str],
    first: usize,
    orders: usize,
) -> anyhow::Result<Vec<Receipt>> {
    let mut sent = Vec::new();
    for i in first..first + orders {
        let sku = crate::ids::sku(skus[i % skus.len()]);
        let order = crate::ids::order(format!("o{i}"));
        if i % 9 == 0 {
            sent.push(producer.rollback(&sku, &order, None).await?);
        }
        let quantity = crate::ids::qty(1 + (i % 3) as i64);
        if i % 5 == 2 {
            let user = crate::ids::user(format!("u{}", i % 7));
            let deadline = crate::ids::at_ms(stockledger_runtime::clock::now_ms() + HOLD_MS);
            let held = producer.reserve_until(&sku, &order, quantity, deadline, Some(&user));
            sent.push(held.await?);
        } else {
            sent.push(producer.deduct(&sku, &order, quantity, None).await?);
        }
        if i % 4 == 0 {
            sent.push(producer.rollback(&sku, &order, Some("cancelled")).await?);
        } else if i % 10 == 2 {
            sent.push(producer.confirm(&sku, &order).await?);
            if i % 20 == 2 {
                sent.push(producer.refund(&sku, &order, None).await?);
            }
        }
    }
    Ok(sent)
}
