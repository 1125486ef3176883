//! The commands order services and operators append to the log.

use std::fmt;

use crate::ids::{AdjustmentId, CommandId, OrderId, Quantity, Sku, ValidationError, MAX_STOCK};

/// Longest free-text reason a rollback may carry, in bytes.
pub const MAX_REASON_LEN: usize = 1024;

/// One record of the command topic. The record key is always `sku`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Command {
    pub command_id: CommandId,
    pub sku: Sku,
    /// When the order service issued the command, in milliseconds since the
    /// Unix epoch. Informational: no decision depends on it.
    pub occurred_at: i64,
    pub body: CommandBody,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CommandBody {
    Deduct(Deduct),
    Rollback(Rollback),
    Restock(Restock),
}

impl CommandBody {
    pub fn kind(&self) -> CommandKind {
        match self {
            Self::Deduct(_) => CommandKind::Deduct,
            Self::Rollback(_) => CommandKind::Rollback,
            Self::Restock(_) => CommandKind::Restock,
        }
    }

    /// The order this command belongs to, if it is a deduct or rollback.
    pub fn order_id(&self) -> Option<&OrderId> {
        match self {
            Self::Deduct(d) => Some(&d.order_id),
            Self::Rollback(r) => Some(&r.order_id),
            Self::Restock(_) => None,
        }
    }

    /// The quantity named by the command (signed for `Restock ADD`).
    pub fn quantity(&self) -> Option<i64> {
        match self {
            Self::Deduct(d) => Some(d.quantity.get()),
            Self::Rollback(_) => None,
            Self::Restock(r) => Some(r.quantity()),
        }
    }
}

/// Take `quantity` units for `order_id`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Deduct {
    pub order_id: OrderId,
    pub quantity: Quantity,
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
}

impl CommandKind {
    pub const ALL: [CommandKind; 3] = [Self::Deduct, Self::Rollback, Self::Restock];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Deduct => "DEDUCT",
            Self::Rollback => "ROLLBACK",
            Self::Restock => "RESTOCK",
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
    fn rollback_reason_is_bounded() {
        let order = OrderId::new("o").unwrap();
        let err = Rollback::new(order, Some("x".repeat(MAX_REASON_LEN + 1))).unwrap_err();
        assert_eq!(err.field, "reason");
    }
}
