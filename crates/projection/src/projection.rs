//! One prefix of the projection: every read and write of a SKU's state.

use std::collections::BTreeMap;
use std::sync::LazyLock;

use redis::{ErrorKind, Script, ServerErrorKind};
use stockledger_core::command::record_time;
use stockledger_core::ids::{MAX_HOLD_MS, MAX_STOCK};
use stockledger_core::machine::misrouted;
use stockledger_core::{CommandBody, Decision, OrderEntry, ResultCode, SkuState};
use stockledger_io::{KeyScan, RedisConn};

use crate::batch::Run;
use crate::encoding::{
    decode_decision, decode_order, user_of_field, AVAILABLE, LIMIT, OFFSET, PARTITION, RESERVED,
    TOTAL,
};
use crate::keys::{self, SkuKeys};

/// Records one call of the apply script takes on a single Redis, at most
/// (a run is never split): enough that setting the script up is a small
/// share of its work, few enough that Redis answers others in between.
const CALL_RECORDS: usize = 1000;

/// Runs one call of the apply script takes on a single Redis, at most.
const CALL_RUNS: usize = 500;

/// The script that applies records; see the file for its contract.
static APPLY: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../lua/apply.lua")));

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
    /// Per partition, the last offset the applier announced as applied (a
    /// lower bound: a redelivery after a crash may record an earlier one).
    pub applied: BTreeMap<i32, i64>,
}

/// The marker's field holding the last offset applied from a partition.
const APPLIED_FIELD: &str = "applied:";

/// One prefix of the projection in one Redis or Redis Cluster.
#[derive(Clone)]
pub struct Projection {
    redis: RedisConn,
    prefix: String,
    /// Check the marker before every apply (the live applier does).
    guarded: bool,
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
        }
    }

    /// This projection, refusing to apply once its marker is gone.
    pub fn guarded(mut self) -> Self {
        self.guarded = true;
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

    /// Applies every run, one script call per run, in one pipelined round
    /// trip on a single Redis (all in flight together on a cluster);
    /// returns each run's decisions in record order. Safe to repeat:
    /// records already applied are answered from the stored decisions.
    pub async fn apply(&self, runs: &[Run<'_>]) -> Result<Vec<Vec<Decision>>, ProjectionError> {
        let decisions = self.execute(&self.script_calls(runs)).await?;
        self.index_holds(runs.iter().zip(&decisions).flat_map(|(run, decided)| {
            run.records
                .iter()
                .zip(decided)
                .map(|(&(_, _, body), d)| (run.at.partition, run.sku, body, d))
        }))
        .await?;
        Ok(decisions)
    }

    /// The script calls that apply `runs`, built and owning all they need,
    /// so [`Projection::execute`] can send them from another task while the
    /// runs' owner goes on. On a single Redis a call takes many runs (one
    /// script call set up for hundreds of records); on a cluster each run is
    /// a call of its own, as a script's keys must share a hash slot.
    pub fn script_calls(&self, runs: &[Run<'_>]) -> ScriptCalls {
        let calls = call_ranges(runs, self.redis.is_cluster());
        ScriptCalls {
            cmds: calls
                .iter()
                .map(|call| self.script_call(&runs[call.clone()]))
                .collect(),
            calls,
            runs: runs
                .iter()
                .map(|run| (run.sku.to_owned(), run.records.len()))
                .collect(),
        }
    }

    /// Sends `calls` in one pipelined round trip (in flight together on a
    /// cluster) and returns each run's decisions in record order; the
    /// holds index is the caller's to keep ([`Projection::index_holds`]).
    /// Safe to repeat: records already applied are answered from the
    /// stored decisions.
    pub async fn execute(
        &self,
        calls: &ScriptCalls,
    ) -> Result<Vec<Vec<Decision>>, ProjectionError> {
        if calls.cmds.is_empty() {
            return Ok(Vec::new());
        }
        let mut conn = self.redis.clone();
        if self.guarded {
            // A round trip of its own: a pipeline would run the scripts even
            // when the marker is gone. (A flush in the instant between the
            // two is not caught here; reconcile would show it.)
            let marked: bool = redis::cmd("EXISTS")
                .arg(self.marker_key())
                .query_async(&mut conn)
                .await?;
            if !marked {
                return Err(ProjectionError::StateLost {
                    prefix: self.prefix.clone(),
                    key: self.marker_key(),
                });
            }
        }
        let replies: Vec<Vec<String>> = match self.redis.query_each(calls.cmds.clone()).await {
            Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                // A restarted or flushed Redis (or a cluster node) forgot the
                // script: load it (on every node) and run the idempotent
                // calls again.
                APPLY.prepare_invoke().load_async(&mut conn).await?;
                self.redis.query_each(calls.cmds.clone()).await?
            }
            other => other?,
        };
        let mut decisions = Vec::with_capacity(calls.runs.len());
        for (call, reply) in calls.calls.iter().zip(replies) {
            let runs = &calls.runs[call.clone()];
            let expected: usize = runs.iter().map(|(_, records)| records).sum();
            if reply.len() != expected {
                return Err(ProjectionError::ShortReply {
                    sku: runs[0].0.clone(),
                    expected,
                    got: reply.len(),
                });
            }
            let mut reply = reply.into_iter();
            for (sku, records) in runs {
                let decided = reply
                    .by_ref()
                    .take(*records)
                    .map(|s| {
                        decode_decision(&s).ok_or_else(|| ProjectionError::Corrupt {
                            key: SkuKeys::new(&self.prefix, sku).decisions,
                            value: s,
                        })
                    })
                    .collect::<Result<Vec<Decision>, _>>()?;
                decisions.push(decided);
            }
        }
        Ok(decisions)
    }

    /// One call of the apply script for `runs` (see the script for the
    /// arguments), written straight into the command: no per-record
    /// allocation.
    fn script_call(&self, runs: &[Run<'_>]) -> redis::Cmd {
        let mut cmd = redis::cmd("EVALSHA");
        cmd.arg(APPLY.get_hash()).arg(4 * runs.len());
        for run in runs {
            let keys = SkuKeys::new(&self.prefix, run.sku);
            cmd.arg(keys.stock)
                .arg(keys.orders)
                .arg(keys.adjustments)
                .arg(keys.decisions);
        }
        cmd.arg(MAX_STOCK).arg(MAX_HOLD_MS);
        for run in runs {
            cmd.arg(run.at.partition)
                .arg(run.at.home)
                .arg(run.records.len());
            for &(offset, timestamp, body) in &run.records {
                cmd.arg(offset);
                script_args(&mut cmd, record_time(timestamp), body);
            }
        }
        cmd
    }

    /// Keeps the [`keys::holds_key`] index of live reservations after a
    /// batch, given each applied record as (partition, sku, command,
    /// decision), each SKU's in log order: a reservation taken is added
    /// with its deadline; a confirm, rollback or expire that leaves no hold
    /// removes its order. Safe to repeat (a redelivered batch does it
    /// again); an entry left behind only makes the expirer send an expire
    /// that changes nothing.
    pub async fn index_holds<'a>(
        &self,
        records: impl IntoIterator<Item = (i32, &'a str, &'a CommandBody, &'a Decision)>,
    ) -> Result<(), ProjectionError> {
        // Only each hold's last change in the batch is written: on a
        // cluster the writes are in flight together, so a reservation's
        // add and its confirm's remove must not both be sent.
        let mut last: BTreeMap<(i32, String), Option<i64>> = BTreeMap::new();
        for (partition, sku, body, decision) in records {
            let Some(order) = body.order_id() else {
                continue;
            };
            let change = match (body, decision.result) {
                (CommandBody::Deduct(d), ResultCode::Applied) => match d.expires_at {
                    Some(deadline) => Some(deadline),
                    None => continue,
                },
                (
                    CommandBody::Confirm(_) | CommandBody::Rollback(_) | CommandBody::Expire(_),
                    result,
                ) if result != ResultCode::IgnoredNotDue && result != ResultCode::Misrouted => None,
                _ => continue,
            };
            let member = keys::hold_member(sku, order.as_str());
            last.insert((partition, member), change);
        }
        let writes: Vec<redis::Cmd> = last
            .into_iter()
            .map(|((partition, member), change)| {
                let key = keys::holds_key(&self.prefix, partition);
                match change {
                    Some(deadline) => redis::Cmd::zadd(key, member, deadline),
                    None => redis::Cmd::zrem(key, member),
                }
            })
            .collect();
        if !writes.is_empty() {
            let _: Vec<redis::Value> = self.redis.query_each(writes).await?;
        }
        Ok(())
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

    /// Publishes on the prefix's [`keys::applied_channel`] that `marks`
    /// (partition, last offset applied) of `topic` are decided, and records
    /// them in the marker, so a later start can tell whether the broker
    /// still has the log this fold reached.
    pub async fn announce_applied(
        &self,
        topic: &str,
        marks: Vec<(i32, i64)>,
    ) -> Result<(), ProjectionError> {
        if marks.is_empty() {
            return Ok(());
        }
        let record = self.record_applied_cmd(&marks);
        let publish = redis::cmd("PUBLISH")
            .arg(keys::applied_channel(&self.prefix))
            .arg(keys::encode_applied(topic, marks))
            .take();
        let _: Vec<i64> = self.redis.query_each(vec![record, publish]).await?;
        Ok(())
    }

    /// Records in the marker that `marks` (partition, last offset applied)
    /// are folded into this prefix, as the applier does with each batch.
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

    fn record_applied_cmd(&self, marks: &[(i32, i64)]) -> redis::Cmd {
        let mut record = redis::cmd("HSET");
        record.arg(self.marker_key());
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

/// A batch's apply script calls, built by [`Projection::script_calls`]
/// and owning what they need: they can be sent from another task.
#[derive(Debug, Clone)]
pub struct ScriptCalls {
    cmds: Vec<redis::Cmd>,
    /// The runs of each call, as ranges of `runs`.
    calls: Vec<std::ops::Range<usize>>,
    /// Each run's SKU (for errors) and record count.
    runs: Vec<(String, usize)>,
}

/// The runs of each apply script call, as ranges of `runs`: on a single
/// Redis, consecutive runs until a call holds [`CALL_RECORDS`] records (or
/// [`CALL_RUNS`] runs); on a cluster, one run per call.
fn call_ranges(runs: &[Run<'_>], cluster: bool) -> Vec<std::ops::Range<usize>> {
    if cluster {
        return (0..runs.len()).map(|r| r..r + 1).collect();
    }
    let mut calls = Vec::new();
    let (mut start, mut records) = (0, 0);
    for (r, run) in runs.iter().enumerate() {
        records += run.records.len();
        if records >= CALL_RECORDS || r + 1 - start >= CALL_RUNS {
            calls.push(start..r + 1);
            (start, records) = (r + 1, 0);
        }
    }
    if start < runs.len() {
        calls.push(start..runs.len());
    }
    calls
}

/// Writes a record's kind and what that kind needs (after its offset; see
/// the apply script), `time` being its record timestamp.
fn script_args(cmd: &mut redis::Cmd, time: i64, body: &CommandBody) {
    match body {
        CommandBody::Deduct(d) if d.user_id.is_none() && d.expires_at.is_none() => {
            cmd.arg("D").arg(d.order_id.as_str()).arg(d.quantity.get());
        }
        CommandBody::Deduct(d) => {
            cmd.arg("E")
                .arg(time)
                .arg(d.order_id.as_str())
                .arg(d.quantity.get())
                .arg(d.user_id.as_ref().map_or("", |u| u.as_str()));
            match d.expires_at {
                Some(t) => cmd.arg(t),
                None => cmd.arg(""),
            };
        }
        CommandBody::Rollback(r) => {
            cmd.arg("R").arg(r.order_id.as_str());
        }
        CommandBody::Restock(r) => {
            cmd.arg("S")
                .arg(r.adjustment_id.as_str())
                .arg(r.quantity())
                .arg(r.mode().as_str());
        }
        CommandBody::Confirm(c) => {
            cmd.arg("F").arg(time).arg(c.order_id.as_str());
        }
        CommandBody::Refund(r) => {
            cmd.arg("U")
                .arg(r.order_id.as_str())
                .arg(r.quantity.map_or(0, |q| q.get()));
        }
        CommandBody::Expire(e) => {
            cmd.arg("X").arg(time).arg(e.order_id.as_str());
        }
        CommandBody::Limit(l) => {
            cmd.arg("L").arg(l.per_user.map_or(0, |q| q.get()));
        }
    }
}

#[cfg(test)]
mod tests {
    use stockledger_core::{CommandBody, Deduct, OrderId, Placement, Quantity};

    use super::*;

    #[test]
    fn calls_take_whole_runs_up_to_the_record_bound_and_one_run_each_on_a_cluster() {
        let body = CommandBody::Deduct(Deduct::new(
            OrderId::new("o").unwrap(),
            Quantity::new(1).unwrap(),
        ));
        let run = |records: usize| Run {
            sku: "S",
            at: Placement {
                partition: 0,
                home: 0,
            },
            records: vec![(0, 0, &body); records],
        };
        // 600 + 600 passes the bound: the second run closes the first call,
        // whole; 10 and 990 make the next; 5 is left for a last one.
        let runs = [run(600), run(600), run(10), run(990), run(5)];
        assert_eq!(call_ranges(&runs, false), [0..2, 2..4, 4..5]);
        assert_eq!(call_ranges(&runs, true), [0..1, 1..2, 2..3, 3..4, 4..5]);
        // Many one-record runs: at most CALL_RUNS of them per call.
        let small: Vec<Run> = (0..CALL_RUNS + 1).map(|_| run(1)).collect();
        assert_eq!(
            call_ranges(&small, false),
            [0..CALL_RUNS, CALL_RUNS..CALL_RUNS + 1]
        );
        assert!(call_ranges(&[], false).is_empty());
    }
}
