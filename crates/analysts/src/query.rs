//! Reading the archive.

use sqlx::{PgPool, Postgres, QueryBuilder};
use stockledger_core::{Figures, ResultCode};

pub use crate::report::{
    report, report_by_location, LocationReportRow, ReportRange, ReportRow, MAX_EVERY_SECS,
};
pub use crate::sql::{check_range, QueryError};
pub use crate::time::{format_instant, parse_as_of, parse_instant, parse_span_ms, AsOf};

/// One archived decision, as analysts see it.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct Entry {
    pub topic: String,
    pub partition: i32,
    pub log_offset: i64,
    pub sku: String,
    pub command: Option<String>,
    pub command_id: Option<String>,
    pub order_id: Option<String>,
    pub adjustment_id: Option<String>,
    pub quantity: Option<i64>,
    pub result: String,
    pub delta: i64,
    /// The SKU's stock after the record; `None` for a record not decided
    /// on it (`INVALID`, `MISROUTED`), which says nothing of the stock.
    pub available_after: Option<i64>,
    pub total_after: Option<i64>,
    pub reason: Option<String>,
    /// RFC 3339, UTC, millisecond precision.
    pub occurred_at: String,
    /// `occurred_at` in milliseconds since the Unix epoch.
    pub occurred_at_ms: i64,
    /// `ADD` or `SET`, for a restock archived from outcome schema v3 on.
    pub restock_mode: Option<String>,
    /// The reason a rollback gave (from outcome schema v3 on).
    pub rollback_reason: Option<String>,
    /// The buyer a deduct named (from outcome schema v4 on).
    pub user_id: Option<String>,
    /// A reservation's deadline: RFC 3339, UTC, millisecond precision.
    pub expires_at: Option<String>,
    /// `expires_at` in milliseconds since the Unix epoch.
    pub expires_at_ms: Option<i64>,
    /// The W3C `traceparent` the command's producer sent, if any.
    pub traceparent: Option<String>,
    /// The basket a deduct was a line of (from outcome schema v5 on).
    pub basket_id: Option<String>,
    /// The named units a deduct took or asked for, or a restock added
    /// (from outcome schema v6 on; `None` for counted stock).
    pub units: Option<Vec<String>>,
    /// The location the command named or acted on; a transfer's `from`
    /// (from outcome schema v7 on; `None` for a SKU without locations).
    pub location: Option<String>,
    /// Where a transfer moved stock to.
    pub to_location: Option<String>,
    /// The stock events the record caused (`SOLD_OUT`, `BACK_IN_STOCK`,
    /// `LOW_STOCK`, `OPENED`, `CLOSED`, `PAUSED`, `RESUMED`; from outcome
    /// schema v8 on; `None` when none).
    pub events: Option<Vec<String>>,
    /// The sale window a window command set: its opening, RFC 3339 (from
    /// outcome schema v9 on).
    pub opens_at: Option<String>,
    /// Its closing, RFC 3339.
    pub closes_at: Option<String>,
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
    /// A basket: its lines' holds and everything that befell those orders
    /// afterwards (confirms, rollbacks, expiries, refunds), by SKU.
    Basket(String),
    /// One named unit of a SKU: the restock that added it, every deduct
    /// that asked for it, and everything that befell the orders that took
    /// it (confirms, rollbacks, expiries, refunds), in log order.
    Unit {
        sku: String,
        unit: String,
    },
}

/// Most entries one page of history may ask for.
pub const MAX_PAGE: i64 = 10_000;

/// The columns an [`Entry`] is read from.
macro_rules! entry_columns {
    () => {
        concat!(
            "topic, partition, log_offset, sku, command, command_id, order_id, adjustment_id,
             quantity, result, delta, available_after, total_after, reason, ",
            rfc3339!("occurred_at"),
            ", (extract(epoch FROM occurred_at) * 1000)::bigint AS occurred_at_ms,
             restock_mode, rollback_reason, user_id, ",
            rfc3339!("expires_at"),
            ", (extract(epoch FROM expires_at) * 1000)::bigint AS expires_at_ms, traceparent,
             basket_id, units, location, to_location, events, ",
            rfc3339!("opens_at"),
            ", ",
            rfc3339!("closes_at")
        )
    };
}

const ENTRY_COLUMNS: &str = entry_columns!();

/// Where a page of history ended: the last entry's command topic, log
/// position and SKU. Its text form, `TOPIC:PARTITION:OFFSET:SKU`, is what
/// `after` takes to read the next page (a topic name has no `:`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cursor {
    pub topic: String,
    pub partition: i32,
    pub log_offset: i64,
    pub sku: String,
}

impl Cursor {
    fn of(entry: &Entry) -> Self {
        Self {
            topic: entry.topic.clone(),
            partition: entry.partition,
            log_offset: entry.log_offset,
            sku: entry.sku.clone(),
        }
    }
}

impl std::fmt::Display for Cursor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}:{}:{}:{}",
            self.topic, self.partition, self.log_offset, self.sku
        )
    }
}

impl std::str::FromStr for Cursor {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || {
            format!(
                "{s:?} is not a cursor (TOPIC:PARTITION:OFFSET:SKU, as a page's next cursor gives it)"
            )
        };
        let mut parts = s.splitn(4, ':');
        let topic = parts.next().filter(|t| !t.is_empty()).ok_or_else(bad)?;
        let partition = parts.next().and_then(|p| p.parse().ok()).ok_or_else(bad)?;
        let log_offset = parts.next().and_then(|o| o.parse().ok()).ok_or_else(bad)?;
        let sku = parts.next().filter(|s| !s.is_empty()).ok_or_else(bad)?;
        Ok(Self {
            topic: topic.to_owned(),
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

/// A history question: whose, which records, in which direction, from where.
#[derive(Debug, Clone)]
pub struct HistoryQuery {
    pub of: HistoryOf,
    /// Records with `occurred_at` at or after this (ms since the epoch).
    pub since_ms: Option<i64>,
    /// Records with `occurred_at` before this (ms since the epoch).
    pub until_ms: Option<i64>,
    /// Only these results (all when empty).
    pub results: Vec<ResultCode>,
    /// Newest first (log order reversed) instead of oldest first.
    pub newest_first: bool,
    /// Continue after this entry (the previous page's `next`).
    pub after: Option<Cursor>,
    /// Most entries, 1 to [`MAX_PAGE`].
    pub limit: i64,
}

impl HistoryQuery {
    /// The first `limit` entries of `of`, oldest first, unfiltered.
    pub fn of(of: HistoryOf, limit: i64) -> Self {
        Self {
            of,
            since_ms: None,
            until_ms: None,
            results: Vec::new(),
            newest_first: false,
            after: None,
            limit,
        }
    }
}

/// Up to `limit` entries of the ledger on command topic `topic`, in log
/// order (the oldest first).
pub async fn history(
    pool: &PgPool,
    topic: &str,
    of: &HistoryOf,
    limit: i64,
) -> Result<Vec<Entry>, QueryError> {
    let limit = limit.clamp(1, MAX_PAGE);
    let page = history_page(pool, topic, &HistoryQuery::of(of.clone(), limit)).await?;
    Ok(page.entries)
}

/// One page of the history `q` asks for on command topic `topic`: a SKU's
/// entries in log order, an order's ordered by SKU and then log order
/// (reversed when newest first), with the cursor of the next page.
pub async fn history_page(
    pool: &PgPool,
    topic: &str,
    q: &HistoryQuery,
) -> Result<Page, QueryError> {
    if !(1..=MAX_PAGE).contains(&q.limit) {
        return Err(QueryError::invalid(
            "limit",
            format!("must be between 1 and {MAX_PAGE}, got {}", q.limit),
        ));
    }
    check_range(q.since_ms, q.until_ms)?;
    if let Some(after) = &q.after {
        if after.topic != topic {
            return Err(QueryError::invalid(
                "after",
                format!(
                    "the cursor is a position in topic {}, not in {topic}",
                    after.topic
                ),
            ));
        }
    }
    let mut sql = QueryBuilder::<Postgres>::new(format!(
        "SELECT {ENTRY_COLUMNS} FROM ledger_entries WHERE topic = "
    ));
    sql.push_bind(topic);
    // One SKU's histories are in log order; those that may span SKUs (an
    // order's, a basket's) by SKU, then log order.
    let by_sku = match &q.of {
        HistoryOf::Sku(sku) => {
            sql.push(" AND sku = ").push_bind(sku);
            false
        }
        HistoryOf::Order { order_id, sku } => {
            sql.push(" AND order_id = ").push_bind(order_id);
            if let Some(sku) = sku {
                sql.push(" AND sku = ").push_bind(sku);
            }
            true
        }
        HistoryOf::Basket(basket_id) => {
            // A line is the order `basket_id` of its SKU: the basket's rows
            // and the rest of those orders' lives.
            sql.push(" AND order_id = ")
                .push_bind(basket_id)
                .push(" AND sku IN (SELECT sku FROM ledger_entries WHERE basket_id = ")
                .push_bind(basket_id)
                .push(" AND topic = ")
                .push_bind(topic)
                .push(")");
            true
        }
        HistoryOf::Unit { sku, unit } => {
            sql.push(" AND sku = ")
                .push_bind(sku)
                .push(" AND (units @> ARRAY[")
                .push_bind(unit)
                .push(
                    "]::text[] OR order_id IN (SELECT order_id FROM ledger_entries WHERE topic = ",
                )
                .push_bind(topic)
                .push(" AND sku = ")
                .push_bind(sku)
                .push(" AND command = 'DEDUCT' AND result = 'APPLIED' AND units @> ARRAY[")
                .push_bind(unit)
                .push("]::text[]))");
            false
        }
    };
    let order_by = continue_after(&mut sql, q.after.as_ref(), by_sku, q.newest_first);
    push_time_range(&mut sql, q.since_ms, q.until_ms);
    if !q.results.is_empty() {
        let results: Vec<&str> = q.results.iter().map(|r| r.as_str()).collect();
        sql.push(" AND result = ANY(").push_bind(results).push(")");
    }
    // One row beyond the page is read to learn whether another follows.
    sql.push(format!(" ORDER BY {order_by} LIMIT "))
        .push_bind(q.limit + 1);
    let mut entries: Vec<Entry> = sql.build_query_as().fetch_all(pool).await?;
    let more = entries.len() as i64 > q.limit;
    entries.truncate(q.limit as usize);
    let next = if more {
        entries.last().map(Cursor::of)
    } else {
        None
    };
    Ok(Page { entries, next })
}

/// Continues after `after` in the history's order, `by_sku` then log
/// order or log order alone, reversed when `newest_first`; the `ORDER BY`
/// clause.
fn continue_after(
    sql: &mut QueryBuilder<'_, Postgres>,
    after: Option<&Cursor>,
    by_sku: bool,
    newest_first: bool,
) -> String {
    let (cmp, dir) = if newest_first {
        ("<", "DESC")
    } else {
        (">", "ASC")
    };
    let sku = if by_sku { "sku, " } else { "" };
    if let Some(after) = after {
        sql.push(format!(" AND ({sku}log_offset, partition) {cmp} ("));
        if by_sku {
            sql.push_bind(after.sku.clone()).push(", ");
        }
        sql.push_bind(after.log_offset)
            .push(", ")
            .push_bind(after.partition)
            .push(")");
    }
    let sku = if by_sku {
        format!("sku {dir}, ")
    } else {
        String::new()
    };
    format!("{sku}log_offset {dir}, partition {dir}")
}

/// `AND since <= occurred_at AND occurred_at < until`, for the bounds given.
fn push_time_range(
    sql: &mut QueryBuilder<'_, Postgres>,
    since_ms: Option<i64>,
    until_ms: Option<i64>,
) {
    if let Some(since) = since_ms {
        sql.push(" AND occurred_at >= timestamptz 'epoch' + interval '1 millisecond' * ")
            .push_bind(since);
    }
    if let Some(until) = until_ms {
        sql.push(" AND occurred_at < timestamptz 'epoch' + interval '1 millisecond' * ")
            .push_bind(until);
    }
}

/// The newest archived record of a command partition: how far the archive
/// reaches in it.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct Reach {
    pub partition: i32,
    pub log_offset: i64,
    /// RFC 3339, UTC, millisecond precision.
    pub occurred_at: String,
}

/// What the archive says a SKU's stock was.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StockAsOf {
    /// The stock right after `entry` (its figures as `stock`); `reach` is
    /// how far the archive goes in the SKU's partition.
    Known {
        entry: Entry,
        stock: Figures,
        reach: Reach,
    },
    /// The SKU had no record yet at that moment; `first` is its first
    /// archived one.
    BeforeFirst { first: Entry },
    /// The offset asked for is beyond what the archive holds of the SKU's
    /// partition: the archiver is behind (or the log ends before it).
    NotArchivedYet { asked: i64, reach: Reach },
    /// No valid record of the SKU is archived at all.
    Unknown,
}

/// The stock of `sku` on command topic `topic` at `at`, from the archive.
///
/// The archive holds each SKU's decisions in log order with the stock after
/// each, so the answer is one indexed row. Records not decided on the
/// stock (invalid or misrouted) have no figures and are skipped.
pub async fn stock_as_of(
    pool: &PgPool,
    topic: &str,
    sku: &str,
    at: AsOf,
) -> Result<StockAsOf, QueryError> {
    const VALID: &str = "available_after IS NOT NULL";
    let first: Option<Entry> = sqlx::query_as(&format!(
        "SELECT {ENTRY_COLUMNS} FROM ledger_entries WHERE topic = $1 AND sku = $2 AND {VALID}
         ORDER BY log_offset, partition LIMIT 1"
    ))
    .bind(topic)
    .bind(sku)
    .fetch_optional(pool)
    .await?;
    let Some(first) = first else {
        return Ok(StockAsOf::Unknown);
    };
    let reach: Reach = sqlx::query_as(concat!(
        "SELECT partition, log_offset, ",
        rfc3339!("occurred_at"),
        " FROM ledger_entries WHERE topic = $1 AND partition = $2
             ORDER BY log_offset DESC LIMIT 1"
    ))
    .bind(topic)
    .bind(first.partition)
    .fetch_one(pool)
    .await?;
    let entry: Option<Entry> = match at {
        AsOf::Offset(offset) => {
            if offset > reach.log_offset {
                return Ok(StockAsOf::NotArchivedYet {
                    asked: offset,
                    reach,
                });
            }
            sqlx::query_as(&format!(
                "SELECT {ENTRY_COLUMNS} FROM ledger_entries
                 WHERE topic = $1 AND sku = $2 AND partition = $3 AND log_offset <= $4 AND {VALID}
                 ORDER BY log_offset DESC LIMIT 1"
            ))
            .bind(topic)
            .bind(sku)
            .bind(first.partition)
            .bind(offset)
            .fetch_optional(pool)
            .await?
        }
        AsOf::Time(ms) => {
            sqlx::query_as(&format!(
                "SELECT {ENTRY_COLUMNS} FROM ledger_entries
                 WHERE topic = $1 AND sku = $2 AND partition = $3 AND {VALID}
                   AND occurred_at <= timestamptz 'epoch' + interval '1 millisecond' * $4
                 ORDER BY occurred_at DESC, log_offset DESC LIMIT 1"
            ))
            .bind(topic)
            .bind(sku)
            .bind(first.partition)
            .bind(ms)
            .fetch_optional(pool)
            .await?
        }
    };
    let figures = |e: &Entry| {
        Some(Figures {
            available: e.available_after?,
            total: e.total_after?,
        })
    };
    Ok(match entry {
        Some(entry) => match figures(&entry) {
            Some(stock) => StockAsOf::Known {
                entry,
                stock,
                reach,
            },
            // Not taken by the query: every row it reads has figures.
            None => StockAsOf::BeforeFirst { first },
        },
        None => StockAsOf::BeforeFirst { first },
    })
}

/// Every archived entry of command topic `topic` with
/// `since <= occurred_at < until`, by `occurred_at` then log position, as
/// a stream (rows are fetched as they are consumed).
pub fn entries_between<'a>(
    pool: &'a PgPool,
    topic: &'a str,
    since_ms: i64,
    until_ms: i64,
) -> impl futures::Stream<Item = Result<Entry, sqlx::Error>> + Send + 'a {
    sqlx::query_as(concat!(
        "SELECT ",
        entry_columns!(),
        " FROM ledger_entries WHERE topic = $1
           AND occurred_at >= timestamptz 'epoch' + interval '1 millisecond' * $2
           AND occurred_at < timestamptz 'epoch' + interval '1 millisecond' * $3
         ORDER BY occurred_at, partition, log_offset"
    ))
    .bind(topic)
    .bind(since_ms)
    .bind(until_ms)
    .fetch(pool)
}

/// Number of archived entries [`entries_between`] gives for the same
/// arguments (as of now).
pub async fn count_between(
    pool: &PgPool,
    topic: &str,
    since_ms: i64,
    until_ms: i64,
) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar(
        "SELECT count(*) FROM ledger_entries WHERE topic = $1
           AND occurred_at >= timestamptz 'epoch' + interval '1 millisecond' * $2
           AND occurred_at < timestamptz 'epoch' + interval '1 millisecond' * $3",
    )
    .bind(topic)
    .bind(since_ms)
    .bind(until_ms)
    .fetch_one(pool)
    .await
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

/// Rows of `sku` on `topic` per command and result.
pub async fn count_by_command_and_result(
    pool: &PgPool,
    topic: &str,
    sku: &str,
) -> Result<Vec<(Option<String>, String, i64)>, sqlx::Error> {
    sqlx::query_as(
        "SELECT command, result, count(*) FROM ledger_entries WHERE topic = $1 AND sku = $2
         GROUP BY command, result ORDER BY command, result",
    )
    .bind(topic)
    .bind(sku)
    .fetch_all(pool)
    .await
}

/// The lowest `available_after` ever archived for `topic` (None if no row
/// gives the stock).
pub async fn min_available(pool: &PgPool, topic: &str) -> Result<Option<i64>, sqlx::Error> {
    sqlx::query_scalar("SELECT min(available_after) FROM ledger_entries WHERE topic = $1")
        .bind(topic)
        .fetch_one(pool)
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_795_000_000_000;

    #[test]
    fn instants_are_rfc3339_now_or_a_time_ago() {
        assert_eq!(parse_instant("1970-01-01T00:00:00Z", NOW), Ok(0));
        assert_eq!(parse_instant("1970-01-01T01:00:00.250+01:00", NOW), Ok(250));
        assert_eq!(parse_instant("now", NOW), Ok(NOW));
        assert_eq!(parse_instant("-15m", NOW), Ok(NOW - 900_000));
        assert_eq!(parse_instant("-2d", NOW), Ok(NOW - 172_800_000));
        assert_eq!(format_instant(250), "1970-01-01T00:00:00.250Z");
        let text = format_instant(NOW + 7);
        assert_eq!(parse_instant(&text, 0), Ok(NOW + 7));
        for bad in [
            "",
            "yesterday",
            "2026-11-23",
            "2026-11-23T10:00:00",
            "-15",
            "-15y",
            "-0m",
        ] {
            let e = parse_instant(bad, NOW).unwrap_err();
            assert!(e.contains(&format!("{bad:?}")), "{bad}: {e}");
        }
    }

    #[test]
    fn spans_take_numbers_of_fixed_units() {
        assert_eq!(parse_span_ms("1m"), Ok(60_000));
        assert_eq!(parse_span_ms("1h"), Ok(3_600_000));
        assert_eq!(parse_span_ms("1h30m"), Ok(5_400_000));
        assert_eq!(parse_span_ms("250ms"), Ok(250));
        assert_eq!(parse_span_ms("1w"), Ok(604_800_000));
        assert_eq!(parse_span_ms("1.5h"), Ok(5_400_000));
        assert!(parse_span_ms("h").is_err());
        assert!(parse_span_ms("99999999999999999d").is_err());
        assert!(parse_span_ms("0s").is_err_and(|e| e.contains("longer than zero")));
        assert!(parse_span_ms("1y").is_err_and(|e| e.contains("unknown unit")));
        assert!(parse_span_ms("2months").is_err_and(|e| e.contains("unknown unit")));
    }

    #[test]
    fn a_cursor_names_its_topic_and_keeps_colons_in_the_sku() {
        let c: Cursor = "stock.ledger:3:42:a:b".parse().unwrap();
        assert_eq!(
            c,
            Cursor {
                topic: "stock.ledger".into(),
                partition: 3,
                log_offset: 42,
                sku: "a:b".into()
            }
        );
        assert_eq!(c.to_string(), "stock.ledger:3:42:a:b");
        for bad in ["3:42:a", ":3:42:a", "t:x:42:a", "t:3:42:", "t:3:42"] {
            assert!(bad.parse::<Cursor>().is_err(), "{bad}");
        }
    }
}
