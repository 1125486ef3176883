//! The wall clock, in the ledger's unit: milliseconds since the Unix
//! epoch, and an instant of it as RFC 3339.
//!
//! Deadlines a caller sets (`hold_ms` from now), the CLI's and the
//! gateway's relative times (`--at 10m`), and the expirer's "due" all read
//! this one clock. What the ledger *decides* by time is decided by the
//! record's log time instead, so a replay says the same.

use std::time::{SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch, now (0 on a clock set before 1970).
///
/// ```
/// let now = stockledger_runtime::clock::now_ms();
/// assert!(now > 1_700_000_000_000, "after November 2023: {now}");
/// ```
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// An instant (ms since the epoch) in RFC 3339, UTC, to the millisecond;
/// one beyond what RFC 3339 can write as "N ms since the epoch".
///
/// ```
/// use stockledger_runtime::clock::rfc3339_ms;
///
/// assert_eq!(rfc3339_ms(1_764_201_600_123), "2025-11-27T00:00:00.123Z");
/// assert_eq!(rfc3339_ms(0), "1970-01-01T00:00:00.000Z");
/// assert_eq!(rfc3339_ms(i64::MAX), "9223372036854775807 ms since the epoch");
/// ```
pub fn rfc3339_ms(ms: i64) -> String {
    const FORMAT: &[time::format_description::FormatItem<'static>] = time::macros::format_description!(
        "[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:3]Z"
    );
    time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000)
        .ok()
        .and_then(|at| at.format(FORMAT).ok())
        .unwrap_or_else(|| format!("{ms} ms since the epoch"))
}

/// The instant an RFC 3339 timestamp names, in milliseconds since the
/// epoch (any offset; finer than a millisecond is cut off, towards the
/// past); else why it is not one.
///
/// ```
/// use stockledger_runtime::clock::parse_rfc3339_ms;
///
/// assert_eq!(parse_rfc3339_ms("2025-11-27T00:00:00.123Z"), Ok(1_764_201_600_123));
/// assert_eq!(parse_rfc3339_ms("2025-11-27T01:00:00+01:00"), Ok(1_764_201_600_000));
/// assert_eq!(parse_rfc3339_ms("1969-12-31T23:59:59.999Z"), Ok(-1));
/// assert!(parse_rfc3339_ms("27/11/2025").is_err());
/// ```
pub fn parse_rfc3339_ms(text: &str) -> Result<i64, String> {
    let at = time::OffsetDateTime::parse(text, &time::format_description::well_known::Rfc3339)
        .map_err(|e| e.to_string())?;
    i64::try_from(at.unix_timestamp_nanos().div_euclid(1_000_000))
        .map_err(|_| "out of range".to_owned())
}
