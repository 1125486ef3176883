//! An outcome borrowed from what it is made of: the command record's
//! position, the command and its decision. The applier encodes a batch's
//! outcomes from these where they lie, without copying a command's ids
//! into an owned [`Outcome`] first; [`Outcome`] is this, owned.

use crate::command::{Command, CommandBody, CommandKind, RestockMode};
use crate::ids::UnitId;

use super::{Decision, LogPosition, Outcome, StockEvent};

/// The fields of an [`Outcome`], borrowed (see [`Outcome`] for each).
///
/// ```
/// use stockledger_core::codec::{decode_outcome, encode_outcome_into};
/// use stockledger_core::{Command, CommandBody, CommandId, Deduct, Decision, LogPosition};
/// use stockledger_core::{OrderId, Outcome, OutcomeView, Quantity, ResultCode, Sku, StockEvents};
///
/// let command = Command {
///     command_id: CommandId::new("c-1")?,
///     sku: Sku::new("SKU-1")?,
///     occurred_at: 1_700_000_000_000,
///     body: CommandBody::Deduct(Deduct::new(OrderId::new("order-42")?, Quantity::new(2)?)),
/// };
/// let decision = Decision {
///     result: ResultCode::Applied, delta: -2, available: 8, total: 10,
///     reason: None, location: None, events: StockEvents::NONE,
/// };
/// let at = LogPosition { topic: "stock.ledger".into(), partition: 0, offset: 9 };
/// let view = OutcomeView::of_command(&at, &command, &decision);
/// let mut buffer = Vec::new();
/// encode_outcome_into(&view, &mut buffer);
/// assert_eq!(decode_outcome(&buffer)?, Outcome::for_command(at, &command, decision));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy)]
pub struct OutcomeView<'a> {
    pub position: &'a LogPosition,
    pub sku: &'a str,
    pub command_id: Option<&'a str>,
    pub kind: Option<CommandKind>,
    pub order_id: Option<&'a str>,
    pub adjustment_id: Option<&'a str>,
    pub quantity: Option<i64>,
    pub decision: &'a Decision,
    pub occurred_at: i64,
    pub restock_mode: Option<RestockMode>,
    pub rollback_reason: Option<&'a str>,
    pub user_id: Option<&'a str>,
    pub expires_at: Option<i64>,
    pub basket_id: Option<&'a str>,
    pub units: Units<'a>,
    pub to_location: Option<&'a str>,
    pub opens_at: Option<i64>,
    pub closes_at: Option<i64>,
}

/// The named units of an outcome: a command's own, or an owned outcome's.
#[derive(Debug, Clone, Copy)]
pub enum Units<'a> {
    Of(&'a [UnitId]),
    Text(&'a [String]),
}

impl<'a> Units<'a> {
    pub fn len(self) -> usize {
        match self {
            Self::Of(units) => units.len(),
            Self::Text(units) => units.len(),
        }
    }

    pub fn is_empty(self) -> bool {
        self.len() == 0
    }

    /// The units' names, in order.
    pub fn names(self) -> impl Iterator<Item = &'a str> {
        let (of, text) = match self {
            Self::Of(units) => (units, &[][..]),
            Self::Text(units) => (&[][..], units),
        };
        (of.iter().map(UnitId::as_str)).chain(text.iter().map(String::as_str))
    }
}

impl<'a> OutcomeView<'a> {
    /// The outcome of `command`, read at `position` and decided so.
    pub fn of_command(
        position: &'a LogPosition,
        command: &'a Command,
        decision: &'a Decision,
    ) -> Self {
        let body = &command.body;
        let window = match body {
            CommandBody::Window(w) => Some(w.window),
            _ => None,
        };
        Self {
            position,
            sku: command.sku.as_str(),
            command_id: Some(command.command_id.as_str()),
            kind: Some(body.kind()),
            order_id: body.order_id().map(|o| o.as_str()),
            adjustment_id: match body {
                CommandBody::Restock(r) => Some(r.adjustment_id.as_str()),
                CommandBody::Transfer(t) => Some(t.transfer_id.as_str()),
                body => body.change_id().map(|c| c.as_str()),
            },
            quantity: body.quantity(),
            decision,
            occurred_at: command.occurred_at,
            restock_mode: match body {
                CommandBody::Restock(r) => Some(r.mode()),
                _ => None,
            },
            rollback_reason: match body {
                CommandBody::Rollback(r) => r.reason.as_deref(),
                _ => None,
            },
            user_id: body.user_id().map(|u| u.as_str()),
            expires_at: body.expires_at(),
            basket_id: body.basket_id().map(|b| b.as_str()),
            units: Units::Of(body.units()),
            to_location: match body {
                CommandBody::Transfer(t) => Some(t.to().as_str()),
                _ => None,
            },
            opens_at: window.and_then(|w| w.opens_at()),
            closes_at: window.and_then(|w| w.closes_at()),
        }
    }

    /// The outcome of a record that is not a valid command, under `key`
    /// with its record's `timestamp`, decided `INVALID` ([`Decision::invalid`]).
    pub fn invalid(
        position: &'a LogPosition,
        key: &'a str,
        decision: &'a Decision,
        timestamp: i64,
    ) -> Self {
        Self {
            position,
            sku: key,
            command_id: None,
            kind: None,
            order_id: None,
            adjustment_id: None,
            quantity: None,
            decision,
            // A record's timestamp is the producer's to set: clamped as
            // deadlines compare it, so the archive can hold every outcome.
            occurred_at: crate::command::record_time(timestamp),
            restock_mode: None,
            rollback_reason: None,
            user_id: None,
            expires_at: None,
            basket_id: None,
            units: Units::Text(&[]),
            to_location: None,
            opens_at: None,
            closes_at: None,
        }
    }

    /// The outcome, owned.
    pub fn to_outcome(&self) -> Outcome {
        let owned = |s: Option<&str>| s.map(str::to_owned);
        Outcome {
            position: self.position.clone(),
            sku: self.sku.to_owned(),
            command_id: owned(self.command_id),
            kind: self.kind,
            order_id: owned(self.order_id),
            adjustment_id: owned(self.adjustment_id),
            quantity: self.quantity,
            decision: self.decision.clone(),
            occurred_at: self.occurred_at,
            restock_mode: self.restock_mode,
            rollback_reason: owned(self.rollback_reason),
            user_id: owned(self.user_id),
            expires_at: self.expires_at,
            basket_id: owned(self.basket_id),
            units: self.units.names().map(str::to_owned).collect(),
            to_location: owned(self.to_location),
            opens_at: self.opens_at,
            closes_at: self.closes_at,
        }
    }

    /// The events the record raised, in their kinds' order.
    pub fn stock_events(&self) -> Vec<StockEvent> {
        let d = self.decision;
        d.events
            .kinds()
            .map(|kind| StockEvent {
                kind,
                sku: self.sku.to_owned(),
                location: d.location.clone(),
                available: d.available,
                total: d.total,
                position: self.position.clone(),
                command_id: self.command_id.map(str::to_owned),
                occurred_at: self.occurred_at,
            })
            .collect()
    }
}

impl Outcome {
    /// The outcome, borrowed.
    pub fn view(&self) -> OutcomeView<'_> {
        OutcomeView {
            position: &self.position,
            sku: &self.sku,
            command_id: self.command_id.as_deref(),
            kind: self.kind,
            order_id: self.order_id.as_deref(),
            adjustment_id: self.adjustment_id.as_deref(),
            quantity: self.quantity,
            decision: &self.decision,
            occurred_at: self.occurred_at,
            restock_mode: self.restock_mode,
            rollback_reason: self.rollback_reason.as_deref(),
            user_id: self.user_id.as_deref(),
            expires_at: self.expires_at,
            basket_id: self.basket_id.as_deref(),
            units: Units::Text(&self.units),
            to_location: self.to_location.as_deref(),
            opens_at: self.opens_at,
            closes_at: self.closes_at,
        }
    }
}
