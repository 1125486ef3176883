//! Commands and outcomes as serde data in the shape of the current schemas,
//! for apache-avro's schema-aware serializer (`write_avro_datum_ref`).
//!
//! That serializer writes each field as it is handed over, so every record
//! here hands over its fields in the order of its `.avsc` file: the
//! commands, outcomes and events as tuples (by position, see [`field`]),
//! the bodies as structs (a field out of order would be written against the
//! wrong schema position). A unit test compares these bytes with
//! the `Value` path's (which apache-avro validates) for every body and
//! result. Enum symbols and union branches go by index, as the binary
//! encoding does.

use serde::ser::{Serialize, SerializeStruct, SerializeTuple, Serializer};

use crate::command::{Command, CommandBody, CommandKind, RestockMode};
use crate::ids::{BasketId, LocationId, Quantity, UnitId, UserId};
use crate::outcome::{Outcome, ResultCode, StockEvent, StockEvents};

/// The current Command schema's datum of a command.
pub(super) struct CommandDatum<'a>(pub &'a Command);

/// The current Outcome schema's datum of an outcome.
pub(super) struct OutcomeDatum<'a>(pub &'a Outcome);

/// The current StockEvent schema's datum of a stock event.
pub(super) struct EventDatum<'a>(pub &'a StockEvent);

/// Hands over the next field of a record written as a tuple: apache-avro
/// writes a tuple against a record schema field by field, by position,
/// where a struct's fields are each looked up by name (a third of an
/// outcome's encoding). `name` is the field's in the `.avsc` file, for the
/// reader.
fn field<R: SerializeTuple>(
    r: &mut R,
    _name: &'static str,
    value: &(impl Serialize + ?Sized),
) -> Result<(), R::Error> {
    r.serialize_element(value)
}

/// An enum symbol by its index in the schema's `symbols`.
struct Symbol {
    index: u32,
    name: &'static str,
}

impl Serialize for Symbol {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_unit_variant("", self.index, self.name)
    }
}

/// `symbols` is the enum's `ALL`, in the order of its schema's symbols.
fn symbol<T: PartialEq + Copy>(symbols: &[T], value: T, name: &'static str) -> Symbol {
    Symbol {
        index: symbols.iter().position(|s| *s == value).unwrap_or_default() as u32,
        name,
    }
}

fn kind_symbol(kind: CommandKind) -> Symbol {
    symbol(&CommandKind::ALL, kind, kind.as_str())
}

fn result_symbol(result: ResultCode) -> Symbol {
    symbol(&ResultCode::ALL, result, result.as_str())
}

fn mode_symbol(mode: RestockMode) -> Symbol {
    match mode {
        RestockMode::Add => Symbol {
            index: 0,
            name: "ADD",
        },
        RestockMode::Set => Symbol {
            index: 1,
            name: "SET",
        },
    }
}

impl Serialize for CommandDatum<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let c = self.0;
        let mut r = s.serialize_tuple(4)?;
        field(&mut r, "command_id", c.command_id.as_str())?;
        field(&mut r, "sku", c.sku.as_str())?;
        field(&mut r, "occurred_at", &c.occurred_at)?;
        field(&mut r, "body", &Body(&c.body))?;
        r.end()
    }
}

/// The `body` union: one branch per command kind, in the schema's order.
struct Body<'a>(&'a CommandBody);

impl Serialize for Body<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let quantity = |q: Option<Quantity>| q.map(Quantity::get);
        let (branch, record) = match self.0 {
            CommandBody::Deduct(d) => (
                0,
                Fields::new("Deduct")
                    .string("order_id", d.order_id.as_str())
                    .long("quantity", d.quantity.get())
                    .optional_string("user_id", d.user_id.as_ref().map(UserId::as_str))
                    .optional_long("expires_at", d.expires_at)
                    .optional_string("basket_id", d.basket_id.as_ref().map(BasketId::as_str))
                    .units(&d.units)
                    .optional_string("location", d.location.as_ref().map(LocationId::as_str)),
            ),
            CommandBody::Rollback(r) => (
                1,
                Fields::new("Rollback")
                    .string("order_id", r.order_id.as_str())
                    .optional_string("reason", r.reason.as_deref()),
            ),
            CommandBody::Restock(r) => (
                2,
                Fields::new("Restock")
                    .string("adjustment_id", r.adjustment_id.as_str())
                    .symbol("mode", mode_symbol(r.mode()))
                    .long("quantity", r.quantity())
                    .units(r.named())
                    .optional_string("location", r.location().map(LocationId::as_str)),
            ),
            CommandBody::Confirm(c) => (
                3,
                Fields::new("Confirm").string("order_id", c.order_id.as_str()),
            ),
            CommandBody::Refund(r) => (
                4,
                Fields::new("Refund")
                    .string("order_id", r.order_id.as_str())
                    .optional_long("quantity", quantity(r.quantity)),
            ),
            CommandBody::Expire(e) => (
                5,
                Fields::new("Expire").string("order_id", e.order_id.as_str()),
            ),
            CommandBody::Limit(l) => (
                6,
                Fields::new("Limit").optional_long("per_user", quantity(l.per_user)),
            ),
            CommandBody::Transfer(t) => (
                7,
                Fields::new("Transfer")
                    .string("transfer_id", t.transfer_id.as_str())
                    .string("from", t.from().as_str())
                    .string("to", t.to().as_str())
                    .long("quantity", t.quantity().get()),
            ),
            CommandBody::Alerts(a) => (
                8,
                Fields::new("Alerts").optional_long("low_stock_below", quantity(a.low_stock_below)),
            ),
            CommandBody::Window(w) => (
                9,
                Fields::new("Window")
                    .string("change_id", w.change_id.as_str())
                    .optional_long("opens_at", w.window.opens_at())
                    .optional_long("closes_at", w.window.closes_at()),
            ),
            CommandBody::Pause(p) => (
                10,
                Fields::new("Pause").string("change_id", p.change_id.as_str()),
            ),
            CommandBody::Resume(r) => (
                11,
                Fields::new("Resume").string("change_id", r.change_id.as_str()),
            ),
            // Refused by `encode_command` before it gets here.
            CommandBody::Refused(_) => {
                return Err(serde::ser::Error::custom("a refused command is never sent"))
            }
        };
        s.serialize_newtype_variant("Body", branch, record.name, &record)
    }
}

/// The `events` array: each kind by its index in `StockEventKind`.
struct Events(StockEvents);

impl Serialize for Events {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.0.kinds().map(|k| Symbol {
            index: k as u32,
            name: k.as_str(),
        }))
    }
}

/// An array of unit names.
struct UnitNames<'a>(&'a [UnitId]);

impl Serialize for UnitNames<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.0.iter().map(UnitId::as_str))
    }
}

/// A body record's fields, in the order they are added; bodies have at
/// most seven (a deduct).
struct Fields<'a> {
    name: &'static str,
    fields: [(&'static str, Field<'a>); 7],
    len: usize,
}

#[derive(Clone, Copy)]
enum Field<'a> {
    String(&'a str),
    OptionalString(Option<&'a str>),
    Long(i64),
    OptionalLong(Option<i64>),
    Symbol(u32, &'static str),
    Units(&'a [UnitId]),
}

impl<'a> Fields<'a> {
    fn new(name: &'static str) -> Self {
        Self {
            name,
            fields: [("", Field::Long(0)); 7],
            len: 0,
        }
    }

    fn with(mut self, name: &'static str, field: Field<'a>) -> Self {
        self.fields[self.len] = (name, field);
        self.len += 1;
        self
    }

    fn string(self, name: &'static str, value: &'a str) -> Self {
        self.with(name, Field::String(value))
    }

    fn optional_string(self, name: &'static str, value: Option<&'a str>) -> Self {
        self.with(name, Field::OptionalString(value))
    }

    fn long(self, name: &'static str, value: i64) -> Self {
        self.with(name, Field::Long(value))
    }

    fn optional_long(self, name: &'static str, value: Option<i64>) -> Self {
        self.with(name, Field::OptionalLong(value))
    }

    fn units(self, value: &'a [UnitId]) -> Self {
        self.with("units", Field::Units(value))
    }

    fn symbol(self, name: &'static str, value: Symbol) -> Self {
        self.with(name, Field::Symbol(value.index, value.name))
    }
}

impl Serialize for Fields<'_> {
    /// As a tuple when it has more than one field (see [`field`]); a
    /// one-field tuple is written against the record schema itself, not
    /// its field, so such a body goes as a struct.
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if self.len == 1 {
            let mut r = s.serialize_struct(self.name, 1)?;
            let (name, value) = self.fields[0];
            r.serialize_field(name, &value)?;
            return r.end();
        }
        let mut r = s.serialize_tuple(self.len)?;
        for (name, value) in &self.fields[..self.len] {
            field(&mut r, name, value)?;
        }
        r.end()
    }
}

impl Serialize for Field<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match *self {
            Field::String(v) => v.serialize(s),
            Field::OptionalString(v) => v.serialize(s),
            Field::Long(v) => v.serialize(s),
            Field::OptionalLong(v) => v.serialize(s),
            Field::Units(units) => UnitNames(units).serialize(s),
            Field::Symbol(index, name) => Symbol { index, name }.serialize(s),
        }
    }
}

impl Serialize for OutcomeDatum<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let o = self.0;
        let d = &o.decision;
        let mut r = s.serialize_tuple(26)?;
        field(&mut r, "topic", &o.position.topic)?;
        field(&mut r, "partition", &o.position.partition)?;
        field(&mut r, "offset", &o.position.offset)?;
        field(&mut r, "sku", &o.sku)?;
        field(&mut r, "command_id", &o.command_id)?;
        field(&mut r, "kind", &o.kind.map(kind_symbol))?;
        field(&mut r, "order_id", &o.order_id)?;
        field(&mut r, "adjustment_id", &o.adjustment_id)?;
        field(&mut r, "quantity", &o.quantity)?;
        field(&mut r, "result", &result_symbol(d.result))?;
        field(&mut r, "delta", &d.delta)?;
        field(&mut r, "available_after", &d.available)?;
        field(&mut r, "total_after", &d.total)?;
        field(&mut r, "reason", &d.reason)?;
        field(&mut r, "occurred_at", &o.occurred_at)?;
        field(&mut r, "restock_mode", &o.restock_mode.map(mode_symbol))?;
        field(&mut r, "rollback_reason", &o.rollback_reason)?;
        field(&mut r, "user_id", &o.user_id)?;
        field(&mut r, "expires_at", &o.expires_at)?;
        field(&mut r, "basket_id", &o.basket_id)?;
        field(&mut r, "units", &o.units)?;
        field(&mut r, "location", &d.location)?;
        field(&mut r, "to_location", &o.to_location)?;
        field(&mut r, "events", &Events(d.events))?;
        field(&mut r, "opens_at", &o.opens_at)?;
        field(&mut r, "closes_at", &o.closes_at)?;
        r.end()
    }
}

impl Serialize for EventDatum<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let e = self.0;
        let mut r = s.serialize_tuple(10)?;
        let kind = Symbol {
            index: e.kind as u32,
            name: e.kind.as_str(),
        };
        field(&mut r, "kind", &kind)?;
        field(&mut r, "sku", &e.sku)?;
        field(&mut r, "location", &e.location)?;
        field(&mut r, "available", &e.available)?;
        field(&mut r, "total", &e.total)?;
        field(&mut r, "topic", &e.position.topic)?;
        field(&mut r, "partition", &e.position.partition)?;
        field(&mut r, "offset", &e.position.offset)?;
        field(&mut r, "command_id", &e.command_id)?;
        field(&mut r, "occurred_at", &e.occurred_at)?;
        r.end()
    }
}
