//! One prefix of the projection: every read and write of a SKU's state.

use std::collections::BTreeMap;
use std::sync::LazyLock;

use redis::{ErrorKind, Script, ServerErrorKind};
use stockledger_core::machine::misrouted;
use stockledger_core::{Decision, OrderEntry, SkuState};
use stockledger_redis::{KeyScan, RedisConn};

use crate::encoding::{
    decode_decision, decode_order, user_of_field, AVAILABLE, LIMIT, OFFSET, PARTITION, RESERVED,
    TOTAL,
};
use crate::keys::{self, SkuKeys};

/// The script that prunes archived history of one SKU; see the file.
static COMPACT: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../lua/compact.lua")));

/// The script that swaps one SKU's rebuilt keys in; see the file.
static SWAP: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../lua/swap.lua")));

#[derive(Debug, thiserror::Error)]
pub enum ProjectionError {
    #[error("a Redis command failed")]
    Redis(#[from] redis::RedisError),
    #[error("the apply script returned {got} decisions for the {expected} records of sku {sku}")]
    ShortReply {
        sku: String,
        expected: usize,
        got: usize,
    },
    #[error("unreadable value in Redis key {key}: {value:?}")]
    Corrupt { key: String, value: String },
    /// The marker written when the projection was created is gone: Redis
    /// restarted empty or was flushed. Applying on would fold the rest of
    /// the log onto nothing; rebuild with `stockledger replay --swap`.
    #[error("the projection under {prefix} has lost its state (its marker {key} is gone); rebuild it with `stockledger replay --swap`")]
    StateLost { prefix: String, key: String },
}

impl ProjectionError {
    /// Whether trying again later may succeed (Redis unreachable, busy, or
    /// a cluster in the middle of a failover).
    pub fn is_transient(&self) -> bool {
        match self {
            Self::Redis(e) => {
                e.is_io_error()
                    || e.is_connection_dropped()
                    || e.is_connection_refusal()
                    || e.is_timeout()
                    || matches!(
                        e.kind(),
                        ErrorKind::Server(
                            ServerErrorKind::BusyLoading
                                | ServerErrorKind::TryAgain
                                | ServerErrorKind::ClusterDown
                                | ServerErrorKind::MasterDown
                        )
                    )
            }
            _ => false,
        }
    }
}

/// What a prefix's marker says of the log it is the fold of.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Marker {
    pub topic: String,
    /// The partition count when the fold was begun; `None` in a marker
    /// written by a release that did not record it.
    pub partitions: Option<i32>,
    /// Per partition, the furthest offset folded into the prefix (a
    /// redelivered or rewound batch never lowers it).
    pub applied: BTreeMap<i32, i64>,
}

/// The marker's field holding the furthest offset applied from a partition.
const APPLIED_FIELD: &str = "applied:";

/// The script that records how far each partition is folded; see the file.
const MARKS: &str = include_str!("../lua/marks.lua");

/// One prefix of the projection in one Redis or Redis Cluster.
#[derive(Clone)]
pub struct Projection {
    pub(crate) redis: RedisConn,
    pub(crate) prefix: String,
    /// Check the marker before every apply (the live applier does).
    pub(crate) guarded: bool,
    /// The command topic whose applied offsets each apply announces on
    /// [`keys::applied_channel`] (the live applier's, for waiting order
    /// services).
    pub(crate) announce_on: Option<String>,
}

impl std::fmt::Debug for Projection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Projection")
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

impl Projection {
    pub async fn connect(
        redis_url: &str,
        prefix: impl Into<String>,
    ) -> Result<Self, ProjectionError> {
        let redis = RedisConn::connect(redis_url).await?;
        Ok(Self::new(redis, prefix))
    }

    /// A projection under `prefix` sharing an existing connection.
    pub fn new(redis: RedisConn, prefix: impl Into<String>) -> Self {
        Self {
            redis,
            prefix: prefix.into(),
            guarded: false,
            announce_on: None,
        }
    }

    /// This projection, refusing to apply once its marker is gone.
    pub fn guarded(mut self) -> Self {
        self.guarded = true;
        self
    }

    /// This projection, announcing after each apply that the offsets it
    /// folded from `topic` are decided ([`keys::applied_channel`]), so
    /// order services waiting for a decision hear of it at once.
    pub fn announcing(mut self, topic: impl Into<String>) -> Self {
        self.announce_on = Some(topic.into());
        self
    }

    /// The key marking that this prefix holds a fold of a log: a hash with
    /// the command topic's name (`topic`) and partition count
    /// (`partitions`), which decided every SKU's home partition.
    pub fn marker_key(&self) -> String {
        format!("{}:meta", self.prefix)
    }

    /// The log this prefix is a fold of, if it is marked.
    pub async fn marker(&self) -> Result<Option<Marker>, ProjectionError> {
        let fields: BTreeMap<String, String> = redis::cmd("HGETALL")
            .arg(self.marker_key())
            .query_async(&mut self.redis.clone())
            .await?;
        let Some(topic) = fields.get("topic") else {
            return Ok(None);
        };
        let applied = fields
            .iter()
            .filter_map(|(field, offset)| {
                let partition = field.strip_prefix(APPLIED_FIELD)?.parse().ok()?;
                Some((partition, offset.parse().ok()?))
            })
            .collect();
        Ok(Some(Marker {
            topic: topic.clone(),
            // A marker written before the count was recorded has none.
            partitions: fields.get("partitions").and_then(|p| p.parse().ok()),
            applied,
        }))
    }

    /// Marks this prefix as the fold of `topic`, which has `partitions`.
    pub async fn mark(&self, topic: &str, partitions: i32) -> Result<(), ProjectionError> {
        let _: () = redis::cmd("HSET")
            .arg(self.marker_key())
            .arg("topic")
            .arg(topic)
            .arg("partitions")
            .arg(partitions)
            .query_async(&mut self.redis.clone())
            .await?;
        Ok(())
    }

    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    pub fn connection(&self) -> RedisConn {
        self.redis.clone()
    }

    /// For each of `partitions`, up to `limit` holds whose deadline is
    /// before `now` (ms): (sku, order id, deadline), earliest first; one
    /// pipelined round trip for all of them.
    pub async fn due_holds(
        &self,
        partitions: &[i32],
        now: i64,
        limit: usize,
    ) -> Result<Vec<Vec<(String, String, i64)>>, ProjectionError> {
        let reads: Vec<redis::Cmd> = partitions
            .iter()
            .map(|&partition| {
                redis::cmd("ZRANGE")
                    .arg(keys::holds_key(&self.prefix, partition))
                    .arg("-inf")
                    .arg(format!("({now}"))
                    .arg("BYSCORE")
                    .arg("LIMIT")
                    .arg(0)
                    .arg(limit)
                    .arg("WITHSCORES")
                    .clone()
            })
            .collect();
        let due: Vec<Vec<(String, i64)>> = self.redis.query_each(reads).await?;
        partitions
            .iter()
            .zip(due)
            .map(|(&partition, holds)| {
                holds
                    .into_iter()
                    .map(
                        |(member, deadline)| match keys::decode_hold_member(&member) {
                            Some((sku, order)) => Ok((sku.to_owned(), order.to_owned(), deadline)),
                            None => Err(ProjectionError::Corrupt {
                                key: keys::holds_key(&self.prefix, partition),
                                value: member,
                            }),
                        },
                    )
                    .collect()
            })
            .collect()
    }

    /// Puts off the holds of `partition` named by `members` (sku, order)
    /// until `retry_at` (ms), if they are still indexed: an expire was
    /// sent for each, and is tried again then if it did not end the hold.
    pub async fn defer_holds(
        &self,
        partition: i32,
        members: &[(String, String)],
        retry_at: i64,
    ) -> Result<(), ProjectionError> {
        if members.is_empty() {
            return Ok(());
        }
        let mut cmd = redis::cmd("ZADD");
        cmd.arg(keys::holds_key(&self.prefix, partition)).arg("XX");
        for (sku, order) in members {
            cmd.arg(retry_at).arg(keys::hold_member(sku, order));
        }
        let _: i64 = cmd.query_async(&mut self.redis.clone()).await?;
        Ok(())
    }

    /// Adds this prefix's index of holds to `live`'s, for each of
    /// `partitions` (a rebuilt prefix swapped in whole: the live index may
    /// have been lost with the live state).
    pub async fn copy_holds_into(
        &self,
        live: &Projection,
        partitions: i32,
    ) -> Result<(), ProjectionError> {
        for partition in 0..partitions {
            let from = keys::holds_key(&self.prefix, partition);
            let holds: Vec<(String, i64)> = redis::cmd("ZRANGE")
                .arg(&from)
                .arg(0)
                .arg(-1)
                .arg("WITHSCORES")
                .query_async(&mut self.redis.clone())
                .await?;
            for page in holds.chunks(1000) {
                let mut cmd = redis::cmd("ZADD");
                cmd.arg(keys::holds_key(&live.prefix, partition));
                for (member, deadline) in page {
                    cmd.arg(deadline).arg(member);
                }
                let _: i64 = cmd.query_async(&mut self.redis.clone()).await?;
            }
            let _: i64 = redis::cmd("DEL")
                .arg(&from)
                .query_async(&mut self.redis.clone())
                .await?;
        }
        Ok(())
    }

    /// Records in the marker that `marks` (partition, last offset applied)
    /// are folded into this prefix, as [`Projection::apply`] does with
    /// each batch; a mark already further is kept.
    pub async fn record_applied(&self, marks: &[(i32, i64)]) -> Result<(), ProjectionError> {
        if marks.is_empty() {
            return Ok(());
        }
        let _: i64 = self
            .record_applied_cmd(marks)
            .query_async(&mut self.redis.clone())
            .await?;
        Ok(())
    }

    /// The call that records `marks` in the marker, never lowering one
    /// (`lua/marks.lua`). Sent as `EVAL`: it runs once a batch, so sending
    /// its few lines costs nothing, and no Redis can have forgotten it.
    pub(crate) fn record_applied_cmd(&self, marks: &[(i32, i64)]) -> redis::Cmd {
        let mut record = redis::cmd("EVAL");
        record.arg(MARKS).arg(1).arg(self.marker_key());
        for &(partition, offset) in marks {
            record
                .arg(format!("{APPLIED_FIELD}{partition}"))
                .arg(offset);
        }
        record
    }

    /// The state of `sku`, or `None` if nothing was ever applied to it.
    pub async fn read_sku(&self, sku: &str) -> Result<Option<SkuState>, ProjectionError> {
        let keys = SkuKeys::new(&self.prefix, sku);
        let mut conn = self.redis.clone();
        type Hash = BTreeMap<String, String>;
        let (stock, orders, adjustments, decisions): (Hash, Hash, Hash, Hash) = redis::pipe()
            .hgetall(&keys.stock)
            .hgetall(&keys.orders)
            .hgetall(&keys.adjustments)
            .hgetall(&keys.decisions)
            .query_async(&mut conn)
            .await?;
        if stock.is_empty() {
            return Ok(None);
        }
        let corrupt = |key: &str, value: &str| ProjectionError::Corrupt {
            key: key.to_owned(),
            value: value.to_owned(),
        };
        let number = |field: &str| -> Result<i64, ProjectionError> {
            let value = stock.get(field).map(String::as_str).unwrap_or("");
            value.parse().map_err(|_| corrupt(&keys.stock, value))
        };
        let partition = match stock.get(PARTITION) {
            None => None, // written before partitions were recorded
            Some(p) => Some(p.parse().map_err(|_| corrupt(&keys.stock, p))?),
        };
        let optional = |field: &str| -> Result<Option<i64>, ProjectionError> {
            stock
                .get(field)
                .map(|v| v.parse().map_err(|_| corrupt(&keys.stock, v)))
                .transpose()
        };
        let mut state = SkuState {
            available: number(AVAILABLE)?,
            total: number(TOTAL)?,
            reserved: optional(RESERVED)?.unwrap_or(0),
            limit: optional(LIMIT)?,
            partition,
            last_offset: Some(number(OFFSET)?),
            ..SkuState::default()
        };
        for (field, value) in orders {
            if let Some(user) = user_of_field(&field) {
                let units = value.parse().map_err(|_| corrupt(&keys.orders, &value))?;
                state.users.insert(user.to_owned(), units);
                continue;
            }
            let entry = decode_order(&value).ok_or_else(|| corrupt(&keys.orders, &value))?;
            state.orders.insert(field, entry);
        }
        for (adjustment, value) in adjustments {
            let offset = value
                .parse()
                .map_err(|_| corrupt(&keys.adjustments, &value))?;
            state.adjustments.insert(adjustment, offset);
        }
        for (offset, value) in decisions {
            let offset = offset
                .parse()
                .map_err(|_| corrupt(&keys.decisions, &offset))?;
            let decision =
                decode_decision(&value).ok_or_else(|| corrupt(&keys.decisions, &value))?;
            state.decisions.insert(offset, decision);
        }
        Ok(Some(state))
    }

    /// Every SKU with state under this prefix (by `SCAN`, so Redis is never
    /// blocked).
    pub async fn skus(&self) -> Result<Vec<String>, ProjectionError> {
        let keys = self
            .redis
            .scan_all(&keys::stock_key_pattern(&self.prefix))
            .await?;
        Ok(keys
            .iter()
            .filter_map(|k| keys::sku_of_stock_key(&self.prefix, k))
            .map(str::to_owned)
            .collect())
    }

    /// The SKUs with state under this prefix, a page of about `page_size`
    /// at a time (by `SCAN`), for walks that must stay bounded in memory.
    pub async fn sku_pages(&self, page_size: usize) -> Result<SkuPages, ProjectionError> {
        let scan = self
            .redis
            .scan(&keys::stock_key_pattern(&self.prefix), page_size)
            .await?;
        Ok(SkuPages {
            scan,
            prefix: self.prefix.clone(),
        })
    }

    /// Removes the marker (a rebuilt prefix that was swapped in whole).
    pub async fn unmark(&self) -> Result<(), ProjectionError> {
        let _: () = redis::cmd("DEL")
            .arg(self.marker_key())
            .query_async(&mut self.redis.clone())
            .await?;
        Ok(())
    }

    /// The decision taken for the record at `partition`/`offset` of `sku`,
    /// if the applier has taken it. A record on another partition than the
    /// one `sku`'s state was built on is answered `MISROUTED`: the applier
    /// decides it so whenever it reaches it, and its offset must not be
    /// looked up among that partition's decisions. (A misrouted record of a
    /// SKU with no state yet leaves nothing in Redis: `None`.)
    pub async fn decision(
        &self,
        sku: &str,
        partition: i32,
        offset: i64,
    ) -> Result<Option<Decision>, ProjectionError> {
        let keys = SkuKeys::new(&self.prefix, sku);
        let (owner, stored): (Option<String>, Option<String>) = redis::pipe()
            .hget(&keys.stock, PARTITION)
            .hget(&keys.decisions, offset)
            .query_async(&mut self.redis.clone())
            .await?;
        if let Some(owner) = owner {
            let owner: i32 = owner.parse().map_err(|_| ProjectionError::Corrupt {
                key: keys.stock.clone(),
                value: owner,
            })?;
            if owner != partition {
                return Ok(Some(misrouted(partition, owner)));
            }
        }
        stored
            .map(|s| {
                decode_decision(&s).ok_or(ProjectionError::Corrupt {
                    key: keys.decisions,
                    value: s,
                })
            })
            .transpose()
    }

    /// What the ledger knows of `order_id` on `sku` (`None` if no deduct or
    /// rollback of it was applied): one field of the orders hash, so a SKU
    /// with millions of orders costs what one with a single order does.
    pub async fn order(
        &self,
        sku: &str,
        order_id: &str,
    ) -> Result<Option<OrderEntry>, ProjectionError> {
        let keys = SkuKeys::new(&self.prefix, sku);
        let stored: Option<String> = redis::cmd("HGET")
            .arg(&keys.orders)
            .arg(order_id)
            .query_async(&mut self.redis.clone())
            .await?;
        stored
            .map(|s| {
                decode_order(&s).ok_or(ProjectionError::Corrupt {
                    key: keys.orders,
                    value: s,
                })
            })
            .transpose()
    }

    /// The offset that applied restock `adjustment_id` of `sku`, if any.
    pub async fn adjustment(
        &self,
        sku: &str,
        adjustment_id: &str,
    ) -> Result<Option<i64>, ProjectionError> {
        let keys = SkuKeys::new(&self.prefix, sku);
        let stored: Option<String> = redis::cmd("HGET")
            .arg(&keys.adjustments)
            .arg(adjustment_id)
            .query_async(&mut self.redis.clone())
            .await?;
        stored
            .map(|s| {
                s.parse().map_err(|_| ProjectionError::Corrupt {
                    key: keys.adjustments,
                    value: s,
                })
            })
            .transpose()
    }

    /// The stock fields of each of `skus` (`None` for a SKU with no state),
    /// in one round trip per node.
    pub async fn stock(&self, skus: &[&str]) -> Result<Vec<Option<Stock>>, ProjectionError> {
        let reads: Vec<redis::Cmd> = skus
            .iter()
            .map(|sku| {
                let mut cmd = redis::cmd("HMGET");
                cmd.arg(SkuKeys::new(&self.prefix, sku).stock)
                    .arg(&[AVAILABLE, TOTAL, OFFSET, PARTITION, RESERVED, LIMIT]);
                cmd
            })
            .collect();
        type Fields = (
            Option<i64>,
            Option<i64>,
            Option<i64>,
            Option<i32>,
            Option<i64>,
            Option<i64>,
        );
        let rows: Vec<Fields> = self.redis.query_each(reads).await?;
        Ok(rows
            .into_iter()
            .map(|row| match row {
                (Some(available), Some(total), Some(offset), partition, reserved, limit) => {
                    Some(Stock {
                        available,
                        total,
                        offset,
                        partition,
                        reserved: reserved.unwrap_or(0),
                        limit,
                    })
                }
                _ => None,
            })
            .collect())
    }

    /// The state of each of `skus` in its stored forms, each SKU's hashes
    /// read together (one `MULTI`), for a snapshot. SKUs gone since they
    /// were listed are left out.
    pub async fn export(&self, skus: &[&str]) -> Result<Vec<SkuExport>, ProjectionError> {
        type Hash = BTreeMap<String, String>;
        let reads: Vec<Vec<redis::Cmd>> = skus
            .iter()
            .map(|sku| {
                let k = SkuKeys::new(&self.prefix, sku);
                vec![
                    redis::Cmd::hgetall(k.stock),
                    redis::Cmd::hgetall(k.orders),
                    redis::Cmd::hgetall(k.adjustments),
                ]
            })
            .collect();
        let hashes: Vec<(Hash, Hash, Hash)> = self.redis.transact_each(reads).await?;
        Ok(skus
            .iter()
            .zip(hashes)
            .filter_map(|(sku, (stock, orders, adjustments))| {
                let number = |field: &str| stock.get(field).and_then(|v| v.parse::<i64>().ok());
                Some(SkuExport {
                    sku: (*sku).to_owned(),
                    stock: Stock {
                        available: number(AVAILABLE)?,
                        total: number(TOTAL)?,
                        offset: number(OFFSET)?,
                        partition: stock.get(PARTITION).and_then(|v| v.parse().ok()),
                        reserved: number(RESERVED).unwrap_or(0),
                        limit: number(LIMIT),
                    },
                    orders,
                    adjustments,
                })
            })
            .collect())
    }

    /// Writes exported states under this prefix (a restore from a
    /// snapshot), laid out as the apply script lays them out.
    pub async fn restore(&self, states: &[SkuExport]) -> Result<(), ProjectionError> {
        let mut writes: Vec<redis::Cmd> = Vec::new();
        for state in states {
            let k = SkuKeys::new(&self.prefix, &state.sku);
            // The field order of the apply script, so a restored hash is
            // laid out as a replayed one.
            let mut stock = vec![
                (AVAILABLE, state.stock.available),
                (TOTAL, state.stock.total),
                (RESERVED, state.stock.reserved),
            ];
            if let Some(partition) = state.stock.partition {
                stock.push((PARTITION, i64::from(partition)));
            }
            stock.push((OFFSET, state.stock.offset));
            if let Some(limit) = state.stock.limit {
                stock.push((LIMIT, limit));
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
        let _: Vec<redis::Value> = self.redis.query_each(writes).await?;
        Ok(())
    }

    /// Prunes `sku`'s history at or below `cutoff` (see `lua/compact.lua`):
    /// returns (orders removed, decisions removed).
    pub async fn prune(&self, sku: &str, cutoff: i64) -> Result<(u64, u64), ProjectionError> {
        let k = SkuKeys::new(&self.prefix, sku);
        Ok(COMPACT
            .key(k.orders)
            .key(k.decisions)
            .arg(cutoff)
            .invoke_async(&mut self.redis.clone())
            .await?)
    }

    /// Swaps `sku`'s state under this (rebuilt) prefix in for its state
    /// under `live`, atomically, unless the rebuilt state is behind the live
    /// one; the replaced keys go under `old`, or are deleted when `None`.
    /// Whether it was swapped.
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
        invocation.arg(if old.is_none() { "1" } else { "0" });
        let done: i64 = invocation.invoke_async(&mut self.redis.clone()).await?;
        Ok(done == 1)
    }
}

/// A walk over the SKUs of a prefix, a page at a time.
pub struct SkuPages {
    scan: KeyScan,
    prefix: String,
}

impl std::fmt::Debug for SkuPages {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SkuPages")
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

impl SkuPages {
    /// The next page of SKUs (sorted, without repeats), `None` at the end.
    pub async fn next_page(&mut self) -> Result<Option<Vec<String>>, ProjectionError> {
        let Some(page) = self.scan.next_page().await? else {
            return Ok(None);
        };
        let mut skus: Vec<String> = page
            .iter()
            .filter_map(|k| keys::sku_of_stock_key(&self.prefix, k))
            .map(str::to_owned)
            .collect();
        skus.sort_unstable();
        skus.dedup();
        Ok(Some(skus))
    }
}

/// A SKU's stock hash.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stock {
    pub available: i64,
    pub total: i64,
    /// The last offset applied.
    pub offset: i64,
    /// The partition whose records built the state (`None` when written
    /// before partitions were recorded).
    pub partition: Option<i32>,
    /// Units held by live reservations.
    pub reserved: i64,
    /// Units one user may hold and buy, if limited.
    pub limit: Option<i64>,
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
