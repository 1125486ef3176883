//! The current schemas' datums written straight into a buffer: commands,
//! outcomes and stock events, each field in the order of its `.avsc` file,
//! in Avro's binary encoding (zig-zag varints, text as its length and its
//! bytes, a union's branch index before its value, an enum's symbol by its
//! index, an array as its count, its items and a closing 0, or the 0
//! alone). No `Value`, no serializer state: a field is a call, and a
//! caller that keeps its buffer writes a batch without allocating.
//!
//! Unit tests in `codec` hold the bytes to those of the `Value`
//! apache-avro validates against the current schemas, for every body,
//! result and optional field.

use crate::command::{Command, CommandBody, RestockMode};
use crate::ids::{LocationId, Quantity, UnitId};
use crate::outcome::{OutcomeView, ResultCode, StockEvent, StockEvents};

/// A datum being written at the end of a buffer.
struct Datum<'a>(&'a mut Vec<u8>);

impl Datum<'_> {
    fn long(&mut self, n: i64) {
        let mut z = ((n << 1) ^ (n >> 63)) as u64;
        if z < 0x80 {
            // Most longs written (indexes, counts, small quantities).
            self.0.push(z as u8);
            return;
        }
        // The varint built aside, then appended at once: one check of
        // the buffer's room rather than one a byte.
        let mut bytes = [0u8; 10];
        let mut len = 0;
        while z >= 0x80 {
            bytes[len] = (z as u8) | 0x80;
            z >>= 7;
            len += 1;
        }
        bytes[len] = z as u8;
        self.0.extend_from_slice(&bytes[..=len]);
    }

    fn text(&mut self, s: &str) {
        self.long(s.len() as i64);
        self.0.extend_from_slice(s.as_bytes());
    }

    /// A `["null", T]` union: branch 0 for none, 1 before a value.
    fn optional<T>(&mut self, value: Option<T>, write: impl FnOnce(&mut Self, T)) {
        match value {
            None => self.long(0),
            Some(v) => {
                self.long(1);
                write(self, v);
            }
        }
    }

    fn optional_text(&mut self, s: Option<&str>) {
        self.optional(s, Self::text);
    }

    fn optional_long(&mut self, n: Option<i64>) {
        self.optional(n, Self::long);
    }

    /// An enum's symbol, by its index among the schema's symbols.
    fn symbol(&mut self, index: usize) {
        self.long(index as i64);
    }

    /// An array: its count and its items in one block, then the 0 that
    /// ends it (the 0 alone when empty).
    fn array<T>(&mut self, items: &[T], mut write: impl FnMut(&mut Self, &T)) {
        if !items.is_empty() {
            self.long(items.len() as i64);
            for item in items {
                write(self, item);
            }
        }
        self.long(0);
    }

    fn units(&mut self, units: &[UnitId]) {
        self.array(units, |d, u| d.text(u.as_str()));
    }

    /// An array of `n` texts, `names`.
    fn texts<'s>(&mut self, n: usize, names: impl Iterator<Item = &'s str>) {
        if n > 0 {
            self.long(n as i64);
            names.for_each(|name| self.text(name));
        }
        self.long(0);
    }

    fn events(&mut self, events: StockEvents) {
        let mut kinds = [0usize; 8];
        let mut n = 0;
        for kind in events.kinds() {
            kinds[n] = kind as usize;
            n += 1;
        }
        self.array(&kinds[..n], |d, &k| d.symbol(k));
    }
}

fn index_of<T: PartialEq>(all: &[T], value: &T) -> usize {
    all.iter().position(|s| s == value).unwrap_or_default()
}

fn mode_index(mode: RestockMode) -> usize {
    match mode {
        RestockMode::Add => 0,
        RestockMode::Set => 1,
    }
}

fn count(q: Option<Quantity>) -> Option<i64> {
    q.map(Quantity::get)
}

/// The current Command schema's datum of `command`, after `out`'s bytes
/// (a refused command, which is never sent, was turned away before).
pub(super) fn command(out: &mut Vec<u8>, command: &Command) {
    let mut d = Datum(out);
    d.text(command.command_id.as_str());
    d.text(command.sku.as_str());
    d.long(command.occurred_at);
    body(&mut d, &command.body);
}

/// The `body` union: one branch per command kind, in the schema's order.
fn body(d: &mut Datum<'_>, body: &CommandBody) {
    match body {
        CommandBody::Deduct(x) => {
            d.long(0);
            d.text(x.order_id.as_str());
            d.long(x.quantity.get());
            d.optional_text(x.user_id.as_ref().map(|u| u.as_str()));
            d.optional_long(x.expires_at);
            d.optional_text(x.basket_id.as_ref().map(|b| b.as_str()));
            d.units(&x.units);
            d.optional_text(x.location.as_ref().map(LocationId::as_str));
        }
        CommandBody::Rollback(x) => {
            d.long(1);
            d.text(x.order_id.as_str());
            d.optional_text(x.reason.as_deref());
        }
        CommandBody::Restock(x) => {
            d.long(2);
            d.text(x.adjustment_id.as_str());
            d.symbol(mode_index(x.mode()));
            d.long(x.quantity());
            d.units(x.named());
            d.optional_text(x.location().map(LocationId::as_str));
        }
        CommandBody::Confirm(x) => {
            d.long(3);
            d.text(x.order_id.as_str());
        }
        CommandBody::Refund(x) => {
            d.long(4);
            d.text(x.order_id.as_str());
            d.optional_long(count(x.quantity));
        }
        CommandBody::Expire(x) => {
            d.long(5);
            d.text(x.order_id.as_str());
        }
        CommandBody::Limit(x) => {
            d.long(6);
            d.optional_long(count(x.per_user));
        }
        CommandBody::Transfer(x) => {
            d.long(7);
            d.text(x.transfer_id.as_str());
            d.text(x.from().as_str());
            d.text(x.to().as_str());
            d.long(x.quantity().get());
        }
        CommandBody::Alerts(x) => {
            d.long(8);
            d.optional_long(count(x.low_stock_below));
        }
        CommandBody::Window(x) => {
            d.long(9);
            d.text(x.change_id.as_str());
            d.optional_long(x.window.opens_at());
            d.optional_long(x.window.closes_at());
        }
        CommandBody::Pause(x) => {
            d.long(10);
            d.text(x.change_id.as_str());
        }
        CommandBody::Resume(x) => {
            d.long(11);
            d.text(x.change_id.as_str());
        }
        // Turned away by `encode_command` before it gets here.
        CommandBody::Refused(_) => {}
    }
}

/// The current Outcome schema's datum of `o`, after `out`'s bytes.
pub(super) fn outcome(out: &mut Vec<u8>, o: &OutcomeView<'_>) {
    let decision = o.decision;
    let mut d = Datum(out);
    d.text(&o.position.topic);
    d.long(i64::from(o.position.partition));
    d.long(o.position.offset);
    d.text(o.sku);
    d.optional_text(o.command_id);
    d.optional(o.kind, |d, k| {
        d.symbol(index_of(&crate::CommandKind::ALL, &k))
    });
    d.optional_text(o.order_id);
    d.optional_text(o.adjustment_id);
    d.optional_long(o.quantity);
    d.symbol(index_of(&ResultCode::ALL, &decision.result));
    d.long(decision.delta);
    d.long(decision.available);
    d.long(decision.total);
    d.optional_text(decision.reason.as_deref());
    d.long(o.occurred_at);
    d.optional(o.restock_mode, |d, m| d.symbol(mode_index(m)));
    d.optional_text(o.rollback_reason);
    d.optional_text(o.user_id);
    d.optional_long(o.expires_at);
    d.optional_text(o.basket_id);
    d.texts(o.units.len(), o.units.names());
    d.optional_text(decision.location.as_deref());
    d.optional_text(o.to_location);
    d.events(decision.events);
    d.optional_long(o.opens_at);
    d.optional_long(o.closes_at);
}

/// The current StockEvent schema's datum of `event`, after `out`'s bytes.
pub(super) fn event(out: &mut Vec<u8>, e: &StockEvent) {
    let mut d = Datum(out);
    d.symbol(e.kind as usize);
    d.text(&e.sku);
    d.optional_text(e.location.as_deref());
    d.long(e.available);
    d.long(e.total);
    d.text(&e.position.topic);
    d.long(i64::from(e.position.partition));
    d.long(e.position.offset);
    d.optional_text(e.command_id.as_deref());
    d.long(e.occurred_at);
}
