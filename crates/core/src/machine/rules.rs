//! What each command does to a SKU's state: the rules the apply script
//! (`crates/projection/lua/apply.lua`) implements inside Redis too, one
//! function per command kind.

use super::*;

impl SkuState {
    pub(super) fn deduct(&mut self, offset: i64, time: i64, d: &Deduct) -> Decision {
        let quantity = d.quantity.get();
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
            return self.refuse(result, reason);
        }
        if let Some(deadline) = d.expires_at {
            if let Err(e) = check_deadline(deadline, time) {
                return self.refuse(ResultCode::RejectedDeadline, e.to_string());
            }
        }
        let named = !d.units.is_empty();
        if !named && !self.units.is_empty() {
            return self.refuse(
                ResultCode::RejectedInsufficient,
                "the sku sells named units; name the units to take",
            );
        }
        if named && self.units.is_empty() && self.total > 0 {
            return self.refuse(
                ResultCode::RejectedInsufficient,
                "the sku sells counted stock, not named units",
            );
        }
        let user = d.user_id.as_ref().map(|u| u.as_str());
        if let Some(limit) = self.limit {
            let Some(user) = user else {
                let reason = format!("the sku has a per-user limit of {limit}; name a user_id");
                return self.refuse(ResultCode::RejectedLimit, reason);
            };
            let counted = self.users.get(user).copied().unwrap_or(0);
            if counted + quantity > limit {
                let reason = format!(
                    "user {user} has {counted} of the per-user limit of {limit}; requested {quantity}"
                );
                return self.refuse(ResultCode::RejectedLimit, reason);
            }
        }
        if named {
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
            if !taken.is_empty() {
                let reason = format!("units not free: {}", taken.join(", "));
                return self.refuse(ResultCode::RejectedInsufficient, reason);
            }
        } else if quantity > self.available {
            let reason = format!("requested {quantity}, available {}", self.available);
            return self.refuse(ResultCode::RejectedInsufficient, reason);
        }
        self.available -= quantity;
        let status = match d.expires_at {
            Some(_) => {
                self.reserved += quantity;
                OrderStatus::Reserved
            }
            None => OrderStatus::Deducted,
        };
        self.count(user, quantity);
        let names: Vec<String> = d.units.iter().map(|u| u.as_str().to_owned()).collect();
        let order = d.order_id.as_str().to_owned();
        let unit = match status {
            OrderStatus::Reserved => Unit::Held(order.clone()),
            _ => Unit::Sold(order.clone()),
        };
        self.mark_units(&names, &unit);
        self.orders.insert(
            order,
            OrderEntry {
                user: user.map(str::to_owned),
                expires_at: d.expires_at,
                units: names,
                ..OrderEntry::new(status, quantity, offset)
            },
        );
        self.decide(ResultCode::Applied, -quantity, None)
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
                let units = self.release(key, OrderStatus::RolledBack, offset);
                self.decide(ResultCode::Applied, units, None)
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
                    let units = self.release(key, OrderStatus::Expired, offset);
                    let reason = format!(
                        "confirmed at {time}, after the deadline {deadline}; the hold expired"
                    );
                    return self.decide(ResultCode::RejectedExpired, units, Some(reason));
                }
                self.reserved -= quantity;
                let mut named = Vec::new();
                if let Some(entry) = self.orders.get_mut(key) {
                    entry.status = OrderStatus::Confirmed;
                    entry.offset = offset;
                    named.clone_from(&entry.units);
                }
                self.mark_units(&named, &Unit::Sold(key.to_owned()));
                self.decide(ResultCode::Confirmed, 0, None)
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
                let units = self.release(key, OrderStatus::Expired, offset);
                self.decide(ResultCode::Expired, units, None)
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
        let (bought, refunded) = (entry.quantity, entry.refunded);
        let target = r.quantity.map_or(bought, |q| q.get());
        if target > bought {
            let reason = format!("refund total {target} is more than the {bought} units bought");
            return self.refuse(ResultCode::RejectedRefund, reason);
        }
        if !entry.units.is_empty() && target != bought {
            let reason =
                format!("an order of named units is refunded whole ({bought} units), not {target}");
            return self.refuse(ResultCode::RejectedRefund, reason);
        }
        if target < refunded {
            let reason = format!(
                "{refunded} units are already refunded; a refund total cannot go down to {target}"
            );
            return self.refuse(ResultCode::RejectedRefund, reason);
        }
        if target == refunded {
            let reason = format!("order already refunded {refunded}");
            return self.refuse(ResultCode::Duplicate, reason);
        }
        let units = target - refunded;
        let user = entry.user.clone();
        let named = entry.units.clone();
        if let Some(entry) = self.orders.get_mut(key) {
            entry.refunded = target;
            entry.offset = offset;
        }
        self.available += units;
        self.count(user.as_deref(), -units);
        self.mark_units(&named, &Unit::Available);
        self.decide(ResultCode::Refunded, units, None)
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
        let named = r.named();
        if named.is_empty() && !self.units.is_empty() {
            return self.decide(
                ResultCode::RejectedRestock,
                0,
                Some("the sku sells named units; add them by name".into()),
            );
        }
        if !named.is_empty() {
            if self.units.is_empty() && self.total > 0 {
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
        self.decide(ResultCode::Applied, delta, None)
    }
}
