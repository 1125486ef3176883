//! The released versions of the command and outcome schemas and their
//! fingerprints.
//!
//! Every version ever released stays in `schemas/history/` as one
//! self-contained file (`Command.v1.avsc`, `Outcome.v2.avsc`, …), so a log
//! that spans versions can always be read: the codec accepts any of them as
//! the writer schema and resolves it into the newest one. A version file is
//! never edited once released; a change is a new file, and evolution only
//! adds what a newer reader can resolve from an older writer (fields with
//! defaults, union branches, enum symbols). `schemas/*.avsc` (one named type
//! per file) are the current version, which a unit test holds equal to the
//! newest history file.
//!
//! A schema's fingerprint is the CRC-64-AVRO (Rabin) fingerprint of its
//! Parsing Canonical Form exactly as the Avro specification defines it, so it
//! is what Java's `SchemaNormalization`, fastavro or any other spec-following
//! library computes. Versions released before that carried a fingerprint of
//! apache-avro 0.21's canonical form instead; it is kept as a second,
//! read-only fingerprint of those versions so their logs still decode.

use std::collections::HashSet;
use std::sync::LazyLock;

use apache_avro::rabin::Rabin;
use apache_avro::Schema;
use digest::Digest;
use serde_json::Value as J;

/// The record types that travel through Kafka.
///
/// ```
/// use stockledger_core::schema::{current, Subject};
///
/// assert_eq!(current(Subject::Outcome).subject.as_str(), "Outcome");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Subject {
    /// Records of the command topic.
    Command,
    /// Records of the outcomes topic.
    Outcome,
    /// Records of the stock events topic.
    StockEvent,
}

impl Subject {
    /// The record's name in its schema.
    ///
    /// ```
    /// use stockledger_core::schema::Subject;
    ///
    /// assert_eq!(Subject::Command.as_str(), "Command");
    /// ```
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Command => "Command",
            Self::Outcome => "Outcome",
            Self::StockEvent => "StockEvent",
        }
    }
}

/// One released version of a schema.
///
/// ```
/// use stockledger_core::schema::{current, fingerprint, Subject};
///
/// let now = current(Subject::Command);
/// assert_eq!(fingerprint(&now.canonical_form), now.fingerprint);
/// assert!(now.json.contains("\"Command\""));
/// ```
#[derive(Debug)]
pub struct Released {
    pub subject: Subject,
    pub version: u32,
    /// The file's text, as other languages load it.
    pub json: &'static str,
    pub schema: Schema,
    /// The Parsing Canonical Form, as the Avro specification defines it.
    pub canonical_form: String,
    /// CRC-64-AVRO of [`Released::canonical_form`]: what this version's
    /// records carry after the `C3 01` magic.
    pub fingerprint: u64,
    /// The fingerprint records of this version carried before stockledger
    /// followed the specification (apache-avro 0.21's canonical form keeps
    /// `{"type":"long"}` where the specification reduces a logical type to
    /// `"long"`). Accepted when reading, never written.
    pub legacy_fingerprint: Option<u64>,
}

/// The history files: subject, version, text, and the fingerprint its records
/// carried before this project computed fingerprints by the specification.
/// The legacy values are literals on purpose: they describe logs already
/// written, whatever a later apache-avro computes.
const HISTORY: [(Subject, u32, &str, Option<u64>); 19] = [
    (
        Subject::Command,
        1,
        include_str!("../../../schemas/history/Command.v1.avsc"),
        Some(0x0ae8_de4f_582d_44c9),
    ),
    (
        Subject::Command,
        2,
        include_str!("../../../schemas/history/Command.v2.avsc"),
        None,
    ),
    (
        Subject::Command,
        3,
        include_str!("../../../schemas/history/Command.v3.avsc"),
        None,
    ),
    (
        Subject::Command,
        4,
        include_str!("../../../schemas/history/Command.v4.avsc"),
        None,
    ),
    (
        Subject::Command,
        5,
        include_str!("../../../schemas/history/Command.v5.avsc"),
        None,
    ),
    (
        Subject::Command,
        6,
        include_str!("../../../schemas/history/Command.v6.avsc"),
        None,
    ),
    (
        Subject::Command,
        7,
        include_str!("../../../schemas/history/Command.v7.avsc"),
        None,
    ),
    (
        Subject::Outcome,
        1,
        include_str!("../../../schemas/history/Outcome.v1.avsc"),
        Some(0x84ca_14aa_9748_22ad),
    ),
    (
        Subject::Outcome,
        2,
        include_str!("../../../schemas/history/Outcome.v2.avsc"),
        None,
    ),
    (
        Subject::Outcome,
        3,
        include_str!("../../../schemas/history/Outcome.v3.avsc"),
        None,
    ),
    (
        Subject::Outcome,
        4,
        include_str!("../../../schemas/history/Outcome.v4.avsc"),
        None,
    ),
    (
        Subject::Outcome,
        5,
        include_str!("../../../schemas/history/Outcome.v5.avsc"),
        None,
    ),
    (
        Subject::Outcome,
        6,
        include_str!("../../../schemas/history/Outcome.v6.avsc"),
        None,
    ),
    (
        Subject::Outcome,
        7,
        include_str!("../../../schemas/history/Outcome.v7.avsc"),
        None,
    ),
    (
        Subject::Outcome,
        8,
        include_str!("../../../schemas/history/Outcome.v8.avsc"),
        None,
    ),
    (
        Subject::Outcome,
        9,
        include_str!("../../../schemas/history/Outcome.v9.avsc"),
        None,
    ),
    (
        Subject::Outcome,
        10,
        include_str!("../../../schemas/history/Outcome.v10.avsc"),
        None,
    ),
    (
        Subject::StockEvent,
        1,
        include_str!("../../../schemas/history/StockEvent.v1.avsc"),
        None,
    ),
    (
        Subject::StockEvent,
        2,
        include_str!("../../../schemas/history/StockEvent.v2.avsc"),
        None,
    ),
];

static RELEASED: LazyLock<Vec<Released>> = LazyLock::new(|| {
    HISTORY
        .iter()
        .map(|&(subject, version, json, legacy_fingerprint)| {
            #[allow(clippy::expect_used)]
            let parsed: J =
                serde_json::from_str(json).expect("schemas/history is valid JSON (unit-tested)");
            #[allow(clippy::expect_used)]
            let canonical_form = parsing_canonical_form(&parsed)
                .expect("schemas/history is a valid schema (unit-tested)");
            #[allow(clippy::expect_used)]
            let schema = Schema::parse(&parsed).expect("schemas/history parses (unit-tested)");
            Released {
                subject,
                version,
                json,
                schema,
                fingerprint: fingerprint(&canonical_form),
                canonical_form,
                legacy_fingerprint,
            }
        })
        .collect()
});

/// Every released version, oldest first within each subject.
///
/// ```
/// use stockledger_core::schema::released;
///
/// assert!(released().iter().any(|r| r.version == 1));
/// ```
pub fn released() -> &'static [Released] {
    &RELEASED
}

/// The released versions of `subject`, oldest first.
///
/// ```
/// use stockledger_core::schema::{versions, Subject};
///
/// let numbers: Vec<u32> = versions(Subject::Outcome).map(|r| r.version).collect();
/// assert!(numbers.windows(2).all(|w| w[0] < w[1]));
/// ```
pub fn versions(subject: Subject) -> impl Iterator<Item = &'static Released> {
    released().iter().filter(move |r| r.subject == subject)
}

/// The newest version of `subject`: what is written now, and what every
/// older version is resolved into when read.
///
/// ```
/// use stockledger_core::codec::command_fingerprint;
/// use stockledger_core::schema::{current, Subject};
///
/// assert_eq!(current(Subject::Command).fingerprint, command_fingerprint());
/// ```
pub fn current(subject: Subject) -> &'static Released {
    #[allow(clippy::expect_used)]
    versions(subject)
        .last()
        .expect("HISTORY holds at least one version of each subject")
}

/// CRC-64-AVRO (the Rabin fingerprint of the Avro specification) of `bytes`.
///
/// ```
/// use stockledger_core::schema::fingerprint;
///
/// // The Avro specification's fingerprint of "int" (fastavro and Java agree).
/// assert_eq!(fingerprint("\"int\""), 0x7275_d51a_3f39_5c8f);
/// ```
pub fn fingerprint(canonical_form: &str) -> u64 {
    let digest = Rabin::digest(canonical_form.as_bytes());
    let mut bytes = [0u8; 8];
    bytes.copy_from_slice(&digest[..8]);
    u64::from_le_bytes(bytes)
}

/// Why a JSON document is not a schema this module can normalise.
///
/// ```
/// use stockledger_core::schema::parsing_canonical_form;
///
/// let refused = parsing_canonical_form(&serde_json::json!(42)).unwrap_err();
/// assert!(refused.to_string().starts_with("not a valid Avro schema"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not a valid Avro schema: {0}")]
pub struct SchemaError(String);

const PRIMITIVES: [&str; 8] = [
    "null", "boolean", "int", "long", "float", "double", "bytes", "string",
];

/// The Parsing Canonical Form of a self-contained schema, by the rules of
/// the Avro specification: primitives in their simple form (a logical type
/// on a primitive reduces to the primitive), full names, only the
/// attributes that matter for parsing (`name`, `type`, `fields`,
/// `symbols`, `items`, `values`, `size`, in that order), no white space.
/// Written here because apache-avro's `canonical_form` keeps logical types
/// on primitives, which gives fingerprints no other implementation shares.
///
/// ```
/// use stockledger_core::schema::parsing_canonical_form;
///
/// let schema = serde_json::json!({
///     "type": "record", "name": "Point", "namespace": "geo", "doc": "a point",
///     "fields": [{"name": "x", "type": {"type": "long", "logicalType": "timestamp-millis"}}]
/// });
/// // As fastavro's to_parsing_canonical_form writes it.
/// assert_eq!(
///     parsing_canonical_form(&schema)?,
///     r#"{"name":"geo.Point","type":"record","fields":[{"name":"x","type":"long"}]}"#
/// );
/// # Ok::<(), stockledger_core::schema::SchemaError>(())
/// ```
pub fn parsing_canonical_form(schema: &J) -> Result<String, SchemaError> {
    let mut out = String::new();
    Normaliser::default().write(schema, "", &mut out)?;
    Ok(out)
}

#[derive(Default)]
struct Normaliser {
    /// Named types already written in full; later uses are by name.
    defined: HashSet<String>,
}

impl Normaliser {
    fn write(&mut self, schema: &J, namespace: &str, out: &mut String) -> Result<(), SchemaError> {
        match schema {
            J::String(name) => {
                let name = if PRIMITIVES.contains(&name.as_str()) {
                    name.clone()
                } else {
                    full_name(name, namespace)
                };
                quoted(&name, out);
                Ok(())
            }
            J::Array(branches) => list(branches, out, |branch, out| {
                self.write(branch, namespace, out)
            }),
            J::Object(map) => {
                let kind = match map.get("type") {
                    Some(J::String(kind)) => kind.as_str(),
                    // `{"type": <schema>}` is that schema.
                    Some(inner @ (J::Object(_) | J::Array(_))) => {
                        return self.write(inner, namespace, out)
                    }
                    _ => return Err(SchemaError("an object without a \"type\"".into())),
                };
                match kind {
                    "record" | "error" | "enum" | "fixed" => self.named(map, kind, namespace, out),
                    "array" | "map" => {
                        let attribute = if kind == "array" { "items" } else { "values" };
                        let inner = map.get(attribute).ok_or_else(|| {
                            SchemaError(format!("{kind} without \"{attribute}\""))
                        })?;
                        out.push_str(&format!("{{\"type\":\"{kind}\",\"{attribute}\":"));
                        self.write(inner, namespace, out)?;
                        out.push('}');
                        Ok(())
                    }
                    // A primitive, perhaps with a logical type or other
                    // attributes: all stripped.
                    primitive if PRIMITIVES.contains(&primitive) => {
                        quoted(primitive, out);
                        Ok(())
                    }
                    // A reference to a named type written as {"type": "name"}.
                    name => {
                        quoted(&full_name(name, namespace), out);
                        Ok(())
                    }
                }
            }
            other => Err(SchemaError(format!("unexpected JSON {other}"))),
        }
    }

    fn named(
        &mut self,
        map: &serde_json::Map<String, J>,
        kind: &str,
        enclosing: &str,
        out: &mut String,
    ) -> Result<(), SchemaError> {
        let name = map
            .get("name")
            .and_then(J::as_str)
            .ok_or_else(|| SchemaError(format!("{kind} without a \"name\"")))?;
        let namespace = match map.get("namespace").and_then(J::as_str) {
            Some(ns) if !name.contains('.') => ns,
            _ => enclosing,
        };
        let full = full_name(name, namespace);
        if !self.defined.insert(full.clone()) {
            quoted(&full, out);
            return Ok(());
        }
        // Names inside take the namespace of this type's full name.
        let inner_namespace = full.rsplit_once('.').map_or("", |(ns, _)| ns).to_owned();
        out.push_str("{\"name\":");
        quoted(&full, out);
        out.push_str(&format!(",\"type\":\"{kind}\""));
        match kind {
            "enum" => {
                let symbols = map
                    .get("symbols")
                    .and_then(J::as_array)
                    .ok_or_else(|| SchemaError(format!("enum {full} without \"symbols\"")))?;
                out.push_str(",\"symbols\":");
                list(symbols, out, |symbol, out| {
                    let symbol = symbol.as_str().ok_or_else(|| {
                        SchemaError(format!("enum {full}: a symbol not a string"))
                    })?;
                    quoted(symbol, out);
                    Ok(())
                })?;
            }
            "fixed" => {
                let size = match map.get("size") {
                    Some(J::Number(n)) => n.as_u64(),
                    Some(J::String(s)) => s.trim().parse().ok(),
                    _ => None,
                }
                .ok_or_else(|| SchemaError(format!("fixed {full} without a valid \"size\"")))?;
                out.push_str(&format!(",\"size\":{size}"));
            }
            _ => {
                let fields = map
                    .get("fields")
                    .and_then(J::as_array)
                    .ok_or_else(|| SchemaError(format!("record {full} without \"fields\"")))?;
                out.push_str(",\"fields\":");
                list(fields, out, |field, out| {
                    let field_name = field.get("name").and_then(J::as_str).ok_or_else(|| {
                        SchemaError(format!("record {full}: a field without a name"))
                    })?;
                    let field_type = field.get("type").ok_or_else(|| {
                        SchemaError(format!("record {full}: field {field_name} without a type"))
                    })?;
                    out.push_str("{\"name\":");
                    quoted(field_name, out);
                    out.push_str(",\"type\":");
                    self.write(field_type, &inner_namespace, out)?;
                    out.push('}');
                    Ok(())
                })?;
            }
        }
        out.push('}');
        Ok(())
    }
}

/// Writes `items` as a JSON array, each by `each`.
fn list(
    items: &[J],
    out: &mut String,
    mut each: impl FnMut(&J, &mut String) -> Result<(), SchemaError>,
) -> Result<(), SchemaError> {
    out.push('[');
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        each(item, out)?;
    }
    out.push(']');
    Ok(())
}

/// A name made full: names with a dot already are; others take `namespace`.
fn full_name(name: &str, namespace: &str) -> String {
    if name.contains('.') || namespace.is_empty() {
        name.to_owned()
    } else {
        format!("{namespace}.{name}")
    }
}

/// Avro names and symbols are `[A-Za-z_][A-Za-z0-9_]*` (dots between), so
/// nothing in them needs escaping: the [STRINGS] rule writes them as they are.
fn quoted(s: &str, out: &mut String) {
    out.push('"');
    out.push_str(s);
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_history_file_parses_and_each_subject_has_a_current_version() {
        for r in released() {
            assert!(r.version >= 1);
            assert_eq!(r.schema.name().map(|n| n.name()), Some(r.subject.as_str()));
            // Self-contained: the canonical form parses on its own.
            Schema::parse_str(&r.canonical_form).unwrap();
        }
        for subject in [Subject::Command, Subject::Outcome, Subject::StockEvent] {
            let versions: Vec<u32> = versions(subject).map(|r| r.version).collect();
            let expected: Vec<u32> = (1..=versions.len() as u32).collect();
            assert_eq!(versions, expected, "{subject:?}: versions 1, 2, … in order");
        }
    }

    #[test]
    fn no_two_versions_share_a_fingerprint() {
        let mut seen = HashSet::new();
        for r in released() {
            for fp in std::iter::once(r.fingerprint).chain(r.legacy_fingerprint) {
                assert!(
                    seen.insert(fp),
                    "{:?} v{} repeats {fp:016x}",
                    r.subject,
                    r.version
                );
            }
        }
    }

    /// The fingerprints the versions released before the specification's
    /// canonical form was followed carry: what apache-avro 0.21 computes for
    /// them. (Should a later apache-avro fix its canonical form, this test
    /// fails and goes; the literals in HISTORY stay, as logs carry them.)
    #[test]
    fn legacy_fingerprints_are_what_the_previous_codec_wrote() {
        use apache_avro::headers::{HeaderBuilder, RabinFingerprintHeader};
        for r in released() {
            if let Some(legacy) = r.legacy_fingerprint {
                let header = RabinFingerprintHeader::from_schema(&r.schema).build_header();
                let mut fp = [0u8; 8];
                fp.copy_from_slice(&header[2..10]);
                assert_eq!(
                    u64::from_le_bytes(fp),
                    legacy,
                    "{:?} v{}",
                    r.subject,
                    r.version
                );
                assert_ne!(legacy, r.fingerprint);
            }
        }
    }

    #[test]
    fn logical_types_reduce_to_their_primitive() {
        let with: J = serde_json::json!({
            "type": "record", "name": "T", "namespace": "n",
            "fields": [{"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}}]
        });
        assert_eq!(
            parsing_canonical_form(&with).unwrap(),
            r#"{"name":"n.T","type":"record","fields":[{"name":"at","type":"long"}]}"#
        );
    }

    #[test]
    fn malformed_schemas_are_errors_not_panics() {
        for bad in [
            serde_json::json!(1),
            serde_json::json!({"name": "x"}),
            serde_json::json!({"type": "record", "name": "r"}),
            serde_json::json!({"type": "enum", "name": "e"}),
            serde_json::json!({"type": "fixed", "name": "f", "size": "x"}),
            serde_json::json!({"type": "array"}),
        ] {
            assert!(parsing_canonical_form(&bad).is_err(), "{bad}");
        }
    }

    /// The one-type-per-file schemas in `schemas/`, by full name.
    const CURRENT_FILES: [(&str, &str); 19] = [
        (
            "stockledger.Window",
            include_str!("../../../schemas/Window.avsc"),
        ),
        (
            "stockledger.Pause",
            include_str!("../../../schemas/Pause.avsc"),
        ),
        (
            "stockledger.Resume",
            include_str!("../../../schemas/Resume.avsc"),
        ),
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
            "stockledger.Confirm",
            include_str!("../../../schemas/Confirm.avsc"),
        ),
        (
            "stockledger.Refund",
            include_str!("../../../schemas/Refund.avsc"),
        ),
        (
            "stockledger.Expire",
            include_str!("../../../schemas/Expire.avsc"),
        ),
        (
            "stockledger.Limit",
            include_str!("../../../schemas/Limit.avsc"),
        ),
        (
            "stockledger.Transfer",
            include_str!("../../../schemas/Transfer.avsc"),
        ),
        (
            "stockledger.Alerts",
            include_str!("../../../schemas/Alerts.avsc"),
        ),
        (
            "stockledger.StockEventKind",
            include_str!("../../../schemas/StockEventKind.avsc"),
        ),
        (
            "stockledger.StockEvent",
            include_str!("../../../schemas/StockEvent.avsc"),
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

    /// Replaces each reference to a named type by its definition the first
    /// time it appears (Avro requires later uses to stay references).
    fn inline(
        schema: &J,
        defs: &std::collections::HashMap<String, J>,
        seen: &mut Vec<String>,
    ) -> J {
        match schema {
            J::String(name) => match defs.get(name) {
                Some(def) if !seen.contains(name) => {
                    seen.push(name.clone());
                    inline(def, defs, seen)
                }
                _ => schema.clone(),
            },
            J::Array(branches) => {
                J::Array(branches.iter().map(|b| inline(b, defs, seen)).collect())
            }
            J::Object(map) => {
                let mut map = map.clone();
                if let Some(J::Array(fields)) = map.get_mut("fields") {
                    for field in fields.iter_mut() {
                        let t = field["type"].clone();
                        field["type"] = inline(&t, defs, seen);
                    }
                }
                for key in ["items", "values", "type"] {
                    if let Some(t @ (J::Array(_) | J::Object(_) | J::String(_))) =
                        map.get(key).cloned()
                    {
                        if key != "type" || !t.is_string() {
                            map.insert(key.to_owned(), inline(&t, defs, seen));
                        }
                    }
                }
                J::Object(map)
            }
            other => other.clone(),
        }
    }

    /// `schemas/*.avsc` is where the current version is edited; once
    /// released it is also a history file, which never changes. A change to
    /// the split files is a new version: add `schemas/history/<Subject>.v<N+1>.avsc`.
    #[test]
    fn the_split_schema_files_are_the_newest_released_version() {
        let defs: std::collections::HashMap<String, J> = CURRENT_FILES
            .iter()
            .map(|(name, text)| {
                let json: J = serde_json::from_str(text).unwrap();
                let declared = format!(
                    "{}.{}",
                    json["namespace"].as_str().unwrap(),
                    json["name"].as_str().unwrap()
                );
                assert_eq!(&declared, name);
                (declared, json)
            })
            .collect();
        for subject in [Subject::Command, Subject::Outcome, Subject::StockEvent] {
            let top = J::String(format!("stockledger.{}", subject.as_str()));
            let inlined = inline(&top, &defs, &mut Vec::new());
            let newest: J = serde_json::from_str(current(subject).json).unwrap();
            assert_eq!(
                inlined,
                newest,
                "schemas/*.avsc differ from the newest schemas/history/{}.v{}.avsc: \
                 released versions never change, so add a new version file",
                subject.as_str(),
                current(subject).version
            );
        }
    }

    /// Pairs where an older version's reader cannot read what a newer
    /// version writes, each a deliberate, documented addition (see
    /// `schemas/history/README.md`): (subject, reader version, writer version).
    const FORWARD_BREAKS: [(Subject, u32, u32); 60] = [
        // Outcome v2 added the MISROUTED result; a v1 reader has no symbol
        // for it (v1's enum has no default, so it cannot be given one).
        (Subject::Outcome, 1, 2),
        (Subject::Outcome, 1, 3),
        // Command v2 added the Confirm, Refund, Expire and Limit branches;
        // Outcome v4 their kinds and the reservation results.
        (Subject::Command, 1, 2),
        (Subject::Outcome, 1, 4),
        (Subject::Outcome, 2, 4),
        (Subject::Outcome, 3, 4),
        // v3 / v5 only added a field with a default (basket_id), so they
        // break exactly what v2 / v4 broke for the older readers.
        (Subject::Command, 1, 3),
        (Subject::Outcome, 1, 5),
        (Subject::Outcome, 2, 5),
        (Subject::Outcome, 3, 5),
        // v4 / v6 only added arrays with defaults (units), the same again.
        (Subject::Command, 1, 4),
        (Subject::Outcome, 1, 6),
        (Subject::Outcome, 2, 6),
        (Subject::Outcome, 3, 6),
        // Command v5 added the Transfer branch, Outcome v7 its kind: no
        // older reader has a place for either (the location fields alone
        // have defaults and would not break).
        (Subject::Command, 1, 5),
        (Subject::Command, 2, 5),
        (Subject::Command, 3, 5),
        (Subject::Command, 4, 5),
        (Subject::Outcome, 1, 7),
        (Subject::Outcome, 2, 7),
        (Subject::Outcome, 3, 7),
        (Subject::Outcome, 4, 7),
        (Subject::Outcome, 5, 7),
        (Subject::Outcome, 6, 7),
        // Command v6 added the Alerts branch, Outcome v8 its kind (its
        // events array alone has a default and would not break).
        (Subject::Command, 1, 6),
        (Subject::Command, 2, 6),
        (Subject::Command, 3, 6),
        (Subject::Command, 4, 6),
        (Subject::Command, 5, 6),
        (Subject::Outcome, 1, 8),
        (Subject::Outcome, 2, 8),
        (Subject::Outcome, 3, 8),
        (Subject::Outcome, 4, 8),
        (Subject::Outcome, 5, 8),
        (Subject::Outcome, 6, 8),
        (Subject::Outcome, 7, 8),
        // Command v7 added the Window, Pause and Resume branches, Outcome
        // v9 their kinds and refusals (its window fields alone have
        // defaults), StockEvent v2 the kinds of a sale's changes.
        (Subject::Command, 1, 7),
        (Subject::Command, 2, 7),
        (Subject::Command, 3, 7),
        (Subject::Command, 4, 7),
        (Subject::Command, 5, 7),
        (Subject::Command, 6, 7),
        (Subject::Outcome, 1, 9),
        (Subject::Outcome, 2, 9),
        (Subject::Outcome, 3, 9),
        (Subject::Outcome, 4, 9),
        (Subject::Outcome, 5, 9),
        (Subject::Outcome, 6, 9),
        (Subject::Outcome, 7, 9),
        (Subject::Outcome, 8, 9),
        // Outcome v10 added the REJECTED_VALUE result.
        (Subject::Outcome, 1, 10),
        (Subject::Outcome, 2, 10),
        (Subject::Outcome, 3, 10),
        (Subject::Outcome, 4, 10),
        (Subject::Outcome, 5, 10),
        (Subject::Outcome, 6, 10),
        (Subject::Outcome, 7, 10),
        (Subject::Outcome, 8, 10),
        (Subject::Outcome, 9, 10),
        (Subject::StockEvent, 1, 2),
    ];

    #[test]
    fn every_pair_of_released_versions_is_compatible_in_both_directions() {
        use apache_avro::schema_compatibility::{Compatibility, SchemaCompatibility};
        for subject in [Subject::Command, Subject::Outcome, Subject::StockEvent] {
            let all: Vec<&Released> = versions(subject).collect();
            for (i, older) in all.iter().enumerate() {
                for newer in &all[i..] {
                    // Backward: the newer reads everything the older wrote.
                    // The decoder relies on it; no exception is allowed.
                    let backward = SchemaCompatibility::can_read(&older.schema, &newer.schema);
                    assert!(
                        matches!(backward, Ok(Compatibility::Full)),
                        "{subject:?} v{} cannot read all of v{}: {backward:?}",
                        newer.version,
                        older.version
                    );
                    // Forward: the older reads all the newer writes, but for
                    // the additions listed in FORWARD_BREAKS (where a union
                    // or enum grew: partly readable, not wholly).
                    let forward = SchemaCompatibility::can_read(&newer.schema, &older.schema);
                    let listed = FORWARD_BREAKS.contains(&(subject, older.version, newer.version));
                    assert_eq!(
                        !matches!(forward, Ok(Compatibility::Full)),
                        listed,
                        "{subject:?}: v{} reading v{}: {forward:?} (listed as a break: {listed})",
                        older.version,
                        newer.version
                    );
                }
            }
        }
    }
}
