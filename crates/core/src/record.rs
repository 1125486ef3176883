//! Turning a Kafka record of the command topic into a command, or into the
//! reason it is not one.

use crate::codec;
use crate::ids::MAX_ID_LEN;
use crate::Command;

/// Decodes `payload` and checks that the record key is the command's SKU
/// (the key decides the partition, so a mismatch would break per-SKU order).
/// A key longer than any SKU is refused before anything else is read.
pub fn interpret(key: Option<&[u8]>, payload: Option<&[u8]>) -> Result<Command, String> {
    if let Some(key) = key.filter(|k| k.len() > MAX_ID_LEN) {
        return Err(format!(
            "record key is {} bytes; a sku is at most {MAX_ID_LEN}",
            key.len()
        ));
    }
    let payload = payload.ok_or_else(|| "record has no value".to_owned())?;
    let command = codec::decode_command(payload).map_err(|e| e.to_string())?;
    match key {
        Some(key) if key == command.sku.as_str().as_bytes() => Ok(command),
        Some([]) => Err(format!(
            "record key is empty; it must be the sku {:?}",
            command.sku.as_str()
        )),
        Some(key) => Err(format!(
            "record key {:?} does not match the command's sku {:?}",
            String::from_utf8_lossy(key),
            command.sku.as_str()
        )),
        None => Err(format!(
            "record has no key; it must be the sku {:?}",
            command.sku.as_str()
        )),
    }
}

/// The record key for reports and outcomes: lossily decoded, empty when
/// absent, and at most its first [`MAX_ID_LEN`] bytes (fewer when that cut
/// a character in two), so an oversized key is never copied whole.
pub fn key_text(key: Option<&[u8]>) -> String {
    let key = key.unwrap_or_default();
    let mut text = String::from_utf8_lossy(&key[..key.len().min(MAX_ID_LEN)]).into_owned();
    // A character cut in two became U+FFFD (3 bytes): the text may be longer
    // than the bytes it was read from.
    while text.len() > MAX_ID_LEN {
        text.pop();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_oversized_key_is_refused_and_reported_cut() {
        let key = vec![b'k'; 10_000];
        assert_eq!(
            interpret(Some(&key), Some(b"not read")).unwrap_err(),
            "record key is 10000 bytes; a sku is at most 128"
        );
        let text = key_text(Some(&key));
        assert_eq!(text.as_bytes(), &key[..MAX_ID_LEN]);
        // A cut through a character never makes it longer.
        let mut wide = vec![b'k'; MAX_ID_LEN - 1];
        wide.extend_from_slice("é".repeat(10).as_bytes());
        assert!(key_text(Some(&wide)).len() <= MAX_ID_LEN);
        assert_eq!(key_text(Some(b"SKU-1")), "SKU-1");
        assert_eq!(key_text(None), "");
    }
}
