//! How a SKU's state is written into its Redis hashes: field names and the
//! compact forms of an order's state and of a decision. The apply script
//! (`lua/apply.lua`) writes the same forms; nothing else reads or writes
//! them.

use stockledger_core::{Decision, OrderEntry, OrderStatus, ResultCode};

/// Fields of the stock hash.
pub const AVAILABLE: &str = "available";
pub const TOTAL: &str = "total";
/// The partition whose records built the state.
pub const PARTITION: &str = "partition";
/// The last offset applied from that partition.
pub const OFFSET: &str = "offset";

/// `RESULT|delta|available|total|reason`: the form stored per offset and
/// returned by the apply script (reason may be empty and is last, so it may
/// itself contain `|`).
pub fn encode_decision(d: &Decision) -> String {
    format!(
        "{}|{}|{}|{}|{}",
        d.result,
        d.delta,
        d.available,
        d.total,
        d.reason.as_deref().unwrap_or("")
    )
}

/// Parses [`encode_decision`]'s form; `None` if it is not one.
pub fn decode_decision(s: &str) -> Option<Decision> {
    let mut parts = s.splitn(5, '|');
    let result = ResultCode::parse(parts.next()?)?;
    let delta = parts.next()?.parse().ok()?;
    let available = parts.next()?.parse().ok()?;
    let total = parts.next()?.parse().ok()?;
    let reason = parts.next()?;
    Some(Decision {
        result,
        delta,
        available,
        total,
        reason: (!reason.is_empty()).then(|| reason.to_owned()),
    })
}

/// One letter per order state.
fn status_code(status: OrderStatus) -> char {
    match status {
        OrderStatus::Deducted => 'D',
        OrderStatus::RolledBack => 'R',
        OrderStatus::Cancelled => 'C',
    }
}

fn status_of(code: char) -> Option<OrderStatus> {
    match code {
        'D' => Some(OrderStatus::Deducted),
        'R' => Some(OrderStatus::RolledBack),
        'C' => Some(OrderStatus::Cancelled),
        _ => None,
    }
}

/// `D|quantity|offset` (deducted), `R|…` (rolled back), `C|0|offset`
/// (tombstone): an order's entry in the orders hash.
pub fn encode_order(e: &OrderEntry) -> String {
    format!("{}|{}|{}", status_code(e.status), e.quantity, e.offset)
}

/// Parses [`encode_order`]'s form; `None` if it is not one.
pub fn decode_order(s: &str) -> Option<OrderEntry> {
    let mut parts = s.split('|');
    let mut code = parts.next()?.chars();
    let status = status_of(code.next()?)?;
    if code.next().is_some() {
        return None;
    }
    let quantity = parts.next()?.parse().ok()?;
    let offset = parts.next()?.parse().ok()?;
    if parts.next().is_some() {
        return None;
    }
    Some(OrderEntry {
        status,
        quantity,
        offset,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decisions_round_trip_including_pipes_in_the_reason() {
        let d = Decision {
            result: ResultCode::RejectedRestock,
            delta: -3,
            available: 7,
            total: 10,
            reason: Some("a|b".into()),
        };
        assert_eq!(encode_decision(&d), "REJECTED_RESTOCK|-3|7|10|a|b");
        assert_eq!(decode_decision(&encode_decision(&d)), Some(d));
        let plain = decode_decision("APPLIED|-1|0|5|").unwrap();
        assert_eq!(plain.reason, None);
        assert_eq!(decode_decision("NOPE|1|1|1|"), None);
        assert_eq!(decode_decision("APPLIED|x|1|1|"), None);
    }

    #[test]
    fn order_entries_round_trip() {
        for status in [
            OrderStatus::Deducted,
            OrderStatus::RolledBack,
            OrderStatus::Cancelled,
        ] {
            let e = OrderEntry {
                status,
                quantity: 3,
                offset: 42,
            };
            assert_eq!(decode_order(&encode_order(&e)), Some(e));
        }
        assert_eq!(
            encode_order(&OrderEntry {
                status: OrderStatus::Cancelled,
                quantity: 0,
                offset: 42
            }),
            "C|0|42"
        );
        assert_eq!(decode_order("X|0|42"), None);
        assert_eq!(decode_order("D|1|2|3"), None);
    }
}
