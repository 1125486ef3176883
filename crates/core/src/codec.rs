//! Avro single-object encoding of commands and outcomes.
//!
//! A payload is `C3 01`, the 8-byte little-endian CRC-64-AVRO (Rabin)
//! fingerprint of the writer schema's canonical form, then the Avro binary
//! datum, so any language holding the `.avsc` files in `schemas/` can decode
//! it. The schemas are compiled in from that directory, with named types
//! referenced across files inlined so each top-level schema is
//! self-contained and its fingerprint matches what other Avro libraries
//! compute.

use std::cell::RefCell;
use std::collections::HashMap;
use std::io::Cursor;
use std::sync::LazyLock;
use std::thread::LocalKey;

use apache_avro::headers::{HeaderBuilder, RabinFingerprintHeader};
use apache_avro::types::Value;
use apache_avro::{GenericSingleObjectReader, GenericSingleObjectWriter, Schema};

use crate::command::{Command, CommandBody, CommandKind, Deduct, Restock, RestockMode, Rollback};
use crate::ids::{AdjustmentId, CommandId, OrderId, Quantity, Sku, ValidationError};
use crate::outcome::{Decision, LogPosition, Outcome, ResultCode};

/// Largest payload the decoder accepts; commands and outcomes are a few
/// hundred bytes, so anything bigger is garbage.
pub const MAX_PAYLOAD_LEN: usize = 64 * 1024;

/// The schema files, by full name. Order matters only for readability.
const SCHEMA_FILES: [(&str, &str); 8] = [
    (
        "stockledger.RestockMode",
        include_str!("../../../schemas/RestockMode.avsc"),
    ),
    (
        "stockledger.Deduct",
        include_str!("../../../schemas/Deduct.avsc"),
    ),
    (
        "stockledger.Rollback",
        include_str!("../../../schemas/Rollback.avsc"),
    ),
    (
        "stockledger.Restock",
        include_str!("../../../schemas/Restock.avsc"),
    ),
    (
        "stockledger.Command",
        include_str!("../../../schemas/Command.avsc"),
    ),
    (
        "stockledger.CommandKind",
        include_str!("../../../schemas/CommandKind.avsc"),
    ),
    (
        "stockledger.OutcomeResult",
        include_str!("../../../schemas/OutcomeResult.avsc"),
    ),
    (
        "stockledger.Outcome",
        include_str!("../../../schemas/Outcome.avsc"),
    ),
];

/// Why a payload could not be decoded into a valid command or outcome.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("payload is {0} bytes; at most {MAX_PAYLOAD_LEN} are accepted")]
    TooLarge(usize),
    #[error("not Avro single-object encoding (expected magic bytes C3 01)")]
    NotSingleObject,
    #[error("unknown writer schema fingerprint {0:016x}")]
    UnknownSchema(u64),
    #[error("malformed Avro datum: {0}")]
    Malformed(String),
    #[error("{0} trailing bytes after the Avro datum")]
    TrailingBytes(usize),
    #[error("invalid {0}")]
    Invalid(#[from] ValidationError),
}

/// Encoding our own types against our own schemas can only fail on a bug.
#[derive(Debug, thiserror::Error)]
#[error("encoding {what} failed: {message}")]
pub struct EncodeError {
    what: &'static str,
    message: String,
}

/// A parsed, self-contained schema and its single-object header.
struct Framed {
    schema: Schema,
    header: Vec<u8>,
    /// Decodes against the schema resolved once (named types indexed), not
    /// on every call as `from_avro_datum` would.
    reader: GenericSingleObjectReader,
}

impl Framed {
    fn new(full_name: &str, defs: &HashMap<String, serde_json::Value>) -> Self {
        let mut seen = Vec::new();
        let json = inline(
            &serde_json::Value::String(full_name.to_owned()),
            defs,
            &mut seen,
        );
        #[allow(clippy::expect_used)]
        let schema = Schema::parse(&json).expect("schemas/ is parsed by a unit test; it is valid");
        let header = RabinFingerprintHeader::from_schema(&schema).build_header();
        #[allow(clippy::expect_used)]
        let reader = GenericSingleObjectReader::new(schema.clone())
            .expect("a schema that parsed resolves: it has no references left");
        Self {
            schema,
            header,
            reader,
        }
    }

    fn fingerprint(&self) -> u64 {
        fingerprint_of(&self.header).unwrap_or_default()
    }

    /// Encodes with this thread's writer for the schema, which holds the
    /// schema resolved once (`to_avro_datum` resolves it on every call).
    fn encode(
        &self,
        writers: &'static LocalKey<RefCell<Option<GenericSingleObjectWriter>>>,
        what: &'static str,
        value: Value,
    ) -> Result<Vec<u8>, EncodeError> {
        let failed = |e: apache_avro::Error| EncodeError {
            what,
            message: e.to_string(),
        };
        writers.with(|slot| {
            let mut slot = slot.borrow_mut();
            let writer = match slot.as_mut() {
                Some(writer) => writer,
                None => slot.insert(
                    GenericSingleObjectWriter::new_with_capacity(&self.schema, 256)
                        .map_err(failed)?,
                ),
            };
            let mut out = Vec::with_capacity(256);
            writer.write_value_ref(&value, &mut out).map_err(failed)?;
            Ok(out)
        })
    }

    fn decode(&self, payload: &[u8]) -> Result<Value, DecodeError> {
        if payload.len() > MAX_PAYLOAD_LEN {
            return Err(DecodeError::TooLarge(payload.len()));
        }
        let fingerprint = fingerprint_of(payload).ok_or(DecodeError::NotSingleObject)?;
        if payload[..self.header.len()] != self.header[..] {
            return Err(DecodeError::UnknownSchema(fingerprint));
        }
        let mut cursor = Cursor::new(payload);
        let value = self
            .reader
            .read_value(&mut cursor)
            .map_err(|e| DecodeError::Malformed(e.to_string()))?;
        let rest = payload.len() - cursor.position() as usize;
        if rest != 0 {
            return Err(DecodeError::TrailingBytes(rest));
        }
        Ok(value)
    }
}

fn fingerprint_of(payload: &[u8]) -> Option<u64> {
    match payload {
        [0xC3, 0x01, f @ ..] if f.len() >= 8 => {
            let mut bytes = [0u8; 8];
            bytes.copy_from_slice(&f[..8]);
            Some(u64::from_le_bytes(bytes))
        }
        _ => None,
    }
}

/// Replaces each reference to a named type by its definition the first time
/// it appears (Avro requires later uses to stay references).
fn inline(
    schema: &serde_json::Value,
    defs: &HashMap<String, serde_json::Value>,
    seen: &mut Vec<String>,
) -> serde_json::Value {
    use serde_json::Value as J;
    match schema {
        J::String(name) => match defs.get(name) {
            Some(def) if !seen.contains(name) => {
                seen.push(name.clone());
                inline(def, defs, seen)
            }
            _ => schema.clone(),
        },
        J::Array(branches) => J::Array(branches.iter().map(|b| inline(b, defs, seen)).collect()),
        J::Object(map) => {
            let mut map = map.clone();
            if let Some(J::Array(fields)) = map.get_mut("fields") {
                for field in fields.iter_mut() {
                    if let Some(t) = field.get("type").cloned() {
                        field["type"] = inline(&t, defs, seen);
                    }
                }
            }
            for key in ["items", "values"] {
                if let Some(t) = map.get(key).cloned() {
                    map.insert(key.to_owned(), inline(&t, defs, seen));
                }
            }
            if let Some(t @ (J::Array(_) | J::Object(_))) = map.get("type").cloned() {
                map.insert("type".to_owned(), inline(&t, defs, seen));
            }
            J::Object(map)
        }
        other => other.clone(),
    }
}

struct Schemas {
    command: Framed,
    outcome: Framed,
}

thread_local! {
    static COMMAND_WRITER: RefCell<Option<GenericSingleObjectWriter>> = const { RefCell::new(None) };
    static OUTCOME_WRITER: RefCell<Option<GenericSingleObjectWriter>> = const { RefCell::new(None) };
}

static SCHEMAS: LazyLock<Schemas> = LazyLock::new(|| {
    // Garbage must never make the decoder allocate more than a payload can
    // hold; this caps every length prefix.
    apache_avro::util::max_allocation_bytes(MAX_PAYLOAD_LEN);
    let defs: HashMap<String, serde_json::Value> = SCHEMA_FILES
        .iter()
        .map(|(name, text)| {
            #[allow(clippy::expect_used)]
            let json = serde_json::from_str(text).expect("schemas/ is valid JSON (unit-tested)");
            ((*name).to_owned(), json)
        })
        .collect();
    Schemas {
        command: Framed::new("stockledger.Command", &defs),
        outcome: Framed::new("stockledger.Outcome", &defs),
    }
});

/// The self-contained command schema (the writer schema of every command).
pub fn command_schema() -> &'static Schema {
    &SCHEMAS.command.schema
}

/// The self-contained outcome schema.
pub fn outcome_schema() -> &'static Schema {
    &SCHEMAS.outcome.schema
}

/// Fingerprint (CRC-64-AVRO) of the command schema, as it appears in headers.
pub fn command_fingerprint() -> u64 {
    SCHEMAS.command.fingerprint()
}

pub fn encode_command(command: &Command) -> Result<Vec<u8>, EncodeError> {
    let body = match &command.body {
        CommandBody::Deduct(d) => Value::Union(
            0,
            Box::new(Value::Record(vec![
                ("order_id".into(), Value::String(d.order_id.as_str().into())),
                ("quantity".into(), Value::Long(d.quantity.get())),
            ])),
        ),
        CommandBody::Rollback(r) => Value::Union(
            1,
            Box::new(Value::Record(vec![
                ("order_id".into(), Value::String(r.order_id.as_str().into())),
                ("reason".into(), optional_string(r.reason.as_deref())),
            ])),
        ),
        CommandBody::Restock(r) => Value::Union(
            2,
            Box::new(Value::Record(vec![
                (
                    "adjustment_id".into(),
                    Value::String(r.adjustment_id.as_str().into()),
                ),
                (
                    "mode".into(),
                    match r.mode() {
                        RestockMode::Add => Value::Enum(0, "ADD".into()),
                        RestockMode::Set => Value::Enum(1, "SET".into()),
                    },
                ),
                ("quantity".into(), Value::Long(r.quantity())),
            ])),
        ),
    };
    let value = Value::Record(vec![
        (
            "command_id".into(),
            Value::String(command.command_id.as_str().into()),
        ),
        ("sku".into(), Value::String(command.sku.as_str().into())),
        (
            "occurred_at".into(),
            Value::TimestampMillis(command.occurred_at),
        ),
        ("body".into(), body),
    ]);
    SCHEMAS.command.encode(&COMMAND_WRITER, "command", value)
}

/// Decodes and validates a command; every failure is a typed error.
pub fn decode_command(payload: &[u8]) -> Result<Command, DecodeError> {
    let value = SCHEMAS.command.decode(payload)?;
    let mut fields = Fields::of(value)?;
    let command_id = CommandId::new(fields.string("command_id")?)?;
    let sku = Sku::new(fields.string("sku")?)?;
    let occurred_at = fields.long("occurred_at")?;
    let (branch, body) = match fields.take("body")? {
        Value::Union(branch, body) => (branch, *body),
        other => return Err(malformed("body", &other)),
    };
    let mut body = Fields::of(body)?;
    let body = match branch {
        0 => CommandBody::Deduct(Deduct {
            order_id: OrderId::new(body.string("order_id")?)?,
            quantity: Quantity::new(body.long("quantity")?)?,
        }),
        1 => CommandBody::Rollback(Rollback::new(
            OrderId::new(body.string("order_id")?)?,
            body.optional_string("reason")?,
        )?),
        2 => {
            let adjustment_id = AdjustmentId::new(body.string("adjustment_id")?)?;
            let mode = match body.symbol("mode")?.as_str() {
                "ADD" => RestockMode::Add,
                "SET" => RestockMode::Set,
                other => {
                    return Err(DecodeError::Malformed(format!(
                        "mode: unknown symbol {other}"
                    )))
                }
            };
            CommandBody::Restock(Restock::new(adjustment_id, mode, body.long("quantity")?)?)
        }
        other => {
            return Err(DecodeError::Malformed(format!(
                "body: unknown union branch {other}"
            )))
        }
    };
    Ok(Command {
        command_id,
        sku,
        occurred_at,
        body,
    })
}

pub fn encode_outcome(outcome: &Outcome) -> Result<Vec<u8>, EncodeError> {
    let kind = match outcome.kind {
        None => Value::Union(0, Box::new(Value::Null)),
        Some(kind) => {
            let index = CommandKind::ALL
                .iter()
                .position(|k| *k == kind)
                .unwrap_or_default();
            Value::Union(1, Box::new(Value::Enum(index as u32, kind.as_str().into())))
        }
    };
    let result = outcome.decision.result;
    let result_index = ResultCode::ALL
        .iter()
        .position(|r| *r == result)
        .unwrap_or_default();
    let value = Value::Record(vec![
        (
            "topic".into(),
            Value::String(outcome.position.topic.clone()),
        ),
        ("partition".into(), Value::Int(outcome.position.partition)),
        ("offset".into(), Value::Long(outcome.position.offset)),
        ("sku".into(), Value::String(outcome.sku.clone())),
        (
            "command_id".into(),
            optional_string(outcome.command_id.as_deref()),
        ),
        ("kind".into(), kind),
        (
            "order_id".into(),
            optional_string(outcome.order_id.as_deref()),
        ),
        (
            "adjustment_id".into(),
            optional_string(outcome.adjustment_id.as_deref()),
        ),
        (
            "quantity".into(),
            match outcome.quantity {
                None => Value::Union(0, Box::new(Value::Null)),
                Some(q) => Value::Union(1, Box::new(Value::Long(q))),
            },
        ),
        (
            "result".into(),
            Value::Enum(result_index as u32, result.as_str().into()),
        ),
        ("delta".into(), Value::Long(outcome.decision.delta)),
        (
            "available_after".into(),
            Value::Long(outcome.decision.available),
        ),
        ("total_after".into(), Value::Long(outcome.decision.total)),
        (
            "reason".into(),
            optional_string(outcome.decision.reason.as_deref()),
        ),
        (
            "occurred_at".into(),
            Value::TimestampMillis(outcome.occurred_at),
        ),
    ]);
    SCHEMAS.outcome.encode(&OUTCOME_WRITER, "outcome", value)
}

pub fn decode_outcome(payload: &[u8]) -> Result<Outcome, DecodeError> {
    let mut f = Fields::of(SCHEMAS.outcome.decode(payload)?)?;
    let partition = match f.take("partition")? {
        Value::Int(p) => p,
        other => return Err(malformed("partition", &other)),
    };
    let position = LogPosition {
        topic: f.string("topic")?,
        partition,
        offset: f.long("offset")?,
    };
    let sku = f.string("sku")?;
    let command_id = f.optional_string("command_id")?;
    let kind = match f.optional("kind")? {
        None => None,
        Some(Value::Enum(_, symbol)) => Some(
            CommandKind::parse(&symbol)
                .ok_or_else(|| DecodeError::Malformed(format!("kind: unknown symbol {symbol}")))?,
        ),
        Some(other) => return Err(malformed("kind", &other)),
    };
    let order_id = f.optional_string("order_id")?;
    let adjustment_id = f.optional_string("adjustment_id")?;
    let quantity = match f.optional("quantity")? {
        None => None,
        Some(Value::Long(q)) => Some(q),
        Some(other) => return Err(malformed("quantity", &other)),
    };
    let symbol = f.symbol("result")?;
    let result = ResultCode::parse(&symbol)
        .ok_or_else(|| DecodeError::Malformed(format!("result: unknown symbol {symbol}")))?;
    let decision = Decision {
        result,
        delta: f.long("delta")?,
        available: f.long("available_after")?,
        total: f.long("total_after")?,
        reason: f.optional_string("reason")?,
    };
    Ok(Outcome {
        position,
        sku,
        command_id,
        kind,
        order_id,
        adjustment_id,
        quantity,
        decision,
        occurred_at: f.long("occurred_at")?,
    })
}

fn optional_string(s: Option<&str>) -> Value {
    match s {
        None => Value::Union(0, Box::new(Value::Null)),
        Some(s) => Value::Union(1, Box::new(Value::String(s.to_owned()))),
    }
}

fn malformed(field: &str, value: &Value) -> DecodeError {
    DecodeError::Malformed(format!("{field}: unexpected value {value:?}"))
}

/// The fields of a decoded record, taken out by name.
struct Fields(Vec<(String, Value)>);

impl Fields {
    fn of(value: Value) -> Result<Self, DecodeError> {
        match value {
            Value::Record(fields) => Ok(Self(fields)),
            other => Err(malformed("record", &other)),
        }
    }

    fn take(&mut self, name: &str) -> Result<Value, DecodeError> {
        let index = self
            .0
            .iter()
            .position(|(n, _)| n == name)
            .ok_or_else(|| DecodeError::Malformed(format!("{name}: missing")))?;
        Ok(self.0.swap_remove(index).1)
    }

    fn string(&mut self, name: &str) -> Result<String, DecodeError> {
        match self.take(name)? {
            Value::String(s) => Ok(s),
            other => Err(malformed(name, &other)),
        }
    }

    fn long(&mut self, name: &str) -> Result<i64, DecodeError> {
        match self.take(name)? {
            Value::Long(n) | Value::TimestampMillis(n) => Ok(n),
            other => Err(malformed(name, &other)),
        }
    }

    fn symbol(&mut self, name: &str) -> Result<String, DecodeError> {
        match self.take(name)? {
            Value::Enum(_, symbol) => Ok(symbol),
            other => Err(malformed(name, &other)),
        }
    }

    fn optional(&mut self, name: &str) -> Result<Option<Value>, DecodeError> {
        match self.take(name)? {
            Value::Union(_, inner) => match *inner {
                Value::Null => Ok(None),
                v => Ok(Some(v)),
            },
            other => Err(malformed(name, &other)),
        }
    }

    fn optional_string(&mut self, name: &str) -> Result<Option<String>, DecodeError> {
        match self.optional(name)? {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(other) => Err(malformed(name, &other)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn command(body: CommandBody) -> Command {
        Command {
            command_id: CommandId::new("c-1").unwrap(),
            sku: Sku::new("SKU-1").unwrap(),
            occurred_at: 1_700_000_000_123,
            body,
        }
    }

    fn bodies() -> Vec<CommandBody> {
        vec![
            CommandBody::Deduct(Deduct {
                order_id: OrderId::new("o-1").unwrap(),
                quantity: Quantity::new(3).unwrap(),
            }),
            CommandBody::Rollback(
                Rollback::new(OrderId::new("o-1").unwrap(), Some("cancel".into())).unwrap(),
            ),
            CommandBody::Rollback(Rollback::new(OrderId::new("o-2").unwrap(), None).unwrap()),
            CommandBody::Restock(
                Restock::new(AdjustmentId::new("a").unwrap(), RestockMode::Add, -4).unwrap(),
            ),
            CommandBody::Restock(
                Restock::new(AdjustmentId::new("b").unwrap(), RestockMode::Set, 9).unwrap(),
            ),
        ]
    }

    #[test]
    fn every_schema_file_parses_and_the_top_level_schemas_are_self_contained() {
        for (name, text) in SCHEMA_FILES {
            let json: serde_json::Value = serde_json::from_str(text).unwrap();
            let declared = format!(
                "{}.{}",
                json["namespace"].as_str().unwrap(),
                json["name"].as_str().unwrap()
            );
            assert_eq!(declared, name);
        }
        // Self-contained: the canonical form parses on its own.
        Schema::parse_str(&command_schema().canonical_form()).unwrap();
        Schema::parse_str(&outcome_schema().canonical_form()).unwrap();
        assert_ne!(command_fingerprint(), 0);
    }

    #[test]
    fn commands_round_trip_with_a_single_object_header() {
        for body in bodies() {
            let c = command(body);
            let bytes = encode_command(&c).unwrap();
            assert_eq!(&bytes[..2], &[0xC3, 0x01]);
            assert_eq!(fingerprint_of(&bytes), Some(command_fingerprint()));
            assert_eq!(decode_command(&bytes).unwrap(), c);
        }
    }

    #[test]
    fn outcomes_round_trip() {
        for body in bodies() {
            let c = command(body);
            let position = LogPosition {
                topic: "t".into(),
                partition: 3,
                offset: 99,
            };
            let decision = Decision::from_compact("APPLIED|-3|5|10|").unwrap();
            let o = Outcome::for_command(position.clone(), &c, decision);
            assert_eq!(decode_outcome(&encode_outcome(&o).unwrap()).unwrap(), o);
            let bad = Outcome::invalid(position, "k", "garbage".into(), 7);
            assert_eq!(decode_outcome(&encode_outcome(&bad).unwrap()).unwrap(), bad);
        }
    }

    #[test]
    fn garbage_and_invalid_content_are_typed_errors() {
        assert_eq!(decode_command(b"hello"), Err(DecodeError::NotSingleObject));
        let mut bytes = encode_command(&command(bodies().remove(0))).unwrap();
        let mut wrong = bytes.clone();
        wrong[2] ^= 0xFF;
        assert!(matches!(
            decode_command(&wrong),
            Err(DecodeError::UnknownSchema(_))
        ));
        bytes.push(0);
        assert_eq!(decode_command(&bytes), Err(DecodeError::TrailingBytes(1)));
        bytes.truncate(bytes.len() - 3);
        assert!(matches!(
            decode_command(&bytes),
            Err(DecodeError::Malformed(_))
        ));
        assert_eq!(
            decode_command(&vec![0; MAX_PAYLOAD_LEN + 1]),
            Err(DecodeError::TooLarge(MAX_PAYLOAD_LEN + 1))
        );
    }

    #[test]
    fn a_well_formed_record_with_invalid_content_names_the_field() {
        // Encode by hand what the typed API refuses to build: quantity 0, empty sku.
        let value = Value::Record(vec![
            ("command_id".into(), Value::String("c".into())),
            ("sku".into(), Value::String("".into())),
            ("occurred_at".into(), Value::TimestampMillis(0)),
            (
                "body".into(),
                Value::Union(
                    0,
                    Box::new(Value::Record(vec![
                        ("order_id".into(), Value::String("o".into())),
                        ("quantity".into(), Value::Long(0)),
                    ])),
                ),
            ),
        ]);
        let bytes = SCHEMAS
            .command
            .encode(&COMMAND_WRITER, "command", value)
            .unwrap();
        match decode_command(&bytes) {
            Err(DecodeError::Invalid(e)) => assert_eq!(e.field, "sku"),
            other => panic!("expected an invalid sku, got {other:?}"),
        }
    }
}
