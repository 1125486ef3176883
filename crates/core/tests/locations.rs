#![allow(clippy::unwrap_used, clippy::expect_used)] // a failed unwrap is a failed test
//! Stock by location in the reference machine: where deducts take from,
//! where orders give back to, what a transfer moves, and what is refused.
//! The differential tests hold the applier's Redis to the same rules.

use stockledger_core::{
    AdjustmentId, CommandBody, Confirm, Decision, Deduct, Expire, LocationId, OrderId, Placement,
    Quantity, Refund, Restock, RestockMode, ResultCode, Rollback, SkuState, Transfer, TransferId,
};

const P: Placement = Placement {
    partition: 0,
    home: 0,
};
const T: i64 = 1_000;

fn at(name: &str) -> LocationId {
    LocationId::new(name).unwrap()
}

fn restock(id: &str, mode: RestockMode, quantity: i64, location: Option<&str>) -> CommandBody {
    let restock = Restock::new(AdjustmentId::new(id).unwrap(), mode, quantity).unwrap();
    CommandBody::Restock(match location {
        Some(name) => restock.at(at(name)).unwrap(),
        None => restock,
    })
}

fn deduct(order: &str, quantity: i64, location: Option<&str>) -> CommandBody {
    let deduct = Deduct::new(
        OrderId::new(order).unwrap(),
        Quantity::new(quantity).unwrap(),
    );
    CommandBody::Deduct(match location {
        Some(name) => deduct.at(at(name)).unwrap(),
        None => deduct,
    })
}

fn hold(order: &str, quantity: i64, deadline: i64) -> CommandBody {
    CommandBody::Deduct(Deduct {
        expires_at: Some(deadline),
        ..Deduct::new(
            OrderId::new(order).unwrap(),
            Quantity::new(quantity).unwrap(),
        )
    })
}

fn transfer(id: &str, from: &str, to: &str, quantity: i64) -> CommandBody {
    CommandBody::Transfer(
        Transfer::new(
            TransferId::new(id).unwrap(),
            at(from),
            at(to),
            Quantity::new(quantity).unwrap(),
        )
        .unwrap(),
    )
}

fn order(id: &str) -> OrderId {
    OrderId::new(id).unwrap()
}

/// Applies `bodies` from offset `from` on; the last decision.
fn run(s: &mut SkuState, from: i64, time: i64, bodies: &[CommandBody]) -> Decision {
    let mut last = None;
    for (i, body) in bodies.iter().enumerate() {
        last = Some(s.apply(P, from + i as i64, time, body));
    }
    last.unwrap()
}

/// Each location as (name, available, total), and that they sum to the SKU's.
fn levels(s: &SkuState) -> Vec<(&str, i64, i64)> {
    let (available, total) = s
        .locations
        .iter()
        .fold((0, 0), |(a, t), l| (a + l.available, t + l.total));
    assert_eq!((available, total), (s.available, s.total), "{s:?}");
    s.locations
        .iter()
        .map(|l| (l.name.as_str(), l.available, l.total))
        .collect()
}

fn said(d: &Decision) -> (ResultCode, Option<&str>, Option<&str>) {
    (d.result, d.reason.as_deref(), d.location.as_deref())
}

/// berlin 5 and paris 3, stocked in that order.
fn two_warehouses() -> SkuState {
    let mut s = SkuState::default();
    run(
        &mut s,
        0,
        T,
        &[
            restock("in-b", RestockMode::Add, 5, Some("berlin")),
            restock("in-p", RestockMode::Add, 3, Some("paris")),
        ],
    );
    assert_eq!(levels(&s), [("berlin", 5, 5), ("paris", 3, 3)]);
    s
}

#[test]
fn a_deduct_naming_no_location_takes_from_the_first_stocked_that_can_serve_it_all() {
    let mut s = two_warehouses();
    let first = s.apply(P, 2, T, &deduct("a", 4, None));
    assert_eq!(said(&first), (ResultCode::Applied, None, Some("berlin")));
    let second = s.apply(P, 3, T, &deduct("b", 2, None));
    assert_eq!(said(&second), (ResultCode::Applied, None, Some("paris")));
    assert_eq!(levels(&s), [("berlin", 1, 5), ("paris", 1, 3)]);
    let split = s.apply(P, 4, T, &deduct("c", 2, None));
    assert_eq!(
        said(&split),
        (
            ResultCode::RejectedInsufficient,
            Some("requested 2, available 2 but no one location has that many (berlin 1, paris 1)"),
            None
        )
    );
    let short = s.apply(P, 5, T, &deduct("d", 3, None));
    assert_eq!(short.reason.as_deref(), Some("requested 3, available 2"));
    assert_eq!(s.orders["a"].location.as_deref(), Some("berlin"));
}

#[test]
fn a_deduct_naming_a_location_takes_from_there_only() {
    let mut s = two_warehouses();
    let there = s.apply(P, 2, T, &deduct("a", 3, Some("paris")));
    assert_eq!(said(&there), (ResultCode::Applied, None, Some("paris")));
    let empty = s.apply(P, 3, T, &deduct("b", 1, Some("paris")));
    assert_eq!(
        said(&empty),
        (
            ResultCode::RejectedInsufficient,
            Some("requested 1, available at paris 0"),
            Some("paris")
        )
    );
    let unknown = s.apply(P, 4, T, &deduct("c", 1, Some("rome")));
    assert_eq!(
        said(&unknown),
        (
            ResultCode::RejectedInsufficient,
            Some("unknown location: rome"),
            Some("rome")
        )
    );
    assert_eq!(levels(&s), [("berlin", 5, 5), ("paris", 0, 3)]);
}

#[test]
fn what_an_order_gives_back_goes_back_where_it_came_from() {
    let mut s = two_warehouses();
    run(
        &mut s,
        2,
        T,
        &[
            deduct("sold", 2, Some("paris")),
            hold("held", 2, T + 10),
            hold("paid", 3, T + 10),
        ],
    );
    assert_eq!(levels(&s), [("berlin", 0, 5), ("paris", 1, 3)]);
    let back = s.apply(
        P,
        5,
        T,
        &CommandBody::Rollback(Rollback::new(order("sold"), None).unwrap()),
    );
    assert_eq!(said(&back), (ResultCode::Applied, None, Some("paris")));
    let paid = s.apply(
        P,
        6,
        T,
        &CommandBody::Confirm(Confirm {
            order_id: order("paid"),
        }),
    );
    assert_eq!(said(&paid), (ResultCode::Confirmed, None, Some("berlin")));
    let expired = s.apply(
        P,
        7,
        T + 11,
        &CommandBody::Expire(Expire {
            order_id: order("held"),
        }),
    );
    assert_eq!(said(&expired), (ResultCode::Expired, None, Some("berlin")));
    assert_eq!(levels(&s), [("berlin", 2, 5), ("paris", 3, 3)]);
    let refund = CommandBody::Refund(Refund {
        order_id: order("paid"),
        quantity: Some(Quantity::new(1).unwrap()),
    });
    let refunded = s.apply(P, 8, T + 11, &refund);
    assert_eq!(
        said(&refunded),
        (ResultCode::Refunded, None, Some("berlin"))
    );
    assert_eq!(levels(&s), [("berlin", 3, 5), ("paris", 3, 3)]);
}

#[test]
fn a_transfer_moves_available_stock_all_or_nothing_once() {
    let mut s = two_warehouses();
    s.apply(P, 2, T, &deduct("a", 4, Some("berlin")));
    let moved = s.apply(P, 3, T, &transfer("t-1", "paris", "rome", 2));
    assert_eq!(said(&moved), (ResultCode::Applied, None, Some("paris")));
    assert_eq!(moved.delta, 0);
    assert_eq!(
        levels(&s),
        [("berlin", 1, 5), ("paris", 1, 1), ("rome", 2, 2)]
    );
    // Held stock does not move: berlin has 1 free of 5.
    let too_much = s.apply(P, 4, T, &transfer("t-2", "berlin", "paris", 2));
    assert_eq!(
        said(&too_much),
        (
            ResultCode::RejectedInsufficient,
            Some("requested 2, available at berlin 1"),
            Some("berlin")
        )
    );
    let nowhere = s.apply(P, 5, T, &transfer("t-3", "oslo", "paris", 1));
    assert_eq!(nowhere.reason.as_deref(), Some("unknown location: oslo"));
    let again = s.apply(P, 6, T, &transfer("t-1", "paris", "rome", 1));
    assert_eq!(
        said(&again),
        (
            ResultCode::Duplicate,
            Some("adjustment already applied"),
            Some("paris")
        )
    );
    // The order taken in berlin still goes back to berlin.
    s.apply(
        P,
        7,
        T,
        &CommandBody::Rollback(Rollback::new(order("a"), None).unwrap()),
    );
    assert_eq!(
        levels(&s),
        [("berlin", 5, 5), ("paris", 1, 1), ("rome", 2, 2)]
    );
}

#[test]
fn a_sku_keeps_stock_in_one_place_or_by_location_never_both() {
    let mut located = two_warehouses();
    let unnamed = located.apply(P, 2, T, &restock("x", RestockMode::Add, 1, None));
    assert_eq!(
        said(&unnamed),
        (
            ResultCode::RejectedRestock,
            Some("the sku keeps stock by location; name the location"),
            None
        )
    );
    let mut plain = SkuState::default();
    plain.apply(P, 0, T, &restock("a", RestockMode::Set, 10, None));
    let named = plain.apply(P, 1, T, &restock("b", RestockMode::Add, 1, Some("berlin")));
    assert_eq!(
        named.reason.as_deref(),
        Some("the sku holds 10 units in no location; stock by location starts from a total of 0")
    );
    assert_eq!(named.result, ResultCode::RejectedRestock);
    let unknown = plain.apply(P, 2, T, &deduct("o", 1, Some("berlin")));
    assert_eq!(unknown.reason.as_deref(), Some("unknown location: berlin"));
    // Emptied, the SKU may move to locations.
    plain.apply(P, 3, T, &restock("c", RestockMode::Set, 0, None));
    let moved = plain.apply(P, 4, T, &restock("d", RestockMode::Add, 4, Some("berlin")));
    assert_eq!(moved.result, ResultCode::Applied);
    assert_eq!(levels(&plain), [("berlin", 4, 4)]);
}

#[test]
fn a_restock_at_a_location_respects_what_orders_hold_there() {
    let mut s = two_warehouses();
    s.apply(P, 2, T, &deduct("a", 4, Some("berlin")));
    let below = s.apply(P, 3, T, &restock("s1", RestockMode::Set, 3, Some("berlin")));
    assert_eq!(
        below.reason.as_deref(),
        Some("SET 3 is below the 4 units held by orders at berlin")
    );
    let negative = s.apply(
        P,
        4,
        T,
        &restock("s2", RestockMode::Add, -2, Some("berlin")),
    );
    assert_eq!(
        negative.reason.as_deref(),
        Some("ADD -2 would leave available at berlin at -1")
    );
    let set = s.apply(P, 5, T, &restock("s3", RestockMode::Set, 6, Some("berlin")));
    assert_eq!((set.result, set.delta), (ResultCode::Applied, 1));
    assert_eq!(levels(&s), [("berlin", 2, 6), ("paris", 3, 3)]);
    assert_eq!((s.available, s.total, s.held()), (5, 9, 4));
}
