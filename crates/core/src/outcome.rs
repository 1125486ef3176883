//! What the applier decided for each record of the log.

use std::fmt;

use crate::command::{Command, CommandKind, RestockMode};

mod view;
pub use view::{OutcomeView, Units};

/// Where a record sits in the log: its identity for exactly-once effect and
/// for the archive's primary key.
///
/// ```
/// use stockledger_core::LogPosition;
///
/// let at = LogPosition { topic: "stock.ledger".into(), partition: 3, offset: 42 };
/// assert_eq!(at.to_string(), "stock.ledger/3@42");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LogPosition {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
}

impl fmt::Display for LogPosition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}@{}", self.topic, self.partition, self.offset)
    }
}

impl LogPosition {
    /// A position as [`LogPosition`]'s `Display` writes it,
    /// `topic/partition@offset`; `None` for other text.
    ///
    /// ```
    /// use stockledger_core::LogPosition;
    ///
    /// let at = LogPosition::parse("stock.ledger/3@42").unwrap();
    /// assert_eq!((at.topic.as_str(), at.partition, at.offset), ("stock.ledger", 3, 42));
    /// assert_eq!(LogPosition::parse("stock.ledger 3:42"), None);
    /// ```
    pub fn parse(text: &str) -> Option<Self> {
        let (topic, at) = text.rsplit_once('/')?;
        let (partition, offset) = at.split_once('@')?;
        Some(Self {
            topic: topic.to_owned(),
            partition: partition.parse().ok()?,
            offset: offset.parse().ok()?,
        })
    }
}

/// What the ledger decided for one record.
///
/// ```
/// use stockledger_core::ResultCode;
///
/// assert_eq!(ResultCode::parse("REJECTED_LIMIT"), Some(ResultCode::RejectedLimit));
/// assert_eq!(ResultCode::Duplicate.to_string(), "DUPLICATE");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum ResultCode {
    /// The command changed stock (or left a restock applied).
    Applied,
    /// A deduct asked for more than is available; nothing changed.
    RejectedInsufficient,
    /// A deduct for an order that was already rolled back or cancelled.
    RejectedCancelled,
    /// A restock that would make stock negative, put a total below what
    /// orders hold, or exceed the maximum stock.
    RejectedRestock,
    /// A rollback with no deduction before it: a tombstone is left so that a
    /// late deduction for the order is refused.
    IgnoredNoDeduction,
    /// The order or adjustment was already decided by an earlier record.
    Duplicate,
    /// The record could not be decoded or is not a valid command; it was sent
    /// to the dead-letter topic.
    Invalid,
    /// The record is on a partition its SKU does not live on (a producer
    /// used another partitioner, or partitions were added): deciding it
    /// would compare it with another partition's offsets, so it is not
    /// applied, and it is dead-lettered naming both partitions.
    Misrouted,
    /// A confirm on time: the reservation's units are sold.
    Confirmed,
    /// An expire after the deadline: the reservation's units are back.
    Expired,
    /// A refund: units a confirmed order bought are back.
    Refunded,
    /// A confirm after the deadline, or for a reservation that expired; if
    /// the hold was still there, it expires with this record (its units
    /// come back in `delta`).
    RejectedExpired,
    /// A reservation whose deadline was not after its record's timestamp,
    /// or more than seven days after it.
    RejectedDeadline,
    /// A confirm or expire with no live hold to act on (no such order, a
    /// plain deduction, or one already sold), or a rollback of a confirmed
    /// order (refund it instead).
    RejectedNotReserved,
    /// A refund of an order that sold nothing.
    RejectedNotSold,
    /// A refund whose total is above what the order bought or below what
    /// was already refunded.
    RejectedRefund,
    /// A deduct that would take the user above the SKU's per-user limit, or
    /// that names no user where a limit is set.
    RejectedLimit,
    /// An expire before the deadline: the hold stays.
    IgnoredNotDue,
    /// A deduct, hold or basket line stamped before the SKU's sale window
    /// opens.
    RejectedNotOpen,
    /// A deduct, hold or basket line stamped at or after the SKU's sale
    /// window closes.
    RejectedClosed,
    /// A deduct, hold or basket line while the SKU is paused.
    RejectedPaused,
    /// A command whose values are refused before any rule is asked (see
    /// [`crate::Refused`]): the reason names the field; nothing changed.
    RejectedValue,
}

impl ResultCode {
    /// In the order of the `OutcomeResult` enum's symbols.
    ///
    /// ```
    /// use stockledger_core::ResultCode;
    ///
    /// assert!(ResultCode::ALL.into_iter().all(|r| ResultCode::parse(r.as_str()) == Some(r)));
    /// ```
    pub const ALL: [ResultCode; 22] = [
        Self::Applied,
        Self::RejectedInsufficient,
        Self::RejectedCancelled,
        Self::RejectedRestock,
        Self::IgnoredNoDeduction,
        Self::Duplicate,
        Self::Invalid,
        Self::Misrouted,
        Self::Confirmed,
        Self::Expired,
        Self::Refunded,
        Self::RejectedExpired,
        Self::RejectedDeadline,
        Self::RejectedNotReserved,
        Self::RejectedNotSold,
        Self::RejectedRefund,
        Self::RejectedLimit,
        Self::IgnoredNotDue,
        Self::RejectedNotOpen,
        Self::RejectedClosed,
        Self::RejectedPaused,
        Self::RejectedValue,
    ];

    /// The symbol used in Avro, Redis, Lua and PostgreSQL.
    ///
    /// ```
    /// use stockledger_core::ResultCode;
    ///
    /// assert_eq!(ResultCode::IgnoredNoDeduction.as_str(), "IGNORED_NO_DEDUCTION");
    /// ```
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Applied => "APPLIED",
            Self::RejectedInsufficient => "REJECTED_INSUFFICIENT",
            Self::RejectedCancelled => "REJECTED_CANCELLED",
            Self::RejectedRestock => "REJECTED_RESTOCK",
            Self::IgnoredNoDeduction => "IGNORED_NO_DEDUCTION",
            Self::Duplicate => "DUPLICATE",
            Self::Invalid => "INVALID",
            Self::Misrouted => "MISROUTED",
            Self::Confirmed => "CONFIRMED",
            Self::Expired => "EXPIRED",
            Self::Refunded => "REFUNDED",
            Self::RejectedExpired => "REJECTED_EXPIRED",
            Self::RejectedDeadline => "REJECTED_DEADLINE",
            Self::RejectedNotReserved => "REJECTED_NOT_RESERVED",
            Self::RejectedNotSold => "REJECTED_NOT_SOLD",
            Self::RejectedRefund => "REJECTED_REFUND",
            Self::RejectedLimit => "REJECTED_LIMIT",
            Self::IgnoredNotDue => "IGNORED_NOT_DUE",
            Self::RejectedNotOpen => "REJECTED_NOT_OPEN",
            Self::RejectedClosed => "REJECTED_CLOSED",
            Self::RejectedPaused => "REJECTED_PAUSED",
            Self::RejectedValue => "REJECTED_VALUE",
        }
    }

    /// Whether the ledger said no: the command was refused (a `REJECTED_`
    /// result) or was not a command it could decide (`INVALID`,
    /// `MISROUTED`). A repeat (`DUPLICATE`) and a rollback or expiry with
    /// nothing to undo (`IGNORED_`) are not refusals: what was asked for
    /// holds.
    ///
    /// ```
    /// use stockledger_core::ResultCode;
    ///
    /// assert!(ResultCode::RejectedInsufficient.is_refusal());
    /// assert!(ResultCode::Invalid.is_refusal());
    /// assert!(!ResultCode::Duplicate.is_refusal());
    /// assert!(!ResultCode::IgnoredNoDeduction.is_refusal());
    /// ```
    pub fn is_refusal(self) -> bool {
        self.as_str().starts_with("REJECTED_") || matches!(self, Self::Invalid | Self::Misrouted)
    }

    /// The result a symbol names, if it names one (exactly, upper case).
    ///
    /// ```
    /// use stockledger_core::ResultCode;
    ///
    /// assert_eq!(ResultCode::parse("APPLIED"), Some(ResultCode::Applied));
    /// assert_eq!(ResultCode::parse("applied"), None);
    /// ```
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|r| r.as_str() == s)
    }
}

impl fmt::Display for ResultCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Whether a SKU with `available` units to sell is sold out: nothing is
/// left to sell now. The one definition of it: [`StockEventKind::SoldOut`]
/// is a SKU becoming so and [`StockEventKind::BackInStock`] its ceasing to
/// be, and every reader that shows "sold out" asks this.
///
/// ```
/// use stockledger_core::sold_out;
///
/// assert!(sold_out(0));
/// assert!(!sold_out(1));
/// ```
pub fn sold_out(available: i64) -> bool {
    available <= 0
}

/// Whether a SKU is [`sold_out`] with nothing held by a reservation
/// either, so no unit comes back by itself: a hold's release or expiry
/// would bring one back, and only a restock, a rollback of a plain
/// deduction or a refund can now. The sold-out fast path refuses a deduct
/// on this, never on [`sold_out`] alone, so it refuses none that a hold
/// coming back would have granted.
///
/// ```
/// use stockledger_core::sold_out_for_good;
///
/// assert!(sold_out_for_good(0, 0));
/// assert!(!sold_out_for_good(0, 3), "three held units may come back");
/// assert!(!sold_out_for_good(2, 0));
/// ```
pub fn sold_out_for_good(available: i64, reserved: i64) -> bool {
    sold_out(available) && reserved <= 0
}

/// A change of a SKU's available stock, or of whether it is on sale, that
/// storefronts and purchasing want to hear of, as the Avro enum
/// `StockEventKind` names it.
///
/// ```
/// use stockledger_core::StockEventKind;
///
/// assert_eq!(StockEventKind::SoldOut.as_str(), "SOLD_OUT");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum StockEventKind {
    /// The SKU became [`sold_out`]: available stock reached 0.
    SoldOut,
    /// The SKU is no longer [`sold_out`]: available stock left 0.
    BackInStock,
    /// Available stock crossed the SKU's `low_stock_below` threshold
    /// downwards.
    LowStock,
    /// The SKU's sale window opened: the first record stamped at or after
    /// its opening, or a window set that is open at its record's time.
    Opened,
    /// The sale window closed: the first record stamped at or after its
    /// closing, or a window set that is not open at its record's time.
    Closed,
    /// A pause stopped the SKU's sale.
    Paused,
    /// A resume ended the pause.
    Resumed,
}

impl StockEventKind {
    /// In the order of the `StockEventKind` enum's symbols.
    pub const ALL: [StockEventKind; 7] = [
        Self::SoldOut,
        Self::BackInStock,
        Self::LowStock,
        Self::Opened,
        Self::Closed,
        Self::Paused,
        Self::Resumed,
    ];

    /// The symbol of the Avro enum.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::SoldOut => "SOLD_OUT",
            Self::BackInStock => "BACK_IN_STOCK",
            Self::LowStock => "LOW_STOCK",
            Self::Opened => "OPENED",
            Self::Closed => "CLOSED",
            Self::Paused => "PAUSED",
            Self::Resumed => "RESUMED",
        }
    }

    /// The kind a symbol names, if it names one.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.as_str() == s)
    }

    /// The one letter Redis and Lua write for it.
    pub fn letter(self) -> char {
        match self {
            Self::SoldOut => 'S',
            Self::BackInStock => 'B',
            Self::LowStock => 'L',
            Self::Opened => 'O',
            Self::Closed => 'C',
            Self::Paused => 'P',
            Self::Resumed => 'R',
        }
    }

    fn bit(self) -> u8 {
        1 << (self as u8)
    }
}

/// The stock events one record caused (most cause none): a set of
/// [`StockEventKind`], in the enum's order.
///
/// ```
/// use stockledger_core::{StockEventKind, StockEvents};
///
/// // 6 left, threshold 5: a deduct of 6 sells out and crosses it.
/// let caused = StockEvents::between(6, 0, Some(5));
/// assert_eq!(caused.kinds().collect::<Vec<_>>(), [StockEventKind::SoldOut, StockEventKind::LowStock]);
/// assert!(StockEvents::between(7, 6, Some(5)).is_empty());
/// assert_eq!(StockEvents::between(0, 2, Some(5)).kinds().collect::<Vec<_>>(), [StockEventKind::BackInStock]);
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct StockEvents(u8);

impl StockEvents {
    /// No event.
    pub const NONE: Self = Self(0);

    /// What a change of available stock from `before` to `after` causes,
    /// with `low_stock_below` the SKU's threshold, if set: `SOLD_OUT` when
    /// it reaches 0, `BACK_IN_STOCK` when it leaves 0, `LOW_STOCK` when it
    /// goes from at or above the threshold to below it.
    pub fn between(before: i64, after: i64, low_stock_below: Option<i64>) -> Self {
        let mut events = Self::NONE;
        if !sold_out(before) && sold_out(after) {
            events.0 |= StockEventKind::SoldOut.bit();
        }
        if sold_out(before) && !sold_out(after) {
            events.0 |= StockEventKind::BackInStock.bit();
        }
        if low_stock_below.is_some_and(|low| before >= low && after < low) {
            events.0 |= StockEventKind::LowStock.bit();
        }
        events
    }

    /// This set and `other`'s together.
    ///
    /// ```
    /// use stockledger_core::{StockEventKind, StockEvents};
    ///
    /// let both = StockEvents::of([StockEventKind::Paused]).with(StockEvents::of([StockEventKind::SoldOut]));
    /// assert_eq!(both.letters(), "SP");
    /// ```
    #[must_use]
    pub fn with(self, other: Self) -> Self {
        Self(self.0 | other.0)
    }

    /// Whether the record caused no event.
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The kinds caused, in the enum's order.
    pub fn kinds(self) -> impl Iterator<Item = StockEventKind> {
        StockEventKind::ALL
            .into_iter()
            .filter(move |k| self.0 & k.bit() != 0)
    }

    /// The set of `kinds`.
    pub fn of(kinds: impl IntoIterator<Item = StockEventKind>) -> Self {
        Self(kinds.into_iter().fold(0, |bits, k| bits | k.bit()))
    }

    /// The kinds as one letter each ([`StockEventKind::letter`]).
    pub fn letters(self) -> String {
        self.kinds().map(StockEventKind::letter).collect()
    }

    /// The set [`StockEvents::letters`] spelled, if it is one.
    pub fn parse_letters(s: &str) -> Option<Self> {
        s.chars()
            .map(|c| StockEventKind::ALL.into_iter().find(|k| k.letter() == c))
            .collect::<Option<Vec<_>>>()
            .map(Self::of)
    }
}

/// The decision for one record: what happened and the SKU's stock after it.
///
/// ```
/// use stockledger_core::{Decision, ResultCode, StockEvents};
///
/// let refused = Decision {
///     result: ResultCode::RejectedInsufficient,
///     delta: 0,
///     available: 0,
///     total: 1000,
///     reason: Some("insufficient stock".into()),
///     location: None,
///     events: StockEvents::NONE,
/// };
/// assert_eq!(refused.available - refused.delta, 0);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    pub result: ResultCode,
    /// Change in available stock caused by this record.
    pub delta: i64,
    /// The SKU's available and total stock after the record; 0, meaning
    /// nothing, for a record not decided on the SKU's stock: read them
    /// through [`Decision::figures`].
    pub available: i64,
    pub total: i64,
    pub reason: Option<String>,
    /// The location the command named (a deduct's or a restock's, a
    /// transfer's `from`) or, when it applied to a SKU that keeps stock by
    /// location, the one it acted on: where a deduct naming none took from,
    /// where an order's units went back or were sold. `None` otherwise
    /// (outcomes before schema v7 have none).
    pub location: Option<String>,
    /// The stock events the record caused (outcomes before schema v8 have
    /// none).
    pub events: StockEvents,
}

/// A SKU's stock after a record, as its decision gives it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Figures {
    pub available: i64,
    pub total: i64,
}

impl Decision {
    /// The decision on a record that is not a valid command, refused for
    /// `reason`: it changes no stock, so its stock fields are zero.
    ///
    /// ```
    /// use stockledger_core::{Decision, ResultCode};
    ///
    /// let refused = Decision::invalid("not a command".into());
    /// assert_eq!((refused.result, refused.delta, refused.total), (ResultCode::Invalid, 0, 0));
    /// ```
    pub fn invalid(reason: String) -> Self {
        Self {
            result: ResultCode::Invalid,
            delta: 0,
            available: 0,
            total: 0,
            reason: Some(reason),
            location: None,
            events: StockEvents::NONE,
        }
    }

    /// The SKU's stock after the record; `None` for a record that was not
    /// decided on the SKU's stock: one that is not a command (`INVALID`)
    /// or that sits on another partition than its SKU's (`MISROUTED`).
    /// Their outcomes carry 0 in `available_after` and `total_after`,
    /// which says nothing of the SKU: the archive stores NULL, and readers
    /// show nothing.
    ///
    /// ```
    /// use stockledger_core::{Decision, Figures, LogPosition, Outcome, ResultCode, StockEvents};
    ///
    /// let at = LogPosition { topic: "stock.ledger".into(), partition: 0, offset: 9 };
    /// let garbage = Outcome::invalid(at, "SKU-1", "not a command".into(), 1_700_000_000_000);
    /// assert_eq!(garbage.decision.figures(), None);
    /// let sold_out = Decision {
    ///     result: ResultCode::Applied, delta: -1, available: 0, total: 5,
    ///     reason: None, location: None, events: StockEvents::NONE,
    /// };
    /// assert_eq!(sold_out.figures(), Some(Figures { available: 0, total: 5 }));
    /// ```
    pub fn figures(&self) -> Option<Figures> {
        match self.result {
            ResultCode::Invalid | ResultCode::Misrouted => None,
            _ => Some(Figures {
                available: self.available,
                total: self.total,
            }),
        }
    }
}

/// The message published on the outcomes topic for one command record and
/// archived as one row keyed by `position`.
///
/// ```
/// use stockledger_core::{LogPosition, Outcome, ResultCode};
///
/// let at = LogPosition { topic: "stock.ledger".into(), partition: 0, offset: 9 };
/// let garbage = Outcome::invalid(at, "SKU-1", "not a command".into(), 1_700_000_000_000);
/// assert_eq!((garbage.decision.result, garbage.kind), (ResultCode::Invalid, None));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    pub position: LogPosition,
    /// The command's SKU, or the record key (lossily decoded) when the record
    /// was not a valid command.
    pub sku: String,
    pub command_id: Option<String>,
    pub kind: Option<CommandKind>,
    pub order_id: Option<String>,
    /// A restock's adjustment id, or a transfer's id.
    pub adjustment_id: Option<String>,
    pub quantity: Option<i64>,
    pub decision: Decision,
    /// The command's own `occurred_at` or, for an invalid record, the record's
    /// timestamp (milliseconds since the Unix epoch).
    pub occurred_at: i64,
    /// A restock's mode (outcomes written before schema v3 have none).
    pub restock_mode: Option<RestockMode>,
    /// The reason a rollback gave, if any (the order service's words, not
    /// the ledger's: that is `decision.reason`).
    pub rollback_reason: Option<String>,
    /// The buyer a deduct named (outcomes before schema v4 have none).
    pub user_id: Option<String>,
    /// A reservation's deadline, milliseconds since the Unix epoch.
    pub expires_at: Option<i64>,
    /// The basket a deduct was a line of (outcomes before schema v5 have
    /// none).
    pub basket_id: Option<String>,
    /// The named units a deduct took or asked for, or a restock added
    /// (outcomes before schema v6 have none; empty for counted stock).
    pub units: Vec<String>,
    /// Where a transfer moved stock to (its `from` is
    /// [`Decision::location`]).
    pub to_location: Option<String>,
    /// The sale window a window command set: its opening (outcomes
    /// before schema v9 have none).
    pub opens_at: Option<i64>,
    /// The sale window a window command set: its closing.
    pub closes_at: Option<i64>,
}

impl Outcome {
    /// The outcome of a valid command.
    ///
    /// ```
    /// use stockledger_core::{Command, CommandBody, CommandId, CommandKind, Decision, Deduct};
    /// use stockledger_core::{LogPosition, OrderId, Outcome, Quantity, ResultCode, Sku, StockEvents};
    ///
    /// let command = Command {
    ///     command_id: CommandId::new("c-1")?,
    ///     sku: Sku::new("SKU-1")?,
    ///     occurred_at: 1_700_000_000_000,
    ///     body: CommandBody::Deduct(Deduct::new(OrderId::new("order-42")?, Quantity::new(2)?)),
    /// };
    /// let decision = Decision {
    ///     result: ResultCode::Applied,
    ///     delta: -2,
    ///     available: 8,
    ///     total: 10,
    ///     reason: None,
    ///     location: None,
    ///     events: StockEvents::NONE,
    /// };
    /// let at = LogPosition { topic: "stock.ledger".into(), partition: 0, offset: 9 };
    /// let outcome = Outcome::for_command(at, &command, decision);
    /// assert_eq!(outcome.kind, Some(CommandKind::Deduct));
    /// assert_eq!(outcome.order_id.as_deref(), Some("order-42"));
    /// assert_eq!(outcome.quantity, Some(2));
    /// # Ok::<(), stockledger_core::ValidationError>(())
    /// ```
    pub fn for_command(position: LogPosition, command: &Command, decision: Decision) -> Self {
        OutcomeView::of_command(&position, command, &decision).to_outcome()
    }

    /// The outcome of a record that is not a valid command. It changes no
    /// stock, so stock fields are zero.
    ///
    /// ```
    /// use stockledger_core::{LogPosition, Outcome};
    ///
    /// let at = LogPosition { topic: "stock.ledger".into(), partition: 0, offset: 9 };
    /// let outcome = Outcome::invalid(at, "SKU-1", "not a command".into(), 1_700_000_000_000);
    /// assert_eq!((outcome.decision.delta, outcome.decision.total), (0, 0));
    /// assert_eq!(outcome.decision.reason.as_deref(), Some("not a command"));
    /// ```
    pub fn invalid(position: LogPosition, key: &str, reason: String, timestamp: i64) -> Self {
        let decision = Decision::invalid(reason);
        OutcomeView::invalid(&position, key, &decision, timestamp).to_outcome()
    }
}

/// One stock event, as published on the stock events topic: a change of
/// a SKU's available stock ([`StockEventKind`]) and the command record
/// that caused it. That record's position and the kind identify the event:
/// a record raises each kind at most once.
///
/// ```
/// use stockledger_core::{LogPosition, Outcome, StockEvent, StockEventKind, StockEvents};
///
/// let at = LogPosition { topic: "stock.ledger".into(), partition: 2, offset: 41 };
/// let mut outcome = Outcome::invalid(at, "SKU-1", "x".into(), 1_700_000_000_000);
/// outcome.decision.events = StockEvents::of([StockEventKind::SoldOut]);
/// let events = StockEvent::of(&outcome);
/// assert_eq!((events[0].kind, events[0].position.offset), (StockEventKind::SoldOut, 41));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StockEvent {
    pub kind: StockEventKind,
    pub sku: String,
    /// The location the causing command named or acted on, if any.
    pub location: Option<String>,
    /// The SKU's available and total stock after the causing record.
    pub available: i64,
    pub total: i64,
    /// The causing command record.
    pub position: LogPosition,
    pub command_id: Option<String>,
    /// The causing command's `occurred_at` (ms since the Unix epoch).
    pub occurred_at: i64,
}

impl StockEvent {
    /// The events `outcome`'s record raised, in [`StockEventKind`] order.
    pub fn of(outcome: &Outcome) -> Vec<StockEvent> {
        outcome.view().stock_events()
    }
}

/// The consumers' rule for the stock events topic: within one partition,
/// events come in the order of their causing records, so an event whose
/// (offset, kind) is not after the last one kept from that partition is a
/// late repeat (an applier that went on after losing its partitions) and
/// is skipped.
///
/// ```
/// use stockledger_core::{EventDedupe, LogPosition, StockEvent, StockEventKind};
///
/// let event = |offset, kind| StockEvent {
///     kind, sku: "SKU-1".into(), location: None, available: 0, total: 5,
///     position: LogPosition { topic: "stock.ledger".into(), partition: 0, offset },
///     command_id: None, occurred_at: 0,
/// };
/// let mut dedupe = EventDedupe::default();
/// assert!(dedupe.keep(&event(7, StockEventKind::SoldOut)));
/// assert!(dedupe.keep(&event(9, StockEventKind::BackInStock)));
/// assert!(!dedupe.keep(&event(7, StockEventKind::SoldOut)), "a late repeat");
/// ```
#[derive(Debug, Clone, Default)]
pub struct EventDedupe {
    last: std::collections::HashMap<i32, (i64, StockEventKind)>,
}

impl EventDedupe {
    /// Whether to keep `event`; a kept one becomes its partition's last.
    pub fn keep(&mut self, event: &StockEvent) -> bool {
        let key = (event.position.offset, event.kind);
        match self.last.get(&event.position.partition) {
            Some(last) if key <= *last => false,
            _ => {
                self.last.insert(event.position.partition, key);
                true
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn result_codes_are_the_outcome_schemas_symbols_in_order() {
        let schema = crate::schema::current(crate::schema::Subject::Outcome);
        let json: serde_json::Value = serde_json::from_str(schema.json).unwrap();
        let result = json["fields"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["name"] == "result")
            .unwrap();
        let symbols: Vec<&str> = result["type"]["symbols"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s.as_str().unwrap())
            .collect();
        let ours: Vec<&str> = ResultCode::ALL.iter().map(|r| r.as_str()).collect();
        assert_eq!(symbols, ours);
    }
}
