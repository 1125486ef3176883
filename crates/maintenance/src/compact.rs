//! Keeping Redis memory bounded: pruning history that is archived and older
//! than a retention window.
//!
//! Per SKU, the cutoff is the newest archived record whose `occurred_at` is
//! older than the window (the archive holds every earlier record of the
//! partition too). Decisions at or below it are removed, and so are orders
//! whose final state (rolled back, or a tombstone) was set at or below it.
//! Deducted orders are kept so a later rollback still gives stock back.
//!
//! After pruning, a deduct for a pruned order id is decided as for a new
//! order (its tombstone is gone), and a redelivered pruned record is
//! answered `DUPLICATE` instead of its first decision (the archive keeps
//! the first decision: its row is never overwritten).

use std::time::Duration;

use sqlx::PgPool;
use stockledger_projection::{Projection, ProjectionError};
use stockledger_redis::RedisConn;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CompactReport {
    pub skus_checked: u64,
    pub orders_removed: u64,
    pub decisions_removed: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum CompactError {
    #[error("the Redis projection failed")]
    Projection(#[from] ProjectionError),
    #[error("pruning sku {sku} up to offset {cutoff}")]
    Prune {
        sku: String,
        cutoff: i64,
        #[source]
        source: ProjectionError,
    },
    #[error("a PostgreSQL request failed")]
    Database(#[from] sqlx::Error),
}

/// Prunes the projection under `prefix` of history older than `retention`
/// (by the records' `occurred_at`) that is archived for `topic`.
pub async fn compact(
    redis: &RedisConn,
    prefix: &str,
    pool: &PgPool,
    topic: &str,
    retention: Duration,
    page_size: usize,
    mut on_page: impl FnMut(u64) + Send,
) -> Result<CompactReport, CompactError> {
    let projection = Projection::new(redis.clone(), prefix);
    let mut report = CompactReport::default();
    let mut pages = projection.sku_pages(page_size).await?;
    while let Some(skus) = pages.next_page().await? {
        report.skus_checked += skus.len() as u64;
        // Offsets of records decided on the SKU's own partition only: an
        // invalid or misrouted record keyed by the SKU may sit on another
        // partition, where its offset means nothing for this SKU.
        let cutoffs: Vec<(String, i64)> = sqlx::query_as(
            "SELECT sku, max(log_offset) FROM ledger_entries
             WHERE topic = $1 AND sku = ANY($2)
               AND result NOT IN ('INVALID', 'MISROUTED')
               AND occurred_at < now() - make_interval(secs => $3)
             GROUP BY sku",
        )
        .bind(topic)
        .bind(&skus)
        .bind(retention.as_secs_f64())
        .fetch_all(pool)
        .await?;
        for (sku, cutoff) in cutoffs {
            let (orders, decisions) =
                projection
                    .prune(&sku, cutoff)
                    .await
                    .map_err(|source| CompactError::Prune {
                        sku: sku.clone(),
                        cutoff,
                        source,
                    })?;
            report.orders_removed += orders;
            report.decisions_removed += decisions;
        }
        on_page(report.skus_checked);
    }
    Ok(report)
}
