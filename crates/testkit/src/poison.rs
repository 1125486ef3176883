//! Records that are not valid commands, for dead-letter tests.

use apache_avro::types::Value;
use stockledger_core::codec;

/// A well-formed Avro single-object `Deduct` whose content breaks the rules
/// (an empty SKU, a quantity of 0 or below): what a buggy producer in another
/// language could write.
pub fn deduct_with(sku: &str, order_id: &str, quantity: i64) -> anyhow::Result<Vec<u8>> {
    deduct_at(sku, order_id, quantity, 0, None)
}

/// A well-formed Avro single-object `Deduct` stamped `occurred_at`, with
/// the deadline `expires_at` if given, none of them checked: what a producer
/// in another language can write at the edges of each type.
pub fn deduct_at(
    sku: &str,
    order_id: &str,
    quantity: i64,
    occurred_at: i64,
    expires_at: Option<i64>,
) -> anyhow::Result<Vec<u8>> {
    let expires_at = match expires_at {
        Some(at) => Value::Union(1, Box::new(Value::TimestampMillis(at))),
        None => Value::Union(0, Box::new(Value::Null)),
    };
    let value = Value::Record(vec![
        ("command_id".into(), Value::String("poison".into())),
        ("sku".into(), Value::String(sku.into())),
        ("occurred_at".into(), Value::TimestampMillis(occurred_at)),
        (
            "body".into(),
            Value::Union(
                0,
                Box::new(Value::Record(vec![
                    ("order_id".into(), Value::String(order_id.into())),
                    ("quantity".into(), Value::Long(quantity)),
                    ("user_id".into(), Value::Union(0, Box::new(Value::Null))),
                    ("expires_at".into(), expires_at),
                    ("basket_id".into(), Value::Union(0, Box::new(Value::Null))),
                    ("units".into(), Value::Array(Vec::new())),
                    ("location".into(), Value::Union(0, Box::new(Value::Null))),
                ])),
            ),
        ),
    ]);
    let mut payload = vec![0xC3, 0x01];
    payload.extend_from_slice(&codec::command_fingerprint().to_le_bytes());
    let writer =
        apache_avro::writer::datum::GenericDatumWriter::builder(codec::command_schema()).build()?;
    payload.extend(writer.write_value_to_vec(value)?);
    Ok(payload)
}
