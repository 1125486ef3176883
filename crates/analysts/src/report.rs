//! Reports: per-SKU (and per-location) totals per interval, summed from
//! the archive's hourly rollup and its rows (the `ledger_report` SQL
//! function). Reached as `stockledger_analysts::query::report` and beside
//! it, as before they had a file of their own.

use sqlx::PgPool;

use crate::sql::{check_range, QueryError};

// The rows of the `ledger_report` SQL function. With the `openapi`
// feature they are also the gateway's report body (field `bucket` named
// `interval_start` there), under the schema names the API document has
// always had.
/// One SKU's totals over one interval.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
#[cfg_attr(
    feature = "openapi",
    derive(serde::Serialize, utoipa::ToSchema),
    schema(as = ReportRowBody)
)]
pub struct ReportRow {
    pub sku: String,
    /// The interval's start, RFC 3339 UTC.
    #[cfg_attr(feature = "openapi", serde(rename = "interval_start"))]
    pub bucket: String,
    pub records: i64,
    pub deducts_applied: i64,
    pub units_taken: i64,
    pub rollbacks_applied: i64,
    pub units_returned: i64,
    /// Units taken by deducts minus units given back by rollbacks.
    pub net_taken: i64,
    pub restocks_applied: i64,
    pub restock_delta: i64,
    pub rejected_insufficient: i64,
    pub rejected_cancelled: i64,
    pub rejected_restock: i64,
    pub ignored_no_deduction: i64,
    pub duplicates: i64,
    pub invalid: i64,
    pub lowest_available: Option<i64>,
    /// When an applied record took available stock to zero in the interval.
    pub sold_out_at: Option<String>,
}

/// `rows` of a report asked for `max_rows + 1` rows, refused (`max_rows`)
/// when it got more than `max_rows`.
fn within_max_rows<T>(rows: Vec<T>, max_rows: i64) -> Result<Vec<T>, QueryError> {
    if rows.len() as i64 > max_rows {
        return Err(QueryError::invalid(
            "max_rows",
            format!("the report has more than {max_rows} rows; ask for one SKU or a shorter range"),
        ));
    }
    Ok(rows)
}

/// Longest report interval: a hundred years of 365.25 days.
pub const MAX_EVERY_SECS: i64 = 3_155_760_000;

/// A report's range widened to whole intervals of `every_secs` seconds
/// aligned on the Unix epoch, after checking the interval and the range.
fn whole_intervals(
    every_secs: i64,
    since_ms: i64,
    until_ms: i64,
) -> Result<(i64, i64), QueryError> {
    if !(1..=MAX_EVERY_SECS).contains(&every_secs) {
        return Err(QueryError::invalid(
            "every",
            format!("must be between one second and 100 years, got {every_secs} s"),
        ));
    }
    check_range(Some(since_ms), Some(until_ms))?;
    let every_ms = every_secs * 1000;
    let since_ms = since_ms.div_euclid(every_ms) * every_ms;
    let until_ms = until_ms
        .div_euclid(every_ms)
        .saturating_add(i64::from(until_ms.rem_euclid(every_ms) != 0))
        .saturating_mul(every_ms);
    Ok((since_ms, until_ms))
}

/// What a report covers: command topic `topic`'s records with
/// `since_ms <= occurred_at < until_ms` (of `sku` only, when given), in
/// intervals of `every_secs` seconds aligned on the Unix epoch, the range
/// widened to whole intervals; at most `max_rows` rows.
#[derive(Debug, Clone, Copy)]
pub struct ReportRange<'a> {
    pub topic: &'a str,
    pub every_secs: i64,
    pub since_ms: i64,
    pub until_ms: i64,
    pub sku: Option<&'a str>,
    pub max_rows: i64,
}

impl ReportRange<'_> {
    /// The range widened to whole intervals, and the row bound kept sane.
    fn checked(&self) -> Result<(i64, i64, i64), QueryError> {
        let (since_ms, until_ms) = whole_intervals(self.every_secs, self.since_ms, self.until_ms)?;
        Ok((since_ms, until_ms, self.max_rows.clamp(1, i64::MAX - 1)))
    }
}

/// Per-SKU (or one SKU's) totals per interval of `range` (the first and
/// last whole too, and whole hours summed from `ledger_hourly`); refused
/// (`max_rows`) when there would be more rows than it allows.
pub async fn report(pool: &PgPool, range: &ReportRange<'_>) -> Result<Vec<ReportRow>, QueryError> {
    let (since_ms, until_ms, max_rows) = range.checked()?;
    let rows: Vec<ReportRow> = sqlx::query_as(concat!(
        "SELECT sku, ",
        rfc3339!("bucket"),
        ", records, deducts_applied, units_taken, rollbacks_applied, units_returned, net_taken,
             restocks_applied, restock_delta, rejected_insufficient, rejected_cancelled,
             rejected_restock, ignored_no_deduction, duplicates, invalid, lowest_available, ",
        rfc3339!("sold_out_at"),
        " FROM ledger_report($1, make_interval(secs => $2),
             timestamptz 'epoch' + interval '1 millisecond' * $3,
             timestamptz 'epoch' + interval '1 millisecond' * $4, $5)
         LIMIT $6"
    ))
    .bind(range.topic)
    .bind(range.every_secs as f64)
    .bind(since_ms)
    .bind(until_ms)
    .bind(range.sku)
    .bind(max_rows + 1)
    .fetch_all(pool)
    .await?;
    within_max_rows(rows, max_rows)
}

// The rows of `report_by_location`, and (feature `openapi`) the
// gateway's body for them, as `ReportRow` is.
/// One location's totals of one SKU over one interval.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
#[cfg_attr(
    feature = "openapi",
    derive(serde::Serialize, utoipa::ToSchema),
    schema(as = LocationReportRowBody)
)]
pub struct LocationReportRow {
    pub sku: String,
    pub location: String,
    /// The interval's start, RFC 3339 UTC.
    #[cfg_attr(feature = "openapi", serde(rename = "interval_start"))]
    pub bucket: String,
    /// Records that named or acted on the location (transfers at their `from`).
    pub records: i64,
    /// Units deducts took from here.
    pub units_taken: i64,
    /// Units that came back here: rollbacks, expiries, refunds.
    pub units_returned: i64,
    /// What applied restocks here changed its available stock by.
    pub restock_delta: i64,
    /// Units transfers moved away from here.
    pub transferred_out: i64,
    /// Units transfers moved here.
    pub transferred_in: i64,
    /// Deducts and transfers refused for too little stock here (or for an
    /// unknown location of this name).
    pub rejected_insufficient: i64,
}

/// Per SKU and location (or one SKU's locations), totals per interval of
/// `range`, as [`report`] does; only records of SKUs that keep stock by
/// location count. Refused (`max_rows`) when there would be more rows than
/// it allows.
pub async fn report_by_location(
    pool: &PgPool,
    range: &ReportRange<'_>,
) -> Result<Vec<LocationReportRow>, QueryError> {
    let (since_ms, until_ms, max_rows) = range.checked()?;
    // Each row counts at its location; a transfer counts again, incoming,
    // at its destination.
    let rows: Vec<LocationReportRow> = sqlx::query_as(concat!(
        "WITH range AS (
             SELECT * FROM ledger_entries
             WHERE topic = $1
               AND occurred_at >= timestamptz 'epoch' + interval '1 millisecond' * $3
               AND occurred_at < timestamptz 'epoch' + interval '1 millisecond' * $4
               AND ($5::text IS NULL OR sku = $5)
         ), moves AS (
             SELECT sku, location, occurred_at, command, result, delta, quantity,
                    false AS incoming
             FROM range WHERE location IS NOT NULL
             UNION ALL
             SELECT sku, to_location, occurred_at, command, result, delta, quantity, true
             FROM range WHERE to_location IS NOT NULL
         ), totals AS (
             SELECT sku, location,
                    date_bin(make_interval(secs => $2), occurred_at, timestamptz 'epoch') AS bucket,
                    count(*) FILTER (WHERE NOT incoming) AS records,
                    coalesce(sum(-delta) FILTER (WHERE NOT incoming AND result = 'APPLIED'
                        AND command = 'DEDUCT'), 0)::bigint AS units_taken,
                    coalesce(sum(delta) FILTER (WHERE NOT incoming AND delta > 0
                        AND command IN ('ROLLBACK', 'EXPIRE', 'REFUND', 'CONFIRM')), 0)::bigint
                        AS units_returned,
                    coalesce(sum(delta) FILTER (WHERE NOT incoming AND result = 'APPLIED'
                        AND command = 'RESTOCK'), 0)::bigint AS restock_delta,
                    coalesce(sum(quantity) FILTER (WHERE NOT incoming AND result = 'APPLIED'
                        AND command = 'TRANSFER'), 0)::bigint AS transferred_out,
                    coalesce(sum(quantity) FILTER (WHERE incoming AND result = 'APPLIED'), 0)::bigint
                        AS transferred_in,
                    count(*) FILTER (WHERE NOT incoming AND result = 'REJECTED_INSUFFICIENT')
                        AS rejected_insufficient
             FROM moves GROUP BY 1, 2, 3
         )
         SELECT sku, location, ",
        rfc3339!("bucket"),
        ", records, units_taken, units_returned, restock_delta, transferred_out,
             transferred_in, rejected_insufficient
         FROM totals ORDER BY sku, location, totals.bucket LIMIT $6"
    ))
    .bind(range.topic)
    .bind(range.every_secs as f64)
    .bind(since_ms)
    .bind(until_ms)
    .bind(range.sku)
    .bind(max_rows + 1)
    .fetch_all(pool)
    .await?;
    within_max_rows(rows, max_rows)
}
