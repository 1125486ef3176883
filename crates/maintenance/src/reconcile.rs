//! Checking that Redis and the archive agree, SKU by SKU.
//!
//! For each SKU in Redis, the archived outcome of the record at the SKU's
//! last-applied offset must exist and show the same available and total
//! stock; each SKU with archived decisions must exist in Redis. Both sides
//! are read in pages, so memory stays bounded whatever the number of SKUs.

use std::collections::HashMap;

use sqlx::PgPool;
use stockledger_projection::{Projection, ProjectionError};
use stockledger_redis::RedisConn;

/// One disagreement between Redis and the archive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Difference {
    pub sku: String,
    pub field: &'static str,
    pub redis: String,
    pub archive: String,
    /// The SKU's last-applied offset in Redis, when known.
    pub offset: Option<i64>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReconcileReport {
    /// SKUs read from Redis.
    pub skus_checked: u64,
    pub differences: Vec<Difference>,
}

#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    #[error("the Redis projection failed")]
    Projection(#[from] ProjectionError),
    #[error("comparing the page of {skus} SKUs from {first}")]
    Page {
        first: String,
        skus: usize,
        #[source]
        source: Box<ReconcileError>,
    },
    #[error("a PostgreSQL request failed")]
    Database(#[from] sqlx::Error),
}

/// Compares the projection under `prefix` with the archive of command
/// topic `topic`, `page_size` SKUs at a time.
pub async fn reconcile(
    redis: &RedisConn,
    prefix: &str,
    pool: &PgPool,
    topic: &str,
    page_size: usize,
    mut on_page: impl FnMut(u64) + Send,
) -> Result<ReconcileReport, ReconcileError> {
    let projection = Projection::new(redis.clone(), prefix);
    let mut report = ReconcileReport::default();
    let mut pages = projection.sku_pages(page_size).await?;
    while let Some(skus) = pages.next_page().await? {
        check_page(&projection, pool, topic, &skus, &mut report)
            .await
            .map_err(|e| ReconcileError::Page {
                first: skus.first().cloned().unwrap_or_default(),
                skus: skus.len(),
                source: Box::new(e),
            })?;
        on_page(report.skus_checked);
    }
    check_archived_skus_exist(&projection, pool, topic, page_size, &mut report).await?;
    Ok(report)
}

async fn check_page(
    projection: &Projection,
    pool: &PgPool,
    topic: &str,
    skus: &[String],
    report: &mut ReconcileReport,
) -> Result<(), ReconcileError> {
    if skus.is_empty() {
        return Ok(());
    }
    let names: Vec<&str> = skus.iter().map(String::as_str).collect();
    let states = projection.stock(&names).await?;
    report.skus_checked += skus.len() as u64;
    let offsets: Vec<i64> = states.iter().map(|s| s.map_or(-1, |s| s.offset)).collect();
    let partitions: Vec<Option<i32>> = states.iter().map(|s| s.and_then(|s| s.partition)).collect();
    // The row of the record the state was last changed by: on the SKU's own
    // partition (a state from before partitions were recorded names none),
    // never a record of the SKU refused as misrouted at the same offset
    // (which has no figures).
    let rows: Vec<(String, Option<i64>, Option<i64>)> = sqlx::query_as(
        "SELECT p.sku, e.available_after, e.total_after
         FROM UNNEST($2::text[], $3::bigint[], $4::integer[]) AS p(sku, log_offset, partition)
         LEFT JOIN ledger_entries e
           ON e.topic = $1 AND e.sku = p.sku AND e.log_offset = p.log_offset
          AND (p.partition IS NULL OR e.partition = p.partition)
          AND e.available_after IS NOT NULL",
    )
    .bind(topic)
    .bind(skus)
    .bind(&offsets)
    .bind(&partitions)
    .fetch_all(pool)
    .await?;
    let archived: HashMap<String, (Option<i64>, Option<i64>)> =
        rows.into_iter().map(|(sku, a, t)| (sku, (a, t))).collect();
    for (sku, state) in skus.iter().zip(states) {
        let show = |v: Option<i64>| v.map_or("missing".to_owned(), |v| v.to_string());
        let (available, total, offset) = (
            state.map(|s| s.available),
            state.map(|s| s.total),
            state.map(|s| s.offset),
        );
        let mut differ = |field, redis: String, archive: String| {
            report.differences.push(Difference {
                sku: sku.clone(),
                field,
                redis,
                archive,
                offset,
            })
        };
        match archived.get(sku) {
            Some((Some(a), Some(t))) => {
                if available != Some(*a) {
                    differ("available", show(available), a.to_string());
                }
                if total != Some(*t) {
                    differ("total", show(total), t.to_string());
                }
            }
            _ => differ(
                "archived outcome",
                format!("last applied offset {}", show(offset)),
                "no row at that offset".to_owned(),
            ),
        }
    }
    Ok(())
}

async fn check_archived_skus_exist(
    projection: &Projection,
    pool: &PgPool,
    topic: &str,
    page_size: usize,
    report: &mut ReconcileReport,
) -> Result<(), ReconcileError> {
    let mut after = String::new();
    loop {
        let skus: Vec<(String, i64)> = sqlx::query_as(
            "SELECT sku, count(*) FROM ledger_entries
             WHERE topic = $1 AND result NOT IN ('INVALID', 'MISROUTED') AND sku > $2
             GROUP BY sku ORDER BY sku LIMIT $3",
        )
        .bind(topic)
        .bind(&after)
        .bind(page_size as i64)
        .fetch_all(pool)
        .await?;
        let Some((last, _)) = skus.last() else {
            return Ok(());
        };
        after = last.clone();
        let names: Vec<&str> = skus.iter().map(|(sku, _)| sku.as_str()).collect();
        let states = projection.stock(&names).await?;
        for ((sku, rows), state) in skus.into_iter().zip(states) {
            if state.is_none() {
                report.differences.push(Difference {
                    sku,
                    field: "presence",
                    redis: "missing".to_owned(),
                    archive: format!("{rows} archived decisions"),
                    offset: None,
                });
            }
        }
    }
}
