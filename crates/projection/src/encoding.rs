//! How a SKU's state is written into its Redis hashes: field names and the
//! compact forms of an order's state and of a decision. Nothing else reads
//! or writes them.

use stockledger_core::{
    Decision, LocationStock, OrderEntry, OrderStatus, ResultCode, SalePhase, SaleWindow, SkuState,
    StockEvents, Unit, UnitState,
};

/// The stock hash's fields, in the order a SKU's first record writes them
/// (the last three only once set).
pub(crate) const STOCK_FIELDS: [&str; 10] = [
    AVAILABLE, TOTAL, RESERVED, PARTITION, OFFSET, NAMED, LOCATED, LIMIT, LOW, SALE,
];

/// Fields of the stock hash.
pub const AVAILABLE: &str = "available";
pub const TOTAL: &str = "total";
/// The partition whose records built the state.
pub const PARTITION: &str = "partition";
/// The last offset applied from that partition.
pub const OFFSET: &str = "offset";
/// Units held by live reservations (absent in state written before
/// reservations existed: none).
pub const RESERVED: &str = "reserved";
/// Units one user may hold and buy (absent: no limit).
pub const LIMIT: &str = "limit";
/// `1` when the SKU sells named units (`0` or absent: counted stock), so
/// the applier knows without reading the orders hash.
pub const NAMED: &str = "named";
/// `1` when the SKU keeps stock by location (`0` or absent: in one
/// implicit place), so the applier knows without reading the orders
/// hash.
pub const LOCATED: &str = "located";
/// The low-stock threshold, when set: read by the applier with the
/// rest of the stock hash. [`ALERTS_FIELD`] holds it too.
pub const LOW: &str = "low";

/// When the SKU sells, once a window, pause or resume was applied
/// ([`encode_sale`]'s form): read by the applier with the rest of the
/// stock hash. [`SALE_FIELD`] holds it too.
pub const SALE: &str = "sale";

/// In the orders hash, the SKU's sale as [`SALE`] holds it: the copy
/// snapshots keep, from which a restore writes [`SALE`].
pub const SALE_FIELD: &str = "{sale}";

/// [`SALE`]'s form of a SKU's window, where its records have reached in
/// it and its pause: `opens_at|closes_at|phase|paused`, each instant in
/// milliseconds since the Unix epoch (empty when absent), the phase as
/// [`SalePhase::as_str`], paused `1` or `0`. `None` for a SKU that sells
/// always and is not paused, which needs no field.
///
/// ```
/// use stockledger_core::{SaleWindow, SkuState};
/// use stockledger_projection::encoding::{decode_sale, encode_sale};
///
/// let state = SkuState {
///     window: SaleWindow::new(Some(1_700_000_000_000), None)?,
///     paused: true,
///     ..SkuState::default()
/// };
/// let field = encode_sale(&state).unwrap();
/// assert_eq!(field, "1700000000000||open|1");
/// assert_eq!(decode_sale(&field), Some((state.window, state.phase, true)));
/// assert_eq!(encode_sale(&SkuState::default()), None);
/// # Ok::<(), stockledger_core::ValidationError>(())
/// ```
pub fn encode_sale(state: &SkuState) -> Option<String> {
    if stockledger_core::sells_always(&state.window, state.phase, state.paused) {
        return None;
    }
    let at = |t: Option<i64>| t.map(|t| t.to_string()).unwrap_or_default();
    Some(format!(
        "{}|{}|{}|{}",
        at(state.window.opens_at()),
        at(state.window.closes_at()),
        state.phase.as_str(),
        u8::from(state.paused)
    ))
}

/// Parses [`encode_sale`]'s form: the window, the phase and whether the
/// SKU is paused; `None` if it is not one.
pub fn decode_sale(s: &str) -> Option<(SaleWindow, SalePhase, bool)> {
    let mut parts = s.split('|');
    let mut at = || -> Option<Option<i64>> {
        match parts.next()? {
            "" => Some(None),
            t => t.parse().ok().map(Some),
        }
    };
    let (opens, closes) = (at()?, at()?);
    let window = SaleWindow::new(opens, closes).ok()?;
    let phase = SalePhase::parse(parts.next()?)?;
    let paused = match parts.next()? {
        "1" => true,
        "0" => false,
        _ => return None,
    };
    parts.next().is_none().then_some((window, phase, paused))
}

/// The value of stock field `name` in `stock`, a stock hash's fields as
/// [`STOCK_FIELDS`].
pub(crate) fn stock_field<'a>(stock: &'a [Option<String>], name: &str) -> Option<&'a str> {
    let at = STOCK_FIELDS.iter().position(|f| *f == name)?;
    stock.get(at)?.as_deref()
}

/// A stock hash read into a SKU's state, the one reading every reader of
/// Redis shares: `field` gives a field's value, `None` when absent. The
/// state's stock figures, reservations, limit, threshold, partition, last
/// offset, named flag and sale come from it; the rest is left default.
///
/// `Ok(None)` when the hash holds none of the fields every applied record
/// writes (`available`, `total`, `offset`): no record was applied to the
/// SKU. `Err` with the value that is not what its field holds (empty when
/// one of those three is missing beside the others).
///
/// ```
/// use std::collections::HashMap;
/// use stockledger_projection::encoding::decode_stock;
///
/// let hash = HashMap::from([("available", "3"), ("total", "5"), ("offset", "41")]);
/// let state = decode_stock(|f| hash.get(f).copied()).unwrap().unwrap();
/// assert_eq!((state.available, state.total, state.reserved, state.last_offset), (3, 5, 0, Some(41)));
/// assert!(decode_stock(|_| None).unwrap().is_none());
/// let torn = HashMap::from([("total", "5"), ("offset", "41")]);
/// assert_eq!(decode_stock(|f| torn.get(f).copied()).unwrap_err(), "");
/// ```
pub fn decode_stock<'a>(
    field: impl Fn(&str) -> Option<&'a str>,
) -> Result<Option<SkuState>, String> {
    if [AVAILABLE, TOTAL, OFFSET]
        .iter()
        .all(|f| field(f).is_none())
    {
        return Ok(None);
    }
    let optional = |name: &str| -> Result<Option<i64>, String> {
        field(name)
            .map(|v| v.parse().map_err(|_| v.to_owned()))
            .transpose()
    };
    let required = |name: &str| optional(name)?.ok_or_else(String::new);
    let partition = field(PARTITION)
        .map(|v| v.parse().map_err(|_| v.to_owned()))
        .transpose()?;
    let mut state = SkuState {
        available: required(AVAILABLE)?,
        total: required(TOTAL)?,
        last_offset: Some(required(OFFSET)?),
        reserved: optional(RESERVED)?.unwrap_or(0),
        limit: optional(LIMIT)?,
        low_stock_below: optional(LOW)?,
        partition,
        named: field(NAMED) == Some("1"),
        ..SkuState::default()
    };
    if let Some(sale) = field(SALE) {
        (state.window, state.phase, state.paused) =
            decode_sale(sale).ok_or_else(|| sale.to_owned())?;
    }
    Ok(Some(state))
}

/// In the orders hash, the low-stock threshold, when set: the copy
/// snapshots keep (they store the orders hash whole), from which a
/// restore writes [`LOW`].
pub const ALERTS_FIELD: &str = "{alerts}";

/// In the orders hash, the field of a user's counted units is this prefix
/// and the user id. Order ids cannot contain a brace, so no order's field
/// starts with it.
pub const USER_FIELD_PREFIX: &str = "{user}";

/// The user whose counter field of the orders hash `field` is, if it is one.
pub fn user_of_field(field: &str) -> Option<&str> {
    field.strip_prefix(USER_FIELD_PREFIX)
}

/// In the orders hash, a named unit's field is this prefix and the unit's
/// name; its value is [`encode_unit`]'s.
pub const UNIT_FIELD_PREFIX: &str = "{unit}";

/// In the orders hash, the field listing the SKU's named units in the
/// order they were added, one per line (names hold no control
/// characters).
pub const UNITS_FIELD: &str = "{units}";

/// In the orders hash, the seat map: one letter per unit, in the order of
/// [`UNITS_FIELD`]: `A` available, `H` held, `S` sold. With the list it is
/// the whole seat map in two fields, read without a script.
pub const SEATMAP_FIELD: &str = "{seatmap}";

/// In the orders hash, the stock per location: a line
/// `name|available|total` each, in the order the locations were first
/// stocked (names are letters, digits, `-`, `_` and `.`).
pub const LOCATIONS_FIELD: &str = "{locations}";

/// [`LOCATIONS_FIELD`]'s form of `locations`.
pub fn encode_locations(locations: &[LocationStock]) -> String {
    let lines: Vec<String> = locations
        .iter()
        .map(|l| format!("{}|{}|{}", l.name, l.available, l.total))
        .collect();
    lines.join("\n")
}

/// Parses [`encode_locations`]'s form; `None` if it is not one.
pub fn decode_locations(s: &str) -> Option<Vec<LocationStock>> {
    s.split('\n')
        .map(|line| {
            let mut parts = line.split('|');
            let name = parts.next().filter(|n| !n.is_empty())?.to_owned();
            let available = parts.next()?.parse().ok()?;
            let total = parts.next()?.parse().ok()?;
            parts.next().is_none().then_some(LocationStock {
                name,
                available,
                total,
            })
        })
        .collect()
}

/// A unit's letter in [`SEATMAP_FIELD`].
pub fn seat_letter(state: UnitState) -> char {
    match state {
        UnitState::Available => 'A',
        UnitState::Held => 'H',
        UnitState::Sold => 'S',
    }
}

/// The state a [`SEATMAP_FIELD`] letter stands for, if it is one.
pub fn state_of_letter(letter: u8) -> Option<UnitState> {
    match letter {
        b'A' => Some(UnitState::Available),
        b'H' => Some(UnitState::Held),
        b'S' => Some(UnitState::Sold),
        _ => None,
    }
}

/// The unit whose field of the orders hash `field` is, if it is one.
pub fn unit_of_field(field: &str) -> Option<&str> {
    field.strip_prefix(UNIT_FIELD_PREFIX)
}

/// A unit's field: its place (from 0) among the SKU's units and, after a
/// `|`, its state: nothing when available, `H` and the order holding it,
/// `S` and the order it was sold to.
pub fn encode_unit(place: usize, unit: &Unit) -> String {
    match unit {
        Unit::Available => format!("{place}|"),
        Unit::Held(order) => format!("{place}|H{order}"),
        Unit::Sold(order) => format!("{place}|S{order}"),
    }
}

/// Parses [`encode_unit`]'s form; `None` if it is not one.
pub fn decode_unit(s: &str) -> Option<(usize, Unit)> {
    let (place, state) = s.split_once('|')?;
    let place = place.parse().ok()?;
    let mut chars = state.chars();
    let unit = match chars.next() {
        None => Unit::Available,
        Some('H') if !chars.as_str().is_empty() => Unit::Held(chars.as_str().to_owned()),
        Some('S') if !chars.as_str().is_empty() => Unit::Sold(chars.as_str().to_owned()),
        Some(_) => return None,
    };
    Some((place, unit))
}

/// `RESULT|delta|available|total|reason`: the form stored per offset and
/// read back for a redelivery (reason may be empty and is last, so it may
/// itself contain `|`), then a tab and the location when the decision
/// names one (no reason or location holds a control character), then,
/// when the record caused stock events, a tab and their letters (the
/// location part is then present, empty when there is none).
pub fn encode_decision(d: &Decision) -> String {
    let reason = d.reason.as_deref().unwrap_or("");
    let mut s = String::with_capacity(40 + reason.len());
    s.push_str(d.result.as_str());
    for n in [d.delta, d.available, d.total] {
        s.push('|');
        push_int(&mut s, n);
    }
    s.push('|');
    s.push_str(reason);
    if d.location.is_some() || !d.events.is_empty() {
        s.push('\t');
        s.push_str(d.location.as_deref().unwrap_or(""));
    }
    if !d.events.is_empty() {
        s.push('\t');
        s.push_str(&d.events.letters());
    }
    s
}

/// Appends `n` in decimal to `s`.
fn push_int(s: &mut String, n: i64) {
    s.push_str(itoa::Buffer::new().format(n));
}

/// `n` in decimal, without the formatting machinery: a field or two a
/// record.
pub(crate) fn int_text(n: i64) -> String {
    itoa::Buffer::new().format(n).to_owned()
}

/// The offset whose decision a field of the stock hash holds, if it holds
/// one: its name is the offset, digits only, which no other field's is.
///
/// ```
/// use stockledger_projection::encoding::decision_offset;
///
/// assert_eq!(decision_offset("42"), Some(42));
/// assert_eq!(decision_offset("available"), None);
/// assert_eq!(decision_offset("-1"), None);
/// ```
pub fn decision_offset(field: &str) -> Option<i64> {
    if field.is_empty() || !field.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    field.parse().ok()
}

/// Parses [`encode_decision`]'s form; `None` if it is not one.
pub fn decode_decision(s: &str) -> Option<Decision> {
    let mut sections = s.split('\t');
    let s = sections.next()?;
    let (location, events) = match (sections.next(), sections.next(), sections.next()) {
        (None, _, _) => (None, StockEvents::NONE),
        (Some(""), None, _) => return None,
        (Some(at), None, _) => (Some(at.to_owned()), StockEvents::NONE),
        (Some(at), Some(letters), None) if !letters.is_empty() => (
            (!at.is_empty()).then(|| at.to_owned()),
            StockEvents::parse_letters(letters)?,
        ),
        _ => return None,
    };
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
        location,
        events,
    })
}

/// One letter per order state.
fn status_code(status: OrderStatus) -> char {
    match status {
        OrderStatus::Deducted => 'D',
        OrderStatus::RolledBack => 'R',
        OrderStatus::Cancelled => 'C',
        OrderStatus::Reserved => 'H',
        OrderStatus::Confirmed => 'S',
        OrderStatus::Expired => 'X',
    }
}

fn status_of(code: char) -> Option<OrderStatus> {
    match code {
        'D' => Some(OrderStatus::Deducted),
        'R' => Some(OrderStatus::RolledBack),
        'C' => Some(OrderStatus::Cancelled),
        'H' => Some(OrderStatus::Reserved),
        'S' => Some(OrderStatus::Confirmed),
        'X' => Some(OrderStatus::Expired),
        _ => None,
    }
}

/// An order's entry in the orders hash: `STATUS|quantity|offset`, and when
/// the order names a user, has a deadline or was refunded,
/// `STATUS|quantity|offset|expires_at|refunded|user` (`expires_at` empty
/// when there is none; the user last, as it may contain `|`). STATUS is
/// `D` deducted, `H` held (reserved), `S` sold (confirmed), `R` rolled
/// back, `X` expired, `C` tombstone. An order that took from a location
/// has a tab and the location after that. An order of named units has the
/// long form followed by each unit's name on a line of its own.
pub fn encode_order(e: &OrderEntry) -> String {
    let user = e.user.as_deref().unwrap_or("");
    let mut s = String::with_capacity(48 + user.len());
    s.push(status_code(e.status));
    for n in [e.quantity, e.offset] {
        s.push('|');
        push_int(&mut s, n);
    }
    if e.user.is_some() || e.expires_at.is_some() || e.refunded > 0 || !e.units.is_empty() {
        s.push('|');
        if let Some(expires_at) = e.expires_at {
            push_int(&mut s, expires_at);
        }
        s.push('|');
        push_int(&mut s, e.refunded);
        s.push('|');
        s.push_str(user);
    }
    if let Some(location) = &e.location {
        s.push('\t');
        s.push_str(location);
    }
    for unit in &e.units {
        s.push('\n');
        s.push_str(unit);
    }
    s
}

/// Parses [`encode_order`]'s form; `None` if it is not one.
pub fn decode_order(s: &str) -> Option<OrderEntry> {
    let (s, units) = match s.split_once('\n') {
        None => (s, Vec::new()),
        Some((head, names)) => (head, names.split('\n').map(str::to_owned).collect()),
    };
    if units.iter().any(String::is_empty) {
        return None;
    }
    let (s, location) = match s.split_once('\t') {
        Some((head, location)) if !location.is_empty() => (head, Some(location.to_owned())),
        Some(_) => return None,
        None => (s, None),
    };
    let mut parts = s.splitn(6, '|');
    let mut code = parts.next()?.chars();
    let status = status_of(code.next()?)?;
    if code.next().is_some() {
        return None;
    }
    let quantity = parts.next()?.parse().ok()?;
    let offset = parts.next()?.parse().ok()?;
    let (expires_at, refunded, user) = match parts.next() {
        None => (None, 0, None),
        Some(expires_at) => {
            let expires_at = match expires_at {
                "" => None,
                t => Some(t.parse().ok()?),
            };
            let refunded = parts.next()?.parse().ok()?;
            let user = Some(parts.next()?).filter(|u| !u.is_empty());
            (expires_at, refunded, user.map(str::to_owned))
        }
    };
    Some(OrderEntry {
        status,
        quantity,
        offset,
        user,
        expires_at,
        refunded,
        units,
        location,
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
            location: None,
            events: StockEvents::NONE,
        };
        assert_eq!(encode_decision(&d), "REJECTED_RESTOCK|-3|7|10|a|b");
        assert_eq!(decode_decision(&encode_decision(&d)), Some(d));
        let plain = decode_decision("APPLIED|-1|0|5|").unwrap();
        assert_eq!(plain.reason, None);
        assert_eq!(decode_decision("NOPE|1|1|1|"), None);
        assert_eq!(decode_decision("APPLIED|x|1|1|"), None);
        let taken = decode_decision("APPLIED|-2|3|5|\tberlin").unwrap();
        assert_eq!(taken.location.as_deref(), Some("berlin"));
        assert_eq!(encode_decision(&taken), "APPLIED|-2|3|5|\tberlin");
        assert_eq!(decode_decision("APPLIED|-2|3|5|\t"), None);
        let sold_out = decode_decision("APPLIED|-1|0|5|\t\tSL").unwrap();
        assert_eq!(
            (sold_out.location, sold_out.events.letters()),
            (None, "SL".to_owned())
        );
        let there = decode_decision("APPLIED|-1|0|5|\tparis\tS").unwrap();
        assert_eq!(encode_decision(&there), "APPLIED|-1|0|5|\tparis\tS");
        assert_eq!(decode_decision("APPLIED|-1|0|5|\t\tX"), None);
        assert_eq!(decode_decision("APPLIED|-1|0|5|\t\t"), None);
    }

    fn entry(status: OrderStatus) -> OrderEntry {
        OrderEntry {
            status,
            quantity: 3,
            offset: 42,
            user: None,
            expires_at: None,
            refunded: 0,
            units: Vec::new(),
            location: None,
        }
    }

    #[test]
    fn order_entries_round_trip() {
        for status in [
            OrderStatus::Deducted,
            OrderStatus::RolledBack,
            OrderStatus::Cancelled,
            OrderStatus::Reserved,
            OrderStatus::Confirmed,
            OrderStatus::Expired,
        ] {
            let e = entry(status);
            assert_eq!(decode_order(&encode_order(&e)), Some(e));
        }
        assert_eq!(encode_order(&entry(OrderStatus::Cancelled)), "C|3|42");
        let sold = OrderEntry {
            user: Some("u|1".into()),
            expires_at: Some(1_700_000_000_000),
            refunded: 1,
            ..entry(OrderStatus::Confirmed)
        };
        assert_eq!(encode_order(&sold), "S|3|42|1700000000000|1|u|1");
        assert_eq!(decode_order(&encode_order(&sold)), Some(sold));
        let no_deadline = OrderEntry {
            user: Some("u".into()),
            ..entry(OrderStatus::Deducted)
        };
        assert_eq!(encode_order(&no_deadline), "D|3|42||0|u");
        assert_eq!(decode_order("D|3|42||0|u"), Some(no_deadline));
        assert_eq!(decode_order("Q|0|42"), None);
        assert_eq!(decode_order("D|1|2|3"), None);
        assert_eq!(decode_order("D|1|2|x|0|"), None);
        let seats = OrderEntry {
            expires_at: Some(1_700_000_000_000),
            units: vec!["7-12".into(), "7-13".into()],
            ..entry(OrderStatus::Reserved)
        };
        assert_eq!(encode_order(&seats), "H|3|42|1700000000000|0|\n7-12\n7-13");
        assert_eq!(decode_order(&encode_order(&seats)), Some(seats));
        assert_eq!(decode_order("H|3|42||0|\n"), None);
        let located = OrderEntry {
            user: Some("u".into()),
            location: Some("paris".into()),
            ..entry(OrderStatus::Deducted)
        };
        assert_eq!(encode_order(&located), "D|3|42||0|u\tparis");
        assert_eq!(decode_order(&encode_order(&located)), Some(located));
        let short = decode_order("R|3|42\tberlin").unwrap();
        assert_eq!(short.location.as_deref(), Some("berlin"));
        assert_eq!(decode_order("R|3|42\t"), None);
        assert_eq!(user_of_field("{user}alice"), Some("alice"));
        assert_eq!(user_of_field("alice"), None);
    }

    #[test]
    fn locations_round_trip_in_their_order() {
        let stock = vec![
            LocationStock {
                name: "berlin".into(),
                available: 3,
                total: 5,
            },
            LocationStock {
                name: "paris-2".into(),
                available: 0,
                total: 0,
            },
        ];
        assert_eq!(encode_locations(&stock), "berlin|3|5\nparis-2|0|0");
        assert_eq!(decode_locations(&encode_locations(&stock)), Some(stock));
        assert_eq!(decode_locations("berlin|3"), None);
        assert_eq!(decode_locations("berlin|3|5|1"), None);
        assert_eq!(decode_locations("|3|5"), None);
    }

    #[test]
    fn units_round_trip_and_their_fields_are_told_apart() {
        for (place, unit) in [
            (0, Unit::Available),
            (7, Unit::Held("o-1".into())),
            (12, Unit::Sold("o|2".into())),
        ] {
            assert_eq!(decode_unit(&encode_unit(place, &unit)), Some((place, unit)));
        }
        assert_eq!(encode_unit(3, &Unit::Held("o".into())), "3|Ho");
        assert_eq!(decode_unit("1|H"), None);
        assert_eq!(decode_unit("1|Xo-1"), None);
        assert_eq!(decode_unit("Ho-1"), None);
        assert_eq!(unit_of_field("{unit}A1"), Some("A1"));
        assert_eq!(unit_of_field(UNITS_FIELD), None);
        assert_eq!(user_of_field(UNITS_FIELD), None);
    }
}
