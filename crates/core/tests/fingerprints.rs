#![allow(clippy::unwrap_used, clippy::expect_used)] // a failed unwrap is a failed test
//! Fingerprints are the Avro specification's, not only our own codec's:
//! `fixtures/fingerprints.json` was computed by fastavro and by Java's
//! `SchemaNormalization` (see `fixtures/generate.py`), and includes the Avro
//! project's published test vectors. Our canonical form and fingerprint must
//! give exactly the same for every case, and every released schema version
//! must be in the file.

use std::collections::BTreeSet;

use serde_json::Value;
use stockledger_core::codec;
use stockledger_core::schema::{self, Subject};

fn fixture() -> Value {
    serde_json::from_str(include_str!("fixtures/fingerprints.json")).unwrap()
}

fn cases() -> Vec<Value> {
    fixture()["cases"].as_array().unwrap().clone()
}

#[test]
fn the_fixture_was_computed_outside_this_project() {
    let by = fixture()["computed_by"].as_str().unwrap().to_owned();
    assert!(by.contains("fastavro"), "{by}");
}

#[test]
fn canonical_forms_and_fingerprints_match_independent_implementations() {
    for case in cases() {
        let name = case["name"].as_str().unwrap();
        let schema = match case.get("file") {
            Some(file) => {
                let path = format!(
                    "{}/../../{}",
                    env!("CARGO_MANIFEST_DIR"),
                    file.as_str().unwrap()
                );
                serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
            }
            None => case["schema"].clone(),
        };
        let ours = schema::parsing_canonical_form(&schema).unwrap();
        assert_eq!(ours, case["canonical_form"].as_str().unwrap(), "{name}");
        let fingerprint = u64::from_str_radix(case["fingerprint"].as_str().unwrap(), 16).unwrap();
        assert_eq!(schema::fingerprint(&ours), fingerprint, "{name}");
    }
}

#[test]
fn every_released_version_is_in_the_fixture_with_the_fingerprint_it_is_written_with() {
    let files: BTreeSet<(String, u64)> = cases()
        .iter()
        .filter_map(|c| {
            let file = c.get("file")?.as_str()?.rsplit('/').next()?.to_owned();
            let fingerprint = u64::from_str_radix(c["fingerprint"].as_str()?, 16).ok()?;
            Some((file, fingerprint))
        })
        .collect();
    let released: BTreeSet<(String, u64)> = schema::released()
        .iter()
        .map(|r| {
            (
                format!("{}.v{}.avsc", r.subject.as_str(), r.version),
                r.fingerprint,
            )
        })
        .collect();
    assert_eq!(
        files, released,
        "run crates/core/tests/fixtures/generate.py after adding a schema version"
    );
    // And the codec frames with the current one.
    assert_eq!(
        codec::command_fingerprint(),
        schema::current(Subject::Command).fingerprint
    );
    assert_eq!(
        codec::outcome_fingerprint(),
        schema::current(Subject::Outcome).fingerprint
    );
}

/// The value the issue reporter's Python order service put on its records,
/// which the previous release refused.
#[test]
fn the_command_schema_v1_fingerprint_is_the_one_spec_following_producers_send() {
    let v1 = schema::versions(Subject::Command).next().unwrap();
    assert_eq!(v1.fingerprint, 0x3394_81eb_7280_545f);
}
