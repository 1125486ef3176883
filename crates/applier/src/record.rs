//! Turning a Kafka record of the command topic into a command, or into the
//! reason it is not one.

use stockledger_core::codec;
use stockledger_core::Command;

/// Decodes `payload` and checks that the record key is the command's SKU
/// (the key decides the partition, so a mismatch would break per-SKU order).
pub fn interpret(key: Option<&[u8]>, payload: Option<&[u8]>) -> Result<Command, String> {
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

/// The record key for reports: lossily decoded, empty when absent.
pub fn key_text(key: Option<&[u8]>) -> String {
    key.map(|k| String::from_utf8_lossy(k).into_owned())
        .unwrap_or_default()
}
