//! A SKU's state moved whole: exported and restored (snapshots), pruned of
//! archived history (compaction), and swapped in from a rebuilt prefix.

use std::collections::BTreeMap;
use std::sync::LazyLock;

use redis::Script;

use super::{Projection, ProjectionError, Stock};
use crate::encoding::{
    decode_stock, ALERTS_FIELD, AVAILABLE, LIMIT, LOCATED, LOCATIONS_FIELD, LOW, NAMED, OFFSET,
    PARTITION, RESERVED, SALE, SALE_FIELD, TOTAL, UNITS_FIELD,
};
use crate::encoding::{stock_field, STOCK_FIELDS};
use crate::keys::{self, SkuKeys};

/// The script that prunes archived history of one SKU; see the file.
static COMPACT: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../lua/compact.lua")));

/// The script that moves a marked prefix's generation; see the file.
static GENERATION: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../lua/generation.lua")));

/// The script that swaps one SKU's rebuilt keys in; see the file.
static SWAP: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../../lua/swap.lua")));

impl Projection {
    /// The state of each of `skus` in its stored forms, each SKU's hashes
    /// read together (one `MULTI`), for a snapshot. SKUs gone since they
    /// were listed are left out.
    pub async fn export(&self, skus: &[&str]) -> Result<Vec<SkuExport>, ProjectionError> {
        type Hash = BTreeMap<String, String>;
        let reads: Vec<Vec<redis::Cmd>> = skus
            .iter()
            .map(|sku| {
                let k = SkuKeys::new(&self.prefix, sku);
                // The stock fields alone: the stock hash holds the
                // decisions too, which snapshots leave to the archive.
                let mut stock = redis::cmd("HMGET");
                stock.arg(k.stock).arg(&STOCK_FIELDS[..]);
                vec![
                    stock,
                    redis::Cmd::hgetall(k.orders),
                    redis::Cmd::hgetall(k.adjustments),
                ]
            })
            .collect();
        let hashes: Vec<(Vec<Option<String>>, Hash, Hash)> =
            self.redis.transact_each(reads).await?;
        let mut states = Vec::with_capacity(skus.len());
        for (sku, (stock, orders, adjustments)) in skus.iter().zip(hashes) {
            let read = decode_stock(|f| stock_field(&stock, f));
            let corrupt = |value: String| ProjectionError::Corrupt {
                key: SkuKeys::new(&self.prefix, sku).stock,
                value,
            };
            // A SKU gone since it was listed has none of its fields.
            let Some(state) = read.map_err(corrupt)? else {
                continue;
            };
            states.push(SkuExport {
                sku: (*sku).to_owned(),
                stock: Stock {
                    available: state.available,
                    total: state.total,
                    offset: state.last_offset.unwrap_or_default(),
                    partition: state.partition,
                    reserved: state.reserved,
                    limit: state.limit,
                },
                orders,
                adjustments,
            });
        }
        Ok(states)
    }

    /// Writes exported states under this prefix (a restore from a
    /// snapshot), laid out as the applier lays them out. On a single Redis
    /// the states and, in a marked prefix, a new generation in the marker
    /// are written in one transaction, so no write an applier decided
    /// before it lands after it (see `fence`); on a cluster each SKU's new
    /// offset fences it.
    pub async fn restore(&self, states: &[SkuExport]) -> Result<(), ProjectionError> {
        let mut writes: Vec<redis::Cmd> = Vec::new();
        for state in states {
            let k = SkuKeys::new(&self.prefix, &state.sku);
            // The applier's field order, so a restored hash is
            // laid out as a replayed one.
            let mut stock: Vec<(&str, String)> = vec![
                (AVAILABLE, state.stock.available.to_string()),
                (TOTAL, state.stock.total.to_string()),
                (RESERVED, state.stock.reserved.to_string()),
            ];
            if let Some(partition) = state.stock.partition {
                stock.push((PARTITION, partition.to_string()));
            }
            stock.push((OFFSET, state.stock.offset.to_string()));
            // The flag the applier reads; the units themselves are in
            // the orders hash, restored as it was.
            let flag = |on: bool| u8::from(on).to_string();
            stock.push((NAMED, flag(state.orders.contains_key(UNITS_FIELD))));
            stock.push((LOCATED, flag(state.orders.contains_key(LOCATIONS_FIELD))));
            if let Some(limit) = state.stock.limit {
                stock.push((LIMIT, limit.to_string()));
            }
            // The threshold the applier reads, from the copy the
            // orders hash keeps.
            if let Some(low) = (state.orders.get(ALERTS_FIELD)).and_then(|v| v.parse::<i64>().ok())
            {
                stock.push((LOW, low.to_string()));
            }
            // The sale, from its copy too.
            if let Some(sale) = state.orders.get(SALE_FIELD) {
                stock.push((SALE, sale.clone()));
            }
            writes.push(redis::Cmd::hset_multiple(&k.stock, &stock));
            if !state.orders.is_empty() {
                let orders: Vec<_> = state.orders.iter().collect();
                writes.push(redis::Cmd::hset_multiple(&k.orders, &orders));
            }
            if !state.adjustments.is_empty() {
                let adjustments: Vec<_> = state.adjustments.iter().collect();
                writes.push(redis::Cmd::hset_multiple(&k.adjustments, &adjustments));
            }
        }
        if self.redis.is_cluster() {
            let _: Vec<redis::Value> = self.redis.query_each(writes).await?;
        } else if !writes.is_empty() {
            // Inside the transaction, so the script must be known before.
            GENERATION
                .prepare_invoke()
                .load_async(&mut self.redis.clone())
                .await?;
            writes.push(
                redis::cmd("EVALSHA")
                    .arg(GENERATION.get_hash())
                    .arg(1)
                    .arg(self.marker_key())
                    .take(),
            );
            let _: Vec<redis::Value> = self.redis.transact_each(vec![writes]).await?;
        }
        Ok(())
    }

    /// Prunes `sku`'s history at or below `cutoff` (see `lua/compact.lua`):
    /// returns (orders removed, decisions removed).
    pub async fn prune(&self, sku: &str, cutoff: i64) -> Result<(u64, u64), ProjectionError> {
        let k = SkuKeys::new(&self.prefix, sku);
        Ok(COMPACT
            .key(k.orders)
            .key(k.decisions)
            .key(k.stock)
            .arg(cutoff)
            .invoke_async(&mut self.redis.clone())
            .await?)
    }

    /// Swaps `sku`'s state under this (rebuilt) prefix in for its state
    /// under `live`, atomically, unless the rebuilt state is behind the live
    /// one; the replaced keys go under `old`, or are deleted when `None`.
    /// On a single Redis the swap moves the live marker's generation in the
    /// same step (see `fence`). Whether it was swapped.
    pub async fn swap_into(
        &self,
        sku: &str,
        live: &str,
        old: Option<&str>,
    ) -> Result<bool, ProjectionError> {
        let live_keys = SkuKeys::new(live, sku);
        let rebuilt = SkuKeys::new(&self.prefix, sku);
        let old_keys = SkuKeys::new(old.unwrap_or(&self.prefix), sku);
        let mut invocation = SWAP.prepare_invoke();
        for key in live_keys
            .as_array()
            .into_iter()
            .chain(rebuilt.as_array())
            .chain(old_keys.as_array())
        {
            invocation.key(key);
        }
        if !self.redis.is_cluster() {
            invocation.key(keys::marker_key(live));
        }
        invocation.arg(if old.is_none() { "1" } else { "0" });
        let done: i64 = invocation.invoke_async(&mut self.redis.clone()).await?;
        Ok(done == 1)
    }
}

/// A SKU's state in its stored forms (orders and adjustments as the
/// hashes hold them), as a snapshot keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkuExport {
    pub sku: String,
    pub stock: Stock,
    /// Order id -> the order's encoded entry, and each user's counted
    /// units under [`crate::encoding::USER_FIELD_PREFIX`].
    pub orders: BTreeMap<String, String>,
    /// Adjustment id -> the offset that applied it.
    pub adjustments: BTreeMap<String, String>,
}
