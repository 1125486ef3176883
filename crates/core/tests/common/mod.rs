//! What the fixture-reading tests share.

use serde_json::Value;

/// The payloads a fixture keeps as hex strings in the array `list`.
pub fn hex_payloads(list: &Value) -> Vec<Vec<u8>> {
    list.as_array()
        .expect("an array of hex strings")
        .iter()
        .map(|h| {
            let h = h.as_str().expect("a hex string");
            (0..h.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&h[i..i + 2], 16).expect("hex"))
                .collect()
        })
        .collect()
}
