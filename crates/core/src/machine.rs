//! The reference state machine: the one definition of what each command does.
//!
//! The applier's Lua script (`crates/projection/lua/apply.lua`) implements the
//! same rules inside Redis; every reason string below appears there too, and
//! the differential tests hold the two to the same outcomes and state.
//!
//! Per SKU the machine keeps available and total stock (total − available is
//! what live deductions hold), the partition its records live on and the
//! offset of the last record applied there, each
//! order's state, the applied restock adjustments and the decision taken for
//! every offset, so that a redelivered record is answered with the decision
//! it got the first time and changes nothing.

use std::collections::BTreeMap;

use crate::command::{Command, CommandBody, Deduct, Restock, RestockMode, Rollback};
use crate::ids::MAX_STOCK;
use crate::outcome::{Decision, ResultCode};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OrderStatus {
    /// The deduction took stock that the order still holds.
    Deducted,
    /// The deduction was given back by a rollback.
    RolledBack,
    /// A rollback came first: a tombstone that refuses the late deduction.
    Cancelled,
}

impl OrderStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Deducted => "DEDUCTED",
            Self::RolledBack => "ROLLED_BACK",
            Self::Cancelled => "CANCELLED",
        }
    }
}

/// What the ledger knows of one order of one SKU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OrderEntry {
    pub status: OrderStatus,
    /// Units taken by the deduction (0 for a tombstone).
    pub quantity: i64,
    /// Offset of the record that last changed this entry.
    pub offset: i64,
}

/// Where a record was read, and where its SKU belongs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Placement {
    /// The partition the record is on.
    pub partition: i32,
    /// The SKU's [`crate::partition::home_partition`] for the topic's
    /// partition count: its owner until its state records one.
    pub home: i32,
}

impl Placement {
    /// A record on its SKU's home partition.
    pub fn home(partition: i32) -> Self {
        Self {
            partition,
            home: partition,
        }
    }
}

/// The decision for a record on a partition its SKU does not live on. It
/// changes nothing, so stock fields are zero (as for an invalid record),
/// and it is the same whenever it is taken: the owner never changes.
pub fn misrouted(partition: i32, owner: i32) -> Decision {
    Decision {
        result: ResultCode::Misrouted,
        delta: 0,
        available: 0,
        total: 0,
        reason: Some(format!(
            "record is on partition {partition} but the sku lives on partition {owner} \
             (produce with the murmur2 partitioner)"
        )),
    }
}

/// The state of one SKU.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SkuState {
    pub available: i64,
    pub total: i64,
    /// The partition whose records built this state (`None` for state
    /// written before partitions were recorded: its home partition owns it).
    pub partition: Option<i32>,
    /// The offset, on [`SkuState::partition`], of the last record applied.
    pub last_offset: Option<i64>,
    pub orders: BTreeMap<String, OrderEntry>,
    /// Applied restock adjustment ids and the offset that applied each.
    pub adjustments: BTreeMap<String, i64>,
    /// The decision taken for every offset applied to this SKU.
    pub decisions: BTreeMap<i64, Decision>,
}

impl SkuState {
    /// Units held by live deductions.
    pub fn held(&self) -> i64 {
        self.total - self.available
    }

    /// The partition this SKU's records must be on.
    pub fn owner(&self, home: i32) -> i32 {
        self.partition.unwrap_or(home)
    }

    /// Applies the record at `offset` of `at.partition`. A record on another
    /// partition than the SKU's owner is [`misrouted`]: its offset means
    /// nothing here, so it is neither applied nor compared. A record at or
    /// below the last applied offset is a redelivery: it gets the decision
    /// stored for it and changes nothing.
    pub fn apply(&mut self, at: Placement, offset: i64, body: &CommandBody) -> Decision {
        let owner = self.owner(at.home);
        if at.partition != owner {
            return misrouted(at.partition, owner);
        }
        if self.last_offset.is_some_and(|last| offset <= last) {
            return self.decisions.get(&offset).cloned().unwrap_or_else(|| {
                self.decide(
                    ResultCode::Duplicate,
                    0,
                    Some("redelivered record; its first decision was pruned".into()),
                )
            });
        }
        let decision = match body {
            CommandBody::Deduct(d) => self.deduct(offset, d),
            CommandBody::Rollback(r) => self.rollback(offset, r),
            CommandBody::Restock(r) => self.restock(offset, r),
        };
        self.decisions.insert(offset, decision.clone());
        self.partition = Some(at.partition);
        self.last_offset = Some(offset);
        decision
    }

    fn decide(&self, result: ResultCode, delta: i64, reason: Option<String>) -> Decision {
        Decision {
            result,
            delta,
            available: self.available,
            total: self.total,
            reason,
        }
    }

    fn deduct(&mut self, offset: i64, d: &Deduct) -> Decision {
        let quantity = d.quantity.get();
        if let Some(entry) = self.orders.get(d.order_id.as_str()) {
            let (result, reason) = match entry.status {
                OrderStatus::Deducted => (ResultCode::Duplicate, "order already deducted"),
                OrderStatus::RolledBack => (ResultCode::RejectedCancelled, "order was rolled back"),
                OrderStatus::Cancelled => (
                    ResultCode::RejectedCancelled,
                    "order was cancelled before its deduction",
                ),
            };
            return self.decide(result, 0, Some(reason.into()));
        }
        if quantity > self.available {
            let reason = format!("requested {quantity}, available {}", self.available);
            return self.decide(ResultCode::RejectedInsufficient, 0, Some(reason));
        }
        self.available -= quantity;
        self.orders.insert(
            d.order_id.as_str().to_owned(),
            OrderEntry {
                status: OrderStatus::Deducted,
                quantity,
                offset,
            },
        );
        self.decide(ResultCode::Applied, -quantity, None)
    }

    fn rollback(&mut self, offset: i64, r: &Rollback) -> Decision {
        let key = r.order_id.as_str();
        match self.orders.get(key).map(|e| (e.status, e.quantity)) {
            Some((OrderStatus::Deducted, quantity)) => {
                self.available += quantity;
                self.orders.insert(
                    key.to_owned(),
                    OrderEntry {
                        status: OrderStatus::RolledBack,
                        quantity,
                        offset,
                    },
                );
                self.decide(ResultCode::Applied, quantity, None)
            }
            Some((OrderStatus::RolledBack, _)) => self.decide(
                ResultCode::Duplicate,
                0,
                Some("order already rolled back".into()),
            ),
            Some((OrderStatus::Cancelled, _)) => self.decide(
                ResultCode::Duplicate,
                0,
                Some("order already cancelled".into()),
            ),
            None => {
                self.orders.insert(
                    key.to_owned(),
                    OrderEntry {
                        status: OrderStatus::Cancelled,
                        quantity: 0,
                        offset,
                    },
                );
                self.decide(
                    ResultCode::IgnoredNoDeduction,
                    0,
                    Some("no deduction for this order; tombstone left".into()),
                )
            }
        }
    }

    fn restock(&mut self, offset: i64, r: &Restock) -> Decision {
        if self.adjustments.contains_key(r.adjustment_id.as_str()) {
            return self.decide(
                ResultCode::Duplicate,
                0,
                Some("adjustment already applied".into()),
            );
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
        self.decide(ResultCode::Applied, delta, None)
    }
}

/// Every SKU's state: the fold of a whole log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ledger {
    /// The command topic's partition count, which decides each SKU's home.
    pub partitions: i32,
    pub skus: BTreeMap<String, SkuState>,
}

impl Ledger {
    /// An empty fold of a topic with `partitions` partitions.
    pub fn new(partitions: i32) -> Self {
        Self {
            partitions,
            skus: BTreeMap::new(),
        }
    }

    /// Applies the record at `partition`/`offset`. A misrouted record
    /// leaves no trace, not even an empty state for its SKU.
    pub fn apply(&mut self, partition: i32, offset: i64, command: &Command) -> Decision {
        let sku = command.sku.as_str();
        let at = Placement {
            partition,
            home: crate::partition::home_partition(sku.as_bytes(), self.partitions),
        };
        match self.skus.get_mut(sku) {
            Some(state) => state.apply(at, offset, &command.body),
            None if partition != at.home => misrouted(partition, at.home),
            None => self
                .skus
                .entry(sku.to_owned())
                .or_default()
                .apply(at, offset, &command.body),
        }
    }

    pub fn sku(&self, sku: &str) -> Option<&SkuState> {
        self.skus.get(sku)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::{AdjustmentId, OrderId, Quantity};

    /// Every record of these tests is on the SKU's home partition, 0.
    const P: Placement = Placement {
        partition: 0,
        home: 0,
    };

    fn deduct(order: &str, q: i64) -> CommandBody {
        CommandBody::Deduct(Deduct {
            order_id: OrderId::new(order).unwrap(),
            quantity: Quantity::new(q).unwrap(),
        })
    }

    fn rollback(order: &str) -> CommandBody {
        CommandBody::Rollback(Rollback::new(OrderId::new(order).unwrap(), None).unwrap())
    }

    fn restock(id: &str, mode: RestockMode, q: i64) -> CommandBody {
        CommandBody::Restock(Restock::new(AdjustmentId::new(id).unwrap(), mode, q).unwrap())
    }

    /// A SKU with 10 units, 3 of them taken by order "held".
    fn stocked() -> SkuState {
        let mut s = SkuState::default();
        assert_eq!(
            s.apply(P, 0, &restock("a0", RestockMode::Set, 10)).result,
            ResultCode::Applied
        );
        assert_eq!(
            s.apply(P, 1, &deduct("held", 3)).result,
            ResultCode::Applied
        );
        s
    }

    fn order_with(status: OrderStatus) -> SkuState {
        let mut s = stocked();
        match status {
            OrderStatus::Deducted => {
                s.apply(P, 2, &deduct("o", 2));
            }
            OrderStatus::RolledBack => {
                s.apply(P, 2, &deduct("o", 2));
                s.apply(P, 3, &rollback("o"));
            }
            OrderStatus::Cancelled => {
                s.apply(P, 2, &rollback("o"));
            }
        }
        assert_eq!(s.orders["o"].status, status);
        s
    }

    #[test]
    fn deduct_on_a_new_order_takes_stock_or_is_refused_when_short() {
        let mut s = stocked();
        let d = s.apply(P, 5, &deduct("o", 7));
        assert_eq!(
            (d.result, d.delta, d.available, d.total),
            (ResultCode::Applied, -7, 0, 10)
        );
        assert_eq!(
            s.orders["o"],
            OrderEntry {
                status: OrderStatus::Deducted,
                quantity: 7,
                offset: 5
            }
        );
        let short = s.apply(P, 6, &deduct("p", 1));
        assert_eq!(short.result, ResultCode::RejectedInsufficient);
        assert_eq!(short.reason.as_deref(), Some("requested 1, available 0"));
        assert!(
            !s.orders.contains_key("p"),
            "a refused deduct leaves no order state"
        );
    }

    #[test]
    fn deduct_on_each_order_state() {
        let cases = [
            (OrderStatus::Deducted, ResultCode::Duplicate),
            (OrderStatus::RolledBack, ResultCode::RejectedCancelled),
            (OrderStatus::Cancelled, ResultCode::RejectedCancelled),
        ];
        for (status, expected) in cases {
            let mut s = order_with(status);
            let before = (s.available, s.total, s.orders.clone());
            let d = s.apply(P, 10, &deduct("o", 1));
            assert_eq!((d.result, d.delta), (expected, 0), "{status:?}");
            assert_eq!(
                before,
                (s.available, s.total, s.orders.clone()),
                "{status:?}"
            );
        }
    }

    #[test]
    fn rollback_on_each_order_state() {
        let mut s = order_with(OrderStatus::Deducted);
        let d = s.apply(P, 10, &rollback("o"));
        assert_eq!(
            (d.result, d.delta, d.available),
            (ResultCode::Applied, 2, 7)
        );
        assert_eq!(s.orders["o"].status, OrderStatus::RolledBack);

        for status in [OrderStatus::RolledBack, OrderStatus::Cancelled] {
            let mut s = order_with(status);
            let available = s.available;
            let d = s.apply(P, 10, &rollback("o"));
            assert_eq!(
                (d.result, d.delta),
                (ResultCode::Duplicate, 0),
                "{status:?}"
            );
            assert_eq!(s.available, available);
        }
    }

    #[test]
    fn rollback_before_its_deduct_leaves_a_tombstone_that_refuses_the_deduct() {
        let mut s = stocked();
        let r = s.apply(P, 2, &rollback("late"));
        assert_eq!(r.result, ResultCode::IgnoredNoDeduction);
        assert_eq!(s.orders["late"].status, OrderStatus::Cancelled);
        let d = s.apply(P, 3, &deduct("late", 1));
        assert_eq!(d.result, ResultCode::RejectedCancelled);
        assert_eq!((s.available, s.total), (7, 10));
        assert_eq!(
            s.apply(P, 4, &rollback("late")).result,
            ResultCode::Duplicate
        );
        assert_eq!((s.available, s.total), (7, 10));
    }

    #[test]
    fn restock_add_and_set_respect_held_stock() {
        let mut s = stocked(); // 7 available, 3 held
        let add = s.apply(P, 2, &restock("a1", RestockMode::Add, -7));
        assert_eq!(
            (add.result, add.available, add.total),
            (ResultCode::Applied, 0, 3)
        );
        let neg = s.apply(P, 3, &restock("a2", RestockMode::Add, -1));
        assert_eq!(neg.result, ResultCode::RejectedRestock);
        assert_eq!(
            neg.reason.as_deref(),
            Some("ADD -1 would leave available at -1")
        );
        let below = s.apply(P, 4, &restock("a3", RestockMode::Set, 2));
        assert_eq!(below.result, ResultCode::RejectedRestock);
        assert_eq!(
            below.reason.as_deref(),
            Some("SET 2 is below the 3 units held by orders")
        );
        let set = s.apply(P, 5, &restock("a4", RestockMode::Set, 20));
        assert_eq!(
            (set.result, set.delta, set.available, set.total),
            (ResultCode::Applied, 17, 17, 20)
        );
        let dup = s.apply(P, 6, &restock("a4", RestockMode::Set, 50));
        assert_eq!((dup.result, s.total), (ResultCode::Duplicate, 20));
        let big = s.apply(P, 7, &restock("a5", RestockMode::Add, MAX_STOCK));
        assert_eq!(big.result, ResultCode::RejectedRestock);
        // A refused adjustment may be sent again once it fits.
        assert_eq!(
            s.apply(P, 8, &restock("a2", RestockMode::Add, -1)).result,
            ResultCode::Applied
        );
    }

    #[test]
    fn redelivered_offsets_get_their_first_decision_and_change_nothing() {
        let mut s = stocked();
        let first = s.apply(P, 2, &deduct("o", 7));
        let after = s.clone();
        assert_eq!(s.apply(P, 2, &deduct("o", 7)), first);
        assert_eq!(
            s.apply(P, 0, &restock("a0", RestockMode::Set, 10)).result,
            ResultCode::Applied
        );
        assert_eq!(s, after);
    }

    #[test]
    fn a_record_on_another_partition_than_the_skus_is_misrouted_and_changes_nothing() {
        let mut s = stocked();
        let before = s.clone();
        let elsewhere = Placement {
            partition: 1,
            home: 0,
        };
        // Offset 2 is new on partition 0, yet the record is not applied.
        let d = s.apply(elsewhere, 2, &deduct("o", 1));
        assert_eq!(d, misrouted(1, 0));
        assert_eq!(
            d.reason.as_deref(),
            Some(
                "record is on partition 1 but the sku lives on partition 0 \
                 (produce with the murmur2 partitioner)"
            )
        );
        // Offset 0 was applied on partition 0: still not a redelivery.
        assert_eq!(
            s.apply(elsewhere, 0, &deduct("o", 1)).result,
            ResultCode::Misrouted
        );
        assert_eq!(s, before);
        assert_eq!(s.partition, Some(0));
    }

    #[test]
    fn the_recorded_partition_owns_a_sku_even_when_its_home_moves() {
        // Partitions were added: the SKU's home is now 5, its state is on 0.
        let mut s = stocked();
        let moved = Placement {
            partition: 5,
            home: 5,
        };
        assert_eq!(s.apply(moved, 9, &deduct("o", 1)), misrouted(5, 0));
        let old = Placement {
            partition: 0,
            home: 5,
        };
        assert_eq!(s.apply(old, 9, &deduct("o", 1)).result, ResultCode::Applied);
    }

    #[test]
    fn a_ledger_refuses_a_new_skus_record_off_its_home_and_keeps_no_state_for_it() {
        let command = |sku: &str| Command {
            command_id: crate::ids::CommandId::new("c").unwrap(),
            sku: crate::ids::Sku::new(sku).unwrap(),
            occurred_at: 0,
            body: restock("a", RestockMode::Add, 5),
        };
        let mut ledger = Ledger::new(4);
        let home = crate::partition::home_partition(b"SKU-1", 4);
        let away = (home + 1) % 4;
        assert_eq!(
            ledger.apply(away, 0, &command("SKU-1")),
            misrouted(away, home)
        );
        assert!(ledger.sku("SKU-1").is_none());
        assert_eq!(
            ledger.apply(home, 0, &command("SKU-1")).result,
            ResultCode::Applied
        );
        assert_eq!(ledger.sku("SKU-1").unwrap().partition, Some(home));
    }
}
