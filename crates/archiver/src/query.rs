//! Reading the archive.

use sqlx::PgPool;

/// One archived decision, as analysts see it.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct Entry {
    pub topic: String,
    pub partition: i32,
    pub log_offset: i64,
    pub sku: String,
    pub command: Option<String>,
    pub order_id: Option<String>,
    pub adjustment_id: Option<String>,
    pub quantity: Option<i64>,
    pub result: String,
    pub delta: i64,
    pub available_after: i64,
    pub total_after: i64,
    pub reason: Option<String>,
    /// RFC 3339, UTC, millisecond precision.
    pub occurred_at: String,
}

/// Which history to read.
#[derive(Debug, Clone)]
pub enum HistoryOf {
    Sku(String),
    /// An order of any SKU, or of one SKU when given.
    Order {
        order_id: String,
        sku: Option<String>,
    },
}

const ENTRY_COLUMNS: &str = "topic, partition, log_offset, sku, command, order_id, adjustment_id,
    quantity, result, delta, available_after, total_after, reason,
    to_char(occurred_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"') AS occurred_at";

/// Up to `limit` entries of the ledger on command topic `topic`, in log
/// order (the oldest first).
pub async fn history(
    pool: &PgPool,
    topic: &str,
    of: &HistoryOf,
    limit: i64,
) -> Result<Vec<Entry>, sqlx::Error> {
    match of {
        HistoryOf::Sku(sku) => {
            sqlx::query_as(&format!(
                "SELECT {ENTRY_COLUMNS} FROM ledger_entries WHERE topic = $1 AND sku = $2
                 ORDER BY log_offset LIMIT $3"
            ))
            .bind(topic)
            .bind(sku)
            .bind(limit)
            .fetch_all(pool)
            .await
        }
        HistoryOf::Order { order_id, sku } => {
            sqlx::query_as(&format!(
                "SELECT {ENTRY_COLUMNS} FROM ledger_entries
                 WHERE topic = $1 AND order_id = $2 AND ($3::text IS NULL OR sku = $3)
                 ORDER BY sku, log_offset LIMIT $4"
            ))
            .bind(topic)
            .bind(order_id)
            .bind(sku)
            .bind(limit)
            .fetch_all(pool)
            .await
        }
    }
}

/// Number of archived rows whose command record is on `topic`.
pub async fn count_rows(pool: &PgPool, topic: &str) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar("SELECT count(*) FROM ledger_entries WHERE topic = $1")
        .bind(topic)
        .fetch_one(pool)
        .await
}

/// Rows per result for `topic`, most frequent first.
pub async fn count_by_result(
    pool: &PgPool,
    topic: &str,
) -> Result<Vec<(String, i64)>, sqlx::Error> {
    sqlx::query_as(
        "SELECT result, count(*) FROM ledger_entries WHERE topic = $1
         GROUP BY result ORDER BY count(*) DESC, result",
    )
    .bind(topic)
    .fetch_all(pool)
    .await
}

/// The lowest `available_after` ever archived for `topic` (None if no rows).
pub async fn min_available(pool: &PgPool, topic: &str) -> Result<Option<i64>, sqlx::Error> {
    sqlx::query_scalar(
        "SELECT min(available_after) FROM ledger_entries
         WHERE topic = $1 AND result NOT IN ('INVALID', 'MISROUTED')",
    )
    .bind(topic)
    .fetch_one(pool)
    .await
}
