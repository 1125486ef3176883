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

/// Where a page of history ended: the last entry's SKU and log position.
/// Its text form, `PARTITION:OFFSET:SKU`, is what `after` takes to read
/// the next page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cursor {
    pub partition: i32,
    pub log_offset: i64,
    pub sku: String,
}

impl Cursor {
    fn of(entry: &Entry) -> Self {
        Self {
            partition: entry.partition,
            log_offset: entry.log_offset,
            sku: entry.sku.clone(),
        }
    }
}

impl std::fmt::Display for Cursor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}:{}", self.partition, self.log_offset, self.sku)
    }
}

impl std::str::FromStr for Cursor {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || {
            format!(
                "{s:?} is not a cursor (PARTITION:OFFSET:SKU, as a page's next cursor gives it)"
            )
        };
        let mut parts = s.splitn(3, ':');
        let partition = parts.next().and_then(|p| p.parse().ok()).ok_or_else(bad)?;
        let log_offset = parts.next().and_then(|o| o.parse().ok()).ok_or_else(bad)?;
        let sku = parts.next().filter(|s| !s.is_empty()).ok_or_else(bad)?;
        Ok(Self {
            partition,
            log_offset,
            sku: sku.to_owned(),
        })
    }
}

/// One page of history and where the next one starts (`None`: this was
/// the last).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Page {
    pub entries: Vec<Entry>,
    pub next: Option<Cursor>,
}

/// Up to `limit` entries of the ledger on command topic `topic`, in log
/// order (the oldest first).
pub async fn history(
    pool: &PgPool,
    topic: &str,
    of: &HistoryOf,
    limit: i64,
) -> Result<Vec<Entry>, sqlx::Error> {
    Ok(history_page(pool, topic, of, None, limit).await?.entries)
}

/// The page of up to `limit` entries that follows `after` (from the first
/// when `None`), ordered by SKU, then log offset, then partition: a SKU's
/// entries in log order.
pub async fn history_page(
    pool: &PgPool,
    topic: &str,
    of: &HistoryOf,
    after: Option<&Cursor>,
    limit: i64,
) -> Result<Page, sqlx::Error> {
    // One row beyond the page is read to learn whether another follows.
    let limit = limit.clamp(1, i64::MAX - 1);
    let (after_sku, after_offset, after_partition) = match after {
        Some(c) => (Some(c.sku.as_str()), c.log_offset, c.partition),
        None => (None, i64::MIN, i32::MIN),
    };
    let mut entries: Vec<Entry> = match of {
        HistoryOf::Sku(sku) => {
            sqlx::query_as(&format!(
                "SELECT {ENTRY_COLUMNS} FROM ledger_entries WHERE topic = $1 AND sku = $2
                 AND ($3::text IS NULL OR (log_offset, partition) > ($4, $5))
                 ORDER BY log_offset, partition LIMIT $6"
            ))
            .bind(topic)
            .bind(sku)
            .bind(after_sku)
            .bind(after_offset)
            .bind(after_partition)
            .bind(limit + 1)
            .fetch_all(pool)
            .await?
        }
        HistoryOf::Order { order_id, sku } => {
            sqlx::query_as(&format!(
                "SELECT {ENTRY_COLUMNS} FROM ledger_entries
                 WHERE topic = $1 AND order_id = $2 AND ($3::text IS NULL OR sku = $3)
                 AND ($4::text IS NULL OR (sku, log_offset, partition) > ($4, $5, $6))
                 ORDER BY sku, log_offset, partition LIMIT $7"
            ))
            .bind(topic)
            .bind(order_id)
            .bind(sku)
            .bind(after_sku)
            .bind(after_offset)
            .bind(after_partition)
            .bind(limit + 1)
            .fetch_all(pool)
            .await?
        }
    };
    let more = entries.len() as i64 > limit;
    entries.truncate(limit as usize);
    let next = if more {
        entries.last().map(Cursor::of)
    } else {
        None
    };
    Ok(Page { entries, next })
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
