//! What applying one record changed: the machine's own account, for a
//! writer that keeps a SKU's state elsewhere (the projection's Redis
//! hashes) and writes only the parts a batch moved.
//!
//! The account is taken by comparing the state before and after the rule
//! ran, never by a second list of what each command may do: a rule added
//! or changed in `rules.rs` is accounted for as it is written.

use super::{LocationStock, OrderEntry, OrderStatus, SkuState};
use crate::command::{CommandBody, SalePhase, SaleWindow};

/// The parts of a SKU's state one record changed, past those every
/// decided record moves (its counts, its offset and partition, and the
/// decision kept at its offset). Returned by
/// [`SkuState::apply_noting`].
///
/// ```
/// use stockledger_core::{
///     AdjustmentId, Changes, CommandBody, Deduct, Hold, OrderId, Placement, Quantity, Restock,
///     RestockMode, SkuState,
/// };
///
/// let mut state = SkuState::default();
/// let at = Placement::home(0);
/// let restock = Restock::new(AdjustmentId::new("a-1")?, RestockMode::Set, 2)?;
/// let (_, changes) = state.apply_noting(at, 0, 1_000, &CommandBody::Restock(restock));
/// assert!(changes.decided && changes.adjustment && !changes.order);
///
/// let mut reserve = Deduct::new(OrderId::new("order-42")?, Quantity::new(1)?);
/// reserve.expires_at = Some(60_000);
/// let (_, changes) = state.apply_noting(at, 1, 1_000, &CommandBody::Deduct(reserve));
/// assert!(changes.order);
/// assert_eq!(changes.hold, Some(Hold::Live(60_000)));
/// # Ok::<(), stockledger_core::ValidationError>(())
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Changes {
    /// Whether the record was decided anew: its decision is kept at its
    /// offset, and the SKU's offset and partition are now its own. False
    /// for a redelivery (answered with its first decision) and a misrouted
    /// record, which change nothing.
    pub decided: bool,
    /// Whether the entry of the order the record names changed; with it
    /// may have changed the count of the order's user and the state of the
    /// order's named units.
    pub order: bool,
    /// Whether the record spent the adjustment or change id it names
    /// ([`CommandBody::adjustment_id`]); a restock that spends it adds the
    /// named units it lists.
    pub adjustment: bool,
    /// Whether the per-user limit changed.
    pub limit: bool,
    /// Whether the low-stock threshold changed.
    pub low_stock: bool,
    /// Whether the stock per location changed.
    pub locations: bool,
    /// Whether the sale's window, phase or pause changed.
    pub sale: bool,
    /// Where the hold of the order the record names stands after it, for
    /// an order that was ever a reservation (`None` for any other record,
    /// and for a misrouted one). Given for redeliveries too, from the
    /// state, so an index of live holds a crash left behind is mended by
    /// the records delivered again.
    pub hold: Option<Hold>,
}

/// Where a reservation's hold stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hold {
    /// Held until the deadline (ms since the epoch, the last millisecond a
    /// confirm is on time).
    Live(i64),
    /// Confirmed, rolled back or expired: nothing is held any more.
    Ended,
}

/// What of a SKU's state is compared after a record, taken before it.
pub(super) struct Before {
    limit: Option<i64>,
    low_stock: Option<i64>,
    sale: (SaleWindow, SalePhase, bool),
    /// The stock per location; copied only for a SKU that has locations.
    locations: Vec<LocationStock>,
}

impl Before {
    pub(super) fn of(state: &SkuState) -> Self {
        Self {
            limit: state.limit,
            low_stock: state.low_stock_below,
            sale: (state.window, state.phase, state.paused),
            locations: state.locations.clone(),
        }
    }

    /// What the record at `offset`, decided anew with `body`, changed from
    /// this to `after`.
    pub(super) fn changes(self, after: &SkuState, offset: i64, body: &CommandBody) -> Changes {
        let order = named_order(after, body);
        let adjustment = body.adjustment_id();
        Changes {
            decided: true,
            order: order.is_some_and(|entry| entry.offset == offset),
            adjustment: adjustment.is_some_and(|id| after.adjustments.get(id) == Some(&offset)),
            limit: self.limit != after.limit,
            low_stock: self.low_stock != after.low_stock_below,
            locations: self.locations != after.locations,
            sale: self.sale != (after.window, after.phase, after.paused),
            hold: order.and_then(hold_of),
        }
    }
}

/// The entry of the order `body` names, in `state`.
pub(super) fn named_order<'a>(state: &'a SkuState, body: &CommandBody) -> Option<&'a OrderEntry> {
    state.orders.get(body.order_id()?.as_str())
}

/// The hold of `entry`, if it was ever a reservation.
pub(super) fn hold_of(entry: &OrderEntry) -> Option<Hold> {
    let deadline = entry.expires_at?;
    Some(if entry.status == OrderStatus::Reserved {
        Hold::Live(deadline)
    } else {
        Hold::Ended
    })
}
