//! The rules the handlers enforce that utoipa's attributes cannot say,
//! written into the OpenAPI document in one place, so that the document
//! accepts nothing the gateway refuses: the ids in paths, the longest
//! `wait_ms`, the fields of a deduct that exclude each other, the names of
//! units and locations, and every query parameter's pattern. Schemathesis,
//! in its positive mode, holds the two to that.

use serde_json::{json, Value};
use utoipa::openapi::path::{Operation, ParameterIn};
use utoipa::openapi::schema::{ArrayItems, Object, ObjectBuilder, Schema, Type};
use utoipa::openapi::{OpenApi, RefOr};

/// What `check_id` accepts, as a pattern: no control character, no brace,
/// no surrounding white space. Its length (1 to 128 bytes of UTF-8) is
/// given as 1 to 128 characters in the document, which cannot count bytes,
/// and said in the description.
const ID_PATTERN: &str =
    r"^[^\s{}\x00-\x1f\x7f-\x9f]([^{}\x00-\x1f\x7f-\x9f]*[^\s{}\x00-\x1f\x7f-\x9f])?$";

/// The path parameters that are ids.
const ID_PARAMETERS: [&str; 6] = [
    "sku",
    "order_id",
    "basket_id",
    "adjustment_id",
    "transfer_id",
    "change_id",
];

/// The query parameters that are ids (history's and reports').
const ID_QUERY_PARAMETERS: [&str; 4] = ["sku", "order_id", "basket_id", "unit"];

/// The request bodies, and which of their fields are ids.
const ID_FIELDS: [(&str, &str); 3] = [
    ("DeductRequest", "user_id"),
    ("BasketHoldRequest", "user_id"),
    ("BasketLineRequest", "sku"),
];

/// The shortest hold `hold_ms` may ask for: one shorter could end before
/// its record is stamped and logged.
pub(crate) const MIN_HOLD_MS: i64 = 1_000;

/// An instant as the analysts' routes take it, as a pattern: `now`, a time
/// ago (`-15m`; up to 99,999 units, so that it stays after the year 1), or
/// RFC 3339 with a zone, its date a real one (29 February aside) from 1970
/// on. The gateway takes more (any RFC 3339 instant from the year 1); the
/// document says no more than it takes.
const INSTANT_PATTERN: &str = concat!(
    r"^(now|-[1-9][0-9]{0,4}[smhdw]|",
    r"(19[7-9][0-9]|[2-9][0-9]{3})-",
    r"((0[13578]|1[02])-(0[1-9]|[12][0-9]|3[01])|(0[469]|11)-(0[1-9]|[12][0-9]|30)|02-(0[1-9]|1[0-9]|2[0-8]))",
    r"[Tt]([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\.[0-9]{1,9})?([Zz]|[+-]([01][0-9]|2[0-3]):[0-5][0-9]))$"
);

/// A report's interval, as a pattern: a whole number of one unit, at most
/// about 30 years in any unit (the gateway takes up to 100).
const EVERY_PATTERN: &str =
    r"^([1-9][0-9]{0,8}s|[1-9][0-9]{0,6}m|[1-9][0-9]{0,4}h|[1-9][0-9]{0,3}d|[1-9][0-9]{0,2}w)$";

/// A location name, as a pattern: 1 to 64 ASCII letters, digits, `-`, `_`,
/// `.` (`LocationId`).
const LOCATION_PATTERN: &str = r"^[A-Za-z0-9._-]{1,64}$";

/// The fields of request bodies that name a location.
const LOCATION_FIELDS: [&str; 3] = ["location", "from", "to"];

/// A history page's cursor, as a pattern: `TOPIC:PARTITION:OFFSET:SKU`.
const CURSOR_PATTERN: &str = r"^.+:[0-9]+:[0-9]+:.+$";

/// Free text (a reason), as a pattern: no control character (`check_text`).
const TEXT_PATTERN: &str = r"^[^\x00-\x1f\x7f-\x9f]*$";

/// The query parameters that are instants.
const INSTANT_PARAMETERS: [&str; 2] = ["since", "until"];

/// The longest `wait_ms` the gateway takes by default (`serve
/// --max-wait-ms`).
pub const DEFAULT_MAX_WAIT_MS: u64 = 30_000;

/// One result name or several, comma-separated.
fn results_pattern() -> String {
    let names: Vec<&str> = stockledger_core::ResultCode::ALL
        .iter()
        .map(|r| r.as_str())
        .collect();
    let one = names.join("|");
    format!("^({one})(,({one}))*$")
}

fn string_matching(pattern: &str) -> Schema {
    Schema::Object(
        ObjectBuilder::new()
            .schema_type(Type::String)
            .pattern(Some(pattern))
            .build(),
    )
}

fn id_schema() -> Schema {
    let mut id = ObjectBuilder::new().schema_type(Type::String).build();
    as_id(&mut id);
    Schema::Object(id)
}

/// `string` (nullable or not) holds an id.
fn as_id(string: &mut Object) {
    string.min_length = Some(1);
    string.max_length = Some(stockledger_core::ids::MAX_ID_LEN);
    string.pattern = Some(ID_PATTERN.to_owned());
}

/// `string` (nullable or not) holds a location name.
fn as_location(string: &mut Object) {
    string.min_length = Some(1);
    string.max_length = Some(stockledger_core::ids::MAX_LOCATION_LEN);
    string.pattern = Some(LOCATION_PATTERN.to_owned());
}

/// Adds the rules to `document`.
pub(super) struct Rules;

impl utoipa::Modify for Rules {
    fn modify(&self, document: &mut OpenApi) {
        for item in document.paths.paths.values_mut() {
            let operations = [&mut item.get, &mut item.post, &mut item.put];
            for operation in operations.into_iter().flatten() {
                parameters(operation);
            }
        }
        let Some(components) = document.components.as_mut() else {
            return;
        };
        for (name, schema) in components.schemas.iter_mut() {
            let RefOr::T(Schema::Object(object)) = schema else {
                continue;
            };
            for (field, property) in object.properties.iter_mut() {
                let is_id = ID_FIELDS.contains(&(name.as_str(), field.as_str()));
                match (field.as_str(), property) {
                    (_, RefOr::T(Schema::Object(id))) if is_id => as_id(id),
                    ("units", property) => unit_names(property),
                    (place, RefOr::T(Schema::Object(location)))
                        if LOCATION_FIELDS.contains(&place) && name.ends_with("Request") =>
                    {
                        as_location(location)
                    }
                    ("reason", RefOr::T(Schema::Object(reason))) if name.ends_with("Request") => {
                        reason.pattern = Some(TEXT_PATTERN.to_owned());
                        // 1,024 bytes of UTF-8 hold 256 characters at worst.
                        reason.max_length = Some(stockledger_core::command::MAX_REASON_LEN / 4);
                    }
                    _ => {}
                }
            }
            if let Some(RefOr::T(Schema::Object(hold))) = object.properties.get_mut("hold_ms") {
                hold.minimum = Some(MIN_HOLD_MS.into());
                hold.maximum = Some(stockledger_core::ids::MAX_HOLD_MS.into());
            }
            match name.as_str() {
                "DeductRequest" => deduct(object),
                "BasketHoldRequest" => basket_hold(object),
                "RestockRequest" => restock(object),
                _ => {}
            }
        }
    }
}

fn parameters(operation: &mut Operation) {
    for parameter in operation.parameters.iter_mut().flatten() {
        let schema = match (&parameter.parameter_in, parameter.name.as_str()) {
            (ParameterIn::Path, name) if ID_PARAMETERS.contains(&name) => {
                let rule = "1 to 128 bytes of UTF-8, no control characters, no braces, no \
                            surrounding white space";
                parameter.description = Some(match parameter.description.take() {
                    Some(said) => format!("{said} ({rule})"),
                    None => rule.to_owned(),
                });
                id_schema()
            }
            (ParameterIn::Query, name) if INSTANT_PARAMETERS.contains(&name) => {
                string_matching(INSTANT_PATTERN)
            }
            // A log offset (up to 18 digits, within an i64), or an instant.
            (ParameterIn::Query, "at") => {
                string_matching(&format!("^[0-9]{{1,18}}$|{INSTANT_PATTERN}"))
            }
            (ParameterIn::Query, "result") => string_matching(&results_pattern()),
            (ParameterIn::Query, "every") => string_matching(EVERY_PATTERN),
            (ParameterIn::Query, "after") => string_matching(CURSOR_PATTERN),
            // The rest keep the type they have, narrowed.
            (ParameterIn::Query, name) => {
                match parameter.schema.as_mut() {
                    Some(RefOr::T(Schema::Object(object))) => {
                        if ID_QUERY_PARAMETERS.contains(&name) {
                            as_id(object);
                        } else if name == "wait_ms" {
                            object.maximum = Some(DEFAULT_MAX_WAIT_MS.into());
                        }
                    }
                    // A repeated id (`?sku=A&sku=B`): each an id.
                    Some(RefOr::T(Schema::Array(array))) if ID_QUERY_PARAMETERS.contains(&name) => {
                        array.items = ArrayItems::RefOrSchema(Box::new(RefOr::T(id_schema())));
                    }
                    _ => {}
                }
                continue;
            }
            _ => continue,
        };
        parameter.schema = Some(RefOr::T(schema));
    }
}

/// An array of unit names: each an id, none twice.
fn unit_names(property: &mut RefOr<Schema>) {
    if let RefOr::T(Schema::Array(array)) = property {
        array.items = ArrayItems::RefOrSchema(Box::new(RefOr::T(id_schema())));
        array.unique_items = true;
    }
}

/// A basket is a hold: `hold_ms` or `expires_at`, not both.
fn basket_hold(object: &mut Object) {
    one_of_these_and_none_of_those(
        object,
        json!([
            {"required": ["hold_ms"], "properties": {"hold_ms": {"type": "integer"}}},
            {"required": ["expires_at"], "properties": {"expires_at": {"type": "integer"}}},
        ]),
        &[&["hold_ms", "expires_at"]],
    );
}

/// Counted stock is `mode` and `quantity` (`ADD` non-zero, `SET` at least
/// 0); named units are `units` alone (the document asks for no `mode`,
/// `quantity` or `location` beside them, which the gateway takes when they
/// agree).
fn restock(object: &mut Object) {
    one_of_these_and_none_of_those(
        object,
        json!([
            {"required": ["mode", "quantity"], "properties": {
                "mode": {"const": "ADD"}, "quantity": {"type": "integer", "not": {"const": 0}}}},
            {"required": ["mode", "quantity"], "properties": {
                "mode": {"const": "SET"}, "quantity": {"type": "integer", "minimum": 0}}},
            {"required": ["units"], "properties": {"units": {"type": "array"}}},
        ]),
        &[
            &["units", "quantity"],
            &["units", "location"],
            &["units", "mode"],
        ],
    );
}

/// A deduct names a quantity or units; `units` goes without `quantity` (its
/// number, if given at all) and without `location`; `hold_ms` without
/// `expires_at`. The document cannot say "the quantity equals the number
/// of units", so it asks for units alone: stricter than the gateway, never
/// looser.
fn deduct(object: &mut Object) {
    one_of_these_and_none_of_those(
        object,
        json!([
            {"required": ["quantity"], "properties": {"quantity": {"type": "integer"}}},
            {"required": ["units"], "properties": {"units": {"type": "array"}}},
        ]),
        &[
            &["hold_ms", "expires_at"],
            &["units", "quantity"],
            &["units", "location"],
        ],
    );
}

/// `object` must match one of `these` and have none of the sets of fields
/// `never_together` all present, said under one key (`allOf`): utoipa
/// keeps such keywords in a hash map, and the document's text must be the
/// same on every run.
fn one_of_these_and_none_of_those(object: &mut Object, these: Value, never_together: &[&[&str]]) {
    let together: Vec<Value> = never_together
        .iter()
        .map(|fields| {
            let any: serde_json::Map<String, Value> = fields
                .iter()
                .map(|f| ((*f).to_owned(), json!({})))
                .collect();
            json!({"required": fields, "properties": any})
        })
        .collect();
    let none = match &together[..] {
        [one] => one.clone(),
        _ => json!({"anyOf": together}),
    };
    object
        .extensions
        .get_or_insert_with(Default::default)
        .insert("allOf".into(), json!([{"anyOf": these}, {"not": none}]));
}
