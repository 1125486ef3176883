#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers: a failed unwrap is a failed test
//! Arbitrary bytes and strings against the decoders and validators: never a
//! panic, always a typed answer. `PROPTEST_CASES=1000000` for a long run.

mod common;

use std::time::{Duration, Instant};

use proptest::prelude::*;
use stockledger_core::codec::{self, DecodeError};
use stockledger_core::ids::{MAX_ID_LEN, MAX_QUANTITY};
use stockledger_core::schema::Subject;
use stockledger_core::{
    AdjustmentId, Command, CommandBody, CommandId, Deduct, OrderId, Quantity, Rollback, Sku,
};

fn cases(default: u32) -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default);
    ProptestConfig {
        cases,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

fn valid_payloads() -> Vec<Vec<u8>> {
    let command = |body| Command {
        command_id: CommandId::new("c").unwrap(),
        sku: Sku::new("SKU").unwrap(),
        occurred_at: 1,
        body,
    };
    vec![
        codec::encode_command(&command(CommandBody::Deduct(Deduct::new(
            OrderId::new("o").unwrap(),
            Quantity::new(3).unwrap(),
        ))))
        .unwrap(),
        codec::encode_command(&command(CommandBody::Rollback(
            Rollback::new(OrderId::new("o").unwrap(), Some("r".into())).unwrap(),
        )))
        .unwrap(),
    ]
}

/// The single-object header of the command schema, so generated tails reach
/// the Avro decoder instead of failing the header check.
fn command_header() -> Vec<u8> {
    valid_payloads()[0][..10].to_vec()
}

proptest! {
    #![proptest_config(cases(3000))]

    #[test]
    fn arbitrary_bytes_never_panic_the_decoders(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
        let _ = codec::decode_command(&bytes);
        let _ = codec::decode_outcome(&bytes);
    }

    #[test]
    fn arbitrary_datums_behind_a_valid_header_are_typed_errors_or_valid_commands(
        tail in prop::collection::vec(any::<u8>(), 0..128)
    ) {
        let mut payload = command_header();
        payload.extend_from_slice(&tail);
        match codec::decode_command(&payload) {
            Ok(command) => {
                // Whatever decodes is a valid command that round-trips.
                let again = codec::encode_command(&command).unwrap();
                prop_assert_eq!(codec::decode_command(&again).unwrap(), command);
            }
            Err(DecodeError::Malformed { .. } | DecodeError::Truncated { .. } | DecodeError::TrailingBytes { .. } | DecodeError::NotCanonical { .. } | DecodeError::Invalid(_)) => {}
            Err(other) => prop_assert!(false, "unexpected error {other:?}"),
        }
    }

    #[test]
    fn mutated_and_truncated_commands_never_panic(
        which in 0..2usize,
        flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..4),
        keep in any::<prop::sample::Index>(),
    ) {
        let mut payload = valid_payloads()[which].clone();
        for (at, byte) in flips {
            let i = at.index(payload.len());
            payload[i] ^= byte;
        }
        payload.truncate(keep.index(payload.len() + 1));
        let _ = codec::decode_command(&payload);
    }

    #[test]
    fn id_validation_accepts_exactly_the_documented_ids(s in ".{0,140}|\\PC{0,10}[\\n\\t\\r\\x00]\\PC{0,10}") {
        // Unicode's Bidi_Control: marks, embeddings, overrides, isolates.
        let bidi = |c: char| matches!(c as u32, 0x061C | 0x200E | 0x200F | 0x202A..=0x202E | 0x2066..=0x2069);
        let ok = !s.is_empty()
            && s.len() <= MAX_ID_LEN
            && !s.chars().any(char::is_control)
            && !s.chars().any(bidi)
            && !s.contains(['{', '}'])
            && s.trim() == s;
        prop_assert_eq!(Sku::new(s.clone()).is_ok(), ok);
        match OrderId::new(s.clone()) {
            Ok(id) => prop_assert_eq!(id.as_str(), s.as_str()),
            Err(e) => prop_assert_eq!(e.field, "order_id"),
        }
        prop_assert_eq!(AdjustmentId::new(s).is_ok(), ok);
    }

    #[test]
    fn quantity_validation_accepts_exactly_one_to_the_maximum(n in any::<i64>()) {
        prop_assert_eq!(Quantity::new(n).is_ok(), (1..=MAX_QUANTITY).contains(&n));
    }
}

/// The decoder's fuzz target, on stable Rust: mutants of the bytes every
/// released version really wrote (the payloads of `fixtures/`) go to every
/// decoder for `STOCKLEDGER_FUZZ_SECS` seconds (3 by default, and at least
/// 10,000 mutants however slow the machine) from the seed
/// `STOCKLEDGER_FUZZ_SEED` (the clock's by default, printed). No mutant may
/// panic a decoder, and a datum accepted must be the bytes its value is
/// written as again, the form of array blocks aside. A long run:
/// `STOCKLEDGER_FUZZ_SECS=600 cargo test -p stockledger-core --test fuzz no_mutant`.
#[test]
fn no_mutant_panics_a_decoder_or_is_accepted_unless_it_is_its_value_written_again() {
    let secs = std::env::var("STOCKLEDGER_FUZZ_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3);
    let mut rng = common::Rng::from_env("STOCKLEDGER_FUZZ_SEED");
    let seeds = fixture_payloads();
    for (subject, payload) in &seeds {
        written_again(*subject, payload);
    }
    let until = Instant::now() + Duration::from_secs(secs);
    let (mut cases, mut accepted) = (0u64, 0u64);
    while Instant::now() < until || cases < MIN_MUTANTS {
        for _ in 0..256 {
            let (subject, seed) = &seeds[rng.below(seeds.len())];
            let mut payload = seed.clone();
            mutate(&mut rng, &mut payload);
            accepted += u64::from(written_again(*subject, &payload));
            cases += 1;
        }
    }
    eprintln!("decoder fuzz: {cases} mutants in {secs} s, {accepted} accepted");
    assert!(
        accepted > 0,
        "no mutant was accepted: the oracle was never asked"
    );
}

/// Mutants a run tries at least, on a machine too busy to try them in its
/// seconds.
const MIN_MUTANTS: u64 = 10_240;

/// Every payload the fixtures keep, with the subject that reads it.
fn fixture_payloads() -> Vec<(Subject, Vec<u8>)> {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures");
    let mut files = vec![format!("{dir}/foreign-records.json")];
    for entry in std::fs::read_dir(format!("{dir}/releases")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "json") {
            files.push(path.display().to_string());
        }
    }
    let mut payloads = Vec::new();
    for file in files {
        let json: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
        let lists = json.get("bytes").unwrap_or(&json);
        for (key, subject) in [
            ("commands", Subject::Command),
            ("outcomes", Subject::Outcome),
            ("events", Subject::StockEvent),
        ] {
            if lists.get(key).is_some() {
                let found = common::hex_payloads(&lists[key]);
                payloads.extend(found.into_iter().map(|p| (subject, p)));
            }
        }
    }
    assert!(payloads.len() > 50, "the fixtures hold the seeds");
    payloads
}

fn mutate(rng: &mut common::Rng, payload: &mut Vec<u8>) {
    for _ in 0..=rng.below(3) {
        let at = 10 + rng.below(payload.len().saturating_sub(10) + 1);
        match rng.below(7) {
            0 => payload.truncate(at),
            1 => payload.push(rng.next() as u8),
            2 if at < payload.len() => payload[at] ^= 1 << rng.below(8),
            3 if at < payload.len() => payload[at] = rng.next() as u8,
            4 if at < payload.len() => {
                payload.remove(at);
            }
            5 => payload.insert(at.min(payload.len()), rng.next() as u8),
            // A small varint where a length or an index was.
            _ if at < payload.len() => payload[at] = rng.pick(&[0, 1, 2, 0x7F, 0x80]),
            _ => {}
        }
    }
}

/// Runs every decoder on `payload`; if `subject`'s accepts it, checks it
/// is its value written again. Whether it was accepted.
fn written_again(subject: Subject, payload: &[u8]) -> bool {
    let _ = codec::decode_command(payload);
    let _ = codec::decode_outcome(payload);
    let _ = codec::decode_stock_event(payload);
    let Some((datum, again)) = codec::datum_and_its_value_written_again(subject, payload) else {
        return false;
    };
    assert_eq!(
        common::hex(&datum),
        common::hex(&again),
        "{subject:?} accepted {} but writes its value again otherwise",
        common::hex(payload)
    );
    true
}
