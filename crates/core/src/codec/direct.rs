//! The current writer schema of commands and of outcomes read straight
//! from a payload's bytes, in one pass, as the rules ask for each field: no
//! `Value` tree, no strict walk before it, no resolution (the datum already
//! has the current shape), no list of the fields read.
//!
//! It is the fast path of the datums every current writer sends, and only
//! that: it accepts the canonical encoding alone (each varint in its
//! fewest bytes, an array in one block with a positive count, text in
//! UTF-8, every index in range, nothing after the datum), and at anything
//! else it gives up, leaving the datum to the general reader, whose strict
//! walk says exactly what is wrong and where. The rules that build the
//! command or the outcome ([`Record`]) are the ones the general reader's
//! fields go through, asked in the schema's order; a refusal of theirs is
//! also left to the general reader, so both build the same value or refuse
//! it with the same error.

use apache_avro::schema::{RecordSchema, UnionSchema};
use apache_avro::Schema;

use super::value::Record;
use super::DecodeError;
use crate::ids::ValidationError;

/// What a field of the schema holds, among the few shapes the command and
/// outcome schemas use.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Shape {
    Text,
    Int,
    Long,
    OptionalText,
    OptionalLong,
    /// An enum, by its symbols.
    Symbol(Vec<String>),
    OptionalSymbol(Vec<String>),
    Texts,
    /// An array of an enum, by its symbols.
    Symbols(Vec<String>),
    /// A union of records (the command's body), by each branch's fields.
    Records(Vec<Vec<(String, Shape)>>),
}

/// The plan of a current schema: the root record's fields, a union of
/// records, if there is one, the last of them.
pub(super) struct Plan {
    root: Vec<(String, Shape)>,
}

impl Plan {
    /// The plan of `schema`, or `None` when it has a shape this reader does
    /// not know (then every datum takes the general reader): a union of
    /// records may only be its last field.
    pub(super) fn of(schema: &Schema) -> Option<Self> {
        let Schema::Record(RecordSchema { fields, .. }) = schema else {
            return None;
        };
        let mut root = Vec::with_capacity(fields.len());
        for field in fields {
            root.push((field.name.clone(), shape_of(&field.schema, true)?));
        }
        let inner = root.len().saturating_sub(1);
        let placed = !(root[..inner].iter()).any(|(_, shape)| matches!(shape, Shape::Records(_)));
        placed.then_some(Self { root })
    }

    /// What `rules` build of `datum`, read in one pass; `None` where the
    /// datum is not the canonical encoding of one value, or the rules
    /// refuse what it holds (the general reader then names why).
    pub(super) fn read<'p, 'a, T>(
        &'p self,
        datum: &'a [u8],
        rules: impl FnOnce(&mut Stream<'p, 'a>) -> Result<T, Strayed>,
    ) -> Option<T> {
        let mut stream = Stream {
            fields: self.root.iter(),
            bytes: Bytes { data: datum, at: 0 },
            strayed: false,
        };
        let value = rules(&mut stream).ok()?;
        let whole = !stream.strayed
            && stream.fields.as_slice().is_empty()
            && stream.bytes.at == datum.len();
        whole.then_some(value)
    }
}

/// The shape of `schema`, when it is one this reader knows; a union of
/// records only at the root (`records`).
fn shape_of(schema: &Schema, records: bool) -> Option<Shape> {
    match schema {
        Schema::String => Some(Shape::Text),
        Schema::Int => Some(Shape::Int),
        Schema::Long | Schema::TimestampMillis => Some(Shape::Long),
        Schema::Enum(e) => Some(Shape::Symbol(e.symbols.clone())),
        Schema::Array(a) => match &*a.items {
            Schema::String => Some(Shape::Texts),
            Schema::Enum(e) => Some(Shape::Symbols(e.symbols.clone())),
            _ => None,
        },
        Schema::Union(u) => union_shape(u, records),
        _ => None,
    }
}

fn union_shape(union: &UnionSchema, records: bool) -> Option<Shape> {
    match union.variants() {
        [Schema::Null, Schema::String] => Some(Shape::OptionalText),
        [Schema::Null, Schema::Long | Schema::TimestampMillis] => Some(Shape::OptionalLong),
        [Schema::Null, Schema::Enum(e)] => Some(Shape::OptionalSymbol(e.symbols.clone())),
        variants if records => {
            let mut branches = Vec::with_capacity(variants.len());
            for variant in variants {
                let Schema::Record(RecordSchema { fields, .. }) = variant else {
                    return None;
                };
                let mut branch = Vec::with_capacity(fields.len());
                for field in fields {
                    branch.push((field.name.clone(), shape_of(&field.schema, false)?));
                }
                branches.push(branch);
            }
            Some(Shape::Records(branches))
        }
        _ => None,
    }
}

/// The datum and how far it has been read.
struct Bytes<'a> {
    data: &'a [u8],
    at: usize,
}

impl<'a> Bytes<'a> {
    /// A varint in its fewest bytes, before zig-zag.
    fn varint(&mut self) -> Option<u64> {
        let mut value = 0u64;
        for i in 0..10 {
            let byte = *self.data.get(self.at)?;
            self.at += 1;
            if i == 9 && byte > 1 {
                return None;
            }
            value |= u64::from(byte & 0x7F) << (7 * i);
            if byte & 0x80 == 0 {
                return (i == 0 || byte != 0).then_some(value);
            }
        }
        None
    }

    /// A long, zig-zag decoded. Most a datum holds (a length, a union's
    /// branch, a count) fit one byte, read here without a call.
    #[inline]
    fn long(&mut self) -> Option<i64> {
        let z = match self.data.get(self.at) {
            Some(&byte) if byte < 0x80 => {
                self.at += 1;
                u64::from(byte)
            }
            _ => self.varint()?,
        };
        Some(((z >> 1) as i64) ^ -((z & 1) as i64))
    }

    /// A `["null", …]` union: its branch index, 0 or 1, then, for 1, the
    /// value `read` reads.
    fn optional<T>(&mut self, read: impl FnOnce(&mut Self) -> Option<T>) -> Option<Option<T>> {
        match self.long()? {
            0 => Some(None),
            1 => read(self).map(Some),
            _ => None,
        }
    }

    fn text(&mut self) -> Option<&'a str> {
        let len = usize::try_from(self.long()?).ok()?;
        let end = self.at.checked_add(len)?;
        let text = std::str::from_utf8(self.data.get(self.at..end)?).ok()?;
        self.at = end;
        Some(text)
    }

    /// An enum's symbol, among `symbols`.
    fn symbol<'p>(&mut self, symbols: &'p [String]) -> Option<&'p str> {
        let index = usize::try_from(self.long()?).ok()?;
        symbols.get(index).map(String::as_str)
    }

    /// An array in one block, each item read by `item`.
    fn array<T>(&mut self, mut item: impl FnMut(&mut Self) -> Option<T>) -> Option<Vec<T>> {
        let count = usize::try_from(self.long()?).ok()?;
        if count == 0 {
            return Some(Vec::new());
        }
        // Each item takes a byte at least: a count beyond what is left is
        // no datum, found before anything is reserved.
        if count > self.data.len() - self.at {
            return None;
        }
        let mut items = Vec::with_capacity(count);
        for _ in 0..count {
            items.push(item(self)?);
        }
        (self.long()? == 0).then_some(items)
    }
}

/// Why the one-pass reader gave a datum up: nothing to tell, since the
/// general reader reads it again and names what is wrong (an encoding
/// other than the canonical one, or a value the rules refuse).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Strayed;

impl From<DecodeError> for Strayed {
    fn from(_: DecodeError) -> Self {
        Self
    }
}

impl From<ValidationError> for Strayed {
    fn from(_: ValidationError) -> Self {
        Self
    }
}

/// A record's fields read from the datum as the rules ask for them, which
/// must be in the schema's order: a field asked out of order, of another
/// shape, or not canonically encoded strays, and the datum is left to the
/// general reader.
pub(super) struct Stream<'p, 'a> {
    /// The fields still to read: the root record's, then, once the body is
    /// entered, its branch's.
    fields: std::slice::Iter<'p, (String, Shape)>,
    bytes: Bytes<'a>,
    strayed: bool,
}

impl<'p> Stream<'p, '_> {
    /// The shape of the next field, which must be `name`. The rules ask in
    /// the schema's order or no command of theirs reads straight: the
    /// tests of every kind hold that, so the name is compared only where
    /// they run (a debug build); a release reads by place and shape.
    fn next(&mut self, name: &str) -> Result<&'p Shape, Strayed> {
        match self.fields.next() {
            Some((next, shape)) => {
                debug_assert_eq!(next, name, "asked out of the schema's order");
                Ok(shape)
            }
            None => Err(self.stray()),
        }
    }

    /// What was read, or the stray that `None` is.
    fn read<T>(&mut self, read: Option<T>) -> Result<T, Strayed> {
        read.ok_or_else(|| self.stray())
    }

    fn stray(&mut self) -> Strayed {
        self.strayed = true;
        Strayed
    }
}

impl Record for Stream<'_, '_> {
    type Error = Strayed;

    fn string(&mut self, name: &str) -> Result<String, Strayed> {
        let read = match self.next(name)? {
            Shape::Text => self.bytes.text().map(str::to_owned),
            _ => None,
        };
        self.read(read)
    }

    fn long(&mut self, name: &str) -> Result<i64, Strayed> {
        let read = match self.next(name)? {
            Shape::Long => self.bytes.long(),
            _ => None,
        };
        self.read(read)
    }

    fn int(&mut self, name: &str) -> Result<i32, Strayed> {
        let read = match self.next(name)? {
            Shape::Int => (self.bytes.long()).and_then(|n| i32::try_from(n).ok()),
            _ => None,
        };
        self.read(read)
    }

    fn symbol<T>(&mut self, name: &str, parse: fn(&str) -> Option<T>) -> Result<T, Strayed> {
        let read = match self.next(name)? {
            Shape::Symbol(symbols) => self.bytes.symbol(symbols).and_then(parse),
            _ => None,
        };
        self.read(read)
    }

    fn optional_symbol<T>(
        &mut self,
        name: &str,
        parse: fn(&str) -> Option<T>,
    ) -> Result<Option<T>, Strayed> {
        let read = match self.next(name)? {
            Shape::OptionalSymbol(symbols) => {
                (self.bytes).optional(|b| b.symbol(symbols).and_then(parse))
            }
            _ => None,
        };
        self.read(read)
    }

    fn symbols<T>(&mut self, name: &str, parse: fn(&str) -> Option<T>) -> Result<Vec<T>, Strayed> {
        let read = match self.next(name)? {
            Shape::Symbols(symbols) => self.bytes.array(|b| b.symbol(symbols).and_then(parse)),
            _ => None,
        };
        self.read(read)
    }

    fn optional_long(&mut self, name: &str) -> Result<Option<i64>, Strayed> {
        let read = match self.next(name)? {
            Shape::OptionalLong => self.bytes.optional(Bytes::long),
            _ => None,
        };
        self.read(read)
    }

    fn optional_string(&mut self, name: &str) -> Result<Option<String>, Strayed> {
        let read = match self.next(name)? {
            Shape::OptionalText => (self.bytes).optional(|b| b.text().map(str::to_owned)),
            _ => None,
        };
        self.read(read)
    }

    fn strings(&mut self, name: &str) -> Result<Vec<String>, Strayed> {
        let read = match self.next(name)? {
            Shape::Texts => self.bytes.array(|b| b.text().map(str::to_owned)),
            _ => None,
        };
        self.read(read)
    }

    fn enter(&mut self, name: &str) -> Result<u32, Strayed> {
        let read = match self.next(name)? {
            Shape::Records(branches) => self.bytes.long().and_then(|index| {
                let fields = branches.get(usize::try_from(index).ok()?)?;
                Some((u32::try_from(index).ok()?, fields))
            }),
            _ => None,
        };
        let (index, fields) = self.read(read)?;
        self.fields = fields.iter();
        Ok(index)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap is a failed test
mod tests {
    use super::super::frame::SCHEMAS;
    use super::super::tests::{bodies, command};
    use super::super::{
        command_of, decode_command, decode_command_generally, decode_outcome,
        decode_outcome_generally, encode_command, encode_outcome, DecodeError,
    };
    use crate::command::{Command, RestockMode};
    use crate::ids::CommandId;
    use crate::outcome::{Decision, LogPosition, Outcome, ResultCode, StockEventKind, StockEvents};

    /// A command of every kind ([`bodies`]), each its own id.
    fn every_kind() -> Vec<Command> {
        bodies()
            .into_iter()
            .enumerate()
            .map(|(i, body)| Command {
                command_id: CommandId::new(format!("c-{i}")).unwrap(),
                ..command(body)
            })
            .collect()
    }

    #[test]
    fn the_current_command_schema_is_read_straight_from_its_bytes() {
        for command in every_kind() {
            let payload = encode_command(&command).unwrap();
            assert!(
                SCHEMAS.command_direct(&payload).is_some(),
                "{command:?} takes the general reader"
            );
            assert_eq!(decode_command(&payload).unwrap(), command);
            assert_eq!(decode_command_generally(&payload).unwrap(), command);
        }
    }

    /// Every flaw the strict walk names leaves the datum to it, so its
    /// error is the one given.
    #[test]
    fn a_datum_in_any_but_the_canonical_encoding_is_left_to_the_general_reader() {
        let command = &every_kind()[1];
        let payload = encode_command(command).unwrap();
        let datum = &payload[10..];
        let plan = SCHEMAS.command_plan.as_ref().unwrap();
        let read = |datum: &[u8]| plan.read(datum, command_of);
        assert!(read(datum).is_some());
        // Cut short anywhere, or followed by a byte.
        for end in 0..datum.len() {
            assert!(read(&datum[..end]).is_none(), "cut at {end}");
        }
        let mut longer = datum.to_vec();
        longer.push(0);
        assert!(read(&longer).is_none());
        // The command id's length (a varint of one byte) in two bytes.
        let mut redundant = vec![datum[0] | 0x80, 0];
        redundant.extend_from_slice(&datum[1..]);
        assert!(read(&redundant).is_none());
        // A union index out of range.
        let mut branch = datum.to_vec();
        let at = 1 + 3 + 1 + 5 + 6; // after "c-1", "SKU-1" and occurred_at
        assert_eq!(branch[at], 0, "the deduct's branch index");
        branch[at] = 2 * 12;
        assert!(read(&branch).is_none());
        // Text that is not UTF-8.
        let mut text = datum.to_vec();
        text[1] = 0xFF;
        assert!(read(&text).is_none());
    }

    /// An outcome of every kind of command and every result, with every
    /// optional field written and not, and a record that was no command.
    fn outcomes() -> Vec<Outcome> {
        let position = |offset| LogPosition {
            topic: "stock.ledger".into(),
            partition: 3,
            offset,
        };
        let mut outcomes: Vec<Outcome> = (every_kind().iter().zip(ResultCode::ALL.iter().cycle()))
            .enumerate()
            .map(|(i, (command, &result))| {
                let decision = Decision {
                    result,
                    delta: -(i as i64),
                    available: 7 - i as i64,
                    total: 1_000_000_000_000,
                    reason: (i % 2 == 0).then(|| format!("reason {i}")),
                    location: (i % 3 == 0).then(|| "paris".to_owned()),
                    events: StockEvents::of([StockEventKind::SoldOut, StockEventKind::LowStock]),
                };
                Outcome::for_command(position(i as i64), command, decision)
            })
            .collect();
        outcomes[0].restock_mode = Some(RestockMode::Set);
        outcomes.push(Outcome::invalid(position(-1), "k", "garbage".into(), 7));
        outcomes
    }

    #[test]
    fn the_current_outcome_schema_is_read_straight_from_its_bytes() {
        for outcome in outcomes() {
            let payload = encode_outcome(&outcome).unwrap();
            assert!(
                SCHEMAS.outcome_direct(&payload).is_some(),
                "{outcome:?} takes the general reader"
            );
            assert_eq!(decode_outcome(&payload).unwrap(), outcome);
            assert_eq!(decode_outcome_generally(&payload).unwrap(), outcome);
        }
    }

    /// Mutants of `payloads` (a bit flipped, a byte set, inserted or
    /// removed, the payload cut), each answered by `decode` as by
    /// `generally`; how many were read straight (`direct`) and accepted.
    fn mutants<T: PartialEq + std::fmt::Debug>(
        payloads: &[Vec<u8>],
        decode: fn(&[u8]) -> Result<T, DecodeError>,
        generally: fn(&[u8]) -> Result<T, DecodeError>,
        direct: impl Fn(&[u8]) -> bool,
    ) -> (usize, usize) {
        let mut state = 0x9E37_79B9_7F4A_7C15_u64;
        let mut next = move |below: usize| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state % below.max(1) as u64) as usize
        };
        let (mut straight, mut accepted) = (0, 0);
        for _ in 0..40_000 {
            let mut mutant = payloads[next(payloads.len())].clone();
            for _ in 0..1 + next(3) {
                if mutant.len() == 10 {
                    mutant.push(next(256) as u8);
                }
                let at = 10 + next(mutant.len() - 10);
                match next(5) {
                    0 => mutant[at] ^= 1 << next(8),
                    1 => mutant[at] = [0, 1, 2, 0x7F, 0x80, 0xFF][next(6)],
                    2 => mutant.insert(at, next(256) as u8),
                    3 if mutant.len() > 11 => {
                        mutant.remove(at);
                    }
                    _ => mutant.truncate(at.max(10)),
                }
            }
            let answer = decode(&mutant);
            assert_eq!(answer, generally(&mutant), "{mutant:02x?}");
            straight += usize::from(direct(&mutant));
            accepted += usize::from(answer.is_ok());
        }
        (straight, accepted)
    }

    /// Whatever bytes come, both readers answer alike: the same command,
    /// or the same error.
    #[test]
    fn mutants_of_every_kind_are_answered_as_the_general_reader_answers_them() {
        let payloads: Vec<Vec<u8>> = every_kind()
            .iter()
            .map(|c| encode_command(c).unwrap())
            .collect();
        let (direct, accepted) = mutants(
            &payloads,
            decode_command,
            decode_command_generally,
            |mutant| SCHEMAS.command_direct(mutant).is_some(),
        );
        // The mutants reach both paths, and commands as well as refusals.
        assert!(
            direct > 1_000 && accepted > 1_000,
            "{direct} read straight, {accepted} accepted"
        );
    }

    /// The same of outcomes.
    #[test]
    fn mutants_of_outcomes_are_answered_as_the_general_reader_answers_them() {
        let payloads: Vec<Vec<u8>> = (outcomes().iter())
            .map(|o| encode_outcome(o).unwrap())
            .collect();
        let (direct, accepted) = mutants(
            &payloads,
            decode_outcome,
            decode_outcome_generally,
            |mutant| SCHEMAS.outcome_direct(mutant).is_some(),
        );
        assert!(
            direct > 1_000 && accepted > 1_000,
            "{direct} read straight, {accepted} accepted"
        );
    }
}
