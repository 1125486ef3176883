//! The single-object frame: `C3 01`, the writer schema's fingerprint,
//! the datum; every released schema version known by its fingerprints, the
//! current one written, older ones resolved into it when read.

use std::collections::HashMap;
use std::io::Cursor;
use std::sync::LazyLock;

use apache_avro::headers::HeaderBuilder;
use apache_avro::types::Value;
use apache_avro::{GenericSingleObjectReader, Schema};

use super::direct::Plan;
use super::strict::{Flaw, Strict};
use super::{DecodeError, MAX_PAYLOAD_LEN};
use crate::command::Command;
use crate::outcome::Outcome;
use crate::schema::{self, Released, Subject};

/// The single-object header of one fingerprint.
pub(super) struct Header(pub(super) u64);

impl Header {
    /// The header followed by room for a datum of `datum` bytes.
    pub(super) fn with_room(&self, datum: usize) -> Vec<u8> {
        let mut out = Vec::with_capacity(10 + datum);
        self.append_to(&mut out);
        out
    }

    /// Appends the header's ten bytes to `out`.
    pub(super) fn append_to(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&[0xC3, 0x01]);
        out.extend_from_slice(&self.0.to_le_bytes());
    }
}

impl HeaderBuilder for Header {
    fn build_header(&self) -> Vec<u8> {
        self.with_room(0)
    }
}

/// A writer schema the decoder accepts, under one of its fingerprints.
pub(super) struct KnownWriter {
    /// Decodes against the writer schema resolved once (named types
    /// indexed), not on every call as `from_avro_datum` would.
    reader: GenericSingleObjectReader,
    /// `Subject.vN`, for error messages.
    label: String,
    /// Whether the datum must be resolved into the current schema (an older
    /// version) or already has its shape (the current one).
    resolve: bool,
    /// The writer schema, for the names of its union branches.
    schema: &'static Schema,
    /// The strict walk over a datum of this writer schema.
    strict: Strict,
}

/// Every released version of one subject: the current one to write, all of
/// them to read.
pub(super) struct Framed {
    current: &'static Released,
    known: HashMap<u64, KnownWriter>,
}

impl Framed {
    pub(super) fn new(subject: Subject) -> Self {
        let current = schema::current(subject);
        let mut known = HashMap::new();
        for released in schema::versions(subject) {
            let fingerprints =
                std::iter::once(released.fingerprint).chain(released.legacy_fingerprint);
            for fingerprint in fingerprints {
                #[allow(clippy::expect_used)]
                let reader = GenericSingleObjectReader::builder()
                    .schema(released.schema.clone())
                    .header(Header(fingerprint).build_header())
                    .build()
                    .expect("a released schema resolves: it is self-contained (unit-tested)");
                known.insert(
                    fingerprint,
                    KnownWriter {
                        reader,
                        label: format!("{}.v{}", subject.as_str(), released.version),
                        resolve: released.version != current.version,
                        schema: &released.schema,
                        strict: Strict::new(&released.schema),
                    },
                );
            }
        }
        Self { current, known }
    }

    pub(super) fn schema(&self) -> &Schema {
        &self.current.schema
    }

    /// The datum of `payload` when it is framed with the current version's
    /// fingerprint and within the size every reader takes.
    pub(super) fn current_datum<'a>(&self, payload: &'a [u8]) -> Option<&'a [u8]> {
        let current = payload.len() <= MAX_PAYLOAD_LEN
            && fingerprint_of(payload)? == self.current.fingerprint;
        current.then(|| &payload[10..])
    }

    /// A datum of the current version, written by `write`, after its
    /// single-object header, in `out` (emptied first: a caller that keeps
    /// it writes record after record without allocating).
    pub(super) fn encode_into(&self, out: &mut Vec<u8>, write: impl FnOnce(&mut Vec<u8>)) {
        out.clear();
        Header(self.current.fingerprint).append_to(out);
        write(out);
    }

    /// [`Framed::encode_into`] a buffer of its own.
    pub(super) fn encode(&self, write: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
        let mut out = Vec::with_capacity(256);
        self.encode_into(&mut out, write);
        out
    }

    /// The datum of `payload`, in the shape of the current version.
    pub(super) fn decode(&self, payload: &[u8]) -> Result<Value, DecodeError> {
        if payload.len() > MAX_PAYLOAD_LEN {
            return Err(DecodeError::TooLarge(payload.len()));
        }
        let fingerprint = fingerprint_of(payload).ok_or_else(|| not_single_object(payload))?;
        let writer = self
            .known
            .get(&fingerprint)
            .ok_or(DecodeError::UnknownSchema(fingerprint))?;
        let malformed = |e: apache_avro::Error| DecodeError::Malformed {
            writer: writer.label.clone(),
            message: e.to_string(),
        };
        let datum = payload.get(10..).unwrap_or_default();
        writer
            .strict
            .check(writer.schema, datum)
            .map_err(|flaw| strict_error(&writer.label, flaw))?;
        // The walk above refused bytes after the datum, and a datum cut short.
        let value = writer
            .reader
            .read_value(&mut Cursor::new(payload))
            .map_err(malformed)?;
        if writer.resolve {
            // apache-avro resolves a union by the first reader branch the
            // value fits, not by name as the specification says: a v2
            // `Confirm {order_id}` fits v3's `Rollback {order_id, reason =
            // null}`. Each union of records is put right afterwards.
            let named = named_branches(&value, writer.schema);
            let mut resolved = value.resolve(self.schema()).map_err(malformed)?;
            for (field, branch, inner) in named {
                let Some((index, branch_schema)) = reader_branch(self.schema(), &field, &branch)
                else {
                    return Err(DecodeError::Malformed {
                        writer: writer.label.clone(),
                        message: format!("{field}: the current schema has no branch {branch}"),
                    });
                };
                let inner = inner
                    .resolve_schemata(branch_schema, vec![self.schema()])
                    .map_err(malformed)?;
                if let Value::Record(fields) = &mut resolved {
                    if let Some((_, slot)) = fields.iter_mut().find(|(n, _)| *n == field) {
                        *slot = Value::Union(index, Box::new(inner));
                    }
                }
            }
            return Ok(resolved);
        }
        Ok(value)
    }
}

fn strict_error(writer: &str, flaw: Flaw) -> DecodeError {
    let writer = writer.to_owned();
    match flaw {
        Flaw::Short { at, needed } => DecodeError::Truncated { writer, at, needed },
        Flaw::Trailing(trailing) => DecodeError::TrailingBytes { writer, trailing },
        Flaw::NonCanonical { at, what } => DecodeError::NotCanonical { writer, at, what },
        Flaw::Malformed { at, what } => DecodeError::Malformed {
            writer,
            message: format!("{at}: {what}"),
        },
    }
}

/// The top-level fields of `value` (a record of `schema`) that hold a
/// branch of a union of records: field name, the branch's full name, its
/// datum.
fn named_branches(value: &Value, schema: &Schema) -> Vec<(String, String, Value)> {
    let (Value::Record(values), Schema::Record(record)) = (value, schema) else {
        return Vec::new();
    };
    let mut named = Vec::new();
    for field in &record.fields {
        let Schema::Union(union) = &field.schema else {
            continue;
        };
        let Some((_, Value::Union(index, inner))) = values.iter().find(|(n, _)| *n == field.name)
        else {
            continue;
        };
        if let Some(Schema::Record(branch)) = union.variants().get(*index as usize) {
            named.push((
                field.name.clone(),
                branch.name.fullname(None),
                (**inner).clone(),
            ));
        }
    }
    named
}

/// The branch of `field`'s union in `schema` (a record) named `branch`:
/// its index and schema.
fn reader_branch<'s>(schema: &'s Schema, field: &str, branch: &str) -> Option<(u32, &'s Schema)> {
    let Schema::Record(record) = schema else {
        return None;
    };
    let field = record.fields.iter().find(|f| f.name == field)?;
    let Schema::Union(union) = &field.schema else {
        return None;
    };
    union
        .variants()
        .iter()
        .enumerate()
        .find_map(|(i, v)| match v {
            Schema::Record(r) if r.name.fullname(None) == branch => Some((i as u32, v)),
            _ => None,
        })
}

/// Why `payload`, which has no single-object header, is refused: the
/// Schema Registry's framing is named, anything else is not single-object.
fn not_single_object(payload: &[u8]) -> DecodeError {
    match payload {
        [0, a, b, c, d, ..] => DecodeError::RegistryFramed(u32::from_be_bytes([*a, *b, *c, *d])),
        _ => DecodeError::NotSingleObject,
    }
}

/// The fingerprint in a single-object header, if `payload` starts with one.
///
/// ```
/// use stockledger_core::codec::fingerprint_of;
///
/// let payload = [0xC3, 0x01, 0x8f, 0x5c, 0x39, 0x3f, 0x1a, 0xd5, 0x75, 0x72, 0x02];
/// assert_eq!(fingerprint_of(&payload), Some(0x7275_d51a_3f39_5c8f));
/// assert_eq!(fingerprint_of(b"{}"), None);
/// ```
pub fn fingerprint_of(payload: &[u8]) -> Option<u64> {
    match payload {
        [0xC3, 0x01, f @ ..] if f.len() >= 8 => {
            let mut bytes = [0u8; 8];
            bytes.copy_from_slice(&f[..8]);
            Some(u64::from_le_bytes(bytes))
        }
        _ => None,
    }
}

pub(super) struct Schemas {
    pub(super) command: Framed,
    /// The current command schema's datums read straight from their bytes
    /// (`None`: its shape is beyond that reader, and every datum takes
    /// the general one).
    pub(super) command_plan: Option<Plan>,
    pub(super) outcome: Framed,
    /// The current outcome schema's datums read straight from their bytes,
    /// as `command_plan`.
    pub(super) outcome_plan: Option<Plan>,
    pub(super) event: Framed,
}

impl Schemas {
    /// The command of a `payload` in the current schema, read in one pass
    /// ([`Plan::read`]); `None`: the payload is for [`Framed::decode`]
    /// to read or refuse.
    pub(super) fn command_direct(&self, payload: &[u8]) -> Option<Command> {
        let datum = self.command.current_datum(payload)?;
        (self.command_plan.as_ref())?.read(datum, super::command_of)
    }

    /// The outcome of a `payload` in the current schema, read in one pass,
    /// as [`Schemas::command_direct`].
    pub(super) fn outcome_direct(&self, payload: &[u8]) -> Option<Outcome> {
        let datum = self.outcome.current_datum(payload)?;
        (self.outcome_plan.as_ref())?.read(datum, super::outcome_of)
    }
}

pub(super) static SCHEMAS: LazyLock<Schemas> = LazyLock::new(|| {
    // Garbage must never make the decoder allocate more than a payload can
    // hold; this caps every length prefix.
    apache_avro::util::max_allocation_bytes(MAX_PAYLOAD_LEN);
    let command = Framed::new(Subject::Command);
    let outcome = Framed::new(Subject::Outcome);
    Schemas {
        command_plan: Plan::of(command.schema()),
        command,
        outcome_plan: Plan::of(outcome.schema()),
        outcome,
        event: Framed::new(Subject::StockEvent),
    }
});

/// The current command schema (the writer schema of every command).
///
/// ```
/// use stockledger_core::codec::command_schema;
///
/// assert!(matches!(command_schema(), apache_avro::Schema::Record(_)));
/// ```
pub fn command_schema() -> &'static Schema {
    SCHEMAS.command.schema()
}

/// The current outcome schema.
///
/// ```
/// use stockledger_core::codec::outcome_schema;
///
/// let apache_avro::Schema::Record(record) = outcome_schema() else { panic!("a record") };
/// assert_eq!(record.name.name(), "Outcome");
/// ```
pub fn outcome_schema() -> &'static Schema {
    SCHEMAS.outcome.schema()
}

/// Fingerprint of the current command schema, as it appears in headers.
///
/// ```
/// use stockledger_core::codec::command_fingerprint;
/// use stockledger_core::schema::{current, Subject};
///
/// assert_eq!(command_fingerprint(), current(Subject::Command).fingerprint);
/// ```
pub fn command_fingerprint() -> u64 {
    SCHEMAS.command.current.fingerprint
}

/// Fingerprint of the current outcome schema, as it appears in headers.
///
/// ```
/// use stockledger_core::codec::outcome_fingerprint;
/// use stockledger_core::schema::{current, Subject};
///
/// assert_eq!(outcome_fingerprint(), current(Subject::Outcome).fingerprint);
/// ```
pub fn outcome_fingerprint() -> u64 {
    SCHEMAS.outcome.current.fingerprint
}

/// What the decoder's fuzz target (`tests/fuzz.rs`) compares: if the
/// reader of `subject` accepts `payload`, its datum (array blocks written
/// with positive counts, as apache-avro's `Value` writer writes them) and
/// its value as that writer writes it again; `None` if it is refused. An
/// accepted datum must be its value written again.
#[doc(hidden)]
pub fn datum_and_its_value_written_again(
    subject: Subject,
    payload: &[u8],
) -> Option<(Vec<u8>, Vec<u8>)> {
    let framed = match subject {
        Subject::Command => &SCHEMAS.command,
        Subject::Outcome => &SCHEMAS.outcome,
        Subject::StockEvent => &SCHEMAS.event,
    };
    framed.decode(payload).ok()?;
    let writer = framed.known.get(&fingerprint_of(payload)?)?;
    let value = writer.reader.read_value(&mut Cursor::new(payload)).ok()?;
    let again = apache_avro::writer::datum::GenericDatumWriter::builder(writer.schema)
        .build()
        .and_then(|w| w.write_value_to_vec(value))
        .ok()?;
    let datum = writer.strict.positive_blocks(writer.schema, &payload[10..]);
    Some((datum, again))
}
