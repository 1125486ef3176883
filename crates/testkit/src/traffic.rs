//! Order traffic for end-to-end and fault tests.

use stockledger_client::Ledger;
use stockledger_core::RestockMode;

/// How long [`orders`]' reservations hold: longer than any test runs.
const HOLD_MS: i64 = 10 * 60 * 1000;

/// Sets every SKU's stock to `units`; returns the records sent.
pub async fn restock_all(producer: &Ledger, skus: &[&str], units: i64) -> anyhow::Result<u64> {
    for sku in skus {
        producer
            .restock(
                &crate::ids::sku(sku),
                &crate::ids::adjustment("initial"),
                RestockMode::Set,
                units,
            )
            .await?;
    }
    Ok(skus.len() as u64)
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
    let mut sent = 0;
    for i in first..first + orders {
        let sku = skus[i % skus.len()];
        let order = format!("o{i}");
        if i % 9 == 0 {
            producer
                .rollback(&crate::ids::sku(sku), &crate::ids::order(&order), None)
                .await?;
            sent += 1;
        }
        let quantity = 1 + (i % 3) as i64;
        if i % 5 == 2 {
            let user = format!("u{}", i % 7);
            let deadline = stockledger_runtime::clock::now_ms() + HOLD_MS;
            producer
                .reserve_until(
                    &crate::ids::sku(sku),
                    &crate::ids::order(&order),
                    crate::ids::qty(quantity),
                    crate::ids::at_ms(deadline),
                    Some(&crate::ids::user(&user)),
                )
                .await?;
        } else {
            producer
                .deduct(
                    &crate::ids::sku(sku),
                    &crate::ids::order(&order),
                    crate::ids::qty(quantity),
                    None,
                )
                .await?;
        }
        sent += 1;
        if i % 4 == 0 {
            producer
                .rollback(
                    &crate::ids::sku(sku),
                    &crate::ids::order(&order),
                    Some("cancelled"),
                )
                .await?;
            sent += 1;
        } else if i % 10 == 2 {
            producer
                .confirm(&crate::ids::sku(sku), &crate::ids::order(&order))
                .await?;
            sent += 1;
            if i % 20 == 2 {
                producer
                    .refund(&crate::ids::sku(sku), &crate::ids::order(&order), None)
                    .await?;
                sent += 1;
            }
        }
    }
    Ok(sent)
}
