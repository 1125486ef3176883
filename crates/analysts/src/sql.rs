//! What every query of the archive shares: the refusal of a question
//! asked wrongly ([`QueryError`]), the range check, and the SQL that reads
//! a timestamp as RFC 3339.

/// The SQL of a `timestamptz` column as text: RFC 3339, UTC, milliseconds.
macro_rules! rfc3339 {
    ($column:literal) => {
        concat!(
            "to_char(",
            $column,
            " AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"') AS ",
            $column
        )
    };
}

/// A question the archive refuses to answer as asked.
#[derive(Debug, thiserror::Error)]
pub enum QueryError {
    /// A parameter is out of its rules; `field` names it.
    #[error("{field}: {problem}")]
    Invalid {
        field: &'static str,
        problem: String,
    },
    #[error("a PostgreSQL request failed")]
    Database(#[from] sqlx::Error),
}

impl QueryError {
    pub(crate) fn invalid(field: &'static str, problem: impl Into<String>) -> Self {
        Self::Invalid {
            field,
            problem: problem.into(),
        }
    }
}

/// Checks a time range given as `since` / `until` (ms since the epoch).
pub fn check_range(since_ms: Option<i64>, until_ms: Option<i64>) -> Result<(), QueryError> {
    match (since_ms, until_ms) {
        (Some(since), Some(until)) if since >= until => Err(QueryError::invalid(
            "since",
            "must be before until (the range is since <= occurred_at < until)",
        )),
        _ => Ok(()),
    }
}
