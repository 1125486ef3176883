#![allow(clippy::unwrap_used)] // test helpers: a failed unwrap is a failed test
//! Arbitrary bytes and strings against the decoders and validators: never a
//! panic, always a typed answer. `PROPTEST_CASES=1000000` for a long run.

use proptest::prelude::*;
use stockledger_core::codec::{self, DecodeError};
use stockledger_core::ids::{MAX_ID_LEN, MAX_QUANTITY};
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
        let ok = !s.is_empty()
            && s.len() <= MAX_ID_LEN
            && !s.chars().any(char::is_control)
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
