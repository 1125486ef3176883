//! The commands order services and operators append to the log.

use std::fmt;

use crate::ids::{
    AdjustmentId, CommandId, OrderId, Quantity, Sku, UserId, ValidationError, MAX_HOLD_MS,
    MAX_STOCK, MAX_TIMESTAMP_MS,
};

/// Longest free-text reason a rollback may carry, in bytes.
pub const MAX_REASON_LEN: usize = 1024;

/// One record of the command topic. The record key is always `sku`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Command {
    pub command_id: CommandId,
    pub sku: Sku,
    /// When the order service issued the command, in milliseconds since the
    /// Unix epoch. Informational: no decision depends on it (deadlines are
    /// compared with the record's timestamp in the log).
    pub occurred_at: i64,
    pub body: CommandBody,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CommandBody {
    Deduct(Deduct),
    Rollback(Rollback),
    Restock(Restock),
    Confirm(Confirm),
    Refund(Refund),
    Expire(Expire),
    Limit(Limit),
}

impl CommandBody {
    pub fn kind(&self) -> CommandKind {
        match self {
            Self::Deduct(_) => CommandKind::Deduct,
            Self::Rollback(_) => CommandKind::Rollback,
            Self::Restock(_) => CommandKind::Restock,
            Self::Confirm(_) => CommandKind::Confirm,
            Self::Refund(_) => CommandKind::Refund,
            Self::Expire(_) => CommandKind::Expire,
            Self::Limit(_) => CommandKind::Limit,
        }
    }

    /// The order this command belongs to, if it names one.
    pub fn order_id(&self) -> Option<&OrderId> {
        match self {
            Self::Deduct(d) => Some(&d.order_id),
            Self::Rollback(r) => Some(&r.order_id),
            Self::Confirm(c) => Some(&c.order_id),
            Self::Refund(r) => Some(&r.order_id),
            Self::Expire(e) => Some(&e.order_id),
            Self::Restock(_) | Self::Limit(_) => None,
        }
    }

    /// The quantity named by the command (signed for `Restock ADD`; a
    /// refund's total, a limit's units per user).
    pub fn quantity(&self) -> Option<i64> {
        match self {
            Self::Deduct(d) => Some(d.quantity.get()),
            Self::Restock(r) => Some(r.quantity()),
            Self::Refund(r) => r.quantity.map(Quantity::get),
            Self::Limit(l) => l.per_user.map(Quantity::get),
            Self::Rollback(_) | Self::Confirm(_) | Self::Expire(_) => None,
        }
    }

    /// The buyer a deduct names, if any.
    pub fn user_id(&self) -> Option<&UserId> {
        match self {
            Self::Deduct(d) => d.user_id.as_ref(),
            _ => None,
        }
    }

    /// A reservation's deadline, if this is one.
    pub fn expires_at(&self) -> Option<i64> {
        match self {
            Self::Deduct(d) => d.expires_at,
            _ => None,
        }
    }
}

/// Take `quantity` units for `order_id`: sold at once, or, with
/// `expires_at`, held until a [`Confirm`] sells them or the deadline passes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Deduct {
    pub order_id: OrderId,
    pub quantity: Quantity,
    /// The buyer, counted against the SKU's per-user limit.
    pub user_id: Option<UserId>,
    /// A reservation's deadline (milliseconds since the Unix epoch): the
    /// last instant at which a confirm is on time. Compared with record
    /// timestamps, never with a clock.
    pub expires_at: Option<i64>,
}

impl Deduct {
    /// A plain deduct: no buyer, no hold.
    pub fn new(order_id: OrderId, quantity: Quantity) -> Self {
        Self {
            order_id,
            quantity,
            user_id: None,
            expires_at: None,
        }
    }

    /// Checks a reservation's deadline against `now` (milliseconds since
    /// the Unix epoch) before it is sent: it must lie after `now` and at
    /// most [`MAX_HOLD_MS`] ahead. The applier checks the same against the
    /// record's timestamp.
    pub fn check_deadline(&self, now: i64) -> Result<(), ValidationError> {
        match self.expires_at {
            Some(deadline) => check_deadline(deadline, now),
            None => Ok(()),
        }
    }
}

/// A record's timestamp as the ledger compares it with deadlines: clamped
/// into 0..=[`MAX_TIMESTAMP_MS`] (a record without a timestamp counts as
/// the epoch), so every comparison is exact in Lua too.
pub fn record_time(timestamp_ms: i64) -> i64 {
    timestamp_ms.clamp(0, MAX_TIMESTAMP_MS)
}

/// Checks that a deadline read from a record is an instant the ledger can
/// compare exactly: between the epoch and the end of year 9999.
pub fn check_expires_at(deadline: i64) -> Result<i64, ValidationError> {
    if (0..=MAX_TIMESTAMP_MS).contains(&deadline) {
        Ok(deadline)
    } else {
        Err(ValidationError::new(
            "expires_at",
            format!(
                "{deadline} is not between 0 and {MAX_TIMESTAMP_MS} (9999-12-31T23:59:59.999Z)"
            ),
        ))
    }
}

/// Why a reservation's deadline `deadline` is refused at time `now`, if it is.
pub fn check_deadline(deadline: i64, now: i64) -> Result<(), ValidationError> {
    if deadline <= now {
        return Err(ValidationError::new(
            "expires_at",
            format!("{deadline} is not after the time of the request ({now})"),
        ));
    }
    if deadline.saturating_sub(now) > MAX_HOLD_MS {
        return Err(ValidationError::new(
            "expires_at",
            format!(
                "{deadline} is more than {MAX_HOLD_MS} ms (7 days) after the time of the request ({now})"
            ),
        ));
    }
    Ok(())
}

/// Sell what a reservation holds. On time when the record's timestamp is at
/// or before the deadline.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Confirm {
    pub order_id: OrderId,
}

/// Give back (part of) what a confirmed order bought.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refund {
    pub order_id: OrderId,
    /// The order's refunded units once this refund is done (a running
    /// total, so a refund sent twice refunds once); `None` refunds all.
    pub quantity: Option<Quantity>,
}

/// End a reservation whose deadline has passed. Written by the applier's
/// expirer (or anyone): it takes effect only when the record's timestamp
/// is after the deadline, so the log, not a clock, decides.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expire {
    pub order_id: OrderId,
}

/// Cap the units one user may hold and buy of this SKU; `None` lifts it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limit {
    pub per_user: Option<Quantity>,
}

/// Give back what `order_id` took. Sent before its deduction, it leaves a
/// tombstone so that the late deduction is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rollback {
    pub order_id: OrderId,
    pub reason: Option<String>,
}

impl Rollback {
    pub fn new(order_id: OrderId, reason: Option<String>) -> Result<Self, ValidationError> {
        if let Some(reason) = &reason {
            if reason.len() > MAX_REASON_LEN {
                return Err(ValidationError::new(
                    "reason",
                    format!(
                        "is {} bytes long; at most {MAX_REASON_LEN} are allowed",
                        reason.len()
                    ),
                ));
            }
        }
        Ok(Self { order_id, reason })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RestockMode {
    /// Change available stock by a signed amount (seed 000's incremental mode).
    Add,
    /// Make the total stock this number; what orders hold stays held (total mode).
    Set,
}

impl RestockMode {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Add => "ADD",
            Self::Set => "SET",
        }
    }
}

/// Arrange stock. Built with [`Restock::new`], which checks the quantity
/// against the mode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Restock {
    pub adjustment_id: AdjustmentId,
    mode: RestockMode,
    quantity: i64,
}

impl Restock {
    /// `ADD` takes a non-zero amount between `-MAX_STOCK` and `MAX_STOCK`;
    /// `SET` a total between 0 and `MAX_STOCK`.
    pub fn new(
        adjustment_id: AdjustmentId,
        mode: RestockMode,
        quantity: i64,
    ) -> Result<Self, ValidationError> {
        let ok = match mode {
            RestockMode::Add => quantity != 0 && (-MAX_STOCK..=MAX_STOCK).contains(&quantity),
            RestockMode::Set => (0..=MAX_STOCK).contains(&quantity),
        };
        if !ok {
            let rule = match mode {
                RestockMode::Add => format!("ADD needs a non-zero amount within ±{MAX_STOCK}"),
                RestockMode::Set => format!("SET needs a total between 0 and {MAX_STOCK}"),
            };
            return Err(ValidationError::new(
                "quantity",
                format!("{rule}, got {quantity}"),
            ));
        }
        Ok(Self {
            adjustment_id,
            mode,
            quantity,
        })
    }

    pub fn mode(&self) -> RestockMode {
        self.mode
    }

    pub fn quantity(&self) -> i64 {
        self.quantity
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CommandKind {
    Deduct,
    Rollback,
    Restock,
    Confirm,
    Refund,
    Expire,
    Limit,
}

impl CommandKind {
    /// In the order of the `CommandKind` enum's symbols.
    pub const ALL: [CommandKind; 7] = [
        Self::Deduct,
        Self::Rollback,
        Self::Restock,
        Self::Confirm,
        Self::Refund,
        Self::Expire,
        Self::Limit,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Deduct => "DEDUCT",
            Self::Rollback => "ROLLBACK",
            Self::Restock => "RESTOCK",
            Self::Confirm => "CONFIRM",
            Self::Refund => "REFUND",
            Self::Expire => "EXPIRE",
            Self::Limit => "LIMIT",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.as_str() == s)
    }
}

impl fmt::Display for CommandKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn adj() -> AdjustmentId {
        AdjustmentId::new("adj-1").unwrap()
    }

    #[test]
    fn restock_quantity_is_checked_against_its_mode() {
        assert!(Restock::new(adj(), RestockMode::Add, -5).is_ok());
        assert!(Restock::new(adj(), RestockMode::Set, 0).is_ok());
        let zero_add = Restock::new(adj(), RestockMode::Add, 0).unwrap_err();
        assert_eq!(zero_add.field, "quantity");
        let negative_set = Restock::new(adj(), RestockMode::Set, -1).unwrap_err();
        assert!(negative_set.problem.contains("SET"), "{negative_set}");
        assert!(Restock::new(adj(), RestockMode::Set, MAX_STOCK + 1).is_err());
    }

    #[test]
    fn a_deadline_must_lie_ahead_and_within_seven_days() {
        let now = 1_700_000_000_000;
        assert!(check_deadline(now + 1, now).is_ok());
        assert!(check_deadline(now + MAX_HOLD_MS, now).is_ok());
        let past = check_deadline(now, now).unwrap_err();
        assert_eq!(past.field, "expires_at");
        assert!(past.problem.contains("not after"), "{past}");
        let far = check_deadline(now + MAX_HOLD_MS + 1, now).unwrap_err();
        assert!(far.problem.contains("7 days"), "{far}");
    }

    #[test]
    fn rollback_reason_is_bounded() {
        let order = OrderId::new("o").unwrap();
        let err = Rollback::new(order, Some("x".repeat(MAX_REASON_LEN + 1))).unwrap_err();
        assert_eq!(err.field, "reason");
    }
}
