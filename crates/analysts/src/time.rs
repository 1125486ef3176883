//! Instants and spans as analysts write them (RFC 3339, `now`, `-15m`)
//! and read them back.

/// The moment of the ledger a stock question is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AsOf {
    /// Just after the SKU's newest record (by `occurred_at`, then log
    /// position) that occurred at or before this instant (ms since the epoch).
    Time(i64),
    /// Just after the SKU's newest record at or before this log offset of
    /// its partition.
    Offset(i64),
}

/// Parses an instant as the CLI and the HTTP API take it: RFC 3339 with a
/// zone (`2026-11-23T10:00:00Z`, `2026-11-23T11:00:00.250+01:00`), `now`, or
/// an offset from `now_ms` (milliseconds since the Unix epoch) like `-15m`,
/// `-2h`, `-7d` (units s, m, h, d, w).
pub fn parse_instant(text: &str, now_ms: i64) -> Result<i64, String> {
    let text = text.trim();
    if text == "now" {
        return Ok(now_ms);
    }
    if let Some(relative) = text.strip_prefix('-') {
        let ms = parse_span_ms(relative).map_err(|e| format!("{text:?}: {e}"))?;
        let at = now_ms.saturating_sub(ms);
        if at < FIRST_INSTANT_MS {
            // PostgreSQL could not compare it (its intervals would overflow).
            return Err(format!("{text:?} is before the year 1"));
        }
        return Ok(at);
    }
    stockledger_runtime::clock::parse_rfc3339_ms(text).map_err(|e| {
        format!(
            "{text:?} is not a time: {e} (give RFC 3339 like 2026-11-23T10:00:00Z, \
             `now`, or a time ago like -15m)"
        )
    })
}

/// 0001-01-01T00:00:00Z in ms since the Unix epoch: the earliest instant
/// an analyst may name (RFC 3339 cannot name an earlier one either).
///
/// ```
/// use stockledger_analysts::query::parse_instant;
///
/// assert!(parse_instant("-2000w", 0).is_ok());
/// assert!(parse_instant("-48284813w", 0).unwrap_err().contains("before the year 1"));
/// ```
pub const FIRST_INSTANT_MS: i64 = -62_135_596_800_000;

/// Parses the moment of an as-of question: a log offset (a whole number),
/// or an instant as [`parse_instant`] takes it.
pub fn parse_as_of(text: &str, now_ms: i64) -> Result<AsOf, String> {
    let text = text.trim();
    if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) {
        return text
            .parse()
            .map(AsOf::Offset)
            .map_err(|_| format!("{text:?}: offset out of range"));
    }
    parse_instant(text, now_ms).map(AsOf::Time)
}

/// Parses a span like `90s`, `15m`, `1h30m`, `1.5h`, `1d` or `1w` into
/// milliseconds, as `humantime` reads them (units from `ms` to `w`).
/// Months and years are refused: they have no fixed length.
pub fn parse_span_ms(text: &str) -> Result<i64, String> {
    const FIXED_UNITS: &str = "ms, s, m, h, d or w";
    let span = humantime::parse_duration(text).map_err(|e| match e {
        humantime::DurationError::UnknownUnit { unit, .. } => {
            format!("{text:?}: unknown unit {unit:?} ({FIXED_UNITS})")
        }
        humantime::DurationError::NumberOverflow => format!("{text:?} is too long"),
        other => format!("{text:?} is not a span ({other}; a number and {FIXED_UNITS})"),
    })?;
    // humantime's months and years are averages (30.44 and 365.25 days).
    let unit_of = |c: char| c.is_ascii_alphabetic();
    let calendar = text.split(|c: char| !unit_of(c)).any(|unit| {
        matches!(
            unit,
            "M" | "y" | "month" | "months" | "year" | "years" | "mon"
        )
    });
    if calendar {
        return Err(format!(
            "{text:?}: unknown unit (months and years have no fixed length; {FIXED_UNITS})"
        ));
    }
    match i64::try_from(span.as_millis()) {
        Ok(0) => Err(format!("{text:?} must be longer than zero")),
        Ok(ms) => Ok(ms),
        Err(_) => Err(format!("{text:?} is too long")),
    }
}

/// An instant (ms since the epoch) in RFC 3339, UTC, to the millisecond.
pub use stockledger_runtime::clock::rfc3339_ms as format_instant;
