#![allow(clippy::unwrap_used, clippy::expect_used)] // a failed unwrap is a failed test
//! The decoders against Apache Avro Java, differentially: valid datums of
//! every released version of every subject, in every shape the schemas
//! allow (each union branch, empty and long strings, units, the largest
//! numbers), and their mutants (every proper prefix, bytes appended, bytes
//! flipped, small varints where lengths and indexes were) go to both.
//!
//! `tests/java/AvroOracle.java` says what Avro Java makes of each. The
//! ledger accepts a datum, at the Avro level, exactly when Java reads it
//! and it is its value written again, and then reads the same value: what
//! Java refuses is refused here, and so is what Java reads lossily (text
//! that is not UTF-8, another encoding of the same value). One other
//! encoding is read here: an array's one block with a negative count and
//! its byte size, as apache-avro's serializer writes it. Java reads it too
//! and writes it again with the count alone; that is the only difference
//! allowed. A datum read at the Avro level may still break a rule of the
//! ledger (an empty order id): that is `Invalid`, and needs no verdict
//! from Java.
//!
//! Needs Java 17 and Maven (the jars come from Maven Central once). The
//! run prints its seed; `STOCKLEDGER_WIRE_SEED=…` replays it.

mod common;

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::process::{Command as Process, Stdio};

use apache_avro::schema::{Name, Schema};
use apache_avro::types::Value;
use stockledger_core::codec::{self, DecodeError};
use stockledger_core::schema::{current, versions, Released, Subject};
use stockledger_core::CommandBody;

use common::{hex, Rng};

fn named(schema: &Schema, into: &mut HashMap<String, Schema>) {
    match schema {
        Schema::Record(r) => {
            into.insert(r.name.fullname(None), schema.clone());
            r.fields.iter().for_each(|f| named(&f.schema, into));
        }
        Schema::Enum(e) => {
            into.insert(e.name.fullname(None), schema.clone());
        }
        Schema::Union(u) => u.variants().iter().for_each(|v| named(v, into)),
        Schema::Array(a) => named(&a.items, into),
        _ => {}
    }
}

/// A value of `schema`, drawn from the shapes that find edges: empty,
/// long and non-ASCII text, the extremes of each number, every branch.
fn value(rng: &mut Rng, schema: &Schema, names: &HashMap<String, Schema>, branch: usize) -> Value {
    match schema {
        Schema::Null => Value::Null,
        Schema::Boolean => Value::Boolean(rng.below(2) == 1),
        Schema::Int => Value::Int(rng.pick(&[0, 1, -1, 3, i32::MAX, i32::MIN])),
        Schema::Long => Value::Long(rng.pick(&[0, 1, -1, 2, 1_000_000, i64::MAX, i64::MIN])),
        Schema::TimestampMillis => {
            Value::TimestampMillis(rng.pick(&[0, 1_700_000_000_000, i64::MAX, -1]))
        }
        Schema::String => Value::String(rng.pick(&[
            String::new(),
            "o-1".into(),
            "SKU-1".into(),
            "A1".into(),
            "paris".into(),
            "ç€😀 déclinée".into(),
            "x".repeat(200),
        ])),
        Schema::Enum(e) => {
            let i = rng.below(e.symbols.len());
            Value::Enum(i as u32, e.symbols[i].clone())
        }
        Schema::Union(u) => {
            let variants = u.variants();
            // The body's union gets each branch in turn, the others at random.
            let i = if variants.len() > 2 {
                branch % variants.len()
            } else {
                rng.below(variants.len())
            };
            Value::Union(i as u32, Box::new(value(rng, &variants[i], names, branch)))
        }
        Schema::Record(r) => Value::Record(
            r.fields
                .iter()
                .map(|f| (f.name.clone(), value(rng, &f.schema, names, branch)))
                .collect(),
        ),
        Schema::Array(a) => Value::Array(
            (0..rng.below(4))
                .map(|_| value(rng, &a.items, names, branch))
                .collect(),
        ),
        Schema::Ref { name } => value(rng, &names[&full(name)], names, branch),
        other => panic!("the ledger's schemas have no {other:?}"),
    }
}

fn full(name: &Name) -> String {
    name.fullname(None)
}

fn payload(version: &Released, value: Value) -> Vec<u8> {
    let mut out = vec![0xC3, 0x01];
    out.extend_from_slice(&version.fingerprint.to_le_bytes());
    let writer = apache_avro::writer::datum::GenericDatumWriter::builder(&version.schema)
        .build()
        .unwrap();
    out.extend(writer.write_value_to_vec(value).unwrap());
    out
}

/// A valid payload's mutants: every proper prefix, then bytes appended,
/// flipped and replaced by small varints.
fn mutants(rng: &mut Rng, valid: &[u8]) -> Vec<Vec<u8>> {
    // Every proper prefix, but inside a long string only some of them.
    let mut out: Vec<Vec<u8>> = (0..valid.len())
        .filter(|&end| end < 120 || end + 120 > valid.len() || rng.below(20) == 0)
        .map(|end| valid[..end].to_vec())
        .collect();
    for n in 1..=3 {
        let mut longer = valid.to_vec();
        longer.extend((0..n).map(|_| rng.next() as u8));
        out.push(longer);
    }
    for _ in 0..6 {
        let mut flipped = valid.to_vec();
        let at = 10 + rng.below(valid.len() - 10);
        flipped[at] ^= 1 << rng.below(8);
        out.push(flipped);
    }
    for _ in 0..6 {
        // A union index or length out of range: -1, 63, -64, 2, 3.
        let mut replaced = valid.to_vec();
        let at = 10 + rng.below(valid.len() - 10);
        replaced[at] = rng.pick(&[0x01, 0x7E, 0x7F, 0x04, 0x06]);
        out.push(replaced);
    }
    out
}

/// What the ledger's decoder makes of `payload`: the value in the newest
/// version (written again, as Java answers it), read but not a valid
/// command of the ledger (or one whose values its rules refuse), or
/// refused.
#[derive(Debug)]
enum Ours {
    Read(Vec<u8>),
    Invalid,
    Refused(#[allow(dead_code)] DecodeError),
}

fn ours(subject: Subject, payload: &[u8]) -> Ours {
    let newest = current(subject);
    let again = match subject {
        Subject::Command => match codec::decode_command(payload) {
            // Read whole, but its values refused: not a command to write
            // again.
            Ok(c) if matches!(c.body, CommandBody::Refused(_)) => return Ours::Invalid,
            read => read.map(|c| codec::encode_command_as(&c, newest, newest.fingerprint).unwrap()),
        },
        Subject::Outcome => codec::decode_outcome(payload)
            .map(|o| codec::encode_outcome_as(&o, newest, newest.fingerprint).unwrap()),
        Subject::StockEvent => {
            codec::decode_stock_event(payload).map(|e| codec::encode_stock_event(&e).unwrap())
        }
    };
    match again {
        Ok(bytes) => Ours::Read(bytes[10..].to_vec()),
        Err(DecodeError::Invalid(_)) => Ours::Invalid,
        Err(e) => Ours::Refused(e),
    }
}

/// Java's verdict on each payload, in order.
fn java(payloads: &[(Subject, Vec<u8>)]) -> Vec<String> {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/java/run.sh");
    let mut child = Process::new("bash")
        .arg(script)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("bash runs tests/java/run.sh (Java 17 and Maven are needed)");
    let mut stdin = child.stdin.take().unwrap();
    let lines: String = payloads
        .iter()
        .map(|(_, p)| format!("{}\n", hex(p)))
        .collect();
    let writer = std::thread::spawn(move || stdin.write_all(lines.as_bytes()).unwrap());
    let verdicts: Vec<String> = BufReader::new(child.stdout.take().unwrap())
        .lines()
        .map(Result::unwrap)
        .collect();
    writer.join().unwrap();
    assert!(child.wait().unwrap().success(), "the Java oracle failed");
    assert_eq!(verdicts.len(), payloads.len(), "a verdict a payload");
    verdicts
}

#[test]
fn the_decoders_accept_exactly_what_avro_java_reads_whole_and_read_the_same_values() {
    let mut rng = Rng::from_env("STOCKLEDGER_WIRE_SEED");
    let seed = rng.0;
    let mut payloads = Vec::new();
    for subject in [Subject::Command, Subject::Outcome, Subject::StockEvent] {
        for version in versions(subject) {
            let mut names = HashMap::new();
            named(&version.schema, &mut names);
            for branch in 0..27 {
                let valid = payload(version, value(&mut rng, &version.schema, &names, branch));
                payloads.push((subject, valid.clone()));
                payloads.extend(mutants(&mut rng, &valid).into_iter().map(|m| (subject, m)));
            }
        }
    }
    let verdicts = java(&payloads);
    let (mut read, mut invalid, mut refused, mut sized) = (0, 0, 0, 0);
    for ((subject, payload), verdict) in payloads.iter().zip(&verdicts) {
        let ours = ours(*subject, payload);
        let shown = match &ours {
            Ours::Read(bytes) => format!("read as {}", hex(bytes)),
            other => format!("{other:?}"),
        };
        let at = format!(
            "{subject:?} payload {} (seed {seed}): Java says {verdict}, we {shown}",
            hex(payload)
        );
        match (
            verdict.split_once(' ').map_or(verdict.as_str(), |v| v.0),
            &ours,
        ) {
            ("OK", Ours::Read(ours)) => {
                assert_eq!(verdict[3..], hex(ours), "{at}");
                read += 1;
            }
            ("OK", Ours::Invalid) => invalid += 1,
            ("REFUSED" | "LOSSY", Ours::Refused(_)) => refused += 1,
            ("LOSSY", Ours::Read(_) | Ours::Invalid) => {
                // Accepted, so the one way it may differ from what Java
                // writes again is the block form: an array's one block
                // with a negative count and its byte size.
                let (datum, _) = codec::datum_and_its_value_written_again(*subject, payload)
                    .expect("a datum read at the Avro level");
                assert_ne!(datum, payload[10..], "{at}");
                assert_eq!(
                    verdict.strip_prefix("LOSSY written again as "),
                    Some(hex(&datum).as_str()),
                    "{at}"
                );
                sized += 1;
            }
            _ => panic!("{at}"),
        }
    }
    eprintln!(
        "strict wire: {} payloads: {read} read alike, {invalid} read but not valid commands, \
         {refused} refused by both, {sized} read alike but for a sized block",
        payloads.len()
    );
    assert!(read > 500 && refused > 5_000, "the run covers both sides");
}
