//! Order traffic for end-to-end and fault tests.

use stockledger_client::LedgerProducer;
use stockledger_core::RestockMode;

/// Sets every SKU's stock to `units`; returns the records sent.
pub async fn restock_all(
    producer: &LedgerProducer,
    skus: &[&str],
    units: i64,
) -> anyhow::Result<u64> {
    for sku in skus {
        producer
            .restock(sku, "initial", RestockMode::Set, units)
            .await?;
    }
    Ok(skus.len() as u64)
}

/// Sends orders `first..first + orders` round-robin over `skus`: a deduct
/// of 1 to 3 units each, every ninth rolled back before its deduct, every
/// fourth rolled back after it. Returns the records sent.
pub async fn orders(
    producer: &LedgerProducer,
    skus: &[&str],
    first: usize,
    orders: usize,
) -> anyhow::Result<u64> {
    let mut sent = 0;
    for i in first..first + orders {
        let sku = skus[i % skus.len()];
        let order = format!("o{i}");
        if i % 9 == 0 {
            producer.rollback(sku, &order, None).await?;
            sent += 1;
        }
        producer.deduct(sku, &order, 1 + (i % 3) as i64).await?;
        sent += 1;
        if i % 4 == 0 {
            producer.rollback(sku, &order, Some("cancelled")).await?;
            sent += 1;
        }
    }
    Ok(sent)
}
