//! Avro single-object encoding of commands and outcomes.
//!
//! A payload is `C3 01`, the 8-byte little-endian CRC-64-AVRO fingerprint
//! of the writer schema's Parsing Canonical Form (see [`crate::schema`]),
//! then the Avro binary datum, so any language holding the `.avsc` files in
//! `schemas/history/` can write and read it. Records are written with the
//! newest released version; any released version (and the fingerprints of
//! the versions released before the specification's canonical form was
//! followed) is read, and resolved into the newest with Avro schema
//! resolution.

use apache_avro::headers::HeaderBuilder;
use apache_avro::types::Value;
use apache_avro::Schema;

use crate::command::{Command, CommandBody, CommandKind, Deduct, SaleWindow};
use crate::ids::{
    BasketId, ChangeId, CommandId, LocationId, Quantity, Sku, UserId, ValidationError,
};
use crate::outcome::{
    Decision, LogPosition, Outcome, OutcomeView, ResultCode, StockEvent, StockEventKind,
    StockEvents,
};
use crate::schema::Released;

mod body;
mod direct;
mod frame;
mod strict;
mod value;
mod write;

pub use frame::{
    command_fingerprint, command_schema, datum_and_its_value_written_again, fingerprint_of,
    outcome_fingerprint, outcome_schema,
};
use frame::{Header, SCHEMAS};
use value::{
    optional_long, optional_string, optional_timestamp, restock_mode, restock_mode_of, strings,
    Fields, Record,
};

/// Largest payload the decoder accepts; commands and outcomes are a few
/// hundred bytes, so anything bigger is garbage.
///
/// ```
/// use stockledger_core::codec::{decode_command, DecodeError, MAX_PAYLOAD_LEN};
///
/// let huge = vec![0u8; MAX_PAYLOAD_LEN + 1];
/// assert_eq!(decode_command(&huge), Err(DecodeError::TooLarge(MAX_PAYLOAD_LEN + 1)));
/// ```
pub const MAX_PAYLOAD_LEN: usize = 64 * 1024;

/// Why a payload could not be decoded into a valid command or outcome.
///
/// ```
/// use stockledger_core::codec::{decode_command, DecodeError};
///
/// assert_eq!(decode_command(b"{\"sku\":\"SKU-1\"}"), Err(DecodeError::NotSingleObject));
/// // What Confluent's KafkaAvroSerializer writes: 0, the schema id, the datum.
/// assert_eq!(decode_command(&[0, 0, 0, 1, 7, 2]), Err(DecodeError::RegistryFramed(263)));
/// let unknown = [0xC3, 0x01, 1, 2, 3, 4, 5, 6, 7, 8];
/// assert!(matches!(decode_command(&unknown), Err(DecodeError::UnknownSchema(_))));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    #[error("payload is {0} bytes; at most {MAX_PAYLOAD_LEN} are accepted")]
    TooLarge(usize),
    #[error(
        "not Avro single-object encoding (expected magic bytes C3 01 and an 8-byte fingerprint)"
    )]
    NotSingleObject,
    /// The framing of Confluent's Schema Registry serializers (magic byte
    /// 0, a 4-byte schema id), which most Java services send by default:
    /// named, so the producer learns what to change.
    #[error(
        "looks like Confluent Schema Registry framing (magic byte 0, schema id {0}), not Avro single-object \
         encoding (C3 01 and an 8-byte fingerprint): configure the producer to write single-object \
         encoding (docs/producers.md)"
    )]
    RegistryFramed(u32),
    #[error(
        "unknown writer schema fingerprint {0:016x} (not a released version of schemas/history)"
    )]
    UnknownSchema(u64),
    #[error("malformed Avro datum for writer schema {writer}: {message}")]
    Malformed { writer: String, message: String },
    /// The payload stops inside its datum. apache-avro alone would read a
    /// missing union index at the end as null; Avro Java refuses.
    #[error(
        "the payload ends before the Avro datum of writer schema {writer} does: {at} needs at \
         least {needed} more byte(s)"
    )]
    Truncated {
        writer: String,
        at: String,
        needed: usize,
    },
    #[error("{trailing} trailing bytes after the Avro datum of writer schema {writer}")]
    TrailingBytes { writer: String, trailing: usize },
    /// The bytes read as a value, but are not the one encoding every Avro
    /// writer gives it (a varint with redundant bytes, an array in several
    /// blocks): refused, so an accepted datum always re-encodes to itself.
    #[error("not the canonical Avro encoding of writer schema {writer}: {at}: {what}")]
    NotCanonical {
        writer: String,
        at: String,
        what: String,
    },
    /// The field's problem is this error's own message, not a cause of it:
    /// "invalid sku: …" says it once.
    #[error("invalid {0}")]
    Invalid(ValidationError),
}

impl From<ValidationError> for DecodeError {
    fn from(e: ValidationError) -> Self {
        Self::Invalid(e)
    }
}

/// Encoding our own types against our own schemas can only fail on a bug.
///
/// ```
/// use stockledger_core::codec::encode_command_as;
/// use stockledger_core::schema::{versions, Subject};
/// use stockledger_core::{Command, CommandBody, CommandId, Limit, Sku};
///
/// // A limit has no place in the first Command schema.
/// let first = versions(Subject::Command).next().unwrap();
/// let limit = Command {
///     command_id: CommandId::new("c-1")?,
///     sku: Sku::new("SKU-1")?,
///     occurred_at: 0,
///     body: CommandBody::Limit(Limit { per_user: None }),
/// };
/// let refused = encode_command_as(&limit, first, first.fingerprint).unwrap_err();
/// assert!(refused.to_string().starts_with("encoding command failed: as Command.v1"));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, thiserror::Error)]
#[error("encoding {what} failed: {message}")]
pub struct EncodeError {
    what: &'static str,
    message: String,
}

/// The command in Avro single-object encoding with the newest `Command`
/// schema: `C3 01`, the schema's 8-byte fingerprint, the datum.
///
/// ```
/// use stockledger_core::codec::{command_fingerprint, decode_command, encode_command};
/// use stockledger_core::{Command, CommandBody, CommandId, Deduct, OrderId, Quantity, Sku};
///
/// let command = Command {
///     command_id: CommandId::new("c-1")?,
///     sku: Sku::new("SKU-1")?,
///     occurred_at: 1_700_000_000_000,
///     body: CommandBody::Deduct(Deduct::new(OrderId::new("order-42")?, Quantity::new(1)?)),
/// };
/// let payload = encode_command(&command)?;
/// assert_eq!(&payload[..2], [0xC3, 0x01]);
/// assert_eq!(payload[2..10], command_fingerprint().to_le_bytes());
/// assert_eq!(decode_command(&payload)?, command);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn encode_command(command: &Command) -> Result<Vec<u8>, EncodeError> {
    only_sendable(command)?;
    Ok(SCHEMAS.command.encode(|out| write::command(out, command)))
}

/// [`encode_command`] into `out`, emptied first: a sender that keeps its
/// buffer encodes command after command without allocating.
pub fn encode_command_into(command: &Command, out: &mut Vec<u8>) -> Result<(), EncodeError> {
    only_sendable(command)?;
    SCHEMAS
        .command
        .encode_into(out, |out| write::command(out, command));
    Ok(())
}

/// Refuses a [`crate::Refused`] command: it is only ever read from the
/// log, and its values have no place in the schema's types.
fn only_sendable(command: &Command) -> Result<(), EncodeError> {
    match &command.body {
        CommandBody::Refused(r) => Err(EncodeError {
            what: "command",
            message: format!("a refused command is never sent ({})", r.problem),
        }),
        _ => Ok(()),
    }
}

/// The current schema's datum of `command`.
fn command_value(command: &Command) -> Value {
    Value::Record(vec![
        (
            "command_id".into(),
            Value::String(command.command_id.as_str().into()),
        ),
        ("sku".into(), Value::String(command.sku.as_str().into())),
        (
            "occurred_at".into(),
            Value::TimestampMillis(command.occurred_at),
        ),
        ("body".into(), body_value(&command.body)),
    ])
}

/// A deduct's record (branch 0 of the body union).
fn deduct_value(d: &Deduct) -> Value {
    Value::Record(vec![
        ("order_id".into(), Value::String(d.order_id.as_str().into())),
        ("quantity".into(), Value::Long(d.quantity.get())),
        (
            "user_id".into(),
            optional_string(d.user_id.as_ref().map(UserId::as_str)),
        ),
        ("expires_at".into(), optional_timestamp(d.expires_at)),
        (
            "basket_id".into(),
            optional_string(d.basket_id.as_ref().map(BasketId::as_str)),
        ),
        ("units".into(), strings(&d.units)),
        (
            "location".into(),
            optional_string(d.location.as_ref().map(LocationId::as_str)),
        ),
    ])
}

/// A command's body: the branch of the `body` union its kind is.
fn body_value(body: &CommandBody) -> Value {
    match body {
        CommandBody::Deduct(d) => Value::Union(0, Box::new(deduct_value(d))),
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
                ("mode".into(), restock_mode(r.mode())),
                ("quantity".into(), Value::Long(r.quantity())),
                ("units".into(), strings(r.named())),
                (
                    "location".into(),
                    optional_string(r.location().map(LocationId::as_str)),
                ),
            ])),
        ),
        CommandBody::Confirm(c) => Value::Union(
            3,
            Box::new(Value::Record(vec![(
                "order_id".into(),
                Value::String(c.order_id.as_str().into()),
            )])),
        ),
        CommandBody::Refund(r) => Value::Union(
            4,
            Box::new(Value::Record(vec![
                ("order_id".into(), Value::String(r.order_id.as_str().into())),
                (
                    "quantity".into(),
                    optional_long(r.quantity.map(Quantity::get)),
                ),
            ])),
        ),
        CommandBody::Expire(e) => Value::Union(
            5,
            Box::new(Value::Record(vec![(
                "order_id".into(),
                Value::String(e.order_id.as_str().into()),
            )])),
        ),
        CommandBody::Limit(l) => Value::Union(
            6,
            Box::new(Value::Record(vec![(
                "per_user".into(),
                optional_long(l.per_user.map(Quantity::get)),
            )])),
        ),
        CommandBody::Transfer(t) => Value::Union(
            7,
            Box::new(Value::Record(vec![
                (
                    "transfer_id".into(),
                    Value::String(t.transfer_id.as_str().into()),
                ),
                ("from".into(), Value::String(t.from().as_str().into())),
                ("to".into(), Value::String(t.to().as_str().into())),
                ("quantity".into(), Value::Long(t.quantity().get())),
            ])),
        ),
        CommandBody::Alerts(a) => Value::Union(
            8,
            Box::new(Value::Record(vec![(
                "low_stock_below".into(),
                optional_long(a.low_stock_below.map(Quantity::get)),
            )])),
        ),
        CommandBody::Window(w) => sale_value(9, &w.change_id, Some(&w.window)),
        CommandBody::Pause(p) => sale_value(10, &p.change_id, None),
        CommandBody::Resume(r) => sale_value(11, &r.change_id, None),
        // Refused by `encode_command_as` before it gets here.
        CommandBody::Refused(_) => Value::Null,
    }
}

/// The branch of a change of the sale: its id and, for a window, the
/// window.
fn sale_value(branch: u32, change_id: &ChangeId, window: Option<&SaleWindow>) -> Value {
    let mut fields = vec![("change_id".into(), Value::String(change_id.to_string()))];
    if let Some(w) = window {
        fields.push(("opens_at".into(), optional_timestamp(w.opens_at())));
        fields.push(("closes_at".into(), optional_timestamp(w.closes_at())));
    }
    Value::Union(branch, Box::new(Value::Record(fields)))
}

/// Decodes and validates a command written with any released `Command`
/// schema; every failure is a typed error.
///
/// ```
/// use stockledger_core::codec::{decode_command, DecodeError};
///
/// assert_eq!(decode_command(b"not avro"), Err(DecodeError::NotSingleObject));
/// ```
pub fn decode_command(payload: &[u8]) -> Result<Command, DecodeError> {
    match SCHEMAS.command_direct(payload) {
        Some(command) => Ok(command),
        None => decode_command_generally(payload),
    }
}

/// [`decode_command`] by apache-avro's `Value`, after the strict walk: any
/// released version, and every refusal named.
fn decode_command_generally(payload: &[u8]) -> Result<Command, DecodeError> {
    let value = SCHEMAS.command.decode(payload)?;
    command_of(&mut Fields::of(value)?)
}

/// The command of a record's fields, its body's among them, whichever
/// reader read them (asked in the schema's order).
fn command_of<R: Record>(fields: &mut R) -> Result<Command, R::Error> {
    let command_id = CommandId::new(fields.string("command_id")?)?;
    let sku = Sku::new(fields.string("sku")?)?;
    let occurred_at = crate::command::check_instant("occurred_at", fields.long("occurred_at")?)?;
    let branch = fields.enter("body")?;
    Ok(Command {
        command_id,
        sku,
        occurred_at,
        body: body::body_of(branch, fields)?,
    })
}

/// The outcome in Avro single-object encoding with the newest `Outcome`
/// schema.
///
/// ```
/// use stockledger_core::codec::{decode_outcome, encode_outcome, outcome_fingerprint};
/// use stockledger_core::{LogPosition, Outcome};
///
/// let at = LogPosition { topic: "stock.ledger".into(), partition: 0, offset: 9 };
/// let outcome = Outcome::invalid(at, "SKU-1", "not a command".into(), 1_700_000_000_000);
/// let payload = encode_outcome(&outcome)?;
/// assert_eq!(payload[2..10], outcome_fingerprint().to_le_bytes());
/// assert_eq!(decode_outcome(&payload)?, outcome);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn encode_outcome(outcome: &Outcome) -> Result<Vec<u8>, EncodeError> {
    Ok(SCHEMAS
        .outcome
        .encode(|out| write::outcome(out, &outcome.view())))
}

/// [`encode_outcome`] of an outcome borrowed from what it is made of
/// ([`OutcomeView`]), into `out`, emptied first: a publisher that keeps its
/// buffer encodes a batch's outcomes without allocating.
///
/// ```
/// use stockledger_core::codec::{decode_outcome, encode_outcome_into};
/// use stockledger_core::{LogPosition, Outcome};
///
/// let mut buffer = Vec::new();
/// for offset in 0..3 {
///     let at = LogPosition { topic: "stock.ledger".into(), partition: 0, offset };
///     let outcome = Outcome::invalid(at, "SKU-1", "not a command".into(), 1_700_000_000_000);
///     encode_outcome_into(&outcome.view(), &mut buffer);
///     assert_eq!(decode_outcome(&buffer)?, outcome);
/// }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn encode_outcome_into(outcome: &OutcomeView<'_>, out: &mut Vec<u8>) {
    SCHEMAS
        .outcome
        .encode_into(out, |out| write::outcome(out, outcome));
}

/// `outcome` as released `version` of the Outcome schema wrote it (only the
/// fields that version has), framed with `fingerprint` (one of the
/// version's): the bytes a log written by an earlier release holds, for
/// tests of logs that span versions.
///
/// ```
/// use stockledger_core::codec::{decode_outcome, encode_outcome_as};
/// use stockledger_core::schema::{versions, Subject};
/// use stockledger_core::{LogPosition, Outcome};
///
/// let first = versions(Subject::Outcome).next().unwrap();
/// let at = LogPosition { topic: "stock.ledger".into(), partition: 0, offset: 9 };
/// let outcome = Outcome::invalid(at, "SKU-1", "not a command".into(), 1_700_000_000_000);
/// let old = encode_outcome_as(&outcome, first, first.fingerprint)?;
/// assert_eq!(decode_outcome(&old)?, outcome);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn encode_outcome_as(
    outcome: &Outcome,
    version: &Released,
    fingerprint: u64,
) -> Result<Vec<u8>, EncodeError> {
    encode_as("outcome", outcome_value(outcome), version, fingerprint)
}

/// `command` as released `version` of the Command schema wrote it (see
/// [`encode_outcome_as`]); an error if that version has no place for it.
///
/// ```
/// use stockledger_core::codec::{decode_command, encode_command_as};
/// use stockledger_core::schema::{versions, Subject};
/// use stockledger_core::{Command, CommandBody, CommandId, Deduct, OrderId, Quantity, Sku};
///
/// let first = versions(Subject::Command).next().unwrap();
/// let command = Command {
///     command_id: CommandId::new("c-1")?,
///     sku: Sku::new("SKU-1")?,
///     occurred_at: 1_700_000_000_000,
///     body: CommandBody::Deduct(Deduct::new(OrderId::new("order-42")?, Quantity::new(1)?)),
/// };
/// let old = encode_command_as(&command, first, first.fingerprint)?;
/// assert_eq!(decode_command(&old)?, command);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn encode_command_as(
    command: &Command,
    version: &Released,
    fingerprint: u64,
) -> Result<Vec<u8>, EncodeError> {
    only_sendable(command)?;
    encode_as("command", command_value(command), version, fingerprint)
}

fn encode_as(
    what: &'static str,
    value: Value,
    version: &Released,
    fingerprint: u64,
) -> Result<Vec<u8>, EncodeError> {
    let value = only_fields_of(value, &version.schema);
    let mut out = Header(fingerprint).build_header();
    let datum = apache_avro::writer::datum::GenericDatumWriter::builder(&version.schema)
        .build()
        .and_then(|writer| writer.write_value_to_vec(value))
        .map_err(|e| EncodeError {
            what,
            message: format!("as {}.v{}: {e}", version.subject.as_str(), version.version),
        })?;
    out.extend(datum);
    Ok(out)
}

/// `value` without the record fields `schema` does not have, at any depth
/// (union branches keep their index: versions only append branches).
fn only_fields_of(value: Value, schema: &Schema) -> Value {
    match (value, schema) {
        (Value::Record(fields), Schema::Record(record)) => Value::Record(
            fields
                .into_iter()
                .filter_map(|(name, v)| {
                    let &i = record.lookup.get(&name)?;
                    let kept = only_fields_of(v, &record.fields[i].schema);
                    Some((name, kept))
                })
                .collect(),
        ),
        (Value::Union(i, inner), Schema::Union(union)) => match union.variants().get(i as usize) {
            Some(branch) => Value::Union(i, Box::new(only_fields_of(*inner, branch))),
            None => Value::Union(i, inner),
        },
        (value, _) => value,
    }
}

/// The current schema's datum of `outcome`.
/// The `kind` of an outcome: null, or the command's kind.
fn kind_value(kind: Option<CommandKind>) -> Value {
    match kind {
        None => Value::Union(0, Box::new(Value::Null)),
        Some(kind) => {
            let index = CommandKind::ALL
                .iter()
                .position(|k| *k == kind)
                .unwrap_or_default();
            Value::Union(1, Box::new(Value::Enum(index as u32, kind.as_str().into())))
        }
    }
}

/// The `result` enum of an outcome.
fn result_value(result: ResultCode) -> Value {
    let index = ResultCode::ALL
        .iter()
        .position(|r| *r == result)
        .unwrap_or_default();
    Value::Enum(index as u32, result.as_str().into())
}

fn outcome_value(outcome: &Outcome) -> Value {
    Value::Record(vec![
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
        ("kind".into(), kind_value(outcome.kind)),
        (
            "order_id".into(),
            optional_string(outcome.order_id.as_deref()),
        ),
        (
            "adjustment_id".into(),
            optional_string(outcome.adjustment_id.as_deref()),
        ),
        ("quantity".into(), optional_long(outcome.quantity)),
        ("result".into(), result_value(outcome.decision.result)),
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
        (
            "restock_mode".into(),
            match outcome.restock_mode {
                None => Value::Union(0, Box::new(Value::Null)),
                Some(mode) => Value::Union(1, Box::new(restock_mode(mode))),
            },
        ),
        (
            "rollback_reason".into(),
            optional_string(outcome.rollback_reason.as_deref()),
        ),
        (
            "user_id".into(),
            optional_string(outcome.user_id.as_deref()),
        ),
        ("expires_at".into(), optional_timestamp(outcome.expires_at)),
        (
            "basket_id".into(),
            optional_string(outcome.basket_id.as_deref()),
        ),
        ("units".into(), strings(&outcome.units)),
        (
            "location".into(),
            optional_string(outcome.decision.location.as_deref()),
        ),
        (
            "to_location".into(),
            optional_string(outcome.to_location.as_deref()),
        ),
        ("events".into(), events_value(&outcome.decision.events)),
        ("opens_at".into(), optional_timestamp(outcome.opens_at)),
        ("closes_at".into(), optional_timestamp(outcome.closes_at)),
    ])
}

/// The `events` array of an outcome.
fn events_value(events: &StockEvents) -> Value {
    Value::Array(
        events
            .kinds()
            .map(|k| Value::Enum(k as u32, k.as_str().into()))
            .collect(),
    )
}

/// The outcome in `payload`, written with any released `Outcome` schema.
///
/// ```
/// use stockledger_core::codec::{decode_outcome, DecodeError};
///
/// assert_eq!(decode_outcome(&[0xC3]), Err(DecodeError::NotSingleObject));
/// ```
pub fn decode_outcome(payload: &[u8]) -> Result<Outcome, DecodeError> {
    match SCHEMAS.outcome_direct(payload) {
        Some(outcome) => Ok(outcome),
        None => decode_outcome_generally(payload),
    }
}

/// [`decode_outcome`] by apache-avro's `Value`, after the strict walk: any
/// released version, and every refusal named.
fn decode_outcome_generally(payload: &[u8]) -> Result<Outcome, DecodeError> {
    outcome_of(&mut Fields::of(SCHEMAS.outcome.decode(payload)?)?)
}

/// The outcome of a record's fields, whichever reader read them (asked in
/// the schema's order).
fn outcome_of<R: Record>(f: &mut R) -> Result<Outcome, R::Error> {
    let position = LogPosition {
        topic: f.string("topic")?,
        partition: f.int("partition")?,
        offset: f.long("offset")?,
    };
    let sku = f.string("sku")?;
    let command_id = f.optional_string("command_id")?;
    let kind = f.optional_symbol("kind", CommandKind::parse)?;
    let order_id = f.optional_string("order_id")?;
    let adjustment_id = f.optional_string("adjustment_id")?;
    let quantity = f.optional_long("quantity")?;
    let result = f.symbol("result", ResultCode::parse)?;
    let delta = f.long("delta")?;
    let available = f.long("available_after")?;
    let total = f.long("total_after")?;
    let reason = f.optional_string("reason")?;
    let occurred_at = f.long("occurred_at")?;
    let restock_mode = f.optional_symbol("restock_mode", restock_mode_of)?;
    let rollback_reason = f.optional_string("rollback_reason")?;
    let user_id = f.optional_string("user_id")?;
    let expires_at = f.optional_long("expires_at")?;
    let basket_id = f.optional_string("basket_id")?;
    let units = f.strings("units")?;
    let location = f.optional_string("location")?;
    let to_location = f.optional_string("to_location")?;
    let events = stock_events(f.symbols("events", StockEventKind::parse)?)?;
    Ok(Outcome {
        position,
        sku,
        command_id,
        kind,
        order_id,
        adjustment_id,
        quantity,
        decision: Decision {
            result,
            delta,
            available,
            total,
            reason,
            location,
            events,
        },
        occurred_at,
        restock_mode,
        rollback_reason,
        user_id,
        expires_at,
        basket_id,
        units,
        to_location,
        opens_at: f.optional_long("opens_at")?,
        closes_at: f.optional_long("closes_at")?,
    })
}

/// The stock event in Avro single-object encoding with the newest
/// `StockEvent` schema.
///
/// ```
/// use stockledger_core::codec::{decode_stock_event, encode_stock_event};
/// use stockledger_core::{LogPosition, StockEvent, StockEventKind};
///
/// let event = StockEvent {
///     kind: StockEventKind::BackInStock,
///     sku: "SKU-1".into(),
///     location: Some("berlin".into()),
///     available: 4,
///     total: 10,
///     position: LogPosition { topic: "stock.ledger".into(), partition: 1, offset: 7 },
///     command_id: Some("c-7".into()),
///     occurred_at: 1_700_000_000_000,
/// };
/// assert_eq!(decode_stock_event(&encode_stock_event(&event)?)?, event);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn encode_stock_event(event: &StockEvent) -> Result<Vec<u8>, EncodeError> {
    Ok(SCHEMAS.event.encode(|out| write::event(out, event)))
}

/// The stock event in `payload`, written with any released `StockEvent`
/// schema.
pub fn decode_stock_event(payload: &[u8]) -> Result<StockEvent, DecodeError> {
    let mut f = Fields::of(SCHEMAS.event.decode(payload)?)?;
    let kind = f.symbol("kind", StockEventKind::parse)?;
    let sku = f.string("sku")?;
    let location = f.optional_string("location")?;
    let available = f.long("available")?;
    let total = f.long("total")?;
    let topic = f.string("topic")?;
    let partition = f.int("partition")?;
    Ok(StockEvent {
        kind,
        sku,
        location,
        available,
        total,
        position: LogPosition {
            topic,
            partition,
            offset: f.long("offset")?,
        },
        command_id: f.optional_string("command_id")?,
        occurred_at: f.long("occurred_at")?,
    })
}

/// The `events` array of an outcome, its kinds as read.
fn stock_events(kinds: Vec<StockEventKind>) -> Result<StockEvents, DecodeError> {
    // A set, written in the order of its kinds: anything else would be read
    // as another array than the one written.
    if kinds
        .windows(2)
        .any(|pair| pair[0] as u32 >= pair[1] as u32)
    {
        return Err(DecodeError::Invalid(ValidationError::new(
            "events",
            "must name each kind once, in the order of StockEventKind's symbols",
        )));
    }
    Ok(StockEvents::of(kinds))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::command::RestockMode;
    use crate::command::{
        Alerts, Confirm, Expire, Limit, Pause, Refund, Restock, Resume, Rollback, Transfer, Window,
    };
    use crate::ids::{AdjustmentId, OrderId, TransferId};
    use crate::schema::{self, Subject};

    pub(super) fn command(body: CommandBody) -> Command {
        Command {
            command_id: CommandId::new("c-1").unwrap(),
            sku: Sku::new("SKU-1").unwrap(),
            occurred_at: 1_700_000_000_123,
            body,
        }
    }

    fn decision(
        result: ResultCode,
        delta: i64,
        available: i64,
        total: i64,
        reason: Option<&str>,
    ) -> Decision {
        Decision {
            result,
            delta,
            available,
            total,
            reason: reason.map(str::to_owned),
            location: None,
            events: StockEvents::NONE,
        }
    }

    fn order(id: &str) -> OrderId {
        OrderId::new(id).unwrap()
    }

    /// A body of every kind, with its optional fields left out and given.
    pub(super) fn bodies() -> Vec<CommandBody> {
        vec![
            CommandBody::Deduct(Deduct::new(order("o-1"), Quantity::new(3).unwrap())),
            CommandBody::Deduct(Deduct {
                user_id: Some(UserId::new("buyer-7").unwrap()),
                expires_at: Some(1_700_000_900_000),
                ..Deduct::new(order("o-3"), Quantity::new(2).unwrap())
            }),
            CommandBody::Deduct(Deduct {
                user_id: Some(UserId::new("buyer-7").unwrap()),
                expires_at: Some(1_700_000_900_000),
                basket_id: Some(BasketId::new("cart-1").unwrap()),
                ..Deduct::new(order("cart-1"), Quantity::new(1).unwrap())
            }),
            CommandBody::Deduct(Deduct {
                expires_at: Some(1_700_000_900_000),
                ..Deduct::for_units(order("o-5"), &["7-12", "7-13"]).unwrap()
            }),
            CommandBody::Confirm(Confirm {
                order_id: order("o-3"),
            }),
            CommandBody::Refund(Refund {
                order_id: order("o-3"),
                quantity: Some(Quantity::new(1).unwrap()),
            }),
            CommandBody::Refund(Refund {
                order_id: order("o-3"),
                quantity: None,
            }),
            CommandBody::Expire(Expire {
                order_id: order("o-4"),
            }),
            CommandBody::Limit(Limit {
                per_user: Some(Quantity::new(2).unwrap()),
            }),
            CommandBody::Limit(Limit { per_user: None }),
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
            CommandBody::Restock(
                Restock::units(AdjustmentId::new("c").unwrap(), &["7-12", "7-13"]).unwrap(),
            ),
            CommandBody::Deduct(
                Deduct::new(order("o-6"), Quantity::new(2).unwrap())
                    .at(location("berlin"))
                    .unwrap(),
            ),
            CommandBody::Restock(
                Restock::new(AdjustmentId::new("d").unwrap(), RestockMode::Set, 40)
                    .and_then(|r| r.at(location("paris")))
                    .unwrap(),
            ),
            CommandBody::Transfer(
                Transfer::new(
                    TransferId::new("t-1").unwrap(),
                    location("paris"),
                    location("berlin"),
                    Quantity::new(5).unwrap(),
                )
                .unwrap(),
            ),
            alerts(Some(10)),
            alerts(None),
            CommandBody::Window(Window {
                change_id: ChangeId::new("sale-1").unwrap(),
                window: SaleWindow::new(Some(1_700_000_000_000), Some(1_700_003_600_000)).unwrap(),
            }),
            CommandBody::Window(Window {
                change_id: ChangeId::new("sale-2").unwrap(),
                window: SaleWindow::ALWAYS,
            }),
            CommandBody::Pause(Pause {
                change_id: ChangeId::new("stop-1").unwrap(),
            }),
            CommandBody::Resume(Resume {
                change_id: ChangeId::new("go-1").unwrap(),
            }),
        ]
    }

    fn alerts(threshold: Option<i64>) -> CommandBody {
        CommandBody::Alerts(Alerts {
            low_stock_below: threshold.map(|q| Quantity::new(q).unwrap()),
        })
    }

    fn location(name: &str) -> LocationId {
        LocationId::new(name).unwrap()
    }

    fn units(names: &[&str]) -> Vec<crate::UnitId> {
        names
            .iter()
            .map(|n| crate::UnitId::new(*n).unwrap())
            .collect()
    }

    /// `command` as a reader sees it when a writer older than v4, which
    /// has no `units` and no `location` field, wrote it: the same
    /// quantity, no names, no location.
    fn without_units(mut command: Command) -> Command {
        match &mut command.body {
            CommandBody::Deduct(d) => {
                d.units.clear();
                d.location = None;
            }
            CommandBody::Restock(r) => {
                *r = Restock::new(r.adjustment_id.clone(), r.mode(), r.quantity()).unwrap();
            }
            _ => {}
        }
        command
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

    /// The writer writes fields in the order it is told: the bytes must be
    /// those of the `Value` apache-avro validates against the current
    /// schema, for every body, result, optional field and array.
    #[test]
    fn records_are_written_as_the_validated_value_path_writes_them() {
        let (commands, outcomes) = (
            schema::current(Subject::Command),
            schema::current(Subject::Outcome),
        );
        let position = LogPosition {
            topic: "topic-a".into(),
            partition: 7,
            offset: 123_456_789,
        };
        for body in bodies() {
            let c = command(body);
            assert_eq!(
                encode_command(&c).unwrap(),
                encode_as("command", command_value(&c), commands, commands.fingerprint).unwrap(),
                "{c:?}"
            );
            for (i, result) in ResultCode::ALL.into_iter().enumerate() {
                let reason = (i % 2 == 0).then_some("why");
                let events = match i % 3 {
                    0 => StockEvents::default(),
                    1 => StockEvents::of([StockEventKind::SoldOut]),
                    _ => StockEvents::of([StockEventKind::SoldOut, StockEventKind::LowStock]),
                };
                let d = Decision {
                    events,
                    ..decision(result, -(i as i64), i as i64, 40, reason)
                };
                let mut o = Outcome::for_command(position.clone(), &c, d);
                o.rollback_reason = reason.map(str::to_owned);
                let expected =
                    encode_as("outcome", outcome_value(&o), outcomes, outcomes.fingerprint);
                assert_eq!(encode_outcome(&o).unwrap(), expected.unwrap(), "{o:?}");
            }
        }
        let bad = Outcome::invalid(position, "k", "garbage".into(), 7);
        let expected = encode_as(
            "outcome",
            outcome_value(&bad),
            outcomes,
            outcomes.fingerprint,
        );
        assert_eq!(encode_outcome(&bad).unwrap(), expected.unwrap());
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
            let decision = Decision {
                events: StockEvents::of([StockEventKind::SoldOut, StockEventKind::LowStock]),
                ..decision(ResultCode::Applied, -3, 5, 10, None)
            };
            let o = Outcome::for_command(position.clone(), &c, decision.clone());
            assert_eq!(decode_outcome(&encode_outcome(&o).unwrap()).unwrap(), o);
            // The applier's way: borrowed from the command, its units the
            // command's own, into a buffer that held another outcome.
            let mut buffer = vec![0xAB; 300];
            encode_outcome_into(
                &OutcomeView::of_command(&position, &c, &decision),
                &mut buffer,
            );
            assert_eq!(buffer, encode_outcome(&o).unwrap(), "{o:?}");
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
        assert_eq!(
            decode_command(&bytes),
            Err(DecodeError::TrailingBytes {
                writer: current_command(),
                trailing: 1
            })
        );
        // Cut inside the order id.
        bytes.truncate(bytes.len() - 6);
        assert!(matches!(
            decode_command(&bytes),
            Err(DecodeError::Truncated { writer, .. }) if writer == current_command()
        ));
        assert_eq!(
            decode_command(&vec![0; MAX_PAYLOAD_LEN + 1]),
            Err(DecodeError::TooLarge(MAX_PAYLOAD_LEN + 1))
        );
    }

    #[test]
    fn a_restock_out_of_its_range_is_read_for_the_machine_to_refuse() {
        for (mode, q) in [(RestockMode::Set, -1), (RestockMode::Add, 0)] {
            let id = AdjustmentId::new("a").unwrap();
            let recorded = Restock::as_recorded(id, mode, Some(q), None::<&[&str]>).unwrap();
            let bytes = encode_command(&command(CommandBody::Restock(recorded))).unwrap();
            let read = decode_command(&bytes).expect("a restock out of range is still a command");
            let CommandBody::Restock(r) = read.body else {
                panic!("not a restock: {read:?}");
            };
            assert_eq!((r.mode(), r.quantity()), (mode, q));
        }
    }

    /// A command record of body branch `branch` with `fields`, none of
    /// their values checked, as another producer may write it.
    fn raw(branch: u32, fields: Vec<(&str, Value)>) -> Vec<u8> {
        let body = Value::Record(fields.into_iter().map(|(f, v)| (f.into(), v)).collect());
        let value = Value::Record(vec![
            ("command_id".into(), Value::String("c-1".into())),
            ("sku".into(), Value::String("SKU-1".into())),
            (
                "occurred_at".into(),
                Value::TimestampMillis(1_700_000_000_123),
            ),
            ("body".into(), Value::Union(branch, Box::new(body))),
        ]);
        let newest = schema::current(Subject::Command);
        encode_as("command", value, newest, newest.fingerprint).unwrap()
    }

    #[test]
    fn a_command_whose_values_are_refused_is_read_for_its_rule_to_answer() {
        let none = || Value::Union(0, Box::new(Value::Null));
        let some = |v: Value| Value::Union(1, Box::new(v));
        let text = |s: &str| Value::String(s.into());
        let deduct = |quantity: i64, expires_at: Option<i64>, basket: Option<&str>| {
            vec![
                ("order_id", text("cart-1")),
                ("quantity", Value::Long(quantity)),
                ("user_id", none()),
                (
                    "expires_at",
                    expires_at.map_or_else(none, |t| some(Value::TimestampMillis(t))),
                ),
                ("basket_id", basket.map_or_else(none, |b| some(text(b)))),
                ("units", Value::Array(Vec::new())),
                ("location", none()),
            ]
        };
        let transfer = |to: &str, quantity: i64| {
            vec![
                ("transfer_id", text("t-1")),
                ("from", text("berlin")),
                ("to", text(to)),
                ("quantity", Value::Long(quantity)),
            ]
        };
        let window = |opens: i64, closes: i64| {
            vec![
                ("change_id", text("w-1")),
                ("opens_at", some(Value::TimestampMillis(opens))),
                ("closes_at", some(Value::TimestampMillis(closes))),
            ]
        };
        let cases = [
            (
                raw(0, deduct(0, None, None)),
                CommandKind::Deduct,
                "quantity",
            ),
            (
                raw(0, deduct(1_000_000_001, None, None)),
                CommandKind::Deduct,
                "quantity",
            ),
            (
                raw(0, deduct(1, None, Some("cart-1"))),
                CommandKind::Deduct,
                "expires_at",
            ),
            (
                raw(
                    4,
                    vec![
                        ("order_id", text("o-1")),
                        ("quantity", some(Value::Long(0))),
                    ],
                ),
                CommandKind::Refund,
                "quantity",
            ),
            (
                raw(6, vec![("per_user", some(Value::Long(0)))]),
                CommandKind::Limit,
                "per_user",
            ),
            (raw(7, transfer("berlin", 1)), CommandKind::Transfer, "to"),
            (
                raw(7, transfer("paris", -1)),
                CommandKind::Transfer,
                "quantity",
            ),
            (
                raw(8, vec![("low_stock_below", some(Value::Long(0)))]),
                CommandKind::Alerts,
                "low_stock_below",
            ),
            (
                raw(9, window(5_000, 5_000)),
                CommandKind::Window,
                "closes_at",
            ),
        ];
        for (bytes, kind, field) in cases {
            let read = decode_command(&bytes).map(|c| c.body);
            match read {
                Ok(CommandBody::Refused(r)) => {
                    assert_eq!((r.kind, r.problem.field), (kind, field), "{r:?}")
                }
                other => panic!("{kind:?} {field}: {other:?}"),
            }
        }
        // What cannot be read stays unreadable: an instant outside the
        // range every part of the ledger holds, an id of another shape.
        for bytes in [
            raw(9, window(-1, 5_000)),
            raw(0, {
                let mut d = deduct(1, None, None);
                d[0].1 = text("");
                d
            }),
        ] {
            assert!(matches!(
                decode_command(&bytes),
                Err(DecodeError::Invalid(_))
            ));
        }
    }

    #[test]
    fn a_deduct_one_byte_short_is_refused_not_read_as_no_location() {
        // The last byte of a deduct is its `location` union index; apache-avro
        // alone reads its absence as null, and the record took stock.
        let whole = encode_command(&command(bodies().remove(0))).unwrap();
        let short = &whole[..whole.len() - 1];
        assert_eq!(
            decode_command(short),
            Err(DecodeError::Truncated {
                writer: current_command(),
                at: "body.Deduct.location".into(),
                needed: 1
            })
        );
        assert_eq!(
            decode_command(short).unwrap_err().to_string(),
            format!(
                "the payload ends before the Avro datum of writer schema {} does: \
                 body.Deduct.location needs at least 1 more byte(s)",
                current_command()
            )
        );
    }

    #[test]
    fn no_proper_prefix_of_any_record_decodes() {
        for body in bodies() {
            let whole = encode_command(&command(body)).unwrap();
            for end in 0..whole.len() {
                assert!(decode_command(&whole[..end]).is_err(), "{end} of {whole:?}");
            }
        }
        let at = LogPosition {
            topic: "t".into(),
            partition: 0,
            offset: 1,
        };
        let outcome = Outcome::invalid(at, "SKU-1", "garbage".into(), 7);
        let whole = encode_outcome(&outcome).unwrap();
        for end in 0..whole.len() {
            assert!(decode_outcome(&whole[..end]).is_err(), "{end} of {whole:?}");
        }
    }

    /// The name of the version commands are written with.
    fn current_command() -> String {
        format!("Command.v{}", schema::current(Subject::Command).version)
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
                        ("user_id".into(), Value::Union(0, Box::new(Value::Null))),
                        ("expires_at".into(), Value::Union(0, Box::new(Value::Null))),
                        ("basket_id".into(), Value::Union(0, Box::new(Value::Null))),
                        ("units".into(), Value::Array(Vec::new())),
                        ("location".into(), Value::Union(0, Box::new(Value::Null))),
                    ])),
                ),
            ),
        ]);
        let current = schema::current(Subject::Command);
        let bytes = encode_as("command", value, current, current.fingerprint).unwrap();
        match decode_command(&bytes) {
            Err(DecodeError::Invalid(e)) => assert_eq!(e.field, "sku"),
            other => panic!("expected an invalid sku, got {other:?}"),
        }
    }

    /// `payload` with its header's fingerprint replaced.
    fn reframed(payload: &[u8], fingerprint: u64) -> Vec<u8> {
        let mut bytes = payload.to_vec();
        bytes[2..10].copy_from_slice(&fingerprint.to_le_bytes());
        bytes
    }

    #[test]
    fn records_are_written_with_the_current_versions_spec_fingerprint() {
        let bytes = encode_command(&command(bodies().remove(0))).unwrap();
        assert_eq!(
            fingerprint_of(&bytes),
            Some(schema::current(Subject::Command).fingerprint)
        );
        let position = LogPosition {
            topic: "t".into(),
            partition: 0,
            offset: 1,
        };
        let o = Outcome::invalid(position, "k", "x".into(), 1);
        let bytes = encode_outcome(&o).unwrap();
        assert_eq!(fingerprint_of(&bytes), Some(outcome_fingerprint()));
    }

    /// Whether Command v1 and Outcome v1–v3 could hold `body` as it is.
    fn first_release_had(body: &CommandBody) -> bool {
        match body {
            CommandBody::Deduct(d) => {
                d.user_id.is_none() && d.expires_at.is_none() && d.location.is_none()
            }
            CommandBody::Restock(r) => r.named().is_empty() && r.location().is_none(),
            CommandBody::Rollback(_) => true,
            _ => false,
        }
    }

    #[test]
    fn commands_of_the_first_release_decode_under_both_of_its_fingerprints() {
        let v1 = schema::versions(Subject::Command).next().unwrap();
        for body in bodies().into_iter().filter(first_release_had) {
            let c = command(body);
            for fingerprint in [v1.fingerprint, v1.legacy_fingerprint.unwrap()] {
                let bytes = encode_command_as(&c, v1, fingerprint).unwrap();
                assert_eq!(decode_command(&bytes).unwrap(), c);
            }
        }
        // A v1 writer has no branch for a confirm.
        let confirm = command(bodies().remove(4));
        assert!(encode_command_as(&confirm, v1, v1.fingerprint).is_err());
    }

    /// Whether versions before Command v5 and Outcome v7 could hold a
    /// command of this kind (they have neither Transfer nor Alerts).
    fn before_transfers(body: &CommandBody) -> bool {
        !matches!(body, CommandBody::Transfer(_)) && before_alerts(body)
    }

    /// Whether versions before Command v6 and Outcome v8 could hold it.
    fn before_alerts(body: &CommandBody) -> bool {
        !matches!(body, CommandBody::Alerts(_)) && before_sales(body)
    }

    /// Whether versions before Command v7 and Outcome v9 could hold it
    /// (they have no windows, pauses or resumes).
    fn before_sales(body: &CommandBody) -> bool {
        body.change_id().is_none()
    }

    #[test]
    fn every_command_written_by_v2_reads_as_itself_a_basket_line_as_a_plain_hold() {
        // apache-avro alone resolves a union by shape: a v2 Confirm would
        // come back as a Rollback, the first v3 branch it fits.
        let v2 = schema::versions(Subject::Command).nth(1).unwrap();
        for body in bodies().into_iter().filter(before_transfers) {
            let written = command(body);
            let bytes = encode_command_as(&written, v2, v2.fingerprint).unwrap();
            let mut expected = without_units(written.clone());
            if let CommandBody::Deduct(d) = &mut expected.body {
                d.basket_id = None;
            }
            assert_eq!(decode_command(&bytes).unwrap(), expected);
        }
    }

    #[test]
    fn a_v3_record_reads_without_units_and_a_mismatched_count_is_refused() {
        let v3 = schema::versions(Subject::Command).nth(2).unwrap();
        for body in bodies().into_iter().filter(before_transfers) {
            let written = command(body);
            let bytes = encode_command_as(&written, v3, v3.fingerprint).unwrap();
            assert_eq!(decode_command(&bytes).unwrap(), without_units(written));
        }
        let wrong = command(CommandBody::Deduct(Deduct {
            units: units(&["A1"]),
            ..Deduct::new(order("o"), Quantity::new(2).unwrap())
        }));
        match decode_command(&encode_command(&wrong).unwrap()).map(|c| c.body) {
            Ok(CommandBody::Refused(r)) => {
                assert_eq!((r.kind, r.quantity), (CommandKind::Deduct, Some(2)));
                assert_eq!(r.problem.field, "quantity");
            }
            other => panic!("expected a refused quantity, got {other:?}"),
        }
    }

    #[test]
    fn outcomes_of_every_released_version_resolve_into_the_current_one() {
        let position = LogPosition {
            topic: "t".into(),
            partition: 3,
            offset: 99,
        };
        let decision = decision(
            ResultCode::Duplicate,
            0,
            5,
            10,
            Some("order already deducted"),
        );
        for body in bodies() {
            let old_kind = first_release_had(&body);
            let c = command(body);
            let o = Outcome::for_command(position.clone(), &c, decision.clone());
            for version in schema::versions(Subject::Outcome) {
                if (version.version < 4 && !old_kind)
                    || (version.version < 7 && !before_transfers(&c.body))
                    || (version.version < 8 && !before_alerts(&c.body))
                    || (version.version < 9 && !before_sales(&c.body))
                {
                    continue;
                }
                // Versions before 3 did not carry what the command said,
                // versions before 4 the buyer and the deadline.
                let mut expected = o.clone();
                if version.version < 3 {
                    expected.restock_mode = None;
                    expected.rollback_reason = None;
                }
                if version.version < 4 {
                    expected.user_id = None;
                    expected.expires_at = None;
                }
                if version.version < 5 {
                    expected.basket_id = None;
                }
                if version.version < 6 {
                    expected.units.clear();
                }
                if version.version < 7 {
                    expected.decision.location = None;
                    expected.to_location = None;
                }
                if version.version < 8 {
                    expected.decision.events = StockEvents::NONE;
                }
                for fingerprint in [Some(version.fingerprint), version.legacy_fingerprint]
                    .into_iter()
                    .flatten()
                {
                    let old = encode_outcome_as(&o, version, fingerprint).unwrap();
                    assert_eq!(
                        decode_outcome(&old).unwrap(),
                        expected,
                        "v{} {fingerprint:016x}",
                        version.version
                    );
                }
            }
        }
    }

    #[test]
    fn a_misrouted_outcome_round_trips_and_cannot_be_read_as_an_older_version() {
        let c = command(bodies().remove(0));
        let position = LogPosition {
            topic: "t".into(),
            partition: 1,
            offset: 7,
        };
        let decision = decision(
            ResultCode::Misrouted,
            0,
            0,
            0,
            Some("sku on the wrong partition"),
        );
        let o = Outcome::for_command(position, &c, decision);
        let bytes = encode_outcome(&o).unwrap();
        assert_eq!(decode_outcome(&bytes).unwrap(), o);
        // Framed as v1 (which has no such symbol), the datum is refused by
        // name, not misread.
        let v1 = schema::versions(Subject::Outcome).next().unwrap();
        match decode_outcome(&reframed(&bytes, v1.fingerprint)) {
            Err(DecodeError::Malformed { writer, .. }) => assert_eq!(writer, "Outcome.v1"),
            other => panic!("expected a malformed v1 datum, got {other:?}"),
        }
    }

    #[test]
    fn an_unknown_fingerprint_is_named_in_hex() {
        let bytes = reframed(
            &encode_command(&command(bodies().remove(0))).unwrap(),
            0x3394_81eb_7280_545f ^ 1,
        );
        let e = decode_command(&bytes).unwrap_err();
        assert_eq!(e, DecodeError::UnknownSchema(0x3394_81eb_7280_545e));
        assert!(e.to_string().contains("339481eb7280545e"), "{e}");
    }
}
