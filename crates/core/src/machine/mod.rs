//! The state machine: the one definition of what each command does.
//!
//! The applier and replay decide every record with it
//! (`crates/projection/src/stage.rs` loads the part of a SKU's state a
//! batch reads from Redis, and writes back what changed); no rule is
//! written anywhere else.
//!
//! Per SKU the machine keeps available, reserved and total stock (total −
//! available − reserved is what is sold), the per-user limit and each
//! user's counted units, the partition its records live on and the offset
//! of the last record applied there, each order's state, the applied
//! restock adjustments and the decision taken for every offset, so that a
//! redelivered record is answered with the decision it got the first time
//! and changes nothing.
//!
//! Time enters only as each record's timestamp in the log: a reservation's
//! deadline is compared with the timestamp of the confirm or expire that
//! meets it, so a replay decides every expiry as the live run did. The
//! deadline is the last millisecond at which a confirm is on time: a
//! confirm stamped at the deadline confirms, an expire stamped at it is
//! not due yet.

use std::collections::BTreeMap;

use crate::command::{CommandBody, SalePhase, SaleWindow};
use crate::outcome::StockEvents;
use crate::outcome::{Decision, ResultCode};
use crate::Command;

mod changes;
mod rules;
mod sale;

use changes::Before;
pub use changes::{Changes, Hold};
pub use rules::judge_refund;

/// Where one order of one SKU stands.
///
/// ```
/// use stockledger_core::OrderStatus;
///
/// assert_eq!(OrderStatus::RolledBack.as_str(), "ROLLED_BACK");
/// ```
///
/// Deliberately not `#[non_exhaustive]`: its one-letter encoding in Redis
/// must be extended when a state is added, and an exhaustive match makes
/// the compiler say so.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OrderStatus {
    /// A plain deduction took stock that the order still has (sold).
    Deducted,
    /// The deduction or reservation was given back by a rollback.
    RolledBack,
    /// A rollback came first: a tombstone that refuses the late deduction.
    Cancelled,
    /// A reservation holds stock until its deadline.
    Reserved,
    /// A reservation was confirmed in time: its units are sold (less what
    /// was refunded).
    Confirmed,
    /// A reservation's deadline passed unconfirmed: its units came back.
    Expired,
}

impl OrderStatus {
    /// The status as Redis, Lua and the HTTP API spell it.
    ///
    /// ```
    /// use stockledger_core::OrderStatus;
    ///
    /// assert_eq!(OrderStatus::Reserved.as_str(), "RESERVED");
    /// ```
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Deducted => "DEDUCTED",
            Self::RolledBack => "ROLLED_BACK",
            Self::Cancelled => "CANCELLED",
            Self::Reserved => "RESERVED",
            Self::Confirmed => "CONFIRMED",
            Self::Expired => "EXPIRED",
        }
    }
}

/// What the ledger knows of one order of one SKU.
///
/// ```
/// use stockledger_core::{OrderEntry, OrderStatus};
///
/// let bought = OrderEntry {
///     status: OrderStatus::Confirmed,
///     quantity: 3,
///     offset: 17,
///     user: Some("alice".into()),
///     expires_at: Some(1_700_000_600_000),
///     refunded: 1,
///     units: Vec::new(),
///     location: None,
/// };
/// assert_eq!(bought.live_units(), 2);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OrderEntry {
    pub status: OrderStatus,
    /// Units taken by the deduction or reservation (0 for a tombstone).
    pub quantity: i64,
    /// Offset of the record that last changed this entry.
    pub offset: i64,
    /// The buyer the units count against, if the deduct named one.
    pub user: Option<String>,
    /// A reservation's deadline.
    pub expires_at: Option<i64>,
    /// Units of a confirmed order refunded so far.
    pub refunded: i64,
    /// The named units the order took, in the order it named them (empty
    /// for counted stock).
    pub units: Vec<String>,
    /// The location the order took from, where its units go back (`None`
    /// for a SKU without locations).
    pub location: Option<String>,
}

impl OrderEntry {
    fn new(status: OrderStatus, quantity: i64, offset: i64) -> Self {
        Self {
            status,
            quantity,
            offset,
            user: None,
            expires_at: None,
            refunded: 0,
            units: Vec::new(),
            location: None,
        }
    }

    /// Units this order still takes from the SKU (held or sold).
    ///
    /// ```
    /// use stockledger_core::{OrderEntry, OrderStatus};
    ///
    /// let tombstone = OrderEntry {
    ///     status: OrderStatus::Cancelled,
    ///     quantity: 0,
    ///     offset: 4,
    ///     user: None,
    ///     expires_at: None,
    ///     refunded: 0,
    ///     units: Vec::new(),
    ///     location: None,
    /// };
    /// assert_eq!(tombstone.live_units(), 0);
    /// ```
    pub fn live_units(&self) -> i64 {
        match self.status {
            OrderStatus::Deducted | OrderStatus::Reserved => self.quantity,
            OrderStatus::Confirmed => self.quantity - self.refunded,
            OrderStatus::RolledBack | OrderStatus::Cancelled | OrderStatus::Expired => 0,
        }
    }
}

/// Where one named unit of a SKU stands.
///
/// ```
/// use stockledger_core::Unit;
///
/// assert_eq!(Unit::Held("order-42".into()).as_str(), "held");
/// assert_eq!(Unit::Sold("order-42".into()).order(), Some("order-42"));
/// assert_eq!(Unit::Available.order(), None);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Unit {
    /// Free to take.
    Available,
    /// Held by this order's live reservation.
    Held(String),
    /// Sold to this order (a plain deduct or a confirmed reservation).
    Sold(String),
}

impl Unit {
    /// Where the unit stands, without its order: what a seat map shows.
    ///
    /// ```
    /// use stockledger_core::{Unit, UnitState};
    ///
    /// assert_eq!(Unit::Sold("order-42".into()).state(), UnitState::Sold);
    /// ```
    pub fn state(&self) -> UnitState {
        match self {
            Self::Available => UnitState::Available,
            Self::Held(_) => UnitState::Held,
            Self::Sold(_) => UnitState::Sold,
        }
    }

    /// The state as the seat map spells it: `available`, `held`, `sold`.
    pub fn as_str(&self) -> &'static str {
        self.state().as_str()
    }

    /// The order holding or owning the unit, if any.
    pub fn order(&self) -> Option<&str> {
        match self {
            Self::Available => None,
            Self::Held(order) | Self::Sold(order) => Some(order),
        }
    }
}

/// Where a named unit stands, as a seat map shows it: [`Unit`] without
/// the order.
///
/// ```
/// use stockledger_core::UnitState;
///
/// assert_eq!(UnitState::Held.as_str(), "held");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum UnitState {
    Available,
    Held,
    Sold,
}

impl UnitState {
    /// `available`, `held` or `sold`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Available => "available",
            Self::Held => "held",
            Self::Sold => "sold",
        }
    }
}

/// The stock of a SKU at one location.
///
/// ```
/// use stockledger_core::LocationStock;
///
/// let berlin = LocationStock { name: "berlin".into(), available: 7, total: 10 };
/// assert_eq!(berlin.held(), 3);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocationStock {
    pub name: String,
    /// Free to take here.
    pub available: i64,
    /// Here in all: available, held by live reservations and sold.
    pub total: i64,
}

impl LocationStock {
    /// Units taken from here by live orders (held or sold).
    pub fn held(&self) -> i64 {
        self.total - self.available
    }
}

/// Where a record was read, and where its SKU belongs.
///
/// ```
/// use stockledger_core::Placement;
///
/// let elsewhere = Placement { partition: 3, home: 5 };
/// assert_ne!(elsewhere, Placement::home(3));
/// ```
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
    ///
    /// ```
    /// use stockledger_core::Placement;
    ///
    /// assert_eq!(Placement::home(2), Placement { partition: 2, home: 2 });
    /// ```
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
///
/// ```
/// use stockledger_core::machine::misrouted;
/// use stockledger_core::ResultCode;
///
/// let decision = misrouted(1, 4);
/// assert_eq!((decision.result, decision.delta), (ResultCode::Misrouted, 0));
/// assert!(decision.reason.is_some_and(|r| r.contains("partition 4")));
/// ```
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
        location: None,
        events: StockEvents::NONE,
    }
}

/// A SKU's orders by id ([`SkuState::orders`]).
pub type Orders = foldhash::HashMap<String, OrderEntry>;

/// A SKU's count of units per user ([`SkuState::users`]).
pub type Users = foldhash::HashMap<String, i64>;

/// The state of one SKU.
///
/// ```
/// use stockledger_core::{AdjustmentId, CommandBody, Placement, Restock, RestockMode, ResultCode, SkuState};
///
/// let mut state = SkuState::default();
/// let restock = Restock::new(AdjustmentId::new("a-1")?, RestockMode::Set, 10)?;
/// let decision = state.apply(Placement::home(0), 0, 1_000, &CommandBody::Restock(restock));
/// assert_eq!((decision.result, state.available, state.total), (ResultCode::Applied, 10, 10));
/// # Ok::<(), stockledger_core::ValidationError>(())
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SkuState {
    pub available: i64,
    pub total: i64,
    /// Units held by live reservations.
    pub reserved: i64,
    /// Units one user may hold and buy, if limited.
    pub limit: Option<i64>,
    /// The partition whose records built this state (`None` for state
    /// written before partitions were recorded: its home partition owns it).
    pub partition: Option<i32>,
    /// The offset, on [`SkuState::partition`], of the last record applied.
    pub last_offset: Option<i64>,
    /// Every order the SKU's records named, by id. A hash map: the rules
    /// and the change set look an order up on nearly every record, where a
    /// tree compared ids all the way down; its seed is drawn per process,
    /// so no producer can choose ids that collide. Its order of iteration
    /// means nothing: a reader that shows orders sorts them.
    pub orders: Orders,
    /// Per user, the units their live orders hold or bought (users at zero
    /// are not kept). Hashed, as [`SkuState::orders`] is: a limited SKU's
    /// deducts count their user on every record.
    pub users: Users,
    /// Applied restock adjustment ids and the offset that applied each.
    pub adjustments: BTreeMap<String, i64>,
    /// The decision taken for every offset applied to this SKU.
    pub decisions: BTreeMap<i64, Decision>,
    /// The SKU's named units and where each stands (empty for a SKU of
    /// counted stock: a SKU is one or the other). `total` counts them and
    /// `available` the free ones. A state may hold only the units its
    /// records name (the applier's, loaded for one batch): the rules look
    /// up units by name and ask [`SkuState::named`] whether there are any.
    pub units: BTreeMap<String, Unit>,
    /// Whether the SKU sells named units: true from its first named
    /// restock on, whether or not [`SkuState::units`] holds them all.
    pub named: bool,
    /// The SKU's stock per location, in the order the locations were first
    /// stocked, which is the order a deduct naming no location tries them
    /// in (empty for a SKU without locations: its stock is in one
    /// implicit place). `available` and `total` are their sums.
    pub locations: Vec<LocationStock>,
    /// The low-stock threshold, if set ([`crate::Alerts`]).
    pub low_stock_below: Option<i64>,
    /// When the SKU sells ([`crate::Window`]).
    pub window: SaleWindow,
    /// Where in [`SkuState::window`] the SKU's records have reached, as
    /// its stock events announced it: it moves only forward with the
    /// records' times, and a new window sets it anew.
    pub phase: SalePhase,
    /// Whether a [`crate::Pause`] stopped the sale.
    pub paused: bool,
}

impl SkuState {
    /// Units taken by live orders: held by reservations or sold.
    ///
    /// ```
    /// use stockledger_core::SkuState;
    ///
    /// let state = SkuState { available: 7, total: 10, reserved: 2, ..SkuState::default() };
    /// assert_eq!(state.held(), 3);
    /// ```
    pub fn held(&self) -> i64 {
        self.total - self.available
    }

    /// Units sold (by plain deductions and confirmed reservations, less
    /// refunds).
    ///
    /// ```
    /// use stockledger_core::SkuState;
    ///
    /// let state = SkuState { available: 7, total: 10, reserved: 2, ..SkuState::default() };
    /// assert_eq!(state.sold(), 1);
    /// ```
    pub fn sold(&self) -> i64 {
        self.total - self.available - self.reserved
    }

    /// The partition this SKU's records must be on.
    ///
    /// ```
    /// use stockledger_core::SkuState;
    ///
    /// assert_eq!(SkuState::default().owner(5), 5);
    /// assert_eq!(SkuState { partition: Some(2), ..SkuState::default() }.owner(5), 2);
    /// ```
    pub fn owner(&self, home: i32) -> i32 {
        self.partition.unwrap_or(home)
    }

    /// Applies the record at `offset` of `at.partition`, whose timestamp in
    /// the log is `time` (milliseconds since the Unix epoch). A record on
    /// another partition than the SKU's owner is [`misrouted`]: its offset
    /// means nothing here, so it is neither applied nor compared. A record
    /// at or below the last applied offset is a redelivery: it gets the
    /// decision stored for it and changes nothing.
    ///
    /// ```
    /// use stockledger_core::{
    ///     AdjustmentId, CommandBody, Deduct, OrderId, Placement, Quantity, Restock, RestockMode,
    ///     ResultCode, SkuState,
    /// };
    ///
    /// let mut state = SkuState::default();
    /// let at = Placement::home(0);
    /// let restock = Restock::new(AdjustmentId::new("a-1")?, RestockMode::Set, 1)?;
    /// state.apply(at, 0, 1_000, &CommandBody::Restock(restock));
    /// let deduct = CommandBody::Deduct(Deduct::new(OrderId::new("order-42")?, Quantity::new(1)?));
    /// assert_eq!(state.apply(at, 1, 1_000, &deduct).result, ResultCode::Applied);
    /// // Redelivered: the same decision, and nothing changes.
    /// assert_eq!(state.apply(at, 1, 1_000, &deduct).result, ResultCode::Applied);
    /// assert_eq!(state.available, 0);
    /// # Ok::<(), stockledger_core::ValidationError>(())
    /// ```
    pub fn apply(&mut self, at: Placement, offset: i64, time: i64, body: &CommandBody) -> Decision {
        self.apply_noting(at, offset, time, body).0
    }

    /// As [`SkuState::apply`], and what the record changed: see
    /// [`Changes`].
    pub fn apply_noting(
        &mut self,
        at: Placement,
        offset: i64,
        time: i64,
        body: &CommandBody,
    ) -> (Decision, Changes) {
        let owner = self.owner(at.home);
        if at.partition != owner {
            return (misrouted(at.partition, owner), Changes::default());
        }
        if self.last_offset.is_some_and(|last| offset <= last) {
            let decision = self.decisions.get(&offset).cloned().unwrap_or_else(|| {
                self.decide(
                    ResultCode::Duplicate,
                    0,
                    Some("redelivered record; its first decision was pruned".into()),
                )
            });
            let hold = changes::named_order(self, body).and_then(changes::hold_of);
            return (
                decision,
                Changes {
                    hold,
                    ..Changes::default()
                },
            );
        }
        let was = Before::of(self);
        let before = self.available;
        let mut decision = match body {
            CommandBody::Deduct(d) => self.deduct(offset, time, d),
            CommandBody::Rollback(r) => self.rollback(offset, r),
            CommandBody::Restock(r) => self.restock(offset, r),
            CommandBody::Confirm(c) => self.confirm(offset, time, c),
            CommandBody::Refund(r) => self.refund(offset, r),
            CommandBody::Expire(e) => self.expire(offset, time, e),
            CommandBody::Limit(l) => self.set_limit(l),
            CommandBody::Transfer(t) => self.transfer(offset, t),
            CommandBody::Alerts(a) => {
                self.low_stock_below = a.low_stock_below.map(|q| q.get());
                self.decide(ResultCode::Applied, 0, None)
            }
            CommandBody::Window(w) => self.set_window(offset, time, w),
            CommandBody::Pause(p) => self.pause(offset, p),
            CommandBody::Resume(r) => self.resume(offset, r),
            CommandBody::Refused(r) => {
                self.decide(ResultCode::RejectedValue, 0, Some(r.problem.to_string()))
            }
        };
        let moved = StockEvents::between(before, self.available, self.low_stock_below);
        decision.events = decision.events.with(moved).with(self.reach(time));
        if decision.location.is_none() {
            decision.location = body.location().map(|l| l.as_str().to_owned());
        }
        self.decisions.insert(offset, decision.clone());
        self.partition = Some(at.partition);
        self.last_offset = Some(offset);
        let changes = was.changes(self, offset, body);
        (decision, changes)
    }

    fn decide(&self, result: ResultCode, delta: i64, reason: Option<String>) -> Decision {
        Decision {
            result,
            delta,
            available: self.available,
            total: self.total,
            reason,
            location: None,
            events: StockEvents::NONE,
        }
    }

    /// An applied decision that acted on `location`, if the SKU keeps
    /// stock by location.
    fn decide_at(
        &self,
        result: ResultCode,
        delta: i64,
        reason: Option<String>,
        location: Option<String>,
    ) -> Decision {
        Decision {
            location,
            ..self.decide(result, delta, reason)
        }
    }

    /// The stock at `name`, if the SKU has that location.
    fn location_mut(&mut self, name: &str) -> Option<&mut LocationStock> {
        self.locations.iter_mut().find(|l| l.name == name)
    }

    /// Changes the available stock at `location` (if any) by `units`,
    /// with the SKU's.
    fn give_back(&mut self, location: Option<&str>, units: i64) {
        self.available += units;
        if let Some(at) = location.and_then(|name| self.location_mut(name)) {
            at.available += units;
        }
    }

    fn refuse(&self, result: ResultCode, reason: impl Into<String>) -> Decision {
        self.decide(result, 0, Some(reason.into()))
    }

    /// Counts `units` (negative: stops counting them) against `user`.
    fn count(&mut self, user: Option<&str>, units: i64) {
        let Some(user) = user else { return };
        let counted = self.users.get(user).copied().unwrap_or(0) + units;
        if counted > 0 {
            self.users.insert(user.to_owned(), counted);
        } else {
            self.users.remove(user);
        }
    }

    /// Sets each of `names` to `state`.
    fn mark_units(&mut self, names: &[String], state: &Unit) {
        for name in names {
            if let Some(unit) = self.units.get_mut(name) {
                *unit = state.clone();
            }
        }
    }

    /// Gives back the units an order still holds or bought, setting its
    /// new status at `offset`; the units returned, and where they went.
    fn release(&mut self, id: &str, status: OrderStatus, offset: i64) -> (i64, Option<String>) {
        let Some(entry) = self.orders.get_mut(id) else {
            return (0, None);
        };
        let units = entry.live_units();
        let named = if units > 0 {
            entry.units.clone()
        } else {
            Vec::new()
        };
        if entry.status == OrderStatus::Reserved {
            self.reserved -= units;
        }
        entry.status = status;
        entry.offset = offset;
        let user = entry.user.clone();
        let location = entry.location.clone();
        self.give_back(location.as_deref(), units);
        self.count(user.as_deref(), -units);
        self.mark_units(&named, &Unit::Available);
        (units, location)
    }
}

/// Every SKU's state: the fold of a whole log in memory, by the same rules
/// the applier applies (the reference the tests hold Redis to).
///
/// ```
/// use stockledger_core::partition::home_partition;
/// use stockledger_core::{
///     Command, CommandBody, CommandId, Deduct, LogFold, OrderId, Quantity, Restock, RestockMode,
///     ResultCode, Rollback, Sku, AdjustmentId,
/// };
///
/// let command = |id: &str, body| Command {
///     command_id: CommandId::new(id).unwrap(),
///     sku: Sku::new("SKU-1").unwrap(),
///     occurred_at: 0,
///     body,
/// };
/// let order = || OrderId::new("order-42").unwrap();
/// let mut fold = LogFold::new(8);
/// let p = home_partition(b"SKU-1", 8);
/// let restock = Restock::new(AdjustmentId::new("a-1")?, RestockMode::Add, 1)?;
/// let deduct = Deduct::new(order(), Quantity::new(1)?);
///
/// // A rollback before its deduct leaves a tombstone; the deduct is refused.
/// let first = fold.apply(p, 0, 0, &command("c0", CommandBody::Restock(restock)));
/// assert_eq!(first.result, ResultCode::Applied);
/// let early = fold.apply(p, 1, 0, &command("c1", CommandBody::Rollback(Rollback::new(order(), None)?)));
/// assert_eq!(early.result, ResultCode::IgnoredNoDeduction);
/// let late = fold.apply(p, 2, 0, &command("c2", CommandBody::Deduct(deduct)));
/// assert_eq!(late.result, ResultCode::RejectedCancelled);
/// assert_eq!(fold.sku("SKU-1").map(|s| s.available), Some(1));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogFold {
    /// The command topic's partition count, which decides each SKU's home.
    pub partitions: i32,
    pub skus: BTreeMap<String, SkuState>,
}

impl LogFold {
    /// An empty fold of a topic with `partitions` partitions.
    ///
    /// ```
    /// use stockledger_core::LogFold;
    ///
    /// let fold = LogFold::new(12);
    /// assert_eq!((fold.partitions, fold.skus.len()), (12, 0));
    /// ```
    pub fn new(partitions: i32) -> Self {
        Self {
            partitions,
            skus: BTreeMap::new(),
        }
    }

    /// Applies the record at `partition`/`offset` stamped `time` in the
    /// log (clamped by [`crate::command::record_time`]). A misrouted record leaves no trace, not even an empty state for
    /// its SKU.
    ///
    /// ```
    /// use stockledger_core::partition::home_partition;
    /// use stockledger_core::{AdjustmentId, Command, CommandBody, CommandId, LogFold, Restock};
    /// use stockledger_core::{RestockMode, ResultCode, Sku};
    ///
    /// let mut fold = LogFold::new(8);
    /// let restock = Command {
    ///     command_id: CommandId::new("c-1")?,
    ///     sku: Sku::new("SKU-1")?,
    ///     occurred_at: 0,
    ///     body: CommandBody::Restock(Restock::new(AdjustmentId::new("a-1")?, RestockMode::Add, 5)?),
    /// };
    /// let home = home_partition(b"SKU-1", 8);
    /// let elsewhere = (home + 1) % 8;
    /// assert_eq!(fold.apply(elsewhere, 0, 0, &restock).result, ResultCode::Misrouted);
    /// assert!(fold.sku("SKU-1").is_none());
    /// assert_eq!(fold.apply(home, 0, 0, &restock).result, ResultCode::Applied);
    /// # Ok::<(), stockledger_core::ValidationError>(())
    /// ```
    pub fn apply(&mut self, partition: i32, offset: i64, time: i64, command: &Command) -> Decision {
        let time = crate::command::record_time(time);
        let sku = command.sku.as_str();
        let at = Placement {
            partition,
            home: crate::partition::home_partition(sku.as_bytes(), self.partitions),
        };
        match self.skus.get_mut(sku) {
            Some(state) => state.apply(at, offset, time, &command.body),
            None if partition != at.home => misrouted(partition, at.home),
            None => {
                self.skus
                    .entry(sku.to_owned())
                    .or_default()
                    .apply(at, offset, time, &command.body)
            }
        }
    }

    /// The state of `sku`, if any record of it was applied.
    ///
    /// ```
    /// use stockledger_core::LogFold;
    ///
    /// assert!(LogFold::new(8).sku("SKU-1").is_none());
    /// ```
    pub fn sku(&self, sku: &str) -> Option<&SkuState> {
        self.skus.get(sku)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::command::{Confirm, Deduct, Expire, Limit, Refund, Restock, RestockMode, Rollback};
    use crate::ids::{AdjustmentId, OrderId, Quantity, MAX_STOCK};

    /// Every record of these tests is on the SKU's home partition, 0.
    const P: Placement = Placement {
        partition: 0,
        home: 0,
    };

    /// The timestamp of records whose time does not matter.
    const T: i64 = 1_000;

    fn deduct(order: &str, q: i64) -> CommandBody {
        CommandBody::Deduct(Deduct::new(
            OrderId::new(order).unwrap(),
            Quantity::new(q).unwrap(),
        ))
    }

    /// A reservation of `q` for `user` until `deadline`.
    fn reserve(order: &str, q: i64, user: Option<&str>, deadline: i64) -> CommandBody {
        CommandBody::Deduct(Deduct {
            user_id: user.map(|u| crate::ids::UserId::new(u).unwrap()),
            expires_at: Some(deadline),
            ..Deduct::new(OrderId::new(order).unwrap(), Quantity::new(q).unwrap())
        })
    }

    fn confirm(order: &str) -> CommandBody {
        CommandBody::Confirm(Confirm {
            order_id: OrderId::new(order).unwrap(),
        })
    }

    fn expire(order: &str) -> CommandBody {
        CommandBody::Expire(Expire {
            order_id: OrderId::new(order).unwrap(),
        })
    }

    fn refund(order: &str, total: Option<i64>) -> CommandBody {
        CommandBody::Refund(Refund {
            order_id: OrderId::new(order).unwrap(),
            quantity: total.map(|q| Quantity::new(q).unwrap()),
        })
    }

    fn limit(per_user: Option<i64>) -> CommandBody {
        CommandBody::Limit(Limit {
            per_user: per_user.map(|q| Quantity::new(q).unwrap()),
        })
    }

    /// (result, delta, available, reserved, total) after applying `body`.
    fn step(
        s: &mut SkuState,
        offset: i64,
        time: i64,
        body: &CommandBody,
    ) -> (ResultCode, i64, i64, i64, i64) {
        let d = s.apply(P, offset, time, body);
        (d.result, d.delta, s.available, s.reserved, s.total)
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
            s.apply(P, 0, T, &restock("a0", RestockMode::Set, 10))
                .result,
            ResultCode::Applied
        );
        assert_eq!(
            s.apply(P, 1, T, &deduct("held", 3)).result,
            ResultCode::Applied
        );
        s
    }

    fn order_with(status: OrderStatus) -> SkuState {
        let mut s = stocked();
        match status {
            OrderStatus::Deducted => {
                s.apply(P, 2, T, &deduct("o", 2));
            }
            OrderStatus::RolledBack => {
                s.apply(P, 2, T, &deduct("o", 2));
                s.apply(P, 3, T, &rollback("o"));
            }
            OrderStatus::Cancelled => {
                s.apply(P, 2, T, &rollback("o"));
            }
            OrderStatus::Reserved => {
                s.apply(P, 2, T, &reserve("o", 2, None, T + 10));
            }
            OrderStatus::Confirmed => {
                s.apply(P, 2, T, &reserve("o", 2, None, T + 10));
                s.apply(P, 3, T, &confirm("o"));
            }
            OrderStatus::Expired => {
                s.apply(P, 2, T, &reserve("o", 2, None, T + 10));
                s.apply(P, 3, T + 11, &expire("o"));
            }
        }
        assert_eq!(s.orders["o"].status, status);
        s
    }

    #[test]
    fn deduct_on_a_new_order_takes_stock_or_is_refused_when_short() {
        let mut s = stocked();
        let d = s.apply(P, 5, T, &deduct("o", 7));
        assert_eq!(
            (d.result, d.delta, d.available, d.total),
            (ResultCode::Applied, -7, 0, 10)
        );
        assert_eq!(s.orders["o"], OrderEntry::new(OrderStatus::Deducted, 7, 5));
        let short = s.apply(P, 6, T, &deduct("p", 1));
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
            (OrderStatus::Reserved, ResultCode::Duplicate),
            (OrderStatus::Confirmed, ResultCode::Duplicate),
            (OrderStatus::Expired, ResultCode::RejectedExpired),
        ];
        for (status, expected) in cases {
            let mut s = order_with(status);
            let before = (s.available, s.total, s.orders.clone());
            let d = s.apply(P, 10, T, &deduct("o", 1));
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
        let d = s.apply(P, 10, T, &rollback("o"));
        assert_eq!(
            (d.result, d.delta, d.available),
            (ResultCode::Applied, 2, 7)
        );
        assert_eq!(s.orders["o"].status, OrderStatus::RolledBack);

        for status in [OrderStatus::RolledBack, OrderStatus::Cancelled] {
            let mut s = order_with(status);
            let available = s.available;
            let d = s.apply(P, 10, T, &rollback("o"));
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
        let r = s.apply(P, 2, T, &rollback("late"));
        assert_eq!(r.result, ResultCode::IgnoredNoDeduction);
        assert_eq!(s.orders["late"].status, OrderStatus::Cancelled);
        let d = s.apply(P, 3, T, &deduct("late", 1));
        assert_eq!(d.result, ResultCode::RejectedCancelled);
        assert_eq!((s.available, s.total), (7, 10));
        assert_eq!(
            s.apply(P, 4, T, &rollback("late")).result,
            ResultCode::Duplicate
        );
        assert_eq!((s.available, s.total), (7, 10));
    }

    #[test]
    fn a_recorded_restock_out_of_its_range_is_refused_by_the_rule_naming_quantity() {
        let recorded = |id: &str, mode, q| {
            let id = AdjustmentId::new(id).unwrap();
            let r = Restock::as_recorded(id, mode, Some(q), None::<&[&str]>).unwrap();
            CommandBody::Restock(r)
        };
        let mut s = stocked(); // 7 available, 3 held
        for (offset, (mode, q)) in [
            (RestockMode::Set, -1),
            (RestockMode::Set, MAX_STOCK + 1),
            (RestockMode::Add, -(MAX_STOCK + 1)),
            (RestockMode::Add, 0),
            (RestockMode::Add, i64::MIN),
        ]
        .into_iter()
        .enumerate()
        {
            let d = s.apply(P, 2 + offset as i64, T, &recorded("r", mode, q));
            assert_eq!((d.result, d.delta), (ResultCode::RejectedRestock, 0), "{q}");
            let reason = d.reason.unwrap_or_default();
            assert!(reason.starts_with("quantity: "), "{reason}");
            assert!(reason.ends_with(&format!("got {q}")), "{reason}");
            assert_eq!((s.available, s.total), (7, 10));
        }
        // Refused, the adjustment is not spent: sent right, it applies.
        let fixed = s.apply(P, 9, T, &recorded("r", RestockMode::Set, 12));
        assert_eq!((fixed.result, s.total), (ResultCode::Applied, 12));
    }

    #[test]
    fn a_command_whose_values_are_refused_changes_nothing_and_names_the_field() {
        let mut s = stocked(); // 7 available, 3 held by "held"
        let before = s.clone();
        let zero = CommandBody::Refused(crate::Refused {
            kind: crate::CommandKind::Deduct,
            order_id: Some(OrderId::new("held").unwrap()),
            adjustment_id: None,
            quantity: Some(0),
            problem: crate::ValidationError::new("quantity", "must be at least 1, got 0"),
        });
        let d = s.apply(P, 2, T, &zero);
        assert_eq!((d.result, d.delta), (ResultCode::RejectedValue, 0));
        assert_eq!(
            d.reason.as_deref(),
            Some("quantity: must be at least 1, got 0")
        );
        assert_eq!(d.figures().map(|f| (f.available, f.total)), Some((7, 10)));
        assert_eq!(
            (&s.orders, &s.adjustments, s.available, s.total),
            (&before.orders, &before.adjustments, 7, 10)
        );
        // Redelivered, the same answer.
        assert_eq!(s.apply(P, 2, T, &zero).result, ResultCode::RejectedValue);
    }

    #[test]
    fn restock_add_and_set_respect_held_stock() {
        let mut s = stocked(); // 7 available, 3 held
        let add = s.apply(P, 2, T, &restock("a1", RestockMode::Add, -7));
        assert_eq!(
            (add.result, add.available, add.total),
            (ResultCode::Applied, 0, 3)
        );
        let neg = s.apply(P, 3, T, &restock("a2", RestockMode::Add, -1));
        assert_eq!(neg.result, ResultCode::RejectedRestock);
        assert_eq!(
            neg.reason.as_deref(),
            Some("ADD -1 would leave available at -1")
        );
        let below = s.apply(P, 4, T, &restock("a3", RestockMode::Set, 2));
        assert_eq!(below.result, ResultCode::RejectedRestock);
        assert_eq!(
            below.reason.as_deref(),
            Some("SET 2 is below the 3 units held by orders")
        );
        let set = s.apply(P, 5, T, &restock("a4", RestockMode::Set, 20));
        assert_eq!(
            (set.result, set.delta, set.available, set.total),
            (ResultCode::Applied, 17, 17, 20)
        );
        let dup = s.apply(P, 6, T, &restock("a4", RestockMode::Set, 50));
        assert_eq!((dup.result, s.total), (ResultCode::Duplicate, 20));
        let big = s.apply(P, 7, T, &restock("a5", RestockMode::Add, MAX_STOCK));
        assert_eq!(big.result, ResultCode::RejectedRestock);
        // A refused adjustment may be sent again once it fits.
        assert_eq!(
            s.apply(P, 8, T, &restock("a2", RestockMode::Add, -1))
                .result,
            ResultCode::Applied
        );
    }

    #[test]
    fn redelivered_offsets_get_their_first_decision_and_change_nothing() {
        let mut s = stocked();
        let first = s.apply(P, 2, T, &deduct("o", 7));
        let after = s.clone();
        assert_eq!(s.apply(P, 2, T, &deduct("o", 7)), first);
        assert_eq!(
            s.apply(P, 0, T, &restock("a0", RestockMode::Set, 10))
                .result,
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
        let d = s.apply(elsewhere, 2, T, &deduct("o", 1));
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
            s.apply(elsewhere, 0, T, &deduct("o", 1)).result,
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
        assert_eq!(s.apply(moved, 9, T, &deduct("o", 1)), misrouted(5, 0));
        let old = Placement {
            partition: 0,
            home: 5,
        };
        assert_eq!(
            s.apply(old, 9, T, &deduct("o", 1)).result,
            ResultCode::Applied
        );
    }

    #[test]
    fn a_ledger_refuses_a_new_skus_record_off_its_home_and_keeps_no_state_for_it() {
        let command = |sku: &str| Command {
            command_id: crate::ids::CommandId::new("c").unwrap(),
            sku: crate::ids::Sku::new(sku).unwrap(),
            occurred_at: 0,
            body: restock("a", RestockMode::Add, 5),
        };
        let mut fold = LogFold::new(4);
        let home = crate::partition::home_partition(b"SKU-1", 4);
        let away = (home + 1) % 4;
        assert_eq!(
            fold.apply(away, 0, T, &command("SKU-1")),
            misrouted(away, home)
        );
        assert!(fold.sku("SKU-1").is_none());
        assert_eq!(
            fold.apply(home, 0, T, &command("SKU-1")).result,
            ResultCode::Applied
        );
        assert_eq!(fold.sku("SKU-1").unwrap().partition, Some(home));
    }

    #[test]
    fn a_reservation_holds_until_confirmed_and_a_confirm_at_the_deadline_is_on_time() {
        let mut s = stocked(); // 7 available, 3 sold
        assert_eq!(
            step(&mut s, 2, 100, &reserve("o", 2, None, 200)),
            (ResultCode::Applied, -2, 5, 2, 10)
        );
        assert_eq!(s.orders["o"].status, OrderStatus::Reserved);
        assert_eq!((s.held(), s.sold()), (5, 3));
        // At the deadline the confirm is on time, and the expire is not due.
        let mut racing = s.clone();
        assert_eq!(
            step(&mut racing, 3, 200, &expire("o")),
            (ResultCode::IgnoredNotDue, 0, 5, 2, 10)
        );
        assert_eq!(
            step(&mut s, 3, 200, &confirm("o")),
            (ResultCode::Confirmed, 0, 5, 0, 10)
        );
        assert_eq!((s.held(), s.sold()), (5, 5));
        assert_eq!(
            step(&mut s, 4, 900, &confirm("o")),
            (ResultCode::Duplicate, 0, 5, 0, 10)
        );
        assert_eq!(
            step(&mut s, 5, 900, &expire("o")).0,
            ResultCode::RejectedNotReserved
        );
        let late = s.apply(P, 6, 900, &rollback("o"));
        assert_eq!(late.result, ResultCode::RejectedNotReserved);
        assert_eq!(
            late.reason.as_deref(),
            Some("order was confirmed; refund it instead")
        );
        assert_eq!((s.available, s.reserved), (5, 0));
    }

    #[test]
    fn a_hold_expires_by_record_time_and_a_late_confirm_expires_it_itself() {
        let mut s = stocked();
        s.apply(P, 2, 100, &reserve("a", 2, None, 200));
        s.apply(P, 3, 100, &reserve("b", 1, None, 200));
        assert_eq!(
            step(&mut s, 4, 201, &expire("a")),
            (ResultCode::Expired, 2, 6, 1, 10)
        );
        assert_eq!(
            step(&mut s, 5, 300, &expire("a")),
            (ResultCode::Duplicate, 0, 6, 1, 10)
        );
        let late = s.apply(P, 6, 250, &confirm("a"));
        assert_eq!(
            (late.result, late.reason.as_deref()),
            (
                ResultCode::RejectedExpired,
                Some("order's reservation expired")
            )
        );
        // No expire came for b; its confirm after the deadline ends it.
        let late = s.apply(P, 7, 201, &confirm("b"));
        assert_eq!((late.result, late.delta), (ResultCode::RejectedExpired, 1));
        assert_eq!(
            late.reason.as_deref(),
            Some("confirmed at 201, after the deadline 200; the hold expired")
        );
        assert_eq!(
            (s.available, s.reserved, s.orders["b"].status),
            (7, 0, OrderStatus::Expired)
        );
        // Expired orders refuse a resent deduct and ignore a rollback.
        assert_eq!(
            step(&mut s, 8, 300, &reserve("a", 2, None, 900)).0,
            ResultCode::RejectedExpired
        );
        assert_eq!(
            step(&mut s, 9, 300, &rollback("a")).0,
            ResultCode::Duplicate
        );
        assert_eq!(s.available, 7);
    }

    #[test]
    fn a_rollback_releases_a_hold_before_confirmation() {
        let mut s = stocked();
        s.apply(P, 2, 100, &reserve("o", 4, Some("u"), 200));
        assert_eq!(
            step(&mut s, 3, 150, &rollback("o")),
            (ResultCode::Applied, 4, 7, 0, 10)
        );
        assert!(s.users.is_empty(), "released units stop counting");
        assert_eq!(
            step(&mut s, 4, 150, &confirm("o")).0,
            ResultCode::RejectedCancelled
        );
        assert_eq!(
            step(&mut s, 5, 250, &expire("o")).0,
            ResultCode::RejectedNotReserved
        );
    }

    #[test]
    fn deadlines_in_the_past_or_beyond_seven_days_are_refused() {
        let mut s = stocked();
        let past = s.apply(P, 2, 500, &reserve("o", 1, None, 500));
        assert_eq!(past.result, ResultCode::RejectedDeadline);
        assert_eq!(
            past.reason.as_deref(),
            Some("expires_at: 500 is not after the time of the request (500)")
        );
        let far = s.apply(
            P,
            3,
            500,
            &reserve("o", 1, None, 501 + crate::ids::MAX_HOLD_MS),
        );
        assert_eq!(far.result, ResultCode::RejectedDeadline);
        assert!(!s.orders.contains_key("o"));
        assert_eq!(s.available, 7);
    }

    #[test]
    fn refunds_are_running_totals_up_to_what_was_bought() {
        let mut s = stocked();
        s.apply(P, 2, 100, &reserve("o", 4, Some("u"), 200));
        assert_eq!(
            step(&mut s, 3, 100, &refund("o", None)).0,
            ResultCode::RejectedNotSold
        );
        s.apply(P, 4, 150, &confirm("o"));
        let over = s.apply(P, 5, 150, &refund("o", Some(5)));
        assert_eq!(
            (over.result, over.reason.as_deref()),
            (
                ResultCode::RejectedRefund,
                Some("refund total 5 is more than the 4 units bought")
            )
        );
        assert_eq!(
            step(&mut s, 6, 150, &refund("o", Some(1))),
            (ResultCode::Refunded, 1, 4, 0, 10)
        );
        assert_eq!(s.users["u"], 3);
        assert_eq!(
            step(&mut s, 7, 150, &refund("o", Some(1))),
            (ResultCode::Duplicate, 0, 4, 0, 10)
        );
        assert_eq!(
            step(&mut s, 8, 150, &refund("o", None)),
            (ResultCode::Refunded, 3, 7, 0, 10)
        );
        assert!(s.users.is_empty());
        assert_eq!(
            step(&mut s, 9, 150, &refund("o", Some(2))).0,
            ResultCode::RejectedRefund
        );
        let plain = s.apply(P, 10, 150, &refund("held", None));
        assert_eq!(
            (plain.result, plain.reason.as_deref()),
            (
                ResultCode::RejectedNotSold,
                Some("order was deducted without a hold; roll it back instead")
            )
        );
        assert_eq!(
            step(&mut s, 11, 150, &refund("nobody", None)).0,
            ResultCode::RejectedNotSold
        );
        assert_eq!(
            step(&mut s, 12, 150, &confirm("nobody")).0,
            ResultCode::RejectedNotReserved
        );
        assert_eq!((s.available, s.total), (7, 10));
    }

    #[test]
    fn a_per_user_limit_counts_live_holds_and_sales_only() {
        let mut s = stocked();
        assert_eq!(step(&mut s, 2, 100, &limit(Some(3))).0, ResultCode::Applied);
        assert_eq!(s.limit, Some(3));
        s.apply(P, 3, 100, &reserve("a", 2, Some("u"), 200));
        let over = s.apply(P, 4, 100, &reserve("b", 2, Some("u"), 200));
        assert_eq!(
            (over.result, over.reason.as_deref()),
            (
                ResultCode::RejectedLimit,
                Some("user u has 2 of the per-user limit of 3; requested 2")
            )
        );
        let anonymous = s.apply(P, 5, 100, &deduct("c", 1));
        assert_eq!(
            (anonymous.result, anonymous.reason.as_deref()),
            (
                ResultCode::RejectedLimit,
                Some("the sku has a per-user limit of 3; name a user_id")
            )
        );
        assert_eq!(
            step(&mut s, 6, 100, &reserve("d", 1, Some("v"), 200)).0,
            ResultCode::Applied
        );
        // a's hold expires: u may buy again.
        s.apply(P, 7, 201, &expire("a"));
        assert_eq!(s.users.get("u"), None);
        assert_eq!(
            step(&mut s, 8, 201, &reserve("b2", 3, Some("u"), 400)).0,
            ResultCode::Applied
        );
        assert_eq!(step(&mut s, 9, 201, &limit(None)).0, ResultCode::Applied);
        assert_eq!(
            step(&mut s, 10, 201, &deduct("e", 1)).0,
            ResultCode::Applied
        );
        assert_eq!(s.users["u"], 3);
    }
}
