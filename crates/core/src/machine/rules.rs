//! What each command does to a SKU's state: the ledger's rules, written
//! here only, one
//! function per command kind.

use super::{LocationStock, OrderEntry, OrderStatus, SkuState, Unit};
use crate::command::{
    check_deadline, Confirm, Deduct, Expire, Limit, Refund, Restock, RestockMode, Rollback,
    Transfer,
};
use crate::ids::{LocationId, Quantity, MAX_STOCK};
use crate::outcome::{Decision, ResultCode};

impl SkuState {
    pub(super) fn deduct(&mut self, offset: i64, time: i64, d: &Deduct) -> Decision {
        if let Some(refused) = self.refuse_deduct(time, d) {
            return refused;
        }
        let quantity = d.quantity.get();
        let location = match (&d.location, self.locations.is_empty()) {
            (_, true) => None,
            (Some(named), false) => Some(named.as_str().to_owned()),
            (None, false) => (self.locations.iter())
                .find(|l| l.available >= quantity)
                .map(|l| l.name.clone()),
        };
        self.available -= quantity;
        if let Some(at) = location.as_deref().and_then(|name| self.location_mut(name)) {
            at.available -= quantity;
        }
        let status = match d.expires_at {
            Some(_) => {
                self.reserved += quantity;
                OrderStatus::Reserved
            }
            None => OrderStatus::Deducted,
        };
        let user = d.user_id.as_ref().map(|u| u.as_str());
        self.count(user, quantity);
        let names: Vec<String> = d.units.iter().map(|u| u.as_str().to_owned()).collect();
        let order = d.order_id.as_str().to_owned();
        if !names.is_empty() {
            let unit = match status {
                OrderStatus::Reserved => Unit::Held(order.clone()),
                _ => Unit::Sold(order.clone()),
            };
            self.mark_units(&names, &unit);
        }
        self.orders.insert(
            order,
            OrderEntry {
                user: user.map(str::to_owned),
                expires_at: d.expires_at,
                units: names,
                location: location.clone(),
                ..OrderEntry::new(status, quantity, offset)
            },
        );
        self.decide_at(ResultCode::Applied, -quantity, None, location)
    }

    /// The refusal a deduct gets, if it is refused: its order decided
    /// before, the sale paused or outside its window, a deadline out of
    /// bounds, the wrong kind of stock, a
    /// per-user limit, or too little (or taken) stock.
    fn refuse_deduct(&self, time: i64, d: &Deduct) -> Option<Decision> {
        if let Some(entry) = self.orders.get(d.order_id.as_str()) {
            let (result, reason) = match entry.status {
                OrderStatus::Deducted => (ResultCode::Duplicate, "order already deducted"),
                OrderStatus::Reserved => (ResultCode::Duplicate, "order already reserved"),
                OrderStatus::Confirmed => (ResultCode::Duplicate, "order already confirmed"),
                OrderStatus::RolledBack => (ResultCode::RejectedCancelled, "order was rolled back"),
                OrderStatus::Cancelled => (
                    ResultCode::RejectedCancelled,
                    "order was cancelled before its deduction",
                ),
                OrderStatus::Expired => {
                    (ResultCode::RejectedExpired, "order's reservation expired")
                }
            };
            return Some(self.refuse(result, reason));
        }
        if let Some(refused) = self.refuse_sale(time) {
            return Some(refused);
        }
        if let Some(deadline) = d.expires_at {
            if let Err(e) = check_deadline(deadline, time) {
                return Some(self.refuse(ResultCode::RejectedDeadline, e.to_string()));
            }
        }
        let named = !d.units.is_empty();
        if !named && self.named {
            return Some(self.refuse(
                ResultCode::RejectedInsufficient,
                "the sku sells named units; name the units to take",
            ));
        }
        if named && !self.named && self.total > 0 {
            return Some(self.refuse(
                ResultCode::RejectedInsufficient,
                "the sku sells counted stock, not named units",
            ));
        }
        if let Some(reason) = self.over_limit(d) {
            return Some(self.refuse(ResultCode::RejectedLimit, reason));
        }
        let short = if named {
            self.units_taken(d)
        } else {
            self.allocate(d.quantity.get(), d.location.as_ref()).err()
        };
        short.map(|reason| self.refuse(ResultCode::RejectedInsufficient, reason))
    }

    /// Why the deduct's user would go over the SKU's per-user limit, if it
    /// would (a SKU with a limit needs a user).
    fn over_limit(&self, d: &Deduct) -> Option<String> {
        let limit = self.limit?;
        let Some(user) = d.user_id.as_ref().map(|u| u.as_str()) else {
            return Some(format!(
                "the sku has a per-user limit of {limit}; name a user_id"
            ));
        };
        let quantity = d.quantity.get();
        let counted = self.users.get(user).copied().unwrap_or(0);
        (counted + quantity > limit).then(|| {
            format!(
                "user {user} has {counted} of the per-user limit of {limit}; requested {quantity}"
            )
        })
    }

    /// Which of the units a deduct names are not free, if any is not.
    fn units_taken(&self, d: &Deduct) -> Option<String> {
        let taken: Vec<String> = d
            .units
            .iter()
            .filter_map(|u| {
                let state = match self.units.get(u.as_str()) {
                    None => "not on sale",
                    Some(Unit::Available) => return None,
                    Some(unit) => unit.as_str(),
                };
                Some(format!("{u} ({state})"))
            })
            .collect();
        (!taken.is_empty()).then(|| format!("units not free: {}", taken.join(", ")))
    }

    /// Why `quantity` units of counted stock cannot be taken (from
    /// `location`, if named), if they cannot. A SKU with locations serves a
    /// deduct naming none from the first location that has all of it.
    fn allocate(&self, quantity: i64, location: Option<&LocationId>) -> Result<(), String> {
        if let Some(named) = location {
            let Some(at) = self.locations.iter().find(|l| l.name == named.as_str()) else {
                return Err(format!("unknown location: {named}"));
            };
            if quantity > at.available {
                return Err(format!(
                    "requested {quantity}, available at {named} {}",
                    at.available
                ));
            }
            return Ok(());
        }
        if quantity > self.available {
            return Err(format!(
                "requested {quantity}, available {}",
                self.available
            ));
        }
        if self.locations.is_empty() || self.locations.iter().any(|l| l.available >= quantity) {
            return Ok(());
        }
        let each: Vec<String> = (self.locations.iter())
            .map(|l| format!("{} {}", l.name, l.available))
            .collect();
        Err(format!(
            "requested {quantity}, available {} but no one location has that many ({})",
            self.available,
            each.join(", ")
        ))
    }

    pub(super) fn rollback(&mut self, offset: i64, r: &Rollback) -> Decision {
        let key = r.order_id.as_str();
        let Some(status) = self.orders.get(key).map(|e| e.status) else {
            self.orders.insert(
                key.to_owned(),
                OrderEntry::new(OrderStatus::Cancelled, 0, offset),
            );
            return self.refuse(
                ResultCode::IgnoredNoDeduction,
                "no deduction for this order; tombstone left",
            );
        };
        match status {
            OrderStatus::Deducted | OrderStatus::Reserved => {
                let (units, at) = self.release(key, OrderStatus::RolledBack, offset);
                self.decide_at(ResultCode::Applied, units, None, at)
            }
            OrderStatus::RolledBack => {
                self.refuse(ResultCode::Duplicate, "order already rolled back")
            }
            OrderStatus::Cancelled => self.refuse(ResultCode::Duplicate, "order already cancelled"),
            OrderStatus::Expired => {
                self.refuse(ResultCode::Duplicate, "order's reservation already expired")
            }
            OrderStatus::Confirmed => self.refuse(
                ResultCode::RejectedNotReserved,
                "order was confirmed; refund it instead",
            ),
        }
    }

    pub(super) fn confirm(&mut self, offset: i64, time: i64, c: &Confirm) -> Decision {
        let key = c.order_id.as_str();
        let Some(entry) = self.orders.get(key) else {
            return self.refuse(
                ResultCode::RejectedNotReserved,
                "no reservation for this order",
            );
        };
        match entry.status {
            OrderStatus::Reserved => {
                let (quantity, deadline) = (entry.quantity, entry.expires_at.unwrap_or(i64::MAX));
                if time > deadline {
                    let (units, at) = self.release(key, OrderStatus::Expired, offset);
                    let reason = format!(
                        "confirmed at {time}, after the deadline {deadline}; the hold expired"
                    );
                    return self.decide_at(ResultCode::RejectedExpired, units, Some(reason), at);
                }
                self.reserved -= quantity;
                let (mut named, mut at) = (Vec::new(), None);
                if let Some(entry) = self.orders.get_mut(key) {
                    entry.status = OrderStatus::Confirmed;
                    entry.offset = offset;
                    named.clone_from(&entry.units);
                    at.clone_from(&entry.location);
                }
                self.mark_units(&named, &Unit::Sold(key.to_owned()));
                self.decide_at(ResultCode::Confirmed, 0, None, at)
            }
            OrderStatus::Confirmed => self.refuse(ResultCode::Duplicate, "order already confirmed"),
            OrderStatus::Expired => {
                self.refuse(ResultCode::RejectedExpired, "order's reservation expired")
            }
            OrderStatus::Deducted => self.refuse(
                ResultCode::RejectedNotReserved,
                "order was deducted without a hold; nothing to confirm",
            ),
            OrderStatus::RolledBack => {
                self.refuse(ResultCode::RejectedCancelled, "order was rolled back")
            }
            OrderStatus::Cancelled => self.refuse(
                ResultCode::RejectedCancelled,
                "order was cancelled before its reservation",
            ),
        }
    }

    pub(super) fn expire(&mut self, offset: i64, time: i64, e: &Expire) -> Decision {
        let key = e.order_id.as_str();
        let Some(entry) = self.orders.get(key) else {
            return self.refuse(
                ResultCode::RejectedNotReserved,
                "no reservation for this order",
            );
        };
        match entry.status {
            OrderStatus::Reserved => {
                let deadline = entry.expires_at.unwrap_or(i64::MAX);
                if time <= deadline {
                    let reason = format!("the hold lasts until {deadline}; record time {time}");
                    return self.refuse(ResultCode::IgnoredNotDue, reason);
                }
                let (units, at) = self.release(key, OrderStatus::Expired, offset);
                self.decide_at(ResultCode::Expired, units, None, at)
            }
            OrderStatus::Expired => self.refuse(ResultCode::Duplicate, "order already expired"),
            other => self.refuse(
                ResultCode::RejectedNotReserved,
                format!("no live hold for this order (it is {})", other.as_str()),
            ),
        }
    }

    pub(super) fn refund(&mut self, offset: i64, r: &Refund) -> Decision {
        let key = r.order_id.as_str();
        let entry = match self.orders.get(key) {
            Some(entry) if entry.status == OrderStatus::Confirmed => entry,
            Some(entry) if entry.status == OrderStatus::Deducted => {
                return self.refuse(
                    ResultCode::RejectedNotSold,
                    "order was deducted without a hold; roll it back instead",
                )
            }
            Some(entry) => {
                let reason = format!("order sold nothing (it is {})", entry.status.as_str());
                return self.refuse(ResultCode::RejectedNotSold, reason);
            }
            None => return self.refuse(ResultCode::RejectedNotSold, "no sale for this order"),
        };
        let (target, units) = match judge_refund(entry, r.quantity) {
            Ok(refunded) => refunded,
            Err((result, reason)) => return self.refuse(result, reason),
        };
        let user = entry.user.clone();
        let named = entry.units.clone();
        let at = entry.location.clone();
        if let Some(entry) = self.orders.get_mut(key) {
            entry.refunded = target;
            entry.offset = offset;
        }
        self.give_back(at.as_deref(), units);
        self.count(user.as_deref(), -units);
        self.mark_units(&named, &Unit::Available);
        self.decide_at(ResultCode::Refunded, units, None, at)
    }

    pub(super) fn set_limit(&mut self, l: &Limit) -> Decision {
        self.limit = l.per_user.map(|q| q.get());
        self.decide(ResultCode::Applied, 0, None)
    }

    pub(super) fn restock(&mut self, offset: i64, r: &Restock) -> Decision {
        if self.adjustments.contains_key(r.adjustment_id.as_str()) {
            return self.decide(
                ResultCode::Duplicate,
                0,
                Some("adjustment already applied".into()),
            );
        }
        if let Some(refused) = r.out_of_range() {
            return self.decide(ResultCode::RejectedRestock, 0, Some(refused.to_string()));
        }
        let named = r.named();
        if named.is_empty() && self.named {
            return self.decide(
                ResultCode::RejectedRestock,
                0,
                Some("the sku sells named units; add them by name".into()),
            );
        }
        if let Err(reason) = self.stocks_there(r) {
            return self.decide(ResultCode::RejectedRestock, 0, Some(reason));
        }
        if !named.is_empty() {
            if !self.named && self.total > 0 {
                let reason = format!(
                    "the sku holds {} counted units; named units cannot be added to it",
                    self.total
                );
                return self.decide(ResultCode::RejectedRestock, 0, Some(reason));
            }
            let there: Vec<&str> = named
                .iter()
                .map(|u| u.as_str())
                .filter(|u| self.units.contains_key(*u))
                .collect();
            if !there.is_empty() {
                let reason = format!("units already there: {}", there.join(", "));
                return self.decide(ResultCode::RejectedRestock, 0, Some(reason));
            }
        }
        let quantity = r.quantity();
        if let Some(location) = r.location() {
            return self.restock_at(offset, r, location);
        }
        let (available, total) = match r.mode() {
            RestockMode::Add => {
                let available = self.available + quantity;
                let total = self.total + quantity;
                if available < 0 {
                    let reason = format!("ADD {quantity} would leave available at {available}");
                    return self.decide(ResultCode::RejectedRestock, 0, Some(reason));
                }
                if total > MAX_STOCK {
                    let reason =
                        format!("ADD {quantity} would make the total {total}, above {MAX_STOCK}");
                    return self.decide(ResultCode::RejectedRestock, 0, Some(reason));
                }
                (available, total)
            }
            RestockMode::Set => {
                let held = self.held();
                if quantity < held {
                    let reason = format!("SET {quantity} is below the {held} units held by orders");
                    return self.decide(ResultCode::RejectedRestock, 0, Some(reason));
                }
                (quantity - held, quantity)
            }
        };
        let delta = available - self.available;
        self.available = available;
        self.total = total;
        self.adjustments
            .insert(r.adjustment_id.as_str().to_owned(), offset);
        for unit in named {
            self.units.insert(unit.as_str().to_owned(), Unit::Available);
        }
        self.named |= !named.is_empty();
        self.decide(ResultCode::Applied, delta, None)
    }

    /// Why a restock cannot go where it asks, if it cannot: a SKU keeps
    /// its stock in one implicit place or by location, never both, and
    /// named units have no location.
    fn stocks_there(&self, r: &Restock) -> Result<(), String> {
        match (r.location(), self.locations.is_empty()) {
            (None, false) if r.named().is_empty() => {
                Err("the sku keeps stock by location; name the location".into())
            }
            (None, false) => {
                Err("the sku keeps stock by location; named units cannot be added to it".into())
            }
            (Some(_), true) if self.total > 0 => Err(format!(
                "the sku holds {} units in no location; stock by location starts from a total of 0",
                self.total
            )),
            _ => Ok(()),
        }
    }

    /// A restock of the stock at `location`: as a restock of the SKU, but
    /// an `ADD` may not leave the location's available below 0, nor a
    /// `SET` its total below what orders hold there. A location not
    /// stocked before is added last.
    fn restock_at(&mut self, offset: i64, r: &Restock, location: &LocationId) -> Decision {
        let quantity = r.quantity();
        let (was_available, was_total) = (self.locations.iter())
            .find(|l| l.name == location.as_str())
            .map_or((0, 0), |l| (l.available, l.total));
        let (available, total) = match r.mode() {
            RestockMode::Add => {
                let available = was_available + quantity;
                if available < 0 {
                    let reason = format!(
                        "ADD {quantity} would leave available at {location} at {available}"
                    );
                    return self.decide(ResultCode::RejectedRestock, 0, Some(reason));
                }
                (available, was_total + quantity)
            }
            RestockMode::Set => {
                let held = was_total - was_available;
                if quantity < held {
                    let reason = format!(
                        "SET {quantity} is below the {held} units held by orders at {location}"
                    );
                    return self.decide(ResultCode::RejectedRestock, 0, Some(reason));
                }
                (quantity - held, quantity)
            }
        };
        let sku_total = self.total + total - was_total;
        if sku_total > MAX_STOCK {
            let reason = format!(
                "{} {quantity} would make the total {sku_total}, above {MAX_STOCK}",
                r.mode().as_str()
            );
            return self.decide(ResultCode::RejectedRestock, 0, Some(reason));
        }
        let delta = available - was_available;
        self.available += delta;
        self.total = sku_total;
        match self.location_mut(location.as_str()) {
            Some(at) => (at.available, at.total) = (available, total),
            None => self.locations.push(LocationStock {
                name: location.as_str().to_owned(),
                available,
                total,
            }),
        }
        self.adjustments
            .insert(r.adjustment_id.as_str().to_owned(), offset);
        let at = Some(location.as_str().to_owned());
        self.decide_at(ResultCode::Applied, delta, None, at)
    }

    pub(super) fn transfer(&mut self, offset: i64, t: &Transfer) -> Decision {
        if self.adjustments.contains_key(t.transfer_id.as_str()) {
            return self.refuse(ResultCode::Duplicate, "adjustment already applied");
        }
        let (from, to, quantity) = (t.from().as_str(), t.to().as_str(), t.quantity().get());
        let Some(there) = self.locations.iter().find(|l| l.name == from) else {
            let reason = format!("unknown location: {from}");
            return self.refuse(ResultCode::RejectedInsufficient, reason);
        };
        if quantity > there.available {
            let reason = format!(
                "requested {quantity}, available at {from} {}",
                there.available
            );
            return self.refuse(ResultCode::RejectedInsufficient, reason);
        }
        if let Some(at) = self.location_mut(from) {
            at.available -= quantity;
            at.total -= quantity;
        }
        match self.location_mut(to) {
            Some(at) => {
                at.available += quantity;
                at.total += quantity;
            }
            None => self.locations.push(LocationStock {
                name: to.to_owned(),
                available: quantity,
                total: quantity,
            }),
        }
        self.adjustments
            .insert(t.transfer_id.as_str().to_owned(), offset);
        self.decide_at(ResultCode::Applied, 0, None, Some(from.to_owned()))
    }
}

/// The machine's judgement of a refund of `entry`, an order that sold
/// (confirmed), to `total` units refunded in all (`None`: every unit it
/// bought): the new total and the units it gives back, or its refusal
/// (`REJECTED_REFUND`, or `DUPLICATE` for a total already reached) and
/// why. Every refund the machine decides is judged by it; a client that
/// checks a refund before sending it asks it too, rather than repeating it.
///
/// ```
/// use stockledger_core::machine::judge_refund;
/// use stockledger_core::{OrderEntry, OrderStatus, Quantity, ResultCode};
///
/// let sold = OrderEntry {
///     status: OrderStatus::Confirmed, quantity: 4, offset: 7, user: None,
///     expires_at: None, refunded: 1, units: Vec::new(), location: None,
/// };
/// assert_eq!(judge_refund(&sold, Quantity::new(3).ok()), Ok((3, 2)));
/// let (result, _) = judge_refund(&sold, Quantity::new(5).ok()).unwrap_err();
/// assert_eq!(result, ResultCode::RejectedRefund);
/// ```
pub fn judge_refund(
    entry: &OrderEntry,
    total: Option<Quantity>,
) -> Result<(i64, i64), (ResultCode, String)> {
    let (bought, refunded) = (entry.quantity, entry.refunded);
    let target = total.map_or(bought, Quantity::get);
    if target > bought {
        let reason = format!("refund total {target} is more than the {bought} units bought");
        return Err((ResultCode::RejectedRefund, reason));
    }
    if !entry.units.is_empty() && target != bought {
        let reason =
            format!("an order of named units is refunded whole ({bought} units), not {target}");
        return Err((ResultCode::RejectedRefund, reason));
    }
    if target < refunded {
        let reason = format!(
            "{refunded} units are already refunded; a refund total cannot go down to {target}"
        );
        return Err((ResultCode::RejectedRefund, reason));
    }
    if target == refunded {
        let reason = format!("order already refunded {refunded}");
        return Err((ResultCode::Duplicate, reason));
    }
    Ok((target, target - refunded))
}
