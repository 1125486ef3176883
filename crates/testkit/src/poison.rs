//! Records that are not valid commands, for dead-letter tests.

use apache_avro::types::Value;
use stockledger_core::codec;

/// A well-formed Avro single-object `Deduct` whose content breaks the rules
/// (an empty SKU, a quantity of 0 or below): what a buggy producer in another
/// language could write.
pub fn deduct_with(sku: &str, order_id: &str, quantity: i64) -> anyhow::Result<Vec<u8>> {
    deduct_at(sku, order_id, quantity, 0, None, None)
}

/// A well-formed Avro single-object `Deduct` stamped `occurred_at`, with
/// the deadline `expires_at` and the basket `basket_id` if given, none of
/// them checked: what a producer in another language can write at the
/// edges of each type, or in a shape the ledger refuses.
pub fn deduct_at(
    sku: &str,
    order_id: &str,
    quantity: i64,
    occurred_at: i64,
    expires_at: Option<i64>,
    basket_id: Option<&str>,
) -> anyhow::Result<Vec<u8>> {
    let body = Value::Record(vec![
        ("order_id".into(), Value::String(order_id.into())),
        ("quantity".into(), Value::Long(quantity)),
        ("user_id".into(), optional(None::<Value>)),
        (
            "expires_at".into(),
            optional(expires_at.map(Value::TimestampMillis)),
        ),
        (
            "basket_id".into(),
            optional(basket_id.map(|b| Value::String(b.into()))),
        ),
        ("units".into(), Value::Array(Vec::new())),
        ("location".into(), optional(None::<Value>)),
    ]);
    command(sku, occurred_at, 0, body)
}

/// A well-formed Avro single-object `Window` with the instants given, none
/// of them checked.
pub fn window_at(
    sku: &str,
    change_id: &str,
    opens_at: Option<i64>,
    closes_at: Option<i64>,
) -> anyhow::Result<Vec<u8>> {
    let body = Value::Record(vec![
        ("change_id".into(), Value::String(change_id.into())),
        (
            "opens_at".into(),
            optional(opens_at.map(Value::TimestampMillis)),
        ),
        (
            "closes_at".into(),
            optional(closes_at.map(Value::TimestampMillis)),
        ),
    ]);
    // The Window's branch of the Command's body union.
    command(sku, 1_700_000_000_000, 9, body)
}

/// A well-formed Avro single-object `Restock` of counted stock, `mode`
/// `"ADD"` or `"SET"`, its quantity not checked against the mode.
pub fn restock_with(
    sku: &str,
    adjustment_id: &str,
    mode: &str,
    quantity: i64,
) -> anyhow::Result<Vec<u8>> {
    let index = match mode {
        "ADD" => 0,
        "SET" => 1,
        other => anyhow::bail!("mode: {other} is neither ADD nor SET"),
    };
    let body = Value::Record(vec![
        ("adjustment_id".into(), Value::String(adjustment_id.into())),
        ("mode".into(), Value::Enum(index, mode.into())),
        ("quantity".into(), Value::Long(quantity)),
        ("units".into(), Value::Array(Vec::new())),
        ("location".into(), optional(None::<Value>)),
    ]);
    // The Restock's branch of the Command's body union.
    command(sku, 1_700_000_000_000, 2, body)
}

/// An optional field's union value.
fn optional(value: Option<Value>) -> Value {
    match value {
        Some(v) => Value::Union(1, Box::new(v)),
        None => Value::Union(0, Box::new(Value::Null)),
    }
}

/// A `Command` of `body` (branch `branch` of its union), framed as Avro
/// single-object encoding under the current schema.
fn command(sku: &str, occurred_at: i64, branch: u32, body: Value) -> anyhow::Result<Vec<u8>> {
    let value = Value::Record(vec![
        ("command_id".into(), Value::String("poison".into())),
        ("sku".into(), Value::String(sku.into())),
        ("occurred_at".into(), Value::TimestampMillis(occurred_at)),
        ("body".into(), Value::Union(branch, Box::new(body))),
    ]);
    let mut payload = vec![0xC3, 0x01];
    payload.extend_from_slice(&codec::command_fingerprint().to_le_bytes());
    let writer =
        apache_avro::writer::datum::GenericDatumWriter::builder(codec::command_schema()).build()?;
    payload.extend(writer.write_value_to_vec(value)?);
    Ok(payload)
}
