//! W3C trace context: the `traceparent` a producer may put on a command
//! record, carried by the applier to the record's outcome and by the
//! archiver to its archive row, so one order can be followed across
//! services (<https://www.w3.org/TR/trace-context/>).

/// The header (Kafka record header, HTTP request header) that carries it.
pub const TRACEPARENT_HEADER: &str = "traceparent";

/// The first valid `traceparent` among a record's `headers` (name, value),
/// if it carries one: what the applier copies to the outcome and the
/// archiver keeps.
///
/// ```
/// use stockledger_core::trace::traceparent_among;
///
/// let good: &[u8] = b"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
/// let headers = [("traceparent", Some(&b"junk"[..])), ("traceparent", Some(good))];
/// assert_eq!(traceparent_among(headers).map(str::as_bytes), Some(good));
/// assert_eq!(traceparent_among([("other", Some(good))]), None);
/// ```
pub fn traceparent_among<'a>(
    headers: impl IntoIterator<Item = (&'a str, Option<&'a [u8]>)>,
) -> Option<&'a str> {
    headers
        .into_iter()
        .filter(|(name, _)| *name == TRACEPARENT_HEADER)
        .find_map(|(_, value)| valid_traceparent(value?))
}

/// `value` if it is a `traceparent` a tracer would accept: version `00`
/// and exactly `00-<32 hex trace id>-<16 hex parent id>-<2 hex flags>`, or
/// a later version with at least those fields; lower-case hex; neither id
/// all zeros. Anything else is not carried (the W3C rule: an invalid one is
/// ignored, not repaired).
///
/// ```
/// use stockledger_core::trace::valid_traceparent;
///
/// let good = b"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
/// assert_eq!(valid_traceparent(good), Some("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"));
/// assert_eq!(valid_traceparent(b"00-00000000000000000000000000000000-b7ad6b7169203331-01"), None);
/// assert_eq!(valid_traceparent(b"00-0AF7651916CD43DD8448EB211C80319C-b7ad6b7169203331-01"), None);
/// assert_eq!(valid_traceparent(b"ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"), None);
/// assert_eq!(valid_traceparent(b"not a trace"), None);
/// ```
pub fn valid_traceparent(value: &[u8]) -> Option<&str> {
    let text = std::str::from_utf8(value).ok()?;
    let lower_hex = |s: &str, len: usize| {
        s.len() == len
            && s.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    };
    let not_zero = |s: &str| s.bytes().any(|b| b != b'0');
    let mut fields = text.split('-');
    let (version, trace_id, parent_id, flags) = (
        fields.next()?,
        fields.next()?,
        fields.next()?,
        fields.next()?,
    );
    let known_layout = match version {
        "00" => fields.next().is_none(),
        "ff" => false,
        v => lower_hex(v, 2),
    };
    (known_layout
        && lower_hex(version, 2)
        && lower_hex(trace_id, 32)
        && not_zero(trace_id)
        && lower_hex(parent_id, 16)
        && not_zero(parent_id)
        && lower_hex(flags, 2))
    .then_some(text)
}
