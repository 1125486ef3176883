//! A refused record as its dead letter: the record whole while it fits the
//! dead-letter topic, or its digest when it does not, so no record the
//! broker took on the command topic can be one the applier cannot publish.

use rdkafka::message::{Header, Headers, Message, OwnedHeaders, OwnedMessage};
use sha2::{Digest, Sha256};
use stockledger_core::ids::MAX_ID_LEN;

use stockledger_kafka::names::{
    DLQ_REASON_HEADER, DLQ_SOURCE_HEADER, DLQ_VALUE_LENGTH_HEADER, DLQ_VALUE_SHA256_HEADER,
};

/// Bytes a record costs a batch beyond its key, value and header bytes:
/// the batch header (61 bytes) and the varints framing the record and each
/// header, with room to spare.
const RECORD_OVERHEAD: usize = 1024;
/// What each header adds to a record beside its name and value (varints).
const HEADER_OVERHEAD: usize = 16;

/// The key, value and headers to publish for a refused record.
#[derive(Debug)]
pub(super) struct Letter<'a> {
    pub(super) key: &'a [u8],
    pub(super) payload: Option<Vec<u8>>,
    pub(super) headers: OwnedHeaders,
}

/// The dead letter of `record`, refused for `reason`, read at `source`:
/// its key, value and headers (a dead letter re-driven and refused again
/// gives up its old reason and source), then the reason and source. When
/// that would be more than `limit` bytes, the largest record the
/// dead-letter topic takes, the letter keeps the key's first 128 bytes, the
/// value's length and SHA-256 and no other header: the original stays at
/// `source` in the command topic, which keeps every record.
pub(super) fn dead_letter<'a>(
    record: &'a OwnedMessage,
    reason: &str,
    source: &str,
    limit: usize,
) -> Letter<'a> {
    let key = record.key().unwrap_or_default();
    let value = record.payload().unwrap_or_default();
    let kept: Vec<Header<'_, &[u8]>> = record
        .headers()
        .into_iter()
        .flat_map(|h| h.iter())
        .filter(|h| h.key != DLQ_REASON_HEADER && h.key != DLQ_SOURCE_HEADER)
        .collect();
    let header_bytes = |name: &str, value: usize| name.len() + value + HEADER_OVERHEAD;
    let whole = key.len()
        + value.len()
        + RECORD_OVERHEAD
        + header_bytes(DLQ_REASON_HEADER, reason.len())
        + header_bytes(DLQ_SOURCE_HEADER, source.len())
        + kept
            .iter()
            .map(|h| header_bytes(h.key, h.value.map_or(0, <[u8]>::len)))
            .sum::<usize>();
    if whole <= limit {
        let capacity = kept.len() + 2;
        let headers = (kept.into_iter())
            .fold(OwnedHeaders::new_with_capacity(capacity), |all, h| {
                all.insert(h)
            });
        return Letter {
            key,
            payload: record.payload().map(<[u8]>::to_vec),
            headers: why(headers, reason, source),
        };
    }
    let length = value.len().to_string();
    let sha256 = hex::encode(Sha256::digest(value));
    let named = named(key, reason, source);
    let headers = (named.headers)
        .insert(Header {
            key: DLQ_VALUE_LENGTH_HEADER,
            value: Some(length.as_bytes()),
        })
        .insert(Header {
            key: DLQ_VALUE_SHA256_HEADER,
            value: Some(sha256.as_bytes()),
        });
    Letter { headers, ..named }
}

/// The dead letter of a record not at hand, refused for `reason`, read at
/// `source`: its key's first 128 bytes and no value; the command topic
/// keeps the record at `source`.
pub(super) fn named<'a>(key: &'a [u8], reason: &str, source: &str) -> Letter<'a> {
    Letter {
        key: &key[..key.len().min(MAX_ID_LEN)],
        payload: None,
        headers: why(OwnedHeaders::new_with_capacity(2), reason, source),
    }
}

/// `headers` with a dead letter's reason and source.
fn why(headers: OwnedHeaders, reason: &str, source: &str) -> OwnedHeaders {
    headers
        .insert(Header {
            key: DLQ_REASON_HEADER,
            value: Some(reason.as_bytes()),
        })
        .insert(Header {
            key: DLQ_SOURCE_HEADER,
            value: Some(source.as_bytes()),
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use rdkafka::Timestamp;

    fn record(key: &[u8], value: &[u8], headers: &[(&str, &[u8])]) -> OwnedMessage {
        let headers = headers.iter().fold(OwnedHeaders::new(), |all, (k, v)| {
            all.insert(Header {
                key: k,
                value: Some(*v),
            })
        });
        OwnedMessage::new(
            Some(value.to_vec()),
            Some(key.to_vec()),
            "stock.ledger".into(),
            Timestamp::CreateTime(1),
            7,
            0,
            Some(headers),
        )
    }

    fn header(letter: &Letter<'_>, name: &str) -> Option<String> {
        letter
            .headers
            .iter()
            .find(|h| h.key == name)
            .and_then(|h| h.value)
            .map(|v| String::from_utf8_lossy(v).into_owned())
    }

    #[test]
    fn a_record_that_fits_is_dead_lettered_whole_with_its_old_reason_replaced() {
        let old = record(
            b"SKU-1",
            b"not avro",
            &[("traceparent", b"00-x"), (DLQ_REASON_HEADER, b"old")],
        );
        let letter = dead_letter(&old, "not a command", "stock.ledger/7@0", 1_048_588);
        assert_eq!(letter.key, b"SKU-1");
        assert_eq!(letter.payload.as_deref(), Some(&b"not avro"[..]));
        let names: Vec<&str> = letter.headers.iter().map(|h| h.key).collect();
        assert_eq!(names, ["traceparent", DLQ_REASON_HEADER, DLQ_SOURCE_HEADER]);
        assert_eq!(
            header(&letter, DLQ_REASON_HEADER).as_deref(),
            Some("not a command")
        );
        assert_eq!(header(&letter, DLQ_VALUE_SHA256_HEADER), None);
    }

    #[test]
    fn a_record_over_the_limit_keeps_its_position_cut_key_length_and_hash() {
        let key = vec![b'k'; 300];
        let value = vec![7u8; 1_048_000];
        let big = record(&key, &value, &[("big", &[1u8; 5000])]);
        let letter = dead_letter(&big, "too large", "stock.ledger/7@0", 1_048_588);
        assert_eq!(letter.key, &key[..MAX_ID_LEN]);
        assert_eq!(letter.payload, None);
        assert_eq!(
            header(&letter, DLQ_SOURCE_HEADER).as_deref(),
            Some("stock.ledger/7@0")
        );
        assert_eq!(
            header(&letter, DLQ_VALUE_LENGTH_HEADER).as_deref(),
            Some("1048000")
        );
        assert_eq!(
            header(&letter, DLQ_VALUE_SHA256_HEADER),
            Some(hex::encode(Sha256::digest(&value)))
        );
        assert_eq!(
            header(&letter, "big"),
            None,
            "the record's own headers are left out"
        );
    }

    #[test]
    fn a_record_not_at_hand_is_named_by_its_key_reason_and_source() {
        let key = vec![b'k'; 300];
        let letter = named(&key, "misrouted", "stock.ledger/7@2");
        assert_eq!(letter.key, &key[..MAX_ID_LEN]);
        assert_eq!(letter.payload, None);
        let names: Vec<&str> = letter.headers.iter().map(|h| h.key).collect();
        assert_eq!(names, [DLQ_REASON_HEADER, DLQ_SOURCE_HEADER]);
        assert_eq!(
            header(&letter, DLQ_SOURCE_HEADER).as_deref(),
            Some("stock.ledger/7@2")
        );
    }

    #[test]
    fn headers_alone_can_make_a_record_too_large_to_copy() {
        let heavy = record(b"SKU-1", b"x", &[("h", &vec![0u8; 2_000_000])]);
        let letter = dead_letter(&heavy, "not a command", "stock.ledger/7@1", 1_048_588);
        assert_eq!(letter.payload, None);
        assert_eq!(
            header(&letter, DLQ_VALUE_LENGTH_HEADER).as_deref(),
            Some("1")
        );
    }
}
