//! Records that are not valid commands, for dead-letter tests.

use apache_avro::types::Value;
use stockledger_core::codec;

/// A well-formed Avro single-object `Deduct` whose content breaks the rules
/// (an empty SKU, a quantity of 0 or below): what a buggy producer in another
/// language could write.
pub fn deduct_with(sku: &str, order_id: &str, quantity: i64) -> anyhow::Result<Vec<u8>> {
    let value = Value::Record(vec![
        ("command_id".into(), Value::String("poison".into())),
        ("sku".into(), Value::String(sku.into())),
        ("occurred_at".into(), Value::TimestampMillis(0)),
        (
            "body".into(),
            Value::Union(
                0,
                Box::new(Value::Record(vec![
                    ("order_id".into(), Value::String(order_id.into())),
                    ("quantity".into(), Value::Long(quantity)),
                    ("user_id".into(), Value::Union(0, Box::new(Value::Null))),
                    ("expires_at".into(), Value::Union(0, Box::new(Value::Null))),
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
