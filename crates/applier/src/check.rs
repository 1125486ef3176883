//! The reference fold of the command log, and comparing the Redis
//! projection with it.

use std::fmt;

use stockledger_core::{Ledger, SkuState};
use stockledger_io::topic::LogRecord;

use crate::record::interpret;
use stockledger_projection::{Projection, ProjectionError};

/// Folds command records of a topic with `partitions` partitions through
/// the reference state machine, skipping those that are not valid commands
/// (the applier dead-letters them).
pub fn fold(records: &[LogRecord], partitions: i32) -> Ledger {
    let mut ledger = Ledger::new(partitions);
    for record in records {
        if let Ok(command) = interpret(record.key.as_deref(), record.payload.as_deref()) {
            let timestamp = record.timestamp.unwrap_or_default();
            ledger.apply(record.partition, record.offset, timestamp, &command);
        }
    }
    ledger
}

/// One SKU whose Redis state differs from the reference.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mismatch {
    pub sku: String,
    pub detail: String,
}

impl fmt::Display for Mismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.sku, self.detail)
    }
}

/// Every difference between `reference` and the projection, SKU by SKU
/// (including SKUs present on one side only).
pub async fn compare(
    projection: &Projection,
    reference: &Ledger,
) -> Result<Vec<Mismatch>, ProjectionError> {
    let mut mismatches = Vec::new();
    for (sku, expected) in &reference.skus {
        let actual = projection.read_sku(sku).await?;
        let detail = match actual {
            None => Some("missing in Redis".to_owned()),
            Some(actual) => first_difference(expected, &actual),
        };
        if let Some(detail) = detail {
            mismatches.push(Mismatch {
                sku: sku.clone(),
                detail,
            });
        }
    }
    for sku in projection.skus().await? {
        if !reference.skus.contains_key(&sku) {
            mismatches.push(Mismatch {
                sku,
                detail: "in Redis but not in the log".to_owned(),
            });
        }
    }
    Ok(mismatches)
}

/// Names the first field where `actual` differs from `expected`.
pub fn first_difference(expected: &SkuState, actual: &SkuState) -> Option<String> {
    let scalar = |field: &str, e: String, a: String| {
        (e != a).then(|| format!("{field}: expected {e}, Redis has {a}"))
    };
    if let Some(d) = scalar(
        "available",
        expected.available.to_string(),
        actual.available.to_string(),
    )
    .or_else(|| {
        scalar(
            "total",
            expected.total.to_string(),
            actual.total.to_string(),
        )
    })
    .or_else(|| {
        scalar(
            "partition",
            format!("{:?}", expected.partition),
            format!("{:?}", actual.partition),
        )
    })
    .or_else(|| {
        scalar(
            "last offset",
            format!("{:?}", expected.last_offset),
            format!("{:?}", actual.last_offset),
        )
    }) {
        return Some(d);
    }
    for (order, e) in &expected.orders {
        let a = actual.orders.get(order);
        if a != Some(e) {
            return Some(format!("order {order}: expected {e:?}, Redis has {a:?}"));
        }
    }
    if let Some(order) = actual
        .orders
        .keys()
        .find(|o| !expected.orders.contains_key(*o))
    {
        return Some(format!("order {order}: in Redis but not in the log"));
    }
    if expected.adjustments != actual.adjustments {
        return Some(format!(
            "adjustments: expected {:?}, Redis has {:?}",
            expected.adjustments, actual.adjustments
        ));
    }
    for (offset, e) in &expected.decisions {
        let a = actual.decisions.get(offset);
        if a != Some(e) {
            return Some(format!(
                "decision at offset {offset}: expected {e:?}, Redis has {a:?}"
            ));
        }
    }
    if expected.decisions.len() != actual.decisions.len() {
        return Some(format!(
            "decisions: expected {}, Redis has {}",
            expected.decisions.len(),
            actual.decisions.len()
        ));
    }
    None
}
