//! The reference fold of the command log, and comparing the Redis
//! projection with it.

use std::collections::BTreeMap;
use std::fmt;

use stockledger_core::{Decision, LogFold, SkuState};
use stockledger_kafka::topic::LogRecord;

use stockledger_core::record::interpret;
use stockledger_projection::{Projection, ProjectionError};

/// Folds command records of a topic with `partitions` partitions through
/// the reference state machine, skipping those that are not valid commands
/// (the applier dead-letters them).
pub fn fold(records: &[LogRecord], partitions: i32) -> LogFold {
    fold_deciding(records, partitions).0
}

/// [`fold`], with the reference decision of every valid command record, by
/// its partition and offset: what each of its outcomes must say, field by
/// field.
pub fn fold_deciding(
    records: &[LogRecord],
    partitions: i32,
) -> (LogFold, BTreeMap<(i32, i64), Decision>) {
    let mut ledger = LogFold::new(partitions);
    let mut decisions = BTreeMap::new();
    for record in records {
        if let Ok(command) = interpret(record.key.as_deref(), record.payload.as_deref()) {
            let timestamp = record.timestamp.unwrap_or_default();
            let decision = ledger.apply(record.partition, record.offset, timestamp, &command);
            decisions.insert((record.partition, record.offset), decision);
        }
    }
    (ledger, decisions)
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
    reference: &LogFold,
) -> Result<Vec<Mismatch>, ProjectionError> {
    let mut mismatches = Vec::new();
    for (sku, expected) in &reference.skus {
        let detail = match projection.read_sku(sku).await {
            Ok(None) => Some("missing in Redis".to_owned()),
            Ok(Some(actual)) => first_difference(expected, &actual),
            // A state that cannot be read is a difference, not a reason to
            // stop looking at the others.
            Err(e @ ProjectionError::Corrupt { .. }) => Some(e.to_string()),
            Err(e) => return Err(e),
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

/// Names the first field where `actual` differs from `expected`. Every
/// field of [`SkuState`] is compared: the destructuring below stops the build
/// when the state gains a field this check does not name.
// One comparison per field of `SkuState`, in its order: long because the
// state is; split, the destructuring would no longer name every field.
#[allow(clippy::too_many_lines)]
pub fn first_difference(expected: &SkuState, actual: &SkuState) -> Option<String> {
    let SkuState {
        available,
        total,
        reserved,
        limit,
        partition,
        last_offset,
        orders: _,
        users,
        adjustments: _,
        decisions: _,
        units,
        named,
        locations,
        low_stock_below,
        window,
        phase,
        paused,
    } = expected;
    // A hash map's own order differs from one map to the next.
    let sorted = |users: &stockledger_core::machine::Users| {
        format!("{:?}", users.iter().collect::<BTreeMap<_, _>>())
    };
    let scalar = |field: &str, e: String, a: String| {
        (e != a).then(|| format!("{field}: expected {e}, Redis has {a}"))
    };
    let scalars = [
        (
            "available",
            available.to_string(),
            actual.available.to_string(),
        ),
        ("total", total.to_string(), actual.total.to_string()),
        (
            "reserved",
            reserved.to_string(),
            actual.reserved.to_string(),
        ),
        ("limit", format!("{limit:?}"), format!("{:?}", actual.limit)),
        (
            "low_stock_below",
            format!("{low_stock_below:?}"),
            format!("{:?}", actual.low_stock_below),
        ),
        (
            "partition",
            format!("{partition:?}"),
            format!("{:?}", actual.partition),
        ),
        (
            "last offset",
            format!("{last_offset:?}"),
            format!("{:?}", actual.last_offset),
        ),
        ("users", sorted(users), sorted(&actual.users)),
        ("units", format!("{units:?}"), format!("{:?}", actual.units)),
        ("named", named.to_string(), actual.named.to_string()),
        (
            "locations",
            format!("{locations:?}"),
            format!("{:?}", actual.locations),
        ),
        ("window", window.to_string(), actual.window.to_string()),
        ("phase", phase.as_str().into(), actual.phase.as_str().into()),
        ("paused", paused.to_string(), actual.paused.to_string()),
    ];
    if let Some(d) = scalars.into_iter().find_map(|(f, e, a)| scalar(f, e, a)) {
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

#[cfg(test)]
mod tests {
    use stockledger_core::{Decision, OrderEntry, OrderStatus, ResultCode};

    use super::*;

    fn state() -> SkuState {
        let order = OrderEntry {
            status: OrderStatus::Deducted,
            quantity: 2,
            offset: 1,
            user: Some("u1".into()),
            expires_at: None,
            refunded: 0,
            units: Vec::new(),
            location: None,
        };
        let decision = Decision {
            result: ResultCode::Applied,
            delta: -2,
            available: 3,
            total: 5,
            reason: None,
            location: None,
            events: stockledger_core::StockEvents::NONE,
        };
        SkuState {
            available: 3,
            total: 5,
            reserved: 0,
            limit: Some(4),
            partition: Some(0),
            last_offset: Some(1),
            orders: [("o1".to_owned(), order)].into_iter().collect(),
            users: [("u1".to_owned(), 2)].into_iter().collect(),
            adjustments: [("a1".to_owned(), 0)].into(),
            decisions: [(1, decision)].into(),
            units: [("A1".to_owned(), stockledger_core::Unit::Available)].into(),
            named: true,
            locations: vec![stockledger_core::LocationStock {
                name: "berlin".into(),
                available: 3,
                total: 5,
            }],
            low_stock_below: Some(2),
            window: stockledger_core::SaleWindow::new(Some(1_700_000_000_000), None).unwrap(),
            phase: stockledger_core::SalePhase::Open,
            paused: true,
        }
    }

    #[test]
    fn every_field_of_the_state_that_differs_is_named() {
        let expected = state();
        assert_eq!(first_difference(&expected, &expected.clone()), None);
        type Corrupt = fn(&mut SkuState);
        let cases: [(&str, Corrupt); 16] = [
            ("available", |s| s.available += 1),
            ("total", |s| s.total += 1),
            ("reserved", |s| s.reserved = 2),
            ("limit", |s| s.limit = None),
            ("partition", |s| s.partition = Some(1)),
            ("last offset", |s| s.last_offset = Some(7)),
            ("order o1", |s| s.orders.get_mut("o1").unwrap().refunded = 1),
            ("users", |s| {
                s.users.insert("u1".into(), 3).map(drop).unwrap()
            }),
            ("adjustments", |s| s.adjustments.clear()),
            ("units", |s| s.units.clear()),
            ("locations", |s| s.locations[0].available = 2),
            ("low_stock_below", |s| s.low_stock_below = None),
            ("window", |s| {
                s.window = stockledger_core::SaleWindow::ALWAYS
            }),
            ("phase", |s| s.phase = stockledger_core::SalePhase::Closed),
            ("paused", |s| s.paused = false),
            ("decision at offset 1", |s| {
                s.decisions.get_mut(&1).unwrap().delta = 0;
            }),
        ];
        for (field, corrupt) in cases {
            let mut actual = expected.clone();
            corrupt(&mut actual);
            let difference = first_difference(&expected, &actual);
            assert!(
                difference.as_deref().is_some_and(|d| d.starts_with(field)),
                "{field}: {difference:?}"
            );
        }
    }
}
