//! The Redis projection: applying runs of records with the Lua script and
//! reading SKU state back.

use std::collections::{BTreeMap, HashMap};

use redis::{ErrorKind, ServerErrorKind};
use stockledger_core::ids::MAX_STOCK;
use stockledger_core::keys::{self, SkuKeys};
use stockledger_core::partition::home_partition;
use stockledger_core::{Command, CommandBody, Decision, OrderEntry, Placement, SkuState};
use stockledger_io::RedisConn;

/// The script that applies records; see the file for its contract.
pub const APPLY_LUA: &str = include_str!("../lua/apply.lua");

/// The script that prunes archived history of one SKU; see the file.
pub const COMPACT_LUA: &str = include_str!("../lua/compact.lua");

#[derive(Debug, thiserror::Error)]
pub enum ProjectionError {
    #[error("Redis: {0}")]
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

/// Consecutive records of one SKU on one partition to apply in one script
/// call, in log order.
#[derive(Debug)]
pub struct Run<'a> {
    pub sku: &'a str,
    /// Where the records are, and where the SKU belongs.
    pub at: Placement,
    pub records: Vec<(i64, &'a CommandBody)>,
}

/// The runs of one batch: records grouped by (partition, SKU), log order
/// kept within each group. Only per-SKU order matters and a SKU lives in one
/// partition, so this is the fewest script calls that keep the contract.
#[derive(Debug, Default)]
pub struct Batch<'a> {
    pub runs: Vec<Run<'a>>,
    /// For each record given to [`Batch::group`], its (run, index in run).
    pub slots: Vec<(usize, usize)>,
}

impl<'a> Batch<'a> {
    /// Groups `(partition, offset, command)` records of a topic with
    /// `partitions` partitions, in delivery order.
    pub fn group(
        records: impl IntoIterator<Item = (i32, i64, &'a Command)>,
        partitions: i32,
    ) -> Self {
        let mut batch = Batch::default();
        let mut run_of: HashMap<(i32, &'a str), usize> = HashMap::new();
        for (partition, offset, command) in records {
            let sku = command.sku.as_str();
            let runs = &mut batch.runs;
            let r = *run_of.entry((partition, sku)).or_insert_with(|| {
                runs.push(Run {
                    sku,
                    at: Placement {
                        partition,
                        home: home_partition(sku.as_bytes(), partitions),
                    },
                    records: Vec::new(),
                });
                runs.len() - 1
            });
            batch.slots.push((r, batch.runs[r].records.len()));
            batch.runs[r].records.push((offset, &command.body));
        }
        batch
    }

    /// Arranges per-run decisions back into the order records were given.
    pub fn in_record_order(&self, decisions: &[Vec<Decision>]) -> Vec<Decision> {
        self.slots
            .iter()
            .map(|&(r, k)| decisions[r][k].clone())
            .collect()
    }
}

/// One prefix of the projection in one Redis or Redis Cluster.
#[derive(Clone)]
pub struct Projection {
    redis: RedisConn,
    prefix: String,
    script: redis::Script,
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
            script: redis::Script::new(APPLY_LUA),
            guarded: false,
        }
    }

    /// This projection, refusing to apply once its marker is gone.
    pub fn guarded(mut self) -> Self {
        self.guarded = true;
        self
    }

    /// The key marking that this prefix holds a fold of a log: a hash with
    /// the command topic's name.
    pub fn marker_key(&self) -> String {
        format!("{}:meta", self.prefix)
    }

    /// The topic this prefix is a fold of, if it is marked.
    pub async fn marked_topic(&self) -> Result<Option<String>, ProjectionError> {
        let topic: Option<String> = redis::cmd("HGET")
            .arg(self.marker_key())
            .arg("topic")
            .query_async(&mut self.redis.clone())
            .await?;
        Ok(topic)
    }

    /// Marks this prefix as the fold of `topic`.
    pub async fn mark(&self, topic: &str) -> Result<(), ProjectionError> {
        let _: () = redis::cmd("HSET")
            .arg(self.marker_key())
            .arg("topic")
            .arg(topic)
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
        if runs.is_empty() {
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
        let calls = || -> Vec<redis::Cmd> {
            runs.iter()
                .map(|run| {
                    let mut cmd = redis::cmd("EVALSHA");
                    cmd.arg(self.script.get_hash()).arg(4);
                    for key in SkuKeys::new(&self.prefix, run.sku).as_array() {
                        cmd.arg(key);
                    }
                    cmd.arg(MAX_STOCK).arg(run.at.partition).arg(run.at.home);
                    for (offset, body) in &run.records {
                        let (kind, id, quantity, mode) = script_args(body);
                        cmd.arg(offset).arg(kind).arg(id).arg(quantity).arg(mode);
                    }
                    cmd
                })
                .collect()
        };
        let replies: Vec<Vec<String>> = match self.redis.query_each(calls()).await {
            Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                // A restarted or flushed Redis (or a cluster node) forgot the
                // script: load it (on every node) and run the idempotent
                // calls again.
                self.script.prepare_invoke().load_async(&mut conn).await?;
                self.redis.query_each(calls()).await?
            }
            other => other?,
        };
        runs.iter()
            .zip(replies)
            .map(|(run, reply)| {
                if reply.len() != run.records.len() {
                    return Err(ProjectionError::ShortReply {
                        sku: run.sku.to_owned(),
                        expected: run.records.len(),
                        got: reply.len(),
                    });
                }
                reply
                    .into_iter()
                    .map(|s| {
                        Decision::from_compact(&s).ok_or_else(|| ProjectionError::Corrupt {
                            key: SkuKeys::new(&self.prefix, run.sku).decisions,
                            value: s,
                        })
                    })
                    .collect()
            })
            .collect()
    }

    /// Publishes on the prefix's [`keys::applied_channel`] that `marks`
    /// (partition, last offset applied) of `topic` are decided.
    pub async fn announce_applied(
        &self,
        topic: &str,
        marks: Vec<(i32, i64)>,
    ) -> Result<(), ProjectionError> {
        let publish = redis::cmd("PUBLISH")
            .arg(keys::applied_channel(&self.prefix))
            .arg(keys::encode_applied(topic, marks))
            .take();
        let _: Vec<i64> = self.redis.query_each(vec![publish]).await?;
        Ok(())
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
        let partition = match stock.get("partition") {
            None => None, // written before partitions were recorded
            Some(p) => Some(p.parse().map_err(|_| corrupt(&keys.stock, p))?),
        };
        let mut state = SkuState {
            available: number("available")?,
            total: number("total")?,
            partition,
            last_offset: Some(number("offset")?),
            ..SkuState::default()
        };
        for (order, value) in orders {
            let entry =
                OrderEntry::from_compact(&value).ok_or_else(|| corrupt(&keys.orders, &value))?;
            state.orders.insert(order, entry);
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
                Decision::from_compact(&value).ok_or_else(|| corrupt(&keys.decisions, &value))?;
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
}

/// The script's per-record arguments: kind, id, quantity, mode.
fn script_args(body: &CommandBody) -> (&'static str, &str, i64, &'static str) {
    match body {
        CommandBody::Deduct(d) => ("D", d.order_id.as_str(), d.quantity.get(), ""),
        CommandBody::Rollback(r) => ("R", r.order_id.as_str(), 0, ""),
        CommandBody::Restock(r) => (
            "S",
            r.adjustment_id.as_str(),
            r.quantity(),
            r.mode().as_str(),
        ),
    }
}
