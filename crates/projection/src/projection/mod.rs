//! One prefix of the projection: every read and write of a SKU's state.
//!
//! - `reads`: what the gateway, the CLI and the tools read of a SKU.
//! - `holds`: the live reservations by deadline, for the expirer.
//! - `whole`: a SKU's state moved whole, for the maintenance tools:
//!   exported and restored (snapshots), pruned (compaction), swapped in
//!   from a rebuilt prefix.
//! - `stops`: the record a service last stopped on, and how many times in
//!   a row, for `status`.
//!
//! This file holds the handle, its errors, the marker and the applied
//! marks; the batch itself is in `fold`.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use redis::{ErrorKind, Script, ServerErrorKind};
use stockledger_core::{Decision, OrderEntry};
use stockledger_redis::RedisConn;

use crate::encoding::PARTITION;
use crate::fence::{Fence, Writer};
use crate::heads::{Heads, DEFAULT_CACHED_FIELDS, DEFAULT_CACHED_SKUS};
use crate::keys;

mod holds;
mod reads;
mod stops;
mod whole;

pub use reads::{Sale, SkuPages, Stock};
pub use stops::StopNote;
pub use whole::SkuExport;

#[derive(Debug, thiserror::Error)]
pub enum ProjectionError {
    #[error("a Redis command failed")]
    Redis(#[from] redis::RedisError),
    /// Another writer kept changing the SKU's state between the read and
    /// the fenced write of a batch, so its decisions were taken again and
    /// again, and nothing was written. Trying again later decides on what
    /// Redis holds then.
    #[error("the state of sku {sku} moved under every attempt to write a batch's decisions")]
    Moved { sku: String },
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
            Self::Moved { .. } => true,
            Self::Redis(e) => redis_is_transient(e),
            _ => false,
        }
    }
}

/// Whether a Redis error may pass by itself: Redis unreachable, busy
/// loading, or a cluster in the middle of a failover (not a refused
/// password or a wrong command).
pub fn redis_is_transient(e: &redis::RedisError) -> bool {
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

/// One line of a basket, as [`Projection::basket`] reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BasketLine {
    pub sku: String,
    /// The partition the line's record is on.
    pub partition: i32,
    /// The line's order (the basket id) on its SKU.
    pub order: Option<OrderEntry>,
    /// For a line without an order, the decision on its record once taken
    /// (a refused hold); `None` while it is not decided.
    pub refusal: Option<Decision>,
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
pub(crate) const APPLIED_FIELD: &str = "applied:";

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
    /// Writes this projection's folds had refused by the fence and decided
    /// again (shared by its clones).
    pub(crate) refusals: Arc<AtomicU64>,
    /// SKUs whose state a batch read from Redis (see `reads_of_skus`).
    pub(crate) reads: Arc<AtomicU64>,
    /// The stock hashes of SKUs written or read lately (see `heads`).
    pub(crate) heads: Heads,
    /// What the marker held at this projection's last read or write (see
    /// `fence`), under which `heads` is trusted.
    pub(crate) fence: Fence,
    /// The connection the fenced writes of a single Redis go through.
    pub(crate) writer: Writer,
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
            refusals: Arc::default(),
            reads: Arc::default(),
            heads: Heads::new(DEFAULT_CACHED_SKUS, DEFAULT_CACHED_FIELDS),
            fence: Fence::default(),
            writer: Writer::default(),
        }
    }

    /// This projection, keeping what it knows of at most `skus` SKUs
    /// between batches (0: nothing; each batch reads what it needs), and
    /// at most `fields` fields of their orders and adjustments hashes kept
    /// whole, instead of [`DEFAULT_CACHED_SKUS`] and
    /// [`DEFAULT_CACHED_FIELDS`].
    pub fn caching(mut self, skus: usize, fields: usize) -> Self {
        self.heads = Heads::new(skus, fields);
        self
    }

    /// How many SKUs are kept between batches.
    pub fn cached_skus(&self) -> usize {
        self.heads.len()
    }

    /// Forgets what is kept of the SKUs of `partitions` (this member no
    /// longer holds them: their next owner reads them as Redis holds them,
    /// and should they come back, so does this one); returns how many.
    pub fn forget_partitions(&self, partitions: &BTreeSet<i32>) -> usize {
        self.fence.forget(partitions);
        self.forget_kept(partitions, false)
    }

    /// Forgets what is kept of the SKUs of `partitions` and, when
    /// `unplaced`, of SKUs with no state yet (whose partition is not known
    /// until their first record applies); returns how many.
    pub(crate) fn forget_kept(&self, partitions: &BTreeSet<i32>, unplaced: bool) -> usize {
        let at = crate::encoding::STOCK_FIELDS
            .iter()
            .position(|f| *f == PARTITION);
        self.heads.forget(|kept| {
            let partition = at.and_then(|at| kept.stock.get(at)?.as_deref()?.parse().ok());
            partition.map_or(unplaced, |p: i32| partitions.contains(&p))
        })
    }

    /// How many fields of orders and adjustments hashes are kept whole.
    pub fn cached_fields(&self) -> usize {
        self.heads.fields()
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
        keys::marker_key(&self.prefix)
    }

    /// Where the dead letter at `dead_letter` (its `topic/partition@offset`)
    /// was re-driven to, if it was (see [`keys::redriven_key`]).
    pub async fn redriven_to(&self, dead_letter: &str) -> Result<Option<String>, ProjectionError> {
        Ok(redis::cmd("HGET")
            .arg(keys::redriven_key(&self.prefix))
            .arg(dead_letter)
            .query_async(&mut self.redis.clone())
            .await?)
    }

    /// Remembers that the dead letter at `dead_letter` was re-driven to `to`.
    pub async fn mark_redriven(&self, dead_letter: &str, to: &str) -> Result<(), ProjectionError> {
        let () = redis::cmd("HSET")
            .arg(keys::redriven_key(&self.prefix))
            .arg(dead_letter)
            .arg(to)
            .query_async(&mut self.redis.clone())
            .await?;
        Ok(())
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

    /// How many writes the fence refused since this projection was made
    /// (its clones count together), each then decided again on what Redis
    /// holds: on a single Redis a batch's (another member had folded one of
    /// its partitions since, or a restore or swap had rewritten SKUs), on
    /// a cluster a SKU's (its stock hash had moved). Two members race so
    /// only while a partition changes hands.
    pub fn fence_refusals(&self) -> u64 {
        self.refusals.load(Ordering::Relaxed)
    }

    /// How many times a batch read part of a SKU's state from Redis since
    /// this projection was made (its clones count together); a SKU kept
    /// whole in memory is read only for a redelivered record's decision or
    /// an order compaction may have pruned.
    pub fn reads_of_skus(&self) -> u64 {
        self.reads.load(Ordering::Relaxed)
    }

    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    pub fn connection(&self) -> RedisConn {
        self.redis.clone()
    }

    /// Runs the calls of `script` that `calls` builds; when Redis forgot
    /// the script (a restart, a flush, a new cluster node), loads it (on
    /// every node) and runs them again, built again: a call refused for want
    /// of its script ran nothing, and one that ran is fenced.
    pub(crate) async fn run<T: redis::FromRedisValue>(
        &self,
        script: &Script,
        calls: impl Fn() -> Vec<redis::Cmd>,
    ) -> Result<Vec<T>, ProjectionError> {
        let first = calls();
        if first.is_empty() {
            return Ok(Vec::new());
        }
        match self.redis.query_each(first).await {
            Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                script
                    .prepare_invoke()
                    .load_async(&mut self.redis.clone())
                    .await?;
                Ok(self.redis.query_each(calls()).await?)
            }
            other => Ok(other?),
        }
    }

    /// Removes the marker (a rebuilt prefix that was swapped in whole).
    pub async fn unmark(&self) -> Result<(), ProjectionError> {
        let _: () = redis::cmd("DEL")
            .arg(self.marker_key())
            .query_async(&mut self.redis.clone())
            .await?;
        Ok(())
    }
}
