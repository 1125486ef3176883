//! Identifiers and quantities that cannot hold a bad value.
//!
//! Every constructor checks its input and names the offending field in the
//! error, so an order service learns what to fix before anything is sent.

use std::fmt;

/// Longest SKU, order id, adjustment id or command id accepted, in bytes.
///
/// ```
/// use stockledger_core::ids::MAX_ID_LEN;
/// use stockledger_core::OrderId;
///
/// assert!(OrderId::new("x".repeat(MAX_ID_LEN)).is_ok());
/// assert!(OrderId::new("x".repeat(MAX_ID_LEN + 1)).is_err());
/// ```
pub const MAX_ID_LEN: usize = 128;

/// Largest quantity one deduct may take.
///
/// ```
/// use stockledger_core::ids::MAX_QUANTITY;
/// use stockledger_core::Quantity;
///
/// assert!(Quantity::new(MAX_QUANTITY).is_ok());
/// assert!(Quantity::new(MAX_QUANTITY + 1).is_err());
/// ```
pub const MAX_QUANTITY: i64 = 1_000_000_000;

/// Largest stock level (and restock amount). Chosen well below 2^53, so
/// any reader whose numbers are doubles (JavaScript, Lua, a JSON parser)
/// holds every value exactly.
///
/// ```
/// use stockledger_core::ids::MAX_STOCK;
/// use stockledger_core::{AdjustmentId, Restock, RestockMode};
///
/// assert!(Restock::new(AdjustmentId::new("a-1")?, RestockMode::Set, MAX_STOCK).is_ok());
/// assert!(Restock::new(AdjustmentId::new("a-2")?, RestockMode::Set, MAX_STOCK + 1).is_err());
/// assert!(MAX_STOCK < 1 << 53);
/// # Ok::<(), stockledger_core::ValidationError>(())
/// ```
pub const MAX_STOCK: i64 = 1_000_000_000_000_000;

/// Longest hold a reservation may ask for: seven days, in milliseconds.
/// A deadline further ahead is a mistake (seconds sent as milliseconds, a
/// year typed wrong), not a checkout.
///
/// ```
/// use stockledger_core::ids::MAX_HOLD_MS;
///
/// assert_eq!(MAX_HOLD_MS, 604_800_000);
/// ```
pub const MAX_HOLD_MS: i64 = 7 * 24 * 60 * 60 * 1000;

/// Latest instant a deadline may name (9999-12-31T23:59:59.999Z), in
/// milliseconds since the Unix epoch: well below 2^53, so a reader whose
/// numbers are doubles holds every deadline and record time exactly.
///
/// ```
/// use stockledger_core::command::check_expires_at;
/// use stockledger_core::ids::MAX_TIMESTAMP_MS;
///
/// assert!(check_expires_at(MAX_TIMESTAMP_MS).is_ok());
/// assert!(check_expires_at(MAX_TIMESTAMP_MS + 1).is_err());
/// ```
pub const MAX_TIMESTAMP_MS: i64 = 253_402_300_799_999;

/// Most named units one deduct may take (a party's seats, not a show).
///
/// ```
/// use stockledger_core::ids::{check_units, MAX_UNITS_PER_DEDUCT};
///
/// let names: Vec<String> = (0..=MAX_UNITS_PER_DEDUCT).map(|i| format!("A{i}")).collect();
/// assert!(check_units(&names, MAX_UNITS_PER_DEDUCT).is_err());
/// ```
pub const MAX_UNITS_PER_DEDUCT: usize = 50;

/// Most named units one restock may add (a hall's seats; a stadium takes
/// several restocks).
///
/// ```
/// use stockledger_core::ids::MAX_UNITS_PER_RESTOCK;
///
/// assert_eq!(MAX_UNITS_PER_RESTOCK, 1_000);
/// ```
pub const MAX_UNITS_PER_RESTOCK: usize = 1_000;

/// Checks a list of unit names as one command carries it: 1 to `max`
/// names, each an identifier ([`UnitId`]), none twice. The refusal names
/// the field `units` and, in its text, the offending position.
///
/// ```
/// use stockledger_core::ids::check_units;
///
/// let seats = ["A1".to_owned(), "A2".to_owned()];
/// assert_eq!(check_units(&seats, 50)?.len(), 2);
/// let twice = ["A1".to_owned(), "A1".to_owned()];
/// let refused = check_units(&twice, 50).unwrap_err();
/// assert_eq!(refused.field, "units");
/// assert!(refused.problem.contains("units[1]"));
/// # Ok::<(), stockledger_core::ValidationError>(())
/// ```
pub fn check_units<S: AsRef<str>>(names: &[S], max: usize) -> Result<Vec<UnitId>, ValidationError> {
    if names.is_empty() {
        return Err(ValidationError::new("units", "must name at least one unit"));
    }
    if names.len() > max {
        return Err(ValidationError::new(
            "units",
            format!("names {} units; at most {max} per request", names.len()),
        ));
    }
    let mut seen = std::collections::HashSet::with_capacity(names.len());
    let mut units = Vec::with_capacity(names.len());
    for (i, name) in names.iter().enumerate() {
        let name = name.as_ref();
        let unit = UnitId::new(name).map_err(|e| {
            ValidationError::new("units", format!("units[{i}] {:?}: {}", name, e.problem))
        })?;
        if !seen.insert(name) {
            return Err(ValidationError::new(
                "units",
                format!("units[{i}] {name:?} appears twice"),
            ));
        }
        units.push(unit);
    }
    Ok(units)
}

/// Longest location name, in bytes.
///
/// ```
/// use stockledger_core::ids::MAX_LOCATION_LEN;
/// use stockledger_core::LocationId;
///
/// assert!(LocationId::new("w".repeat(MAX_LOCATION_LEN + 1)).is_err());
/// ```
pub const MAX_LOCATION_LEN: usize = 64;

/// Where stock sits: a warehouse, a store. 1 to [`MAX_LOCATION_LEN`] bytes
/// of ASCII letters, digits, `-`, `_` and `.`: a name that is safe as it is
/// in a Redis field, a URL, a CSV cell and a metric label.
///
/// ```
/// use stockledger_core::LocationId;
///
/// assert_eq!(LocationId::new("berlin-2")?.as_str(), "berlin-2");
/// let refused = LocationId::named("from", "Zürich").unwrap_err();
/// assert_eq!(refused.field, "from");
/// assert!(refused.problem.contains("'ü'"), "{refused}");
/// # Ok::<(), stockledger_core::ValidationError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LocationId(String);

impl LocationId {
    /// A location named in the field `location`.
    pub fn new(value: impl Into<String>) -> Result<Self, ValidationError> {
        Self::named("location", value)
    }

    /// A location named in `field` (a transfer's `from` and `to`); the
    /// refusal names that field.
    pub fn named(field: &'static str, value: impl Into<String>) -> Result<Self, ValidationError> {
        let value = value.into();
        if value.is_empty() {
            return Err(ValidationError::new(field, "must not be empty"));
        }
        if value.len() > MAX_LOCATION_LEN {
            return Err(ValidationError::new(
                field,
                format!(
                    "is {} bytes long; at most {MAX_LOCATION_LEN} are allowed",
                    value.len()
                ),
            ));
        }
        let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.');
        if let Some(c) = value.chars().find(|&c| !allowed(c)) {
            return Err(ValidationError::new(
                field,
                format!("must be ASCII letters, digits, '-', '_' or '.' (found {c:?})"),
            ));
        }
        Ok(Self(value))
    }

    /// The name as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for LocationId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl AsRef<str> for LocationId {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl std::str::FromStr for LocationId {
    type Err = ValidationError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::new(s)
    }
}

/// A value was refused; `field` names the input, `problem` says what is wrong.
///
/// ```
/// use stockledger_core::Sku;
///
/// let refused = Sku::new("shoes{eu}").unwrap_err();
/// assert_eq!(refused.field, "sku");
/// assert!(refused.to_string().starts_with("sku: must not contain '{'"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {problem}")]
pub struct ValidationError {
    pub field: &'static str,
    pub problem: String,
}

impl ValidationError {
    /// A refusal of `field`, saying what is wrong with it.
    ///
    /// ```
    /// use stockledger_core::ValidationError;
    ///
    /// let e = ValidationError::new("quantity", "must be at least 1, got 0");
    /// assert_eq!(e.to_string(), "quantity: must be at least 1, got 0");
    /// ```
    pub fn new(field: &'static str, problem: impl Into<String>) -> Self {
        Self {
            field,
            problem: problem.into(),
        }
    }
}

/// Checks a free-text field: no control character, NUL included.
///
/// Text is archived in PostgreSQL, which cannot store NUL, and printed by
/// `history` and `dlq show` on terminals, where ESC or CR would rewrite the
/// screen; one line of printable text is all a reason needs.
///
/// ```
/// use stockledger_core::ids::check_text;
///
/// assert!(check_text("reason", "payment failed: card déclinée").is_ok());
/// let refused = check_text("reason", "a\u{0}b").unwrap_err();
/// assert_eq!(refused.to_string(), "reason: must not contain control characters (found '\\0')");
/// ```
///
/// Nor a bidirectional formatting character (U+202E, right-to-left
/// override, and its kin), which makes one name look like another where it
/// is shown:
///
/// ```
/// use stockledger_core::ids::check_text;
///
/// let refused = check_text("sku", "SKU-\u{202e}1-UKS").unwrap_err();
/// assert!(refused.to_string().contains("bidirectional"), "{refused}");
/// ```
pub fn check_text(field: &'static str, value: &str) -> Result<(), ValidationError> {
    // Printable ASCII, as nearly every text is, has neither kind: passed
    // in one look at each byte.
    if value.bytes().all(|b| matches!(b, b' '..=b'~')) {
        return Ok(());
    }
    check_text_fully(field, value)
}

/// [`check_text`] character by character, naming the one refused.
fn check_text_fully(field: &'static str, value: &str) -> Result<(), ValidationError> {
    if let Some(c) = value.chars().find(|c| c.is_control()) {
        return Err(ValidationError::new(
            field,
            format!("must not contain control characters (found {c:?})"),
        ));
    }
    match value.chars().find(|&c| is_bidi_control(c)) {
        Some(c) => Err(ValidationError::new(
            field,
            format!("must not contain bidirectional formatting characters (found {c:?})"),
        )),
        None => Ok(()),
    }
}

/// The characters that change the direction text is shown in (Unicode's
/// `Bidi_Control`): marks, embeddings, overrides and isolates.
fn is_bidi_control(c: char) -> bool {
    matches!(c, '\u{061C}' | '\u{200E}' | '\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}')
}

/// Checks the rules shared by every identifier: not empty, at most
/// [`MAX_ID_LEN`] bytes, no control characters (a newline in a SKU would
/// corrupt logs, keys and CSV exports), no `{` or `}` (they delimit the Redis
/// Cluster hash tag that keeps one SKU's keys on one node), no surrounding
/// whitespace.
///
/// ```
/// use stockledger_core::ids::check_id;
///
/// assert!(check_id("warehouse", "eu-west").is_ok());
/// assert_eq!(check_id("warehouse", " eu").unwrap_err().field, "warehouse");
/// ```
pub fn check_id(field: &'static str, value: &str) -> Result<(), ValidationError> {
    if is_plain_id(value) {
        return Ok(());
    }
    check_id_fully(field, value)
}

/// [`check_id`] rule by rule, naming the first one `value` breaks.
fn check_id_fully(field: &'static str, value: &str) -> Result<(), ValidationError> {
    if value.is_empty() {
        return Err(ValidationError::new(field, "must not be empty"));
    }
    if value.len() > MAX_ID_LEN {
        return Err(ValidationError::new(
            field,
            format!(
                "is {} bytes long; at most {MAX_ID_LEN} are allowed",
                value.len()
            ),
        ));
    }
    check_text(field, value)?;
    if let Some(c) = value.chars().find(|c| matches!(c, '{' | '}')) {
        return Err(ValidationError::new(
            field,
            format!("must not contain {c:?} (braces delimit the Redis Cluster hash tag)"),
        ));
    }
    if value.trim() != value {
        return Err(ValidationError::new(
            field,
            "must not start or end with whitespace",
        ));
    }
    Ok(())
}

/// Whether `value` passes [`check_id`] at a glance, as nearly every id
/// does: 1 to [`MAX_ID_LEN`] bytes of printable ASCII, no brace, no space
/// at either end. Anything else takes the checks that name its fault.
fn is_plain_id(value: &str) -> bool {
    let bytes = value.as_bytes();
    let ends = matches!((bytes.first(), bytes.last()), (Some(&first), Some(&last)) if first != b' ' && last != b' ');
    if !ends || bytes.len() > MAX_ID_LEN {
        return false;
    }
    // Eight bytes at a time, the last few padded with a plain byte: ids
    // are read on every record, and most are shorter than the sixteen a
    // vector of bytes would need.
    let mut words = bytes.chunks_exact(8);
    let whole = words.by_ref().all(|chunk| {
        let mut word = [0; 8];
        word.copy_from_slice(chunk);
        is_plain_word(u64::from_le_bytes(word))
    });
    let mut last = [b'a'; 8];
    last[..words.remainder().len()].copy_from_slice(words.remainder());
    whole && is_plain_word(u64::from_le_bytes(last))
}

/// Whether each of the eight bytes of `word` is printable ASCII (`' '` to
/// `'~'`) and no brace. Each test sets the high bit of some byte exactly
/// when some byte fails it (a borrow or carry only ever moves from a byte
/// that already failed), so their union is zero only for a plain word.
fn is_plain_word(word: u64) -> bool {
    const ONES: u64 = u64::from_le_bytes([0x01; 8]);
    const HIGH: u64 = u64::from_le_bytes([0x80; 8]);
    let below_space = word.wrapping_sub(ONES * u64::from(b' ')) & !word;
    let above_tilde = word.wrapping_add(ONES * u64::from(0x7F - b'~')) | word;
    let is = |byte: u8| {
        let xor = word ^ (ONES * u64::from(byte));
        xor.wrapping_sub(ONES) & !xor
    };
    (below_space | above_tilde | is(b'{') | is(b'}')) & HIGH == 0
}

macro_rules! id_type {
    ($(#[$doc:meta])* $name:ident, $field:literal) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub struct $name(String);

        impl $name {
            /// The input field this identifier is validated as.
            ///
            /// ```
            #[doc = concat!("use stockledger_core::", stringify!($name), ";")]
            ///
            #[doc = concat!("assert_eq!(", stringify!($name), "::FIELD, \"", $field, "\");")]
            /// ```
            pub const FIELD: &'static str = $field;

            /// The identifier, if `value` is 1 to [`MAX_ID_LEN`] bytes with
            /// no control character, no brace and no surrounding space;
            /// else the refusal, naming the field.
            ///
            /// ```
            #[doc = concat!("use stockledger_core::", stringify!($name), ";")]
            ///
            #[doc = concat!("let id = ", stringify!($name), "::new(\"A-1\")?;")]
            /// assert_eq!(id.to_string(), "A-1");
            #[doc = concat!("let refused = ", stringify!($name), "::new(\"A\\n1\").unwrap_err();")]
            #[doc = concat!("assert_eq!(refused.field, \"", $field, "\");")]
            /// # Ok::<(), stockledger_core::ValidationError>(())
            /// ```
            pub fn new(value: impl Into<String>) -> Result<Self, ValidationError> {
                let value = value.into();
                check_id($field, &value)?;
                Ok(Self(value))
            }

            /// The identifier as text.
            ///
            /// ```
            #[doc = concat!("use stockledger_core::", stringify!($name), ";")]
            ///
            #[doc = concat!("assert_eq!(", stringify!($name), "::new(\"A-1\")?.as_str(), \"A-1\");")]
            /// # Ok::<(), stockledger_core::ValidationError>(())
            /// ```
            pub fn as_str(&self) -> &str {
                &self.0
            }

            /// The identifier as an owned string, without copying it.
            ///
            /// ```
            #[doc = concat!("use stockledger_core::", stringify!($name), ";")]
            ///
            #[doc = concat!("let text: String = ", stringify!($name), "::new(\"A-1\")?.into_string();")]
            /// assert_eq!(text, "A-1");
            /// # Ok::<(), stockledger_core::ValidationError>(())
            /// ```
            pub fn into_string(self) -> String {
                self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        impl std::str::FromStr for $name {
            type Err = ValidationError;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                Self::new(s)
            }
        }
    };
}

id_type!(
    /// A stock-keeping unit: the Kafka record key and the Redis hash tag.
    Sku,
    "sku"
);
id_type!(
    /// An order, unique per SKU; deducts and rollbacks of one order share it.
    OrderId,
    "order_id"
);
id_type!(
    /// Names one restock so that sending it twice applies it once.
    AdjustmentId,
    "adjustment_id"
);
id_type!(
    /// The buyer a deduct or reservation is for, counted against a SKU's
    /// per-user limit.
    UserId,
    "user_id"
);
id_type!(
    /// A basket: several SKUs held together, all or none. Each line is the
    /// order of this id on its SKU.
    BasketId,
    "basket_id"
);
id_type!(
    /// One named unit of a SKU: a seat of a show, a serial number, a
    /// parking slot. A SKU sells named units or counted stock, never both.
    UnitId,
    "units"
);
id_type!(
    /// Names one transfer between two locations of a SKU, so that sending
    /// it twice moves the stock once. Transfer ids and restock adjustment
    /// ids share one namespace per SKU: both name an adjustment of stock.
    TransferId,
    "transfer_id"
);
id_type!(
    /// Names one change of a SKU's sale (a window, a pause, a resume), so
    /// that sending it twice applies it once. Change ids share the SKU's
    /// namespace of adjustments with restocks and transfers.
    ChangeId,
    "change_id"
);
id_type!(
    /// Unique id of one command, chosen by the producer.
    CommandId,
    "command_id"
);

/// A quantity a deduct takes: 1 to [`MAX_QUANTITY`].
///
/// ```
/// use stockledger_core::Quantity;
///
/// let two = Quantity::new(2)?;
/// assert_eq!((two.get(), two.to_string()), (2, "2".to_owned()));
/// # Ok::<(), stockledger_core::ValidationError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Quantity(i64);

impl Quantity {
    /// A quantity of 1 to [`MAX_QUANTITY`] units.
    ///
    /// ```
    /// use stockledger_core::Quantity;
    ///
    /// assert_eq!(Quantity::new(3).map(Quantity::get), Ok(3));
    /// assert_eq!(Quantity::new(0).unwrap_err().field, "quantity");
    /// ```
    pub fn new(value: i64) -> Result<Self, ValidationError> {
        Self::of_field("quantity", value)
    }

    /// A quantity read from the input `field` (a refund's `total`, a
    /// limit's `per_user`), which a refusal names.
    ///
    /// ```
    /// use stockledger_core::Quantity;
    ///
    /// assert_eq!(Quantity::of_field("per_user", 0).unwrap_err().field, "per_user");
    /// ```
    pub fn of_field(field: &'static str, value: i64) -> Result<Self, ValidationError> {
        if value <= 0 {
            return Err(ValidationError::new(
                field,
                format!("must be at least 1, got {value}"),
            ));
        }
        if value > MAX_QUANTITY {
            return Err(ValidationError::new(
                field,
                format!("must be at most {MAX_QUANTITY}, got {value}"),
            ));
        }
        Ok(Self(value))
    }

    /// The number of units.
    ///
    /// ```
    /// use stockledger_core::Quantity;
    ///
    /// assert_eq!(Quantity::new(7)?.get(), 7);
    /// # Ok::<(), stockledger_core::ValidationError>(())
    /// ```
    pub fn get(self) -> i64 {
        self.0
    }
}

impl fmt::Display for Quantity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The glance of [`check_id`] and [`check_text`] answers every text of
    /// up to three characters as their rules do, at the edges of printable
    /// ASCII and beyond it.
    #[test]
    fn the_plain_ascii_glance_agrees_with_the_rules() {
        let alphabet = [
            ' ', '!', '~', '{', '}', 'a', '\u{7F}', '\u{1F}', '\t', 'é', '\u{200E}', '\u{A0}',
        ];
        let mut texts = vec![String::new()];
        for _ in 0..3 {
            let longer: Vec<String> = texts
                .iter()
                .flat_map(|t| alphabet.iter().map(move |c| format!("{t}{c}")))
                .collect();
            texts.extend(longer);
        }
        texts.push("x".repeat(MAX_ID_LEN));
        texts.push("x".repeat(MAX_ID_LEN + 1));
        // Longer ids, each character at each place: the glance looks at
        // many bytes at a time.
        for len in [7, 8, 9, 15, 16, 17, 31, 32, 33, 64, MAX_ID_LEN] {
            for at in 0..len {
                for c in alphabet {
                    let mut text: Vec<char> = vec!['x'; len];
                    text[at] = c;
                    texts.push(text.into_iter().collect());
                }
            }
        }
        for text in &texts {
            assert_eq!(
                check_id("f", text).is_ok(),
                check_id_fully("f", text).is_ok(),
                "{text:?}"
            );
            assert_eq!(
                check_text("f", text).is_ok(),
                check_text_fully("f", text).is_ok(),
                "{text:?}"
            );
        }
    }

    /// A word of eight bytes is plain exactly when each byte is: every
    /// byte value at every place, beside neighbours at the edges where a
    /// borrow or a carry could reach across.
    #[test]
    fn a_word_is_plain_exactly_when_each_of_its_bytes_is() {
        let plain = |b: u8| (b' '..=b'~').contains(&b) && b != b'{' && b != b'}';
        for neighbour in [b'a', b' ', b'~', b'!', 0x00, 0x1F, 0x7F, 0x80, 0xFF] {
            for at in 0..8 {
                for byte in 0..=u8::MAX {
                    let mut word = [neighbour; 8];
                    word[at] = byte;
                    assert_eq!(
                        is_plain_word(u64::from_le_bytes(word)),
                        word.iter().all(|&b| plain(b)),
                        "{word:02x?}"
                    );
                }
            }
        }
    }

    #[test]
    fn ids_refuse_empty_long_and_control_characters_naming_the_field() {
        assert_eq!(Sku::new("").unwrap_err().field, "sku");
        assert_eq!(OrderId::new("").unwrap_err().field, "order_id");
        let long = OrderId::new("x".repeat(10_000)).unwrap_err();
        assert_eq!(long.field, "order_id");
        assert!(long.problem.contains("10000 bytes"), "{long}");
        let newline = Sku::new("SKU\n1").unwrap_err();
        assert_eq!(
            newline.to_string(),
            "sku: must not contain control characters (found '\\n')"
        );
        assert_eq!(Sku::new(" a").unwrap_err().field, "sku");
        assert_eq!(AdjustmentId::new("").unwrap_err().field, "adjustment_id");
        assert_eq!(Sku::new("SKU-1").unwrap().as_str(), "SKU-1");
        assert!(Sku::new("x".repeat(MAX_ID_LEN)).is_ok());
    }

    #[test]
    fn ids_refuse_braces_which_would_split_a_skus_keys_across_cluster_slots() {
        assert_eq!(
            Sku::new("}x").unwrap_err().to_string(),
            "sku: must not contain '}' (braces delimit the Redis Cluster hash tag)"
        );
        assert_eq!(Sku::new("a{b").unwrap_err().field, "sku");
        assert_eq!(OrderId::new("{o}").unwrap_err().field, "order_id");
        assert_eq!(CommandId::new("c}").unwrap_err().field, "command_id");
    }

    #[test]
    fn quantity_must_be_positive_and_bounded() {
        assert_eq!(
            Quantity::new(0).unwrap_err().to_string(),
            "quantity: must be at least 1, got 0"
        );
        assert_eq!(Quantity::new(-3).unwrap_err().field, "quantity");
        assert_eq!(
            Quantity::new(MAX_QUANTITY + 1).unwrap_err().field,
            "quantity"
        );
        assert_eq!(Quantity::new(MAX_QUANTITY).unwrap().get(), MAX_QUANTITY);
    }
}
