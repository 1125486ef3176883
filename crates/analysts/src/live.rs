//! The archive's last minutes, for the console and `stockledger status`:
//! decisions per result, the busiest SKUs, the units a SKU's deducts took
//! per interval, and the moments it sold out or came back.
//!
//! Every question is bounded by `since_ms` (a record's `occurred_at`, ms
//! since the epoch), which the archive's monthly partitions and its BRIN
//! index on `occurred_at` serve without reading older rows. What the
//! archiver has not archived yet is not counted: a lagging archiver shows
//! as lag in `status`, not here.

use sqlx::PgPool;

/// `occurred_at >= $since` for a bound parameter of ms since the epoch.
macro_rules! since {
    ($n:literal) => {
        concat!(
            "occurred_at >= timestamptz 'epoch' + interval '1 millisecond' * $",
            $n
        )
    };
}

/// Most SKUs [`busiest_skus`] answers.
pub const MAX_BUSIEST: i64 = 100;

/// Decisions of `topic`'s records that occurred at or after `since_ms`,
/// per result, most frequent first.
pub async fn decisions_by_result_since(
    pool: &PgPool,
    topic: &str,
    since_ms: i64,
) -> Result<Vec<(String, i64)>, sqlx::Error> {
    sqlx::query_as(concat!(
        "SELECT result, count(*) FROM ledger_entries WHERE topic = $1 AND ",
        since!(2),
        " GROUP BY result ORDER BY count(*) DESC, result"
    ))
    .bind(topic)
    .bind(since_ms)
    .fetch_all(pool)
    .await
}

/// The record the archiver of `group` last stopped on, if it has a note
/// (`service_stops`): the record, how many times in a row, when (ms since
/// the Unix epoch) and why.
pub async fn archiver_stop(
    pool: &PgPool,
    group: &str,
) -> Result<Option<(String, i32, i64, String)>, sqlx::Error> {
    sqlx::query_as(
        "SELECT record, times, (extract(epoch FROM stopped_at) * 1000)::bigint, error
         FROM service_stops WHERE consumer_group = $1 AND service = 'archiver'",
    )
    .bind(group)
    .fetch_optional(pool)
    .await
}

/// The SKUs with the most deducts (applied or refused) since `since_ms`,
/// busiest first, at most `limit` (and at most [`MAX_BUSIEST`]).
pub async fn busiest_skus(
    pool: &PgPool,
    topic: &str,
    since_ms: i64,
    limit: i64,
) -> Result<Vec<String>, sqlx::Error> {
    sqlx::query_scalar(concat!(
        "SELECT sku FROM ledger_entries WHERE topic = $1 AND command = 'DEDUCT' AND ",
        since!(2),
        " GROUP BY sku ORDER BY count(*) DESC, sku LIMIT $3"
    ))
    .bind(topic)
    .bind(since_ms)
    .bind(limit.clamp(0, MAX_BUSIEST))
    .fetch_all(pool)
    .await
}

/// The units `sku`'s applied deducts (holds and basket lines included)
/// took, per interval of `every_ms` starting at `since_ms`: (the
/// interval's start, units), oldest first, intervals with none left out.
pub async fn taken_per_interval(
    pool: &PgPool,
    topic: &str,
    sku: &str,
    since_ms: i64,
    every_ms: i64,
) -> Result<Vec<(i64, i64)>, sqlx::Error> {
    sqlx::query_as(concat!(
        "SELECT $3 + ((extract(epoch FROM occurred_at) * 1000)::bigint - $3) / $4 * $4 AS start,
                sum(-delta)::bigint
         FROM ledger_entries
         WHERE topic = $1 AND sku = $2 AND command = 'DEDUCT' AND result = 'APPLIED' AND ",
        since!(3),
        " GROUP BY start ORDER BY start"
    ))
    .bind(topic)
    .bind(sku)
    .bind(since_ms)
    .bind(every_ms.max(1))
    .fetch_all(pool)
    .await
}

/// A moment a SKU sold out or came back in stock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StockMoment {
    /// The record's `occurred_at`, ms since the epoch.
    pub at_ms: i64,
    /// `SOLD_OUT` or `BACK_IN_STOCK`.
    pub kind: String,
    /// The location the event is about, for stock kept by location.
    pub location: Option<String>,
    pub available: i64,
}

/// When `sku` sold out and came back since `since_ms`, in log order, at
/// most the first 200.
pub async fn stock_moments(
    pool: &PgPool,
    topic: &str,
    sku: &str,
    since_ms: i64,
) -> Result<Vec<StockMoment>, sqlx::Error> {
    let rows: Vec<(i64, String, Option<String>, i64)> = sqlx::query_as(concat!(
        "SELECT (extract(epoch FROM occurred_at) * 1000)::bigint, kind, location, available_after
         FROM ledger_stock_events
         WHERE topic = $1 AND sku = $2 AND kind IN ('SOLD_OUT', 'BACK_IN_STOCK') AND ",
        since!(3),
        " ORDER BY partition, log_offset LIMIT 200"
    ))
    .bind(topic)
    .bind(sku)
    .bind(since_ms)
    .fetch_all(pool)
    .await?;
    Ok(rows
        .into_iter()
        .map(|(at_ms, kind, location, available)| StockMoment {
            at_ms,
            kind,
            location,
            available,
        })
        .collect())
}
