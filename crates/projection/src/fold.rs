//! The one fold path: how a batch of log records reaches Redis.
//!
//! [`Projection::prepare`] takes a batch once: it groups the commands by
//! SKU and notes how far each partition was read, and owns all of it, so
//! the result can be applied from another task. [`Projection::apply`]
//! then takes the part of each SKU's state the batch's records need, from
//! what the projection keeps in memory (see `heads`) or else from Redis
//! (`lua/load.lua`), decides every record with the core's machine
//! ([`stockledger_core::SkuState::apply_noting`], the one place a rule is
//! written, which also says what each record changed), and writes those
//! changes in one fenced step. On a single Redis it is a transaction that
//! lands only if the marker still holds, for each of the batch's
//! partitions, the offset this projection last saw there, and the
//! generation restores and swaps move (see `fence`); on a cluster a script
//! per SKU (`lua/write.lua`) whose changes land only if its stock hash
//! still holds the offset they were decided on, and the marker is written
//! once every SKU is. What another writer moved since it was read (a
//! member that has not yet noticed it lost the partition, a restore, a
//! swap) gets nothing written; it is read and decided again on what Redis
//! holds now, where the records the other writer applied are redeliveries
//! answered with their stored decisions. Then the fold keeps the index of
//! live holds, as the machine says where each record's order's hold
//! stands, and, for a live applier, announces the offsets to waiting
//! order services. The applier and replay both fold this way; nothing
//! else writes a SKU's decisions.

use std::collections::BTreeMap;
use std::sync::LazyLock;
use std::time::Instant;

use foldhash::{HashMap, HashMapExt};
use redis::Script;
use stockledger_core::command::record_time;
use stockledger_core::partition::home_partition;
use stockledger_core::{Command, Decision, Hold};

use crate::fence::{Expected, Learned, GENERATION_FIELD};
use crate::heads::{answer_in, Change, Whole};
use crate::keys;
use crate::projection::{Projection, ProjectionError, APPLIED_FIELD};
use crate::stage::{Record, SkuStage, Wanted};
use crate::write::Written;

/// The script that reads the fields a batch needs; see the file.
static LOAD: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../lua/load.lua")));

/// SKUs one call of the load or write script takes on a single Redis, at
/// most: enough that a call's setup is a small share of its work, few
/// enough that Redis answers others in between.
const CALL_SKUS: usize = 1000;

/// How many times a batch's SKUs are decided again on what Redis holds,
/// when another writer moved their state under them, before the apply
/// fails (as a transient error: the applier tries again later). Two
/// writers race only while a partition changes hands, and the one behind
/// soon finds nothing left to write.
const FENCED_ATTEMPTS: u32 = 16;

/// How long to wait before deciding a refused batch again, after the
/// first retry (which goes at once): doubling from 1 ms up to 64 ms, so
/// a writer racing a faster one (a member with small batches) lets it
/// finish instead of being refused at every attempt.
fn fenced_pause(attempt: u32) -> std::time::Duration {
    std::time::Duration::from_millis(if attempt < 2 {
        0
    } else {
        1 << (attempt - 2).min(6)
    })
}

/// One record of a batch, as read from the log.
#[derive(Debug, Clone, Copy)]
pub struct Entry<'a> {
    pub partition: i32,
    pub offset: i64,
    /// The record's timestamp, ms since the epoch.
    pub timestamp: i64,
    /// The command to apply; `None` when there is none (not a valid
    /// command, or a SKU another fold owns), the offset still counting as
    /// read.
    pub command: Option<&'a Command>,
}

/// A batch ready to apply, owning all it needs.
#[derive(Debug, Clone)]
pub struct Prepared {
    /// The commands, in the order given.
    records: Vec<Record>,
    /// Each SKU's name, home partition and records (indexes into
    /// `records`, in log order), in the order first met.
    skus: Vec<(String, i32, Vec<usize>)>,
    /// The last offset read from each partition.
    marks: Vec<(i32, i64)>,
    /// The basket lines among the commands, by basket id.
    baskets: BTreeMap<String, BasketLines>,
}

impl Prepared {
    /// How many SKUs the batch's commands are for.
    pub fn runs(&self) -> usize {
        self.skus.len()
    }

    /// The last offset read from each partition, valid record or not:
    /// what [`Projection::apply`] records in the marker.
    pub fn marks(&self) -> &[(i32, i64)] {
        &self.marks
    }
}

/// A record's decision, and where the hold of the order it names stands
/// after it ([`stockledger_core::Changes::hold`]).
type Decided = (Decision, Option<Hold>);

/// A basket's lines in a batch: its holds' deadline, and each line's SKU
/// with the partition and offset of its record.
type BasketLines = (i64, BTreeMap<String, (i32, i64)>);

impl Projection {
    /// Prepares `entries`, records of a command topic with `partitions`
    /// partitions in delivery order, to be applied by
    /// [`Projection::apply`].
    pub fn prepare<'a>(
        &self,
        entries: impl IntoIterator<Item = Entry<'a>>,
        partitions: i32,
    ) -> Prepared {
        let mut last: BTreeMap<i32, i64> = BTreeMap::new();
        let entries = entries.into_iter();
        let mut records = Vec::with_capacity(entries.size_hint().0);
        for entry in entries {
            let read = last.entry(entry.partition).or_insert(entry.offset);
            *read = (*read).max(entry.offset);
            if let Some(command) = entry.command {
                records.push(Record {
                    partition: entry.partition,
                    offset: entry.offset,
                    time: record_time(entry.timestamp),
                    command: command.clone(),
                });
            }
        }
        let mut baskets: BTreeMap<String, BasketLines> = BTreeMap::new();
        for r in &records {
            if let Some(basket) = r.command.body.basket_id() {
                let deadline = r.command.body.expires_at().unwrap_or_default();
                let (last, lines) = baskets.entry(basket.as_str().to_owned()).or_default();
                *last = (*last).max(deadline);
                lines.insert(r.command.sku.as_str().to_owned(), (r.partition, r.offset));
            }
        }
        let mut skus: Vec<(String, i32, Vec<usize>)> = Vec::new();
        let mut index: HashMap<&str, usize> = HashMap::new();
        for (i, r) in records.iter().enumerate() {
            let sku = r.command.sku.as_str();
            let s = *index.entry(sku).or_insert_with(|| {
                let home = home_partition(sku.as_bytes(), partitions);
                skus.push((sku.to_owned(), home, Vec::new()));
                skus.len() - 1
            });
            skus[s].2.push(i);
        }
        Prepared {
            records,
            skus,
            marks: last.into_iter().collect(),
            baskets,
        }
    }

    /// Applies `batch` and returns the decision for each of its commands,
    /// in the order they were prepared; then keeps the index of live holds
    /// and records how far each partition is folded (announcing it when
    /// the projection is [`Projection::announcing`]). Baskets' lines are
    /// indexed first ([`keys::basket_key`], and the basket among the open
    /// ones, [`keys::open_baskets_key`]), so a line whose decision can be
    /// read is in its basket's index. Safe to repeat: records already
    /// applied are answered from the stored decisions and change nothing.
    pub async fn apply(&self, batch: &Prepared) -> Result<Vec<Decision>, ProjectionError> {
        Ok(self.apply_timed(batch).await?.0)
    }

    /// [`Projection::apply`], with when the batch was decided: after its
    /// last reading of Redis, before its write.
    pub async fn apply_timed(
        &self,
        batch: &Prepared,
    ) -> Result<(Vec<Decision>, Instant), ProjectionError> {
        if !batch.baskets.is_empty() {
            let mut index = Vec::with_capacity(batch.baskets.len() + 1);
            let mut open = redis::cmd("ZADD");
            open.arg(keys::open_baskets_key(&self.prefix)).arg("NX");
            for (basket, (deadline, lines)) in &batch.baskets {
                let mut cmd = redis::cmd("HSET");
                cmd.arg(keys::basket_key(&self.prefix, basket));
                for (sku, &(partition, offset)) in lines {
                    cmd.arg(sku)
                        .arg(keys::encode_line_position(partition, offset));
                }
                index.push(cmd);
                open.arg(deadline).arg(basket);
            }
            index.push(open);
            let _: Vec<redis::Value> = self.redis.query_each(index).await?;
        }
        self.check_marked().await?;
        let (decided, decided_at) = self.decide_and_write(batch).await?;
        let mut writes = hold_writes(&self.prefix, batch, &decided);
        if !batch.marks.is_empty() {
            if let Some(topic) = &self.announce_on {
                writes.push(
                    redis::cmd("PUBLISH")
                        .arg(keys::applied_channel(&self.prefix))
                        .arg(keys::encode_applied(topic, batch.marks.clone()))
                        .take(),
                );
            }
        }
        if !writes.is_empty() {
            let _: Vec<redis::Value> = self.redis.query_each(writes).await?;
        }
        let decisions = decided.into_iter().map(|(decision, _)| decision).collect();
        Ok((decisions, decided_at))
    }

    /// For a guarded projection, fails when the marker is gone (Redis
    /// restarted empty or was flushed). A flush between this and the write
    /// is not caught here; reconcile would show it.
    async fn check_marked(&self) -> Result<(), ProjectionError> {
        if !self.guarded {
            return Ok(());
        }
        let marked: bool = redis::cmd("HEXISTS")
            .arg(self.marker_key())
            .arg("topic")
            .query_async(&mut self.redis.clone())
            .await?;
        if marked {
            Ok(())
        } else {
            Err(ProjectionError::StateLost {
                prefix: self.prefix.clone(),
                key: self.marker_key(),
            })
        }
    }

    /// Reads, decides and writes the batch's SKUs, deciding again those
    /// whose state moved under the decisions (on a single Redis, the whole
    /// batch when the fence refused it); records the marks with the last
    /// write.
    async fn decide_and_write(
        &self,
        batch: &Prepared,
    ) -> Result<(Vec<Decided>, Instant), ProjectionError> {
        let mut decided: Vec<Option<Decided>> = vec![None; batch.records.len()];
        let mut decided_at = Instant::now();
        let all: Vec<usize> = (0..batch.skus.len()).collect();
        let mut pending = all.clone();
        for attempt in 1u32.. {
            let expected = self.fence_for(batch).await?;
            let (stages, loaded) = self.staged(batch, &pending).await?;
            let mut writes = Vec::with_capacity(stages.len());
            let mut changes = Vec::with_capacity(stages.len());
            for (k, (mut stage, loaded)) in stages.into_iter().zip(loaded).enumerate() {
                stage.decide(&batch.records, &mut decided);
                let (write, stock) = stage.finish();
                if let Some(write) = write {
                    writes.push((k, write));
                }
                changes.push(Change {
                    stock,
                    loaded,
                    hashes: Default::default(),
                });
            }
            decided_at = Instant::now();
            let written = match self.write(&batch.marks, &writes, expected.as_ref()).await {
                Ok(written) => written,
                Err(e) => {
                    // Whether anything landed is unknown: read it again.
                    self.heads.clear();
                    self.fence.reset();
                    return Err(e);
                }
            };
            let refused = written == Written::Refused;
            let moved: Vec<usize> = match written {
                Written::Landed => Vec::new(),
                Written::Moved(moved) => moved.into_iter().map(|k| pending[k]).collect(),
                Written::Refused => pending.clone(),
            };
            for (k, write) in writes {
                let [_, orders, adjustments] = write.hashes;
                changes[k].hashes = [
                    (orders.deletes, orders.sets),
                    (adjustments.deletes, adjustments.sets),
                ];
            }
            self.heads.put(
                (pending.iter().zip(changes))
                    .map(|(&s, change)| {
                        let kept = (!moved.contains(&s)).then_some(change);
                        (batch.skus[s].0.clone(), kept)
                    })
                    .collect(),
            );
            if moved.is_empty() {
                break;
            }
            if attempt >= FENCED_ATTEMPTS {
                return Err(ProjectionError::Moved {
                    sku: batch.skus[moved[0]].0.clone(),
                });
            }
            // A batch refused on a single Redis, each SKU moved on a cluster.
            let count = if refused { 1 } else { moved.len() as u64 };
            self.refusals
                .fetch_add(count, std::sync::atomic::Ordering::Relaxed);
            tokio::time::sleep(fenced_pause(attempt)).await;
            if refused {
                // Nothing landed, and nothing kept can be trusted: decide
                // the whole batch again on what Redis holds.
                self.heads.clear();
                self.fence.reset();
                pending.clone_from(&all);
            } else {
                pending = moved;
            }
        }
        Ok((decided.into_iter().flatten().collect(), decided_at))
    }

    /// On a single Redis, what the batch's write must find in the marker
    /// (see `fence`): the marker's fields of partitions not known yet are
    /// read first, before any of their SKUs, and what was kept of those
    /// SKUs is forgotten (all that was kept, when the generation moved).
    /// `None` on a cluster, where each SKU is fenced by its stock hash.
    async fn fence_for(&self, batch: &Prepared) -> Result<Option<Expected>, ProjectionError> {
        if self.redis.is_cluster() {
            return Ok(None);
        }
        let partitions: Vec<i32> = batch.marks.iter().map(|&(p, _)| p).collect();
        let unknown = self.fence.unknown(&partitions);
        if !unknown.is_empty() {
            let marker = self.marker_key();
            let mut read = redis::cmd("HMGET");
            read.arg(&marker).arg(GENERATION_FIELD);
            for p in &unknown {
                read.arg(format!("{APPLIED_FIELD}{p}"));
            }
            let values: Vec<Option<String>> = read.query_async(&mut self.redis.clone()).await?;
            let mut values = values.into_iter().map(|value| {
                value
                    .map(|v| {
                        v.parse::<i64>().map_err(|_| ProjectionError::Corrupt {
                            key: marker.clone(),
                            value: v,
                        })
                    })
                    .transpose()
            });
            let generation = values.next().transpose()?.flatten();
            let read = (unknown.into_iter())
                .zip(values)
                .map(|(p, v)| Ok((p, v?)))
                .collect::<Result<Vec<_>, ProjectionError>>()?;
            match self.fence.learn(generation, read) {
                Learned::Anew => self.heads.clear(),
                Learned::Partitions(partitions) => {
                    let partitions = partitions.into_iter().collect();
                    self.forget_kept(&partitions, true);
                }
            }
        }
        Ok(Some(self.fence.expected(&partitions)))
    }

    /// The stages of the batch's SKUs numbered `pending`, each with the
    /// part of its state its records need: what is kept in memory (see
    /// `heads`), the rest read from Redis; and, for each, its orders and
    /// adjustments hashes when this read took them whole.
    async fn staged(
        &self,
        batch: &Prepared,
        pending: &[usize],
    ) -> Result<(Vec<SkuStage>, Vec<Option<Whole>>), ProjectionError> {
        let kept = self.heads.get(pending.iter().map(|&s| &batch.skus[s].0));
        let mut stages = Vec::with_capacity(pending.len());
        let mut whole = Vec::with_capacity(pending.len());
        for (&s, kept) in pending.iter().zip(kept) {
            let (sku, home, records) = &batch.skus[s];
            let (stock, known) = kept.map_or((None, false), |(stock, known)| (Some(stock), known));
            let mut stage = SkuStage::new(&self.prefix, sku, *home, stock)?;
            stage.records.clone_from(records);
            stages.push(stage);
            whole.push(known.then_some(sku.as_str()));
        }
        let mut loaded: Vec<Option<Whole>> = vec![None; stages.len()];
        let first: Vec<Wanted> = stages.iter().map(|s| s.wanted(&batch.records)).collect();
        let first = self.answer_from_memory(&mut stages, &whole, &loaded, first)?;
        self.read(&mut stages, first, &mut loaded).await?;
        let next: Vec<Wanted> = stages
            .iter()
            .map(|s| s.wanted_next(&batch.records))
            .collect();
        let next = self.answer_from_memory(&mut stages, &whole, &loaded, next)?;
        self.read(&mut stages, next, &mut loaded).await?;
        Ok((stages, loaded))
    }

    /// Loads into each stage of a SKU known whole (kept, `whole[k]` its
    /// name, or `loaded[k]` by this batch) the fields of `wanted` that
    /// memory answers; returns what is left to read from Redis.
    fn answer_from_memory(
        &self,
        stages: &mut [SkuStage],
        whole: &[Option<&str>],
        loaded: &[Option<Whole>],
        wanted: Vec<Wanted>,
    ) -> Result<Vec<Wanted>, ProjectionError> {
        let mut left = Vec::with_capacity(wanted.len());
        for (k, mut want) in wanted.into_iter().enumerate() {
            if whole[k].is_none() && loaded[k].is_none() {
                left.push(want);
                continue;
            }
            let mut known = Wanted::default();
            let mut values: [Vec<Option<String>>; 4] = Default::default();
            for (hash, (fields, known_fields)) in [
                (&mut want.orders, &mut known.orders),
                (&mut want.adjustments, &mut known.adjustments),
            ]
            .into_iter()
            .enumerate()
            {
                let answers = match (&loaded[k], whole[k]) {
                    (Some(maps), _) => (fields.iter())
                        .map(|field| answer_in(&maps[hash], hash == 0, field))
                        .collect(),
                    (None, Some(sku)) => self.heads.answer(sku, hash, fields),
                    (None, None) => vec![None; fields.len()],
                };
                let mut unknown = Vec::new();
                for (field, answer) in std::mem::take(fields).into_iter().zip(answers) {
                    match answer {
                        Some(value) => {
                            known_fields.push(field);
                            values[hash + 1].push(value);
                        }
                        None => unknown.push(field),
                    }
                }
                *fields = unknown;
            }
            if !known.is_empty() {
                stages[k].load(&known, values)?;
            }
            left.push(want);
        }
        Ok(left)
    }

    /// Reads each stage's `wanted` fields into it: on a single Redis in a
    /// few calls of many SKUs, on a cluster one call per SKU (a script's
    /// keys must share a slot, and a SKU's keys share its hash tag). A
    /// stage that wants nothing is left out. A stage read for the first
    /// time (its stock hash wanted) also asks for its orders and
    /// adjustments hashes whole, which `loaded` gets when both are small.
    async fn read(
        &self,
        stages: &mut [SkuStage],
        wanted: Vec<Wanted>,
        loaded: &mut [Option<Whole>],
    ) -> Result<(), ProjectionError> {
        let asking: Vec<usize> = (0..stages.len())
            .filter(|&k| !wanted[k].is_empty())
            .collect();
        if asking.is_empty() {
            return Ok(());
        }
        self.reads
            .fetch_add(asking.len() as u64, std::sync::atomic::Ordering::Relaxed);
        let limit = self.heads.whole_on_miss();
        let per_call = if self.redis.is_cluster() {
            1
        } else {
            CALL_SKUS
        };
        let calls = || {
            asking
                .chunks(per_call)
                .map(|chunk| {
                    let (args, bytes) = (chunk.iter())
                        .map(|&k| load_size(&stages[k], &wanted[k]))
                        .fold((3, 64), |(a, b), (args, bytes)| (a + args, b + bytes));
                    let mut cmd = crate::write::sized("EVALSHA", args, bytes);
                    cmd.arg(LOAD.get_hash()).arg(4 * chunk.len());
                    for &k in chunk {
                        for key in stages[k].keys.as_array() {
                            cmd.arg(key);
                        }
                    }
                    cmd.arg(limit);
                    for &k in chunk {
                        let want = &wanted[k];
                        let whole = if limit > 0 && !want.stock.is_empty() {
                            "1"
                        } else {
                            "0"
                        };
                        // A decision is read where this release writes it,
                        // the stock hash, and where earlier ones did.
                        cmd.arg("0").arg(want.stock.len() + want.decisions.len());
                        cmd.arg(&want.stock).arg(&want.decisions);
                        cmd.arg(whole).arg(want.orders.len()).arg(&want.orders);
                        cmd.arg(whole).arg(want.adjustments.len());
                        cmd.arg(&want.adjustments);
                        cmd.arg("0").arg(want.decisions.len());
                        cmd.arg(&want.decisions);
                    }
                    cmd
                })
                .collect()
        };
        let replies: Vec<Vec<u8>> = self.run(&LOAD, calls).await?;
        let mut values = Vec::with_capacity(4 * asking.len());
        for reply in &replies {
            values.extend(crate::reply::lists(reply)?);
        }
        let mut values = values.into_iter();
        for &k in &asking {
            let mut four = || values.next().unwrap_or_default();
            let mut read = [four(), four(), four(), four()];
            let want = &wanted[k];
            let decisions = read[0].split_off(want.stock.len().min(read[0].len()));
            for (earlier, now) in read[3].iter_mut().zip(decisions) {
                if now.is_some() {
                    *earlier = now;
                }
            }
            let orders = split_whole(&mut read[1], want.orders.len());
            let adjustments = split_whole(&mut read[2], want.adjustments.len());
            if let (Some(orders), Some(adjustments)) = (orders, adjustments) {
                loaded[k] = Some([orders, adjustments]);
            }
            stages[k].load(want, read)?;
        }
        Ok(())
    }
}

/// The arguments a SKU adds to a call of the load script, and their bytes
/// (a count taken as 8), to size the call.
fn load_size(stage: &SkuStage, want: &Wanted) -> (usize, usize) {
    let keys: usize = stage.keys.as_array().iter().map(|k| k.len()).sum();
    let stock: usize = want.stock.iter().map(|f| f.len()).sum();
    let [orders, adjustments, decisions] = [&want.orders, &want.adjustments, &want.decisions]
        .map(|f| f.iter().map(String::len).sum::<usize>());
    let fields =
        want.stock.len() + want.orders.len() + want.adjustments.len() + 2 * want.decisions.len();
    let args = 4 + 12 + fields;
    (
        args,
        keys + 12 * 8 + stock + orders + adjustments + 2 * decisions,
    )
}

/// Takes off `read` (a hash's reply from the load script, the values of
/// the `asked` fields first) the hash read whole after them, if it was.
fn split_whole(read: &mut Vec<Option<String>>, asked: usize) -> Option<HashMap<String, String>> {
    if read.get(asked).and_then(Option::as_deref) != Some("*") {
        return None;
    }
    let pairs = read.split_off(asked + 1);
    read.truncate(asked);
    let mut pairs = pairs.into_iter().flatten();
    let mut whole = HashMap::new();
    while let (Some(field), Some(value)) = (pairs.next(), pairs.next()) {
        whole.insert(field, value);
    }
    Some(whole)
}

/// The writes that keep the [`keys::holds_key`] index of live reservations
/// after a batch, as the machine says where each record's order's hold
/// stands: a live hold is added with its deadline, one that ended is
/// removed. Redeliveries say it too, so an index a crash left behind
/// (the batch written, its index not) is mended when they come. Only
/// each hold's last change is written: on a cluster the writes are in
/// flight together, so a reservation's add and its confirm's remove must
/// not both be sent.
fn hold_writes(prefix: &str, batch: &Prepared, decided: &[Decided]) -> Vec<redis::Cmd> {
    let mut last: BTreeMap<(i32, &str, &str), Hold> = BTreeMap::new();
    for (record, (_, hold)) in batch.records.iter().zip(decided) {
        let (Some(hold), Some(order)) = (hold, record.command.body.order_id()) else {
            continue;
        };
        let sku = record.command.sku.as_str();
        last.insert((record.partition, sku, order.as_str()), *hold);
    }
    last.into_iter()
        .map(|((partition, sku, order), hold)| {
            let key = keys::holds_key(prefix, partition);
            let member = keys::hold_member(sku, order);
            match hold {
                Hold::Live(deadline) => redis::Cmd::zadd(key, member, deadline),
                Hold::Ended => redis::Cmd::zrem(key, member),
            }
        })
        .collect()
}
