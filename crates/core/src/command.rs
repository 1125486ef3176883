//! The commands order services and operators append to the log.

use std::fmt;

use crate::ids::{
    check_units, AdjustmentId, BasketId, ChangeId, CommandId, LocationId, OrderId, Quantity, Sku,
    TransferId, UnitId, UserId, ValidationError, MAX_HOLD_MS, MAX_STOCK, MAX_TIMESTAMP_MS,
    MAX_UNITS_PER_DEDUCT, MAX_UNITS_PER_RESTOCK,
};

mod sale;

pub use sale::{sells_always, Pause, Resume, SalePhase, SaleWindow, Window, MAX_WINDOW_AHEAD_MS};

/// Longest free-text reason a rollback may carry, in bytes.
///
/// ```
/// use stockledger_core::command::MAX_REASON_LEN;
/// use stockledger_core::{OrderId, Rollback};
///
/// let order = OrderId::new("order-42")?;
/// let long = "x".repeat(MAX_REASON_LEN + 1);
/// assert_eq!(Rollback::new(order, Some(long)).unwrap_err().field, "reason");
/// # Ok::<(), stockledger_core::ValidationError>(())
/// ```
pub const MAX_REASON_LEN: usize = 1024;

/// One record of the command topic. The record key is always `sku`.
///
/// ```
/// use stockledger_core::{Command, CommandBody, CommandId, Deduct, OrderId, Quantity, Sku};
///
/// let command = Command {
///     command_id: CommandId::new("c-1")?,
///     sku: Sku::new("SKU-1")?,
///     occurred_at: 1_700_000_000_000,
///     body: CommandBody::Deduct(Deduct::new(OrderId::new("order-42")?, Quantity::new(2)?)),
/// };
/// assert_eq!(command.body.quantity(), Some(2));
/// # Ok::<(), stockledger_core::ValidationError>(())
/// ```
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

/// What a command asks of the ledger: one variant per kind of command.
///
/// ```
/// use stockledger_core::{CommandBody, CommandKind, Deduct, Limit, OrderId, Quantity};
///
/// let deduct = CommandBody::Deduct(Deduct::new(OrderId::new("order-42")?, Quantity::new(2)?));
/// assert_eq!(deduct.kind(), CommandKind::Deduct);
/// assert_eq!(deduct.order_id().map(OrderId::as_str), Some("order-42"));
/// assert_eq!(deduct.quantity(), Some(2));
/// assert_eq!((deduct.user_id(), deduct.expires_at()), (None, None));
///
/// let uncapped = CommandBody::Limit(Limit { per_user: None });
/// assert_eq!((uncapped.order_id(), uncapped.quantity()), (None, None));
/// # Ok::<(), stockledger_core::ValidationError>(())
/// ```
///
/// Deliberately not `#[non_exhaustive]`: the fold, the Lua encoding and
/// the codec must each be revisited when a kind of command is added, and
/// exhaustive matches make the compiler find them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CommandBody {
    Deduct(Deduct),
    Rollback(Rollback),
    Restock(Restock),
    Confirm(Confirm),
    Refund(Refund),
    Expire(Expire),
    Limit(Limit),
    Transfer(Transfer),
    Alerts(Alerts),
    Window(Window),
    Pause(Pause),
    Resume(Resume),
    /// A command read from the log whose values are refused: see
    /// [`Refused`]. Only ever read, never sent.
    Refused(Refused),
}

/// A command read from the log whose values are refused before any rule
/// is asked: a quantity, a limit or a threshold outside 1 to 10⁹, a
/// transfer to the location it comes from, a window that closes when or
/// before it opens, a basket line of another shape than a basket's, named
/// units miscounted or given a location. The machine decides it
/// `REJECTED_VALUE`, naming the field, and it changes nothing. The library
/// refuses such a command before sending it, so one is only ever decoded
/// from a record another producer wrote, and never encoded.
///
/// ```
/// use stockledger_core::{CommandBody, CommandKind, Refused, ValidationError};
///
/// let zero = Refused {
///     kind: CommandKind::Deduct,
///     order_id: None,
///     adjustment_id: None,
///     quantity: Some(0),
///     problem: ValidationError::new("quantity", "must be between 1 and 1000000000, got 0"),
/// };
/// assert_eq!(CommandBody::Refused(zero).kind(), CommandKind::Deduct);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    /// The kind of command the record is.
    pub kind: CommandKind,
    /// The order it names (a deduct's, a refund's).
    pub order_id: Option<OrderId>,
    /// The id it would spend among the SKU's adjustments (a transfer's, a
    /// window's).
    pub adjustment_id: Option<String>,
    /// The quantity it carries, as read.
    pub quantity: Option<i64>,
    /// What is refused, naming the field.
    pub problem: ValidationError,
}

impl CommandBody {
    /// Which kind of command this is.
    ///
    /// ```
    /// use stockledger_core::{CommandBody, CommandKind, Expire, OrderId};
    ///
    /// let expire = CommandBody::Expire(Expire { order_id: OrderId::new("order-42")? });
    /// assert_eq!(expire.kind().as_str(), "EXPIRE");
    /// # Ok::<(), stockledger_core::ValidationError>(())
    /// ```
    pub fn kind(&self) -> CommandKind {
        match self {
            Self::Deduct(_) => CommandKind::Deduct,
            Self::Rollback(_) => CommandKind::Rollback,
            Self::Restock(_) => CommandKind::Restock,
            Self::Confirm(_) => CommandKind::Confirm,
            Self::Refund(_) => CommandKind::Refund,
            Self::Expire(_) => CommandKind::Expire,
            Self::Limit(_) => CommandKind::Limit,
            Self::Transfer(_) => CommandKind::Transfer,
            Self::Alerts(_) => CommandKind::Alerts,
            Self::Window(_) => CommandKind::Window,
            Self::Pause(_) => CommandKind::Pause,
            Self::Resume(_) => CommandKind::Resume,
            Self::Refused(r) => r.kind,
        }
    }

    /// The order this command belongs to, if it names one.
    ///
    /// ```
    /// use stockledger_core::{CommandBody, Confirm, OrderId};
    ///
    /// let confirm = CommandBody::Confirm(Confirm { order_id: OrderId::new("order-42")? });
    /// assert_eq!(confirm.order_id().map(OrderId::as_str), Some("order-42"));
    /// # Ok::<(), stockledger_core::ValidationError>(())
    /// ```
    pub fn order_id(&self) -> Option<&OrderId> {
        match self {
            Self::Deduct(d) => Some(&d.order_id),
            Self::Rollback(r) => Some(&r.order_id),
            Self::Confirm(c) => Some(&c.order_id),
            Self::Refund(r) => Some(&r.order_id),
            Self::Expire(e) => Some(&e.order_id),
            Self::Refused(r) => r.order_id.as_ref(),
            Self::Restock(_)
            | Self::Limit(_)
            | Self::Transfer(_)
            | Self::Alerts(_)
            | Self::Window(_)
            | Self::Pause(_)
            | Self::Resume(_) => None,
        }
    }

    /// The quantity named by the command (signed for `Restock ADD`; a
    /// refund's total, a limit's units per user, the units a transfer
    /// moves, an alert's threshold).
    ///
    /// ```
    /// use stockledger_core::{AdjustmentId, CommandBody, Restock, RestockMode};
    ///
    /// let taken_back = Restock::new(AdjustmentId::new("count-7")?, RestockMode::Add, -3)?;
    /// assert_eq!(CommandBody::Restock(taken_back).quantity(), Some(-3));
    /// # Ok::<(), stockledger_core::ValidationError>(())
    /// ```
    pub fn quantity(&self) -> Option<i64> {
        match self {
            Self::Deduct(d) => Some(d.quantity.get()),
            Self::Restock(r) => Some(r.quantity()),
            Self::Refund(r) => r.quantity.map(Quantity::get),
            Self::Limit(l) => l.per_user.map(Quantity::get),
            Self::Transfer(t) => Some(t.quantity.get()),
            Self::Alerts(a) => a.low_stock_below.map(Quantity::get),
            Self::Refused(r) => r.quantity,
            Self::Rollback(_)
            | Self::Confirm(_)
            | Self::Expire(_)
            | Self::Window(_)
            | Self::Pause(_)
            | Self::Resume(_) => None,
        }
    }

    /// The id of a change of the SKU's sale (a window, pause or resume),
    /// if this is one.
    ///
    /// ```
    /// use stockledger_core::{ChangeId, CommandBody, Pause};
    ///
    /// let pause = CommandBody::Pause(Pause { change_id: ChangeId::new("stop-1")? });
    /// assert_eq!(pause.change_id().map(ChangeId::as_str), Some("stop-1"));
    /// # Ok::<(), stockledger_core::ValidationError>(())
    /// ```
    pub fn change_id(&self) -> Option<&ChangeId> {
        match self {
            Self::Window(w) => Some(&w.change_id),
            Self::Pause(p) => Some(&p.change_id),
            Self::Resume(r) => Some(&r.change_id),
            _ => None,
        }
    }

    /// The id this command spends in its SKU's namespace of adjustments,
    /// where the same id again is `DUPLICATE`: a restock's, a transfer's,
    /// or a change of the sale's.
    ///
    /// ```
    /// use stockledger_core::{ChangeId, CommandBody, Pause};
    ///
    /// let pause = CommandBody::Pause(Pause { change_id: ChangeId::new("stop-1")? });
    /// assert_eq!(pause.adjustment_id(), Some("stop-1"));
    /// # Ok::<(), stockledger_core::ValidationError>(())
    /// ```
    pub fn adjustment_id(&self) -> Option<&str> {
        match self {
            Self::Restock(r) => Some(r.adjustment_id.as_str()),
            Self::Transfer(t) => Some(t.transfer_id.as_str()),
            Self::Refused(r) => r.adjustment_id.as_deref(),
            _ => self.change_id().map(ChangeId::as_str),
        }
    }

    /// The buyer a deduct names, if any.
    ///
    /// ```
    /// use stockledger_core::{CommandBody, Deduct, OrderId, Quantity, UserId};
    ///
    /// let deduct = Deduct {
    ///     user_id: Some(UserId::new("alice")?),
    ///     ..Deduct::new(OrderId::new("order-42")?, Quantity::new(1)?)
    /// };
    /// assert_eq!(CommandBody::Deduct(deduct).user_id().map(UserId::as_str), Some("alice"));
    /// # Ok::<(), stockledger_core::ValidationError>(())
    /// ```
    pub fn user_id(&self) -> Option<&UserId> {
        match self {
            Self::Deduct(d) => d.user_id.as_ref(),
            _ => None,
        }
    }

    /// A reservation's deadline, if this is one.
    ///
    /// ```
    /// use stockledger_core::{CommandBody, Deduct, OrderId, Quantity};
    ///
    /// let hold = Deduct {
    ///     expires_at: Some(1_700_000_600_000),
    ///     ..Deduct::new(OrderId::new("order-42")?, Quantity::new(1)?)
    /// };
    /// assert_eq!(CommandBody::Deduct(hold).expires_at(), Some(1_700_000_600_000));
    /// # Ok::<(), stockledger_core::ValidationError>(())
    /// ```
    pub fn expires_at(&self) -> Option<i64> {
        match self {
            Self::Deduct(d) => d.expires_at,
            _ => None,
        }
    }

    /// The basket a deduct is a line of, if any.
    ///
    /// ```
    /// use stockledger_core::{BasketId, CommandBody, Deduct, OrderId, Quantity};
    ///
    /// let line = Deduct {
    ///     basket_id: Some(BasketId::new("cart-9")?),
    ///     ..Deduct::new(OrderId::new("cart-9")?, Quantity::new(1)?)
    /// };
    /// assert_eq!(CommandBody::Deduct(line).basket_id().map(BasketId::as_str), Some("cart-9"));
    /// # Ok::<(), stockledger_core::ValidationError>(())
    /// ```
    pub fn basket_id(&self) -> Option<&BasketId> {
        match self {
            Self::Deduct(d) => d.basket_id.as_ref(),
            _ => None,
        }
    }

    /// The named units a deduct takes or a restock adds (empty for
    /// counted stock and for every other kind).
    ///
    /// ```
    /// use stockledger_core::{CommandBody, Deduct, OrderId, UnitId};
    ///
    /// let seats = Deduct::for_units(OrderId::new("order-42")?, &[UnitId::new("A1")?])?;
    /// assert_eq!(CommandBody::Deduct(seats).units()[0].as_str(), "A1");
    /// # Ok::<(), stockledger_core::ValidationError>(())
    /// ```
    pub fn units(&self) -> &[UnitId] {
        match self {
            Self::Deduct(d) => &d.units,
            Self::Restock(r) => &r.units,
            _ => &[],
        }
    }

    /// The location a command names: where a deduct takes from or a
    /// restock puts stock, a transfer's `from`. `None` for the rest, and
    /// for a deduct that leaves the choice to the ledger.
    ///
    /// ```
    /// use stockledger_core::{CommandBody, LocationId, Quantity, Transfer, TransferId};
    ///
    /// let moved = Transfer::new(
    ///     TransferId::new("t-1")?,
    ///     LocationId::new("berlin")?,
    ///     LocationId::new("paris")?,
    ///     Quantity::new(3)?,
    /// )?;
    /// assert_eq!(CommandBody::Transfer(moved).location().map(LocationId::as_str), Some("berlin"));
    /// # Ok::<(), stockledger_core::ValidationError>(())
    /// ```
    pub fn location(&self) -> Option<&LocationId> {
        match self {
            Self::Deduct(d) => d.location.as_ref(),
            Self::Restock(r) => r.location.as_ref(),
            Self::Transfer(t) => Some(&t.from),
            _ => None,
        }
    }
}

/// Take `quantity` units for `order_id`: sold at once, or, with
/// `expires_at`, held until a [`Confirm`] sells them or the deadline passes.
///
/// ```
/// use stockledger_core::{Deduct, OrderId, Quantity, UserId};
///
/// // A reservation of one unit for alice, held ten minutes.
/// let now = 1_700_000_000_000;
/// let hold = Deduct {
///     user_id: Some(UserId::new("alice")?),
///     expires_at: Some(now + 600_000),
///     ..Deduct::new(OrderId::new("order-42")?, Quantity::new(1)?)
/// };
/// assert!(hold.check_deadline(now).is_ok());
/// # Ok::<(), stockledger_core::ValidationError>(())
/// ```
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
    /// The basket this hold is a line of, if any: informational to the
    /// rules (a line is decided as any hold), kept for the basket's index
    /// and the archive.
    pub basket_id: Option<BasketId>,
    /// The named units taken, all or none (empty for counted stock). When
    /// there are any, `quantity` is their number: build it with
    /// [`Deduct::for_units`].
    pub units: Vec<UnitId>,
    /// The location to take from, for a SKU that keeps stock by location;
    /// `None` lets the ledger choose: the first location, in the order
    /// they were first stocked, that can serve the whole quantity.
    pub location: Option<LocationId>,
}

impl Deduct {
    /// A plain deduct: no buyer, no hold.
    ///
    /// ```
    /// use stockledger_core::{Deduct, OrderId, Quantity};
    ///
    /// let deduct = Deduct::new(OrderId::new("order-42")?, Quantity::new(2)?);
    /// assert_eq!((deduct.user_id, deduct.expires_at), (None, None));
    /// # Ok::<(), stockledger_core::ValidationError>(())
    /// ```
    pub fn new(order_id: OrderId, quantity: Quantity) -> Self {
        Self {
            order_id,
            quantity,
            user_id: None,
            expires_at: None,
            basket_id: None,
            units: Vec::new(),
            location: None,
        }
    }

    /// A deduct of exactly these named units: 1 to
    /// [`MAX_UNITS_PER_DEDUCT`], none twice; its quantity is their number.
    ///
    /// ```
    /// use stockledger_core::{Deduct, OrderId, UnitId};
    ///
    /// let seats = [UnitId::new("7-12")?, UnitId::new("7-13")?];
    /// let deduct = Deduct::for_units(OrderId::new("order-42")?, &seats)?;
    /// assert_eq!(deduct.quantity.get(), 2);
    /// assert_eq!(Deduct::for_units(OrderId::new("o")?, &["7-12", "7-12"]).unwrap_err().field, "units");
    /// # Ok::<(), stockledger_core::ValidationError>(())
    /// ```
    pub fn for_units<S: AsRef<str>>(
        order_id: OrderId,
        units: &[S],
    ) -> Result<Self, ValidationError> {
        Self::taking(order_id, None, Some(units))
    }

    /// What a request or a record asks to take: `quantity` units of
    /// counted stock, or the named `units` (with `quantity`, if given, their
    /// number). The rules every way in shares: one of the two is needed,
    /// the names are checked as [`check_units`] does, and a quantity beside
    /// them must count them.
    ///
    /// ```
    /// use stockledger_core::{Deduct, OrderId};
    ///
    /// let counted = Deduct::taking(OrderId::new("o-1")?, Some(3), None::<&[&str]>)?;
    /// assert!(counted.units.is_empty());
    /// let miscounted = Deduct::taking(OrderId::new("o-2")?, Some(3), Some(&["A1", "A2"][..]));
    /// assert_eq!(miscounted.unwrap_err().field, "quantity");
    /// let nothing = Deduct::taking(OrderId::new("o-3")?, None, None::<&[&str]>);
    /// assert_eq!(nothing.unwrap_err().field, "quantity");
    /// # Ok::<(), stockledger_core::ValidationError>(())
    /// ```
    pub fn taking<S: AsRef<str>>(
        order_id: OrderId,
        quantity: Option<i64>,
        units: Option<&[S]>,
    ) -> Result<Self, ValidationError> {
        let (quantity, units) = Self::counted(quantity, units)?;
        Ok(Self {
            units,
            ..Self::new(order_id, quantity)
        })
    }

    /// The quantity and the units of what [`Deduct::taking`] takes, by its
    /// rules, before there is a deduct to hold them.
    pub(crate) fn counted<S: AsRef<str>>(
        quantity: Option<i64>,
        units: Option<&[S]>,
    ) -> Result<(Quantity, Vec<UnitId>), ValidationError> {
        let Some(names) = units else {
            let Some(quantity) = quantity else {
                return Err(ValidationError::new(
                    "quantity",
                    "give quantity, or units for a SKU of named units",
                ));
            };
            return Ok((Quantity::new(quantity)?, Vec::new()));
        };
        let units = check_units(names, MAX_UNITS_PER_DEDUCT)?;
        let counted = named_quantity(quantity, &units)?;
        Ok((Quantity::new(counted)?, units))
    }

    /// The same deduct, taking from `location`. Named units have no
    /// location: a deduct of them refuses one, naming `location`.
    ///
    /// ```
    /// use stockledger_core::{Deduct, LocationId, OrderId, Quantity};
    ///
    /// let paris = LocationId::new("paris")?;
    /// let deduct = Deduct::new(OrderId::new("o-1")?, Quantity::new(2)?).at(paris)?;
    /// assert_eq!(deduct.location.map(|l| l.to_string()).as_deref(), Some("paris"));
    /// # Ok::<(), stockledger_core::ValidationError>(())
    /// ```
    pub fn at(self, location: LocationId) -> Result<Self, ValidationError> {
        let deduct = Self {
            location: Some(location),
            ..self
        };
        deduct.check_location()?;
        Ok(deduct)
    }

    /// That a deduct with a location takes counted stock ([`Deduct::at`]).
    pub(crate) fn check_location(&self) -> Result<(), ValidationError> {
        match self.location {
            Some(_) => units_have_no_location(&self.units),
            None => Ok(()),
        }
    }

    /// Checks a reservation's deadline against `now` (milliseconds since
    /// the Unix epoch) before it is sent: it must lie after `now` and at
    /// most [`MAX_HOLD_MS`] ahead. The applier checks the same against the
    /// record's timestamp.
    ///
    /// ```
    /// use stockledger_core::{Deduct, OrderId, Quantity};
    ///
    /// let now = 1_700_000_000_000;
    /// let late = Deduct {
    ///     expires_at: Some(now - 1),
    ///     ..Deduct::new(OrderId::new("order-42")?, Quantity::new(1)?)
    /// };
    /// assert_eq!(late.check_deadline(now).unwrap_err().field, "expires_at");
    /// # Ok::<(), stockledger_core::ValidationError>(())
    /// ```
    pub fn check_deadline(&self, now: i64) -> Result<(), ValidationError> {
        match self.expires_at {
            Some(deadline) => check_deadline(deadline, now),
            None => Ok(()),
        }
    }

    /// Checks the shape of a basket's line (a deduct with a `basket_id`):
    /// a hold (with `expires_at`) of the order named as its basket, which
    /// is how the basket's confirm, release and settling find its lines. A
    /// line of another shape is refused wherever it comes from, naming the
    /// field, rather than left as a hold no basket settles.
    ///
    /// ```
    /// use stockledger_core::{BasketId, Deduct, OrderId, Quantity};
    ///
    /// let line = Deduct {
    ///     expires_at: Some(1_700_000_060_000),
    ///     basket_id: Some(BasketId::new("cart-9")?),
    ///     ..Deduct::new(OrderId::new("cart-9")?, Quantity::new(1)?)
    /// };
    /// assert!(line.check_basket_line().is_ok());
    /// let sold_at_once = Deduct { expires_at: None, ..line.clone() };
    /// assert_eq!(sold_at_once.check_basket_line().unwrap_err().field, "expires_at");
    /// let other_order = Deduct { order_id: OrderId::new("order-1")?, ..line };
    /// assert_eq!(other_order.check_basket_line().unwrap_err().field, "order_id");
    /// # Ok::<(), stockledger_core::ValidationError>(())
    /// ```
    pub fn check_basket_line(&self) -> Result<(), ValidationError> {
        let Some(basket) = &self.basket_id else {
            return Ok(());
        };
        if self.expires_at.is_none() {
            return Err(ValidationError::new(
                "expires_at",
                format!("a line of basket {basket} is a hold: it needs a deadline"),
            ));
        }
        if self.order_id.as_str() != basket.as_str() {
            return Err(ValidationError::new(
                "order_id",
                format!(
                    "{} is not the basket's id {basket}: a basket's lines are its orders",
                    self.order_id
                ),
            ));
        }
        Ok(())
    }
}

/// Refuses a location beside named units: the rule every way in shares.
fn units_have_no_location(units: &[UnitId]) -> Result<(), ValidationError> {
    if units.is_empty() {
        return Ok(());
    }
    Err(ValidationError::new(
        "location",
        "named units have no location; give units or location, not both",
    ))
}

/// The number of `units`, which `quantity`, when given beside them, must
/// be (the lists are bounded by the per-request limits, so it fits).
fn named_quantity(quantity: Option<i64>, units: &[UnitId]) -> Result<i64, ValidationError> {
    let named = i64::try_from(units.len()).unwrap_or(i64::MAX);
    match quantity {
        Some(q) if q != named => Err(ValidationError::new(
            "quantity",
            format!("{q} is not the number of units named ({named})"),
        )),
        _ => Ok(named),
    }
}

/// A record's timestamp as the ledger compares it with deadlines: clamped
/// into 0..=[`MAX_TIMESTAMP_MS`] (a record without a timestamp counts as
/// the epoch), so every comparison is exact in Lua too.
///
/// ```
/// use stockledger_core::command::record_time;
/// use stockledger_core::ids::MAX_TIMESTAMP_MS;
///
/// assert_eq!(record_time(1_700_000_000_000), 1_700_000_000_000);
/// assert_eq!(record_time(-1), 0);
/// assert_eq!(record_time(i64::MAX), MAX_TIMESTAMP_MS);
/// ```
pub fn record_time(timestamp_ms: i64) -> i64 {
    timestamp_ms.clamp(0, MAX_TIMESTAMP_MS)
}

/// Checks that a deadline read from a record is an instant the ledger can
/// compare exactly: between the epoch and the end of year 9999.
///
/// ```
/// use stockledger_core::command::check_expires_at;
///
/// assert_eq!(check_expires_at(1_700_000_000_000), Ok(1_700_000_000_000));
/// assert_eq!(check_expires_at(-5).unwrap_err().field, "expires_at");
/// ```
pub fn check_expires_at(deadline: i64) -> Result<i64, ValidationError> {
    check_instant("expires_at", deadline)
}

/// Checks that the instant in `field`, read from a record, is one every
/// part of the ledger holds exactly: between the epoch and the end of year
/// 9999 (a Lua or JavaScript number, PostgreSQL's `timestamptz`, the
/// archive's months). A command's `occurred_at` outside it is refused
/// before it is decided, so it never reaches the archive.
///
/// ```
/// use stockledger_core::command::check_instant;
/// use stockledger_core::ids::MAX_TIMESTAMP_MS;
///
/// assert_eq!(check_instant("occurred_at", MAX_TIMESTAMP_MS), Ok(MAX_TIMESTAMP_MS));
/// let refused = check_instant("occurred_at", i64::MIN).unwrap_err();
/// assert_eq!(refused.field, "occurred_at");
/// assert!(refused.to_string().contains("9999-12-31T23:59:59.999Z"));
/// ```
pub fn check_instant(field: &'static str, at: i64) -> Result<i64, ValidationError> {
    if (0..=MAX_TIMESTAMP_MS).contains(&at) {
        Ok(at)
    } else {
        Err(ValidationError::new(
            field,
            format!(
                "{at} is not between 0 (1970-01-01T00:00:00Z) and {MAX_TIMESTAMP_MS} \
                 (9999-12-31T23:59:59.999Z)"
            ),
        ))
    }
}

/// Why a reservation's deadline `deadline` is refused at time `now`, if it is.
///
/// ```
/// use stockledger_core::command::check_deadline;
/// use stockledger_core::ids::MAX_HOLD_MS;
///
/// let now = 1_700_000_000_000;
/// assert!(check_deadline(now + 1, now).is_ok());
/// assert!(check_deadline(now, now).is_err());
/// assert!(check_deadline(now + MAX_HOLD_MS + 1, now).is_err());
/// ```
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
///
/// ```
/// use stockledger_core::{CommandBody, CommandKind, Confirm, OrderId};
///
/// let paid = CommandBody::Confirm(Confirm { order_id: OrderId::new("order-42")? });
/// assert_eq!(paid.kind(), CommandKind::Confirm);
/// # Ok::<(), stockledger_core::ValidationError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Confirm {
    pub order_id: OrderId,
}

/// Give back (part of) what a confirmed order bought.
///
/// ```
/// use stockledger_core::{CommandBody, OrderId, Quantity, Refund};
///
/// // Two units refunded in all, however often this is sent.
/// let refund = Refund { order_id: OrderId::new("order-42")?, quantity: Some(Quantity::new(2)?) };
/// assert_eq!(CommandBody::Refund(refund).quantity(), Some(2));
/// # Ok::<(), stockledger_core::ValidationError>(())
/// ```
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
///
/// ```
/// use stockledger_core::{CommandBody, Expire, OrderId};
///
/// let expire = CommandBody::Expire(Expire { order_id: OrderId::new("order-42")? });
/// assert_eq!(expire.order_id().map(OrderId::as_str), Some("order-42"));
/// # Ok::<(), stockledger_core::ValidationError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expire {
    pub order_id: OrderId,
}

/// Set (or, with `None`, lift) the SKU's low-stock threshold: a
/// `LOW_STOCK` event is raised when available stock goes from at or above
/// it to below it.
///
/// ```
/// use stockledger_core::{Alerts, CommandBody, CommandKind, Quantity};
///
/// let alerts = CommandBody::Alerts(Alerts { low_stock_below: Some(Quantity::new(10)?) });
/// assert_eq!((alerts.kind(), alerts.quantity()), (CommandKind::Alerts, Some(10)));
/// # Ok::<(), stockledger_core::ValidationError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Alerts {
    pub low_stock_below: Option<Quantity>,
}

/// Cap the units one user may hold and buy of this SKU; `None` lifts it.
///
/// ```
/// use stockledger_core::{CommandBody, Limit, Quantity};
///
/// let one_each = CommandBody::Limit(Limit { per_user: Some(Quantity::new(1)?) });
/// assert_eq!(one_each.quantity(), Some(1));
/// # Ok::<(), stockledger_core::ValidationError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limit {
    pub per_user: Option<Quantity>,
}

/// Move available stock between two locations of a SKU, all or nothing;
/// `transfer_id` makes it idempotent. What orders hold stays where it is.
///
/// ```
/// use stockledger_core::{LocationId, Quantity, Transfer, TransferId};
///
/// let berlin = || LocationId::new("berlin");
/// let to_self = Transfer::new(TransferId::new("t-1")?, berlin()?, berlin()?, Quantity::new(1)?);
/// assert_eq!(to_self.unwrap_err().field, "to");
/// # Ok::<(), stockledger_core::ValidationError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transfer {
    pub transfer_id: TransferId,
    from: LocationId,
    to: LocationId,
    quantity: Quantity,
}

impl Transfer {
    /// A transfer of `quantity` units from `from` to another location
    /// `to` (a location not stocked yet is added).
    pub fn new(
        transfer_id: TransferId,
        from: LocationId,
        to: LocationId,
        quantity: Quantity,
    ) -> Result<Self, ValidationError> {
        if from == to {
            return Err(ValidationError::new(
                "to",
                format!("is the location the stock comes from ({from}); name another"),
            ));
        }
        Ok(Self {
            transfer_id,
            from,
            to,
            quantity,
        })
    }

    /// Where the stock comes from.
    pub fn from(&self) -> &LocationId {
        &self.from
    }

    /// Where the stock goes.
    pub fn to(&self) -> &LocationId {
        &self.to
    }

    /// The units moved.
    pub fn quantity(&self) -> Quantity {
        self.quantity
    }
}

/// Give back what `order_id` took. Sent before its deduction, it leaves a
/// tombstone so that the late deduction is refused.
///
/// ```
/// use stockledger_core::{OrderId, Rollback};
///
/// let cancel = Rollback::new(OrderId::new("order-42")?, Some("payment failed".into()))?;
/// assert_eq!(cancel.reason.as_deref(), Some("payment failed"));
/// # Ok::<(), stockledger_core::ValidationError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rollback {
    pub order_id: OrderId,
    pub reason: Option<String>,
}

/// Why stock is given back: at most [`MAX_REASON_LEN`] bytes of text
/// without control characters (see [`crate::ids::check_text`]), the rule
/// a rollback's `reason` keeps.
///
/// ```
/// use stockledger_core::Reason;
///
/// assert_eq!(Reason::new("changed their mind")?.as_str(), "changed their mind");
/// assert_eq!(Reason::new("a\u{0}b").unwrap_err().field, "reason");
/// # Ok::<(), stockledger_core::ValidationError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reason(String);

impl Reason {
    pub fn new(text: impl Into<String>) -> Result<Self, ValidationError> {
        let text = text.into();
        if text.len() > MAX_REASON_LEN {
            return Err(ValidationError::new(
                "reason",
                format!(
                    "is {} bytes long; at most {MAX_REASON_LEN} are allowed",
                    text.len()
                ),
            ));
        }
        crate::ids::check_text("reason", &text)?;
        Ok(Self(text))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl Rollback {
    /// A rollback of `order_id`, its reason a valid [`Reason`].
    ///
    /// ```
    /// use stockledger_core::{OrderId, Rollback};
    ///
    /// assert!(Rollback::new(OrderId::new("order-42")?, None).is_ok());
    /// # Ok::<(), stockledger_core::ValidationError>(())
    /// ```
    pub fn new(order_id: OrderId, reason: Option<String>) -> Result<Self, ValidationError> {
        let reason = reason.map(Reason::new).transpose()?.map(|r| r.0);
        Ok(Self { order_id, reason })
    }
}

/// How a restock changes the stock.
///
/// ```
/// use stockledger_core::{AdjustmentId, Restock, RestockMode};
///
/// assert!(Restock::new(AdjustmentId::new("a-1")?, RestockMode::Add, -3).is_ok());
/// assert!(Restock::new(AdjustmentId::new("a-2")?, RestockMode::Set, -3).is_err());
/// # Ok::<(), stockledger_core::ValidationError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum RestockMode {
    /// Change available stock by a signed amount (seed 000's incremental mode).
    Add,
    /// Make the total stock this number; what orders hold stays held (total mode).
    Set,
}

impl RestockMode {
    /// The symbol of the Avro enum `RestockMode`.
    ///
    /// ```
    /// use stockledger_core::RestockMode;
    ///
    /// assert_eq!(RestockMode::Set.as_str(), "SET");
    /// ```
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Add => "ADD",
            Self::Set => "SET",
        }
    }
}

/// Arrange stock. Built with [`Restock::new`], which checks the quantity
/// against the mode.
///
/// ```
/// use stockledger_core::{AdjustmentId, Restock, RestockMode};
///
/// let count = Restock::new(AdjustmentId::new("count-2026-11")?, RestockMode::Set, 500)?;
/// assert_eq!((count.mode(), count.quantity()), (RestockMode::Set, 500));
/// # Ok::<(), stockledger_core::ValidationError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Restock {
    pub adjustment_id: AdjustmentId,
    mode: RestockMode,
    quantity: i64,
    units: Vec<UnitId>,
    location: Option<LocationId>,
}

impl Restock {
    /// `ADD` takes a non-zero amount between `-MAX_STOCK` and `MAX_STOCK`;
    /// `SET` a total between 0 and `MAX_STOCK`.
    ///
    /// ```
    /// use stockledger_core::{AdjustmentId, Restock, RestockMode};
    ///
    /// let refused = Restock::new(AdjustmentId::new("a-1")?, RestockMode::Add, 0).unwrap_err();
    /// assert_eq!(refused.field, "quantity");
    /// # Ok::<(), stockledger_core::ValidationError>(())
    /// ```
    pub fn new(
        adjustment_id: AdjustmentId,
        mode: RestockMode,
        quantity: i64,
    ) -> Result<Self, ValidationError> {
        Self::with_units(adjustment_id, mode, Some(quantity), None::<&[&str]>)
    }

    /// Why the quantity is outside what its mode takes, naming
    /// `quantity`; `None` when it is within. [`Restock::new`] refuses such
    /// a restock; one a record carries ([`Restock::as_recorded`]) is the
    /// machine's to refuse, as `REJECTED_RESTOCK`.
    ///
    /// ```
    /// use stockledger_core::{AdjustmentId, Restock, RestockMode};
    ///
    /// let id = AdjustmentId::new("a-1")?;
    /// let negative = Restock::as_recorded(id, RestockMode::Set, Some(-1), None::<&[&str]>)?;
    /// assert_eq!(negative.out_of_range().unwrap().field, "quantity");
    /// # Ok::<(), stockledger_core::ValidationError>(())
    /// ```
    pub fn out_of_range(&self) -> Option<ValidationError> {
        let quantity = self.quantity;
        let rule = match self.mode {
            RestockMode::Add if quantity == 0 || !(-MAX_STOCK..=MAX_STOCK).contains(&quantity) => {
                format!("ADD needs a non-zero amount within ±{MAX_STOCK}")
            }
            RestockMode::Set if !(0..=MAX_STOCK).contains(&quantity) => {
                format!("SET needs a total between 0 and {MAX_STOCK}")
            }
            _ => return None,
        };
        Some(ValidationError::new(
            "quantity",
            format!("{rule}, got {quantity}"),
        ))
    }

    /// The same restock, of the stock at `location`. Named units have no
    /// location: a restock of them refuses one, naming `location`.
    ///
    /// ```
    /// use stockledger_core::{AdjustmentId, LocationId, Restock, RestockMode};
    ///
    /// let berlin = LocationId::new("berlin")?;
    /// let arrived = Restock::new(AdjustmentId::new("po-7")?, RestockMode::Add, 40)?.at(berlin.clone())?;
    /// assert_eq!(arrived.location(), Some(&berlin));
    /// let seats = Restock::units(AdjustmentId::new("hall")?, &["A1"])?;
    /// assert_eq!(seats.at(berlin).unwrap_err().field, "location");
    /// # Ok::<(), stockledger_core::ValidationError>(())
    /// ```
    pub fn at(self, location: LocationId) -> Result<Self, ValidationError> {
        units_have_no_location(&self.units)?;
        Ok(Self {
            location: Some(location),
            ..self
        })
    }

    /// The location this restock stocks, if it names one.
    pub fn location(&self) -> Option<&LocationId> {
        self.location.as_ref()
    }

    /// Adds these named units, free: 1 to [`MAX_UNITS_PER_RESTOCK`], none
    /// twice. An `ADD` of their number; a SKU that already has one of them,
    /// or counted stock, refuses it.
    ///
    /// ```
    /// use stockledger_core::{AdjustmentId, Restock, RestockMode};
    ///
    /// let seats = Restock::units(AdjustmentId::new("show-1-seats")?, &["A1", "A2"])?;
    /// assert_eq!((seats.mode(), seats.quantity(), seats.named().len()), (RestockMode::Add, 2, 2));
    /// # Ok::<(), stockledger_core::ValidationError>(())
    /// ```
    pub fn units<S: AsRef<str>>(
        adjustment_id: AdjustmentId,
        units: &[S],
    ) -> Result<Self, ValidationError> {
        Self::with_units(adjustment_id, RestockMode::Add, None, Some(units))
    }

    /// What a request or a record asks to restock: [`Restock::new`] of
    /// `mode` and `quantity`, or with `units` those named units, after
    /// checking that the mode is `ADD` and the quantity, if given, their
    /// number.
    ///
    /// ```
    /// use stockledger_core::{AdjustmentId, Restock, RestockMode};
    ///
    /// let set = Restock::with_units(AdjustmentId::new("a")?, RestockMode::Set, Some(1), Some(&["A1"][..]));
    /// assert_eq!(set.unwrap_err().field, "mode");
    /// let counted = Restock::with_units(AdjustmentId::new("b")?, RestockMode::Set, None, None::<&[&str]>);
    /// assert_eq!(counted.unwrap_err().field, "quantity");
    /// # Ok::<(), stockledger_core::ValidationError>(())
    /// ```
    pub fn with_units<S: AsRef<str>>(
        adjustment_id: AdjustmentId,
        mode: RestockMode,
        quantity: Option<i64>,
        units: Option<&[S]>,
    ) -> Result<Self, ValidationError> {
        let restock = Self::as_recorded(adjustment_id, mode, quantity, units)?;
        match restock.out_of_range() {
            Some(refused) => Err(refused),
            None => Ok(restock),
        }
    }

    /// A restock as a record of the log carries it: read as
    /// [`Restock::with_units`] reads it, but a quantity outside what its
    /// mode takes is kept, for the machine to refuse as a rule does
    /// (`REJECTED_RESTOCK`, see [`Restock::out_of_range`]) rather than the
    /// record being unreadable.
    ///
    /// ```
    /// use stockledger_core::{AdjustmentId, Restock, RestockMode};
    ///
    /// let nothing = Restock::as_recorded(AdjustmentId::new("a")?, RestockMode::Add, Some(0), None::<&[&str]>)?;
    /// assert_eq!(nothing.quantity(), 0);
    /// # Ok::<(), stockledger_core::ValidationError>(())
    /// ```
    pub fn as_recorded<S: AsRef<str>>(
        adjustment_id: AdjustmentId,
        mode: RestockMode,
        quantity: Option<i64>,
        units: Option<&[S]>,
    ) -> Result<Self, ValidationError> {
        let Some(names) = units else {
            let Some(quantity) = quantity else {
                return Err(ValidationError::new(
                    "quantity",
                    "give mode and quantity, or units",
                ));
            };
            return Ok(Self {
                adjustment_id,
                mode,
                quantity,
                units: Vec::new(),
                location: None,
            });
        };
        if mode != RestockMode::Add {
            return Err(ValidationError::new(
                "mode",
                "named units are only added (ADD), never SET",
            ));
        }
        let units = check_units(names, MAX_UNITS_PER_RESTOCK)?;
        Ok(Self {
            adjustment_id,
            mode,
            quantity: named_quantity(quantity, &units)?,
            units,
            location: None,
        })
    }

    /// The named units this restock adds (empty for counted stock).
    ///
    /// ```
    /// use stockledger_core::{AdjustmentId, Restock, RestockMode};
    ///
    /// assert!(Restock::new(AdjustmentId::new("a")?, RestockMode::Add, 3)?.named().is_empty());
    /// # Ok::<(), stockledger_core::ValidationError>(())
    /// ```
    pub fn named(&self) -> &[UnitId] {
        &self.units
    }

    /// Whether the quantity is added or is the new total.
    ///
    /// ```
    /// use stockledger_core::{AdjustmentId, Restock, RestockMode};
    ///
    /// let add = Restock::new(AdjustmentId::new("a-1")?, RestockMode::Add, 5)?;
    /// assert_eq!(add.mode(), RestockMode::Add);
    /// # Ok::<(), stockledger_core::ValidationError>(())
    /// ```
    pub fn mode(&self) -> RestockMode {
        self.mode
    }

    /// The amount added (signed) or the total set.
    ///
    /// ```
    /// use stockledger_core::{AdjustmentId, Restock, RestockMode};
    ///
    /// let add = Restock::new(AdjustmentId::new("a-1")?, RestockMode::Add, -2)?;
    /// assert_eq!(add.quantity(), -2);
    /// # Ok::<(), stockledger_core::ValidationError>(())
    /// ```
    pub fn quantity(&self) -> i64 {
        self.quantity
    }
}

/// The kinds of command, as the Avro enum `CommandKind` names them.
///
/// ```
/// use stockledger_core::CommandKind;
///
/// for kind in CommandKind::ALL {
///     assert_eq!(CommandKind::parse(kind.as_str()), Some(kind));
/// }
/// assert_eq!(CommandKind::Rollback.to_string(), "ROLLBACK");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum CommandKind {
    Deduct,
    Rollback,
    Restock,
    Confirm,
    Refund,
    Expire,
    Limit,
    Transfer,
    Alerts,
    Window,
    Pause,
    Resume,
}

impl CommandKind {
    /// In the order of the `CommandKind` enum's symbols.
    ///
    /// ```
    /// use stockledger_core::CommandKind;
    ///
    /// assert_eq!(CommandKind::ALL[0], CommandKind::Deduct);
    /// ```
    pub const ALL: [CommandKind; 12] = [
        Self::Deduct,
        Self::Rollback,
        Self::Restock,
        Self::Confirm,
        Self::Refund,
        Self::Expire,
        Self::Limit,
        Self::Transfer,
        Self::Alerts,
        Self::Window,
        Self::Pause,
        Self::Resume,
    ];

    /// The kind's symbol.
    ///
    /// ```
    /// use stockledger_core::CommandKind;
    ///
    /// assert_eq!(CommandKind::Restock.as_str(), "RESTOCK");
    /// ```
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Deduct => "DEDUCT",
            Self::Rollback => "ROLLBACK",
            Self::Restock => "RESTOCK",
            Self::Confirm => "CONFIRM",
            Self::Refund => "REFUND",
            Self::Expire => "EXPIRE",
            Self::Limit => "LIMIT",
            Self::Transfer => "TRANSFER",
            Self::Alerts => "ALERTS",
            Self::Window => "WINDOW",
            Self::Pause => "PAUSE",
            Self::Resume => "RESUME",
        }
    }

    /// The kind a symbol names, if it names one (exactly, upper case).
    ///
    /// ```
    /// use stockledger_core::CommandKind;
    ///
    /// assert_eq!(CommandKind::parse("REFUND"), Some(CommandKind::Refund));
    /// assert_eq!(CommandKind::parse("refund"), None);
    /// ```
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
