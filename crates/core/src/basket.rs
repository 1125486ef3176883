//! Whether a basket sold whole: the one judge of a basket's lines, which
//! the client's answers, the applier's settler and the demo's check ask.
//!
//! A basket is an order id on several SKUs, one line each, held together
//! and confirmed together; the log decides each line on its own SKU. What
//! the lines' orders say together is judged here, once: where the basket
//! stands ([`BasketStanding`]), and what a basket past its deadline needs
//! so that none stays partly sold ([`Settlement`]).

use crate::machine::{OrderEntry, OrderStatus};

/// Where one line of a basket stands, from its order on its SKU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LineStanding {
    /// In the log, not decided yet (or not seen yet).
    Undecided,
    /// Its hold holds units.
    Held,
    /// Its units are sold: a confirmed hold, or a plain deduct of the
    /// same order id.
    Sold,
    /// Sold, then every unit refunded.
    Refunded,
    /// Its hold was refused: it left no order.
    Refused,
    /// Rolled back (or a rollback came first and refused the hold).
    Released,
    /// Its hold's deadline passed unconfirmed.
    Expired,
}

impl LineStanding {
    /// The line whose order on its SKU is `order` (`None`: no order), and
    /// whose record was `refused` (a refusal leaves no order; no order and
    /// no refusal is a line not decided yet).
    ///
    /// ```
    /// use stockledger_core::basket::LineStanding;
    ///
    /// assert_eq!(LineStanding::of(None, false), LineStanding::Undecided);
    /// assert_eq!(LineStanding::of(None, true), LineStanding::Refused);
    /// ```
    pub fn of(order: Option<&OrderEntry>, refused: bool) -> Self {
        let Some(order) = order else {
            return if refused {
                Self::Refused
            } else {
                Self::Undecided
            };
        };
        match order.status {
            OrderStatus::Reserved => Self::Held,
            OrderStatus::Confirmed | OrderStatus::Deducted if order.live_units() > 0 => Self::Sold,
            OrderStatus::Confirmed | OrderStatus::Deducted => Self::Refunded,
            OrderStatus::RolledBack | OrderStatus::Cancelled => Self::Released,
            OrderStatus::Expired => Self::Expired,
        }
    }

    /// Whether the line holds or sold units now.
    pub fn takes(self) -> bool {
        matches!(self, Self::Held | Self::Sold)
    }
}

/// Where a basket stands, from its lines.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BasketStanding {
    /// A line is in the log and not decided yet.
    Pending,
    /// Every line is held.
    Held,
    /// Every line was sold: the basket sold whole (a line refunded since,
    /// by an operator's hand, does not undo that).
    Sold,
    /// No line holds or sold units, and a line's hold was refused.
    Refused,
    /// No line holds or sold units: rolled back, expired or refunded.
    Released,
    /// Some lines hold or sold units and others not: a caller stopped
    /// half-way, or a line failed after another was sold.
    Partial,
}

/// The one judge of a basket: where the basket with these lines stands.
///
/// ```
/// use stockledger_core::basket::{standing, BasketStanding, LineStanding::*};
///
/// assert_eq!(standing(&[Held, Held]), BasketStanding::Held);
/// assert_eq!(standing(&[Sold, Refunded]), BasketStanding::Sold);
/// assert_eq!(standing(&[Sold, Expired]), BasketStanding::Partial);
/// assert_eq!(standing(&[Refused, Released]), BasketStanding::Refused);
/// assert_eq!(standing(&[Held, Undecided]), BasketStanding::Pending);
/// ```
pub fn standing(lines: &[LineStanding]) -> BasketStanding {
    let all = |f: fn(LineStanding) -> bool| lines.iter().all(|&l| f(l));
    if lines.contains(&LineStanding::Undecided) {
        BasketStanding::Pending
    } else if all(|l| l == LineStanding::Held) {
        BasketStanding::Held
    } else if all(|l| !l.takes()) {
        if lines.contains(&LineStanding::Refused) {
            BasketStanding::Refused
        } else {
            BasketStanding::Released
        }
    } else if all(|l| matches!(l, LineStanding::Sold | LineStanding::Refunded)) {
        BasketStanding::Sold
    } else {
        BasketStanding::Partial
    }
}

/// What a basket past its holds' deadline needs so that it ends sold
/// whole or not at all.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Settlement {
    /// A line is still held (its expire is on the way) or not decided
    /// yet: look again later.
    Wait,
    /// Sold whole, or not at all: nothing to do.
    Settled,
    /// Some lines sold and others given back: these lines (indexes into
    /// the lines) are to be refunded, since a line given back can never be
    /// sold again.
    Undo(Vec<usize>),
}

/// The settlement of a basket past its deadline whose lines are `lines`.
///
/// ```
/// use stockledger_core::basket::{settlement, LineStanding::*, Settlement};
///
/// assert_eq!(settlement(&[Sold, Expired]), Settlement::Undo(vec![0]));
/// assert_eq!(settlement(&[Sold, Held]), Settlement::Wait);
/// assert_eq!(settlement(&[Sold, Refunded]), Settlement::Settled);
/// ```
pub fn settlement(lines: &[LineStanding]) -> Settlement {
    match standing(lines) {
        BasketStanding::Pending | BasketStanding::Held => Settlement::Wait,
        BasketStanding::Partial if lines.contains(&LineStanding::Held) => Settlement::Wait,
        BasketStanding::Partial => Settlement::Undo(
            (lines.iter().enumerate())
                .filter(|(_, &l)| l == LineStanding::Sold)
                .map(|(i, _)| i)
                .collect(),
        ),
        BasketStanding::Sold | BasketStanding::Refused | BasketStanding::Released => {
            Settlement::Settled
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn order(status: OrderStatus, quantity: i64, refunded: i64) -> OrderEntry {
        OrderEntry {
            status,
            quantity,
            offset: 0,
            user: None,
            expires_at: Some(10),
            refunded,
            units: Vec::new(),
            location: None,
        }
    }

    #[test]
    fn a_line_stands_where_its_order_does() {
        use OrderStatus::*;
        let of = |status, refunded| LineStanding::of(Some(&order(status, 2, refunded)), false);
        assert_eq!(of(Reserved, 0), LineStanding::Held);
        assert_eq!(of(Confirmed, 1), LineStanding::Sold);
        assert_eq!(of(Confirmed, 2), LineStanding::Refunded);
        assert_eq!(of(Deducted, 0), LineStanding::Sold);
        assert_eq!(of(RolledBack, 0), LineStanding::Released);
        assert_eq!(of(Cancelled, 0), LineStanding::Released);
        assert_eq!(of(Expired, 0), LineStanding::Expired);
    }

    #[test]
    fn a_basket_is_sold_whole_or_not_at_all_or_half_way() {
        use BasketStanding as B;
        use LineStanding::*;
        let cases: [(&[LineStanding], BasketStanding, Settlement); 10] = [
            (&[Held, Held], B::Held, Settlement::Wait),
            (&[Sold, Sold], B::Sold, Settlement::Settled),
            (&[Sold, Refunded], B::Sold, Settlement::Settled),
            (&[Refunded, Refunded], B::Released, Settlement::Settled),
            (
                &[Released, Expired, Refunded],
                B::Released,
                Settlement::Settled,
            ),
            (&[Refused, Expired], B::Refused, Settlement::Settled),
            (&[Held, Undecided], B::Pending, Settlement::Wait),
            (
                &[Sold, Released, Sold],
                B::Partial,
                Settlement::Undo(vec![0, 2]),
            ),
            (&[Sold, Refused], B::Partial, Settlement::Undo(vec![0])),
            (&[Held, Released], B::Partial, Settlement::Wait),
        ];
        for (lines, basket, settled) in cases {
            assert_eq!(standing(lines), basket, "{lines:?}");
            assert_eq!(settlement(lines), settled, "{lines:?}");
        }
    }
}
