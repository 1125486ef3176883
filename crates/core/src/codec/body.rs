//! A command's body read from its record's fields: built into the command
//! it is, or, when the values are refused, into a [`Refused`] command the
//! machine answers. What cannot be read is a [`DecodeError`](super::DecodeError)
//! (or, for the one-pass reader, a stray that leaves it to the general
//! reader).

use super::value::{restock_mode_of, shape, Record};
use crate::command::{
    Alerts, CommandBody, CommandKind, Confirm, Deduct, Expire, Limit, Pause, Refund, Refused,
    Restock, Resume, Rollback, SaleWindow, Transfer, Window,
};
use crate::ids::{
    AdjustmentId, BasketId, ChangeId, LocationId, OrderId, Quantity, TransferId, UserId,
    ValidationError,
};

/// A body's values built into its command, or, when they are refused, a
/// [`Refused`] command of `kind` naming what it could read: the record is a
/// command, and its answer is a rule's (`REJECTED_VALUE`), not a dead
/// letter. What cannot be read (an id, a text, an instant outside the
/// range every part of the ledger holds) stays a [`DecodeError`](super::DecodeError).
struct Readable {
    kind: CommandKind,
    order_id: Option<OrderId>,
    adjustment_id: Option<String>,
    quantity: Option<i64>,
}

impl Readable {
    fn of(kind: CommandKind) -> Self {
        Self {
            kind,
            order_id: None,
            adjustment_id: None,
            quantity: None,
        }
    }

    fn body(self, built: Result<CommandBody, ValidationError>) -> CommandBody {
        built.unwrap_or_else(|problem| self.refused(problem))
    }

    fn refused(self, problem: ValidationError) -> CommandBody {
        CommandBody::Refused(Refused {
            kind: self.kind,
            order_id: self.order_id,
            adjustment_id: self.adjustment_id,
            quantity: self.quantity,
            problem,
        })
    }

    /// [`Readable::refused`], of order `order_id`: the order's id is moved
    /// into the command it builds, and back here only when it is refused.
    fn refused_order(self, order_id: OrderId, problem: ValidationError) -> CommandBody {
        Self {
            order_id: Some(order_id),
            ..self
        }
        .refused(problem)
    }
}

/// A deduct's fields, checked as `Deduct`'s constructors check them.
fn deduct_of<R: Record>(body: &mut R) -> Result<CommandBody, R::Error> {
    let order_id = OrderId::new(body.string("order_id")?)?;
    let quantity = body.long("quantity")?;
    let user_id = (body.optional_string("user_id")?)
        .map(UserId::new)
        .transpose()?;
    let expires_at = (body.optional_long("expires_at")?)
        .map(crate::command::check_expires_at)
        .transpose()?;
    let basket_id = (body.optional_string("basket_id")?)
        .map(BasketId::new)
        .transpose()?;
    let names = body.strings("units")?;
    let location = (body.optional_string("location")?)
        .map(LocationId::new)
        .transpose()?;
    let read = Readable {
        quantity: Some(quantity),
        ..Readable::of(CommandKind::Deduct)
    };
    let units = (!names.is_empty()).then_some(&names[..]);
    let (counted, units) = match Deduct::counted(Some(quantity), units) {
        Ok(counted) => counted,
        Err(problem) => return Ok(read.refused_order(order_id, problem)),
    };
    let deduct = Deduct {
        user_id,
        expires_at,
        basket_id,
        units,
        location,
        ..Deduct::new(order_id, counted)
    };
    let checked = (deduct.check_location()).and_then(|()| deduct.check_basket_line());
    Ok(match checked {
        Ok(()) => CommandBody::Deduct(deduct),
        Err(problem) => read.refused_order(deduct.order_id, problem),
    })
}

/// A transfer's fields; its quantity and its two places are values.
fn transfer_of<R: Record>(body: &mut R) -> Result<CommandBody, R::Error> {
    let transfer_id = TransferId::new(body.string("transfer_id")?)?;
    let from = LocationId::named("from", body.string("from")?)?;
    let to = LocationId::named("to", body.string("to")?)?;
    let quantity = body.long("quantity")?;
    let read = Readable {
        adjustment_id: Some(transfer_id.as_str().to_owned()),
        quantity: Some(quantity),
        ..Readable::of(CommandKind::Transfer)
    };
    let built = Quantity::new(quantity)
        .and_then(|q| Transfer::new(transfer_id, from, to, q))
        .map(CommandBody::Transfer);
    Ok(read.body(built))
}

/// A window's fields: each instant must be one the ledger holds; that it
/// closes after it opens is a value.
fn window_of<R: Record>(body: &mut R) -> Result<CommandBody, R::Error> {
    let change_id = ChangeId::new(body.string("change_id")?)?;
    let mut instant = |field: &'static str| -> Result<Option<i64>, R::Error> {
        let at = body.optional_long(field)?;
        Ok(at
            .map(|at| crate::command::check_instant(field, at))
            .transpose()?)
    };
    let (opens_at, closes_at) = (instant("opens_at")?, instant("closes_at")?);
    let read = Readable {
        adjustment_id: Some(change_id.as_str().to_owned()),
        ..Readable::of(CommandKind::Window)
    };
    let built = SaleWindow::new(opens_at, closes_at)
        .map(|window| CommandBody::Window(Window { change_id, window }));
    Ok(read.body(built))
}

/// A restock's fields: a quantity outside what its mode takes is the
/// restock rule's to refuse; named units of another shape are values.
fn restock_of<R: Record>(body: &mut R) -> Result<CommandBody, R::Error> {
    let adjustment_id = AdjustmentId::new(body.string("adjustment_id")?)?;
    let mode = body.symbol("mode", restock_mode_of)?;
    let quantity = body.long("quantity")?;
    let names = body.strings("units")?;
    let location = (body.optional_string("location")?)
        .map(LocationId::new)
        .transpose()?;
    let read = Readable {
        adjustment_id: Some(adjustment_id.as_str().to_owned()),
        quantity: Some(quantity),
        ..Readable::of(CommandKind::Restock)
    };
    let units = (!names.is_empty()).then_some(&names[..]);
    let built = Restock::as_recorded(adjustment_id, mode, Some(quantity), units)
        .and_then(|restock| match location {
            Some(location) => restock.at(location),
            None => Ok(restock),
        })
        .map(CommandBody::Restock);
    Ok(read.body(built))
}

/// A count read from a record: a value from 1 to 10⁹, named `field`.
fn count_of(field: &'static str, read: Option<i64>) -> Result<Option<Quantity>, ValidationError> {
    read.map(|n| Quantity::of_field(field, n)).transpose()
}

/// The body of union branch `branch`, from its record's fields.
pub(super) fn body_of<R: Record>(branch: u32, body: &mut R) -> Result<CommandBody, R::Error> {
    Ok(match branch {
        0 => deduct_of(body)?,
        1 => CommandBody::Rollback(Rollback::new(
            OrderId::new(body.string("order_id")?)?,
            body.optional_string("reason")?,
        )?),
        2 => restock_of(body)?,
        3 => CommandBody::Confirm(Confirm {
            order_id: OrderId::new(body.string("order_id")?)?,
        }),
        4 => {
            let order_id = OrderId::new(body.string("order_id")?)?;
            let quantity = body.optional_long("quantity")?;
            match count_of("quantity", quantity) {
                Ok(counted) => CommandBody::Refund(Refund {
                    order_id,
                    quantity: counted,
                }),
                Err(problem) => Readable {
                    quantity,
                    ..Readable::of(CommandKind::Refund)
                }
                .refused_order(order_id, problem),
            }
        }
        5 => CommandBody::Expire(Expire {
            order_id: OrderId::new(body.string("order_id")?)?,
        }),
        6 => {
            let per_user = body.optional_long("per_user")?;
            let read = Readable {
                quantity: per_user,
                ..Readable::of(CommandKind::Limit)
            };
            read.body(
                count_of("per_user", per_user)
                    .map(|per_user| CommandBody::Limit(Limit { per_user })),
            )
        }
        7 => transfer_of(body)?,
        8 => {
            let below = body.optional_long("low_stock_below")?;
            let read = Readable {
                quantity: below,
                ..Readable::of(CommandKind::Alerts)
            };
            let built = count_of("low_stock_below", below)
                .map(|low_stock_below| CommandBody::Alerts(Alerts { low_stock_below }));
            read.body(built)
        }
        9 => window_of(body)?,
        10 => CommandBody::Pause(Pause {
            change_id: ChangeId::new(body.string("change_id")?)?,
        }),
        11 => CommandBody::Resume(Resume {
            change_id: ChangeId::new(body.string("change_id")?)?,
        }),
        other => return Err(shape(format!("body: unknown union branch {other}")).into()),
    })
}
