//! Snapshots of the Redis projection in PostgreSQL.
//!
//! A snapshot records, for every SKU, its stock, last applied offset,
//! orders and adjustments, plus where a replay must start in each partition:
//! the applier group's committed offsets when the snapshot began. Every
//! record before those offsets was applied, so every SKU it touched is in
//! the snapshot; from there the fold skips, per SKU, what the
//! snapshot already holds.

use std::collections::{BTreeMap, HashMap};

use rdkafka::error::KafkaError;
use sqlx::PgPool;
use stockledger_kafka::topic::{self, LogError};
use stockledger_kafka::KafkaConfig;
use stockledger_projection::{Projection, ProjectionError, SkuExport, Stock};
use stockledger_redis::RedisConn;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    pub id: i64,
    pub skus: i64,
    /// Partition -> first offset a replay from this snapshot reads.
    pub start: HashMap<i32, i64>,
}

#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    #[error("a Kafka request failed")]
    Kafka(#[from] KafkaError),
    #[error("the Redis projection failed")]
    Projection(#[from] ProjectionError),
    #[error("a PostgreSQL request failed")]
    Database(#[from] sqlx::Error),
    #[error("unreadable state of sku {sku} in snapshot {snapshot}: {problem}")]
    Corrupt {
        snapshot: i64,
        sku: String,
        problem: String,
    },
    #[error("the offset lookup task failed: {0}")]
    Task(String),
}

/// The offsets `group` has committed on `topic`, by partition.
pub async fn committed_offsets(
    kafka: &KafkaConfig,
    group: &str,
    topic: &str,
) -> Result<HashMap<i32, i64>, SnapshotError> {
    topic::committed_offsets(kafka, group, topic)
        .await
        .map_err(|e| match e {
            LogError::Kafka(k) => SnapshotError::Kafka(k),
            other => SnapshotError::Task(other.to_string()),
        })
}

/// Writes a snapshot of `prefix`, `page_size` SKUs at a time; `start` is
/// where a replay from it begins (see [`committed_offsets`]).
pub async fn take(
    pool: &PgPool,
    redis: &RedisConn,
    prefix: &str,
    topic: &str,
    start: &HashMap<i32, i64>,
    page_size: usize,
    mut on_page: impl FnMut(u64) + Send,
) -> Result<Snapshot, SnapshotError> {
    let id: i64 =
        sqlx::query_scalar("INSERT INTO snapshots (topic, prefix) VALUES ($1, $2) RETURNING id")
            .bind(topic)
            .bind(prefix)
            .fetch_one(pool)
            .await?;
    let (partitions, offsets): (Vec<i32>, Vec<i64>) = start.iter().map(|(p, o)| (*p, *o)).unzip();
    sqlx::query(
        "INSERT INTO snapshot_partitions (snapshot_id, partition, start_offset)
         SELECT $1, * FROM UNNEST($2::int[], $3::bigint[])",
    )
    .bind(id)
    .bind(&partitions)
    .bind(&offsets)
    .execute(pool)
    .await?;

    let projection = Projection::new(redis.clone(), prefix);
    let mut pages = projection.sku_pages(page_size).await?;
    let mut total = 0i64;
    while let Some(skus) = pages.next_page().await? {
        let names: Vec<&str> = skus.iter().map(String::as_str).collect();
        total += write_page(pool, &projection.export(&names).await?, id).await?;
        on_page(total as u64);
    }
    sqlx::query("UPDATE snapshots SET skus = $2, complete = true WHERE id = $1")
        .bind(id)
        .bind(total)
        .execute(pool)
        .await?;
    Ok(Snapshot {
        id,
        skus: total,
        start: start.clone(),
    })
}

type Hash = BTreeMap<String, String>;

/// sku, partition, last offset, available, total, reserved, per-user
/// limit, orders, adjustments.
type SkuRow = (
    String,
    Option<i32>,
    i64,
    i64,
    i64,
    i64,
    Option<i64>,
    String,
    String,
);

/// A page of SKU states as columns, for `UNNEST`.
#[derive(Default)]
struct Columns {
    sku: Vec<String>,
    partition: Vec<Option<i32>>,
    last_offset: Vec<i64>,
    available: Vec<i64>,
    total: Vec<i64>,
    reserved: Vec<i64>,
    limit: Vec<Option<i64>>,
    orders: Vec<String>,
    adjustments: Vec<String>,
}

async fn write_page(pool: &PgPool, states: &[SkuExport], id: i64) -> Result<i64, SnapshotError> {
    if states.is_empty() {
        return Ok(0);
    }
    let mut columns = Columns::default();
    for state in states {
        columns.sku.push(state.sku.clone());
        columns.partition.push(state.stock.partition);
        columns.last_offset.push(state.stock.offset);
        columns.available.push(state.stock.available);
        columns.total.push(state.stock.total);
        columns.reserved.push(state.stock.reserved);
        columns.limit.push(state.stock.limit);
        // Maps of strings always serialize.
        columns
            .orders
            .push(serde_json::to_string(&state.orders).unwrap_or_default());
        columns
            .adjustments
            .push(serde_json::to_string(&state.adjustments).unwrap_or_default());
    }
    sqlx::query(
        "INSERT INTO snapshot_skus (snapshot_id, sku, partition, last_offset, available, total,
             reserved, per_user_limit, orders, adjustments)
         SELECT $1, sku, partition, last_offset, available, total, reserved, per_user_limit,
             orders::jsonb, adjustments::jsonb
         FROM UNNEST($2::text[], $3::integer[], $4::bigint[], $5::bigint[], $6::bigint[],
             $7::bigint[], $8::bigint[], $9::text[], $10::text[])
             AS s(sku, partition, last_offset, available, total, reserved, per_user_limit,
                 orders, adjustments)",
    )
    .bind(id)
    .bind(&columns.sku)
    .bind(&columns.partition)
    .bind(&columns.last_offset)
    .bind(&columns.available)
    .bind(&columns.total)
    .bind(&columns.reserved)
    .bind(&columns.limit)
    .bind(&columns.orders)
    .bind(&columns.adjustments)
    .execute(pool)
    .await?;
    Ok(columns.sku.len() as i64)
}

/// The newest complete snapshot of the projection of `topic`.
pub async fn latest(pool: &PgPool, topic: &str) -> Result<Option<Snapshot>, SnapshotError> {
    let Some((id, skus)): Option<(i64, i64)> = sqlx::query_as(
        "SELECT id, skus FROM snapshots WHERE topic = $1 AND complete ORDER BY id DESC LIMIT 1",
    )
    .bind(topic)
    .fetch_optional(pool)
    .await?
    else {
        return Ok(None);
    };
    let start: Vec<(i32, i64)> = sqlx::query_as(
        "SELECT partition, start_offset FROM snapshot_partitions WHERE snapshot_id = $1",
    )
    .bind(id)
    .fetch_all(pool)
    .await?;
    Ok(Some(Snapshot {
        id,
        skus,
        start: start.into_iter().collect(),
    }))
}

/// Writes the SKU states of `snapshot` under `prefix`, `page_size` at a
/// time; returns how many SKUs were written.
pub async fn restore(
    pool: &PgPool,
    snapshot: &Snapshot,
    redis: &RedisConn,
    prefix: &str,
    page_size: usize,
) -> Result<u64, SnapshotError> {
    let projection = Projection::new(redis.clone(), prefix);
    let mut after = String::new();
    let mut written = 0;
    loop {
        let rows: Vec<SkuRow> = sqlx::query_as(
            "SELECT sku, partition, last_offset, available, total, reserved, per_user_limit,
                 orders::text, adjustments::text
             FROM snapshot_skus WHERE snapshot_id = $1 AND sku > $2 ORDER BY sku LIMIT $3",
        )
        .bind(snapshot.id)
        .bind(&after)
        .bind(page_size as i64)
        .fetch_all(pool)
        .await?;
        let Some(last) = rows.last() else {
            return Ok(written);
        };
        after = last.0.clone();
        let mut states = Vec::with_capacity(rows.len());
        for (sku, partition, offset, available, total, reserved, limit, orders, adjustments) in rows
        {
            let corrupt = |problem: String| SnapshotError::Corrupt {
                snapshot: snapshot.id,
                sku: sku.clone(),
                problem,
            };
            let orders: Hash = serde_json::from_str(&orders).map_err(|e| corrupt(e.to_string()))?;
            let adjustments: Hash =
                serde_json::from_str(&adjustments).map_err(|e| corrupt(e.to_string()))?;
            states.push(SkuExport {
                stock: Stock {
                    available,
                    total,
                    offset,
                    partition,
                    reserved,
                    limit,
                },
                sku,
                orders,
                adjustments,
            });
        }
        written += states.len() as u64;
        projection.restore(&states).await?;
    }
}
