//! The one fold path: how a batch of log records reaches Redis.
//!
//! [`Projection::prepare`] takes a batch once: it groups the commands into
//! per-SKU runs, builds the apply script's calls, notes which holds each
//! command may take or end and how far each partition was read, and owns
//! all of it, so the result can be applied from another task.
//! [`Projection::apply`] then sends the calls, keeps the index of live
//! holds, records the offsets in the marker and, for a live applier,
//! announces them to waiting order services. The applier and replay both
//! fold this way; nothing else sends the apply script.

use std::collections::BTreeMap;
use std::ops::Range;
use std::sync::LazyLock;

use redis::{ErrorKind, Script, ServerErrorKind};
use stockledger_core::command::record_time;
use stockledger_core::ids::{MAX_HOLD_MS, MAX_STOCK};
use stockledger_core::{Command, CommandBody, Decision, ResultCode, UnitId};

use crate::batch::{in_record_order, Batch, Run};
use crate::encoding::decode_decision;
use crate::keys::{self, SkuKeys};
use crate::projection::{Projection, ProjectionError};

/// Records one call of the apply script takes on a single Redis, at most
/// (a run is never split): enough that setting the script up is a small
/// share of its work, few enough that Redis answers others in between.
const CALL_RECORDS: usize = 1000;

/// Runs one call of the apply script takes on a single Redis, at most.
const CALL_RUNS: usize = 500;

/// The script that applies records; see the file for its contract.
pub(crate) static APPLY: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../lua/apply.lua")));

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
    /// The apply script's calls.
    calls: Vec<redis::Cmd>,
    /// The runs each call takes, as ranges of `runs`.
    ranges: Vec<Range<usize>>,
    /// Each run's SKU (for errors) and record count.
    runs: Vec<(String, usize)>,
    /// For each command, in the order given, its (run, index in run).
    slots: Vec<(usize, usize)>,
    /// For each command, in the order given, the hold it may take or end.
    holds: Vec<Option<HoldChange>>,
    /// The last offset read from each partition.
    marks: Vec<(i32, i64)>,
    /// The basket lines among the commands, by basket id.
    baskets: BTreeMap<String, BasketLines>,
}

impl Prepared {
    /// How many script runs (SKU and partition pairs) the batch makes.
    pub fn runs(&self) -> usize {
        self.runs.len()
    }

    /// The last offset read from each partition, valid record or not:
    /// what [`Projection::apply`] records in the marker.
    pub fn marks(&self) -> &[(i32, i64)] {
        &self.marks
    }
}

/// A basket's lines in a batch: its holds' deadline, and each line's SKU
/// with the partition and offset of its record.
type BasketLines = (i64, BTreeMap<String, (i32, i64)>);

/// What a command may do to the index of live holds, once decided.
#[derive(Debug, Clone)]
struct HoldChange {
    partition: i32,
    /// [`keys::hold_member`] of the SKU and order.
    member: String,
    /// `Some(deadline)`: a reservation, indexed if applied. `None`: a
    /// confirm, rollback or expire, which ends the hold when decided.
    deadline: Option<i64>,
}

impl HoldChange {
    fn of(partition: i32, command: &Command) -> Option<Self> {
        let deadline = match &command.body {
            CommandBody::Deduct(d) => Some(d.expires_at?),
            CommandBody::Confirm(_) | CommandBody::Rollback(_) | CommandBody::Expire(_) => None,
            _ => return None,
        };
        let order = command.body.order_id()?;
        Some(Self {
            partition,
            member: keys::hold_member(command.sku.as_str(), order.as_str()),
            deadline,
        })
    }

    /// The index entry after `decision`: `Some(Some(deadline))` to add,
    /// `Some(None)` to remove, `None` to leave as it is.
    fn after(&self, decision: &Decision) -> Option<Option<i64>> {
        match self.deadline {
            Some(deadline) => (decision.result == ResultCode::Applied).then_some(Some(deadline)),
            None => (decision.result != ResultCode::IgnoredNotDue
                && decision.result != ResultCode::Misrouted)
                .then_some(None),
        }
    }
}

impl Projection {
    /// Prepares `entries`, records of a command topic with `partitions`
    /// partitions in delivery order, to be applied by
    /// [`Projection::apply`]. On a single Redis a call takes many runs
    /// (one script call set up for hundreds of records); on a cluster each
    /// run is a call of its own, as a script's keys must share a slot.
    pub fn prepare<'a>(
        &self,
        entries: impl IntoIterator<Item = Entry<'a>>,
        partitions: i32,
    ) -> Prepared {
        let mut last: BTreeMap<i32, i64> = BTreeMap::new();
        let mut commands = Vec::new();
        for entry in entries {
            let read = last.entry(entry.partition).or_insert(entry.offset);
            *read = (*read).max(entry.offset);
            if let Some(command) = entry.command {
                commands.push((entry.partition, entry.offset, entry.timestamp, command));
            }
        }
        let holds = commands
            .iter()
            .map(|&(partition, _, _, command)| HoldChange::of(partition, command))
            .collect();
        let mut baskets: BTreeMap<String, BasketLines> = BTreeMap::new();
        for &(partition, offset, _, command) in &commands {
            if let Some(basket) = command.body.basket_id() {
                let deadline = command.body.expires_at().unwrap_or_default();
                let (last, lines) = baskets.entry(basket.as_str().to_owned()).or_default();
                *last = (*last).max(deadline);
                lines.insert(command.sku.as_str().to_owned(), (partition, offset));
            }
        }
        let batch = Batch::group(commands, partitions);
        let ranges = call_ranges(&batch.runs, self.redis.is_cluster());
        Prepared {
            calls: ranges
                .iter()
                .map(|call| self.script_call(&batch.runs[call.clone()]))
                .collect(),
            ranges,
            runs: batch
                .runs
                .iter()
                .map(|run| (run.sku.to_owned(), run.records.len()))
                .collect(),
            slots: batch.slots,
            holds,
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
    /// applied are answered from the stored decisions, and the rest writes
    /// the same again.
    pub async fn apply(&self, batch: &Prepared) -> Result<Vec<Decision>, ProjectionError> {
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
        let per_run = self.execute(batch).await?;
        let decisions = in_record_order(&batch.slots, &per_run);
        let mut writes = hold_writes(&self.prefix, batch, &decisions);
        if !batch.marks.is_empty() {
            writes.push(self.record_applied_cmd(&batch.marks));
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
        Ok(decisions)
    }

    /// Sends the batch's calls in one pipelined round trip (in flight
    /// together on a cluster); each run's decisions in record order.
    async fn execute(&self, batch: &Prepared) -> Result<Vec<Vec<Decision>>, ProjectionError> {
        if batch.calls.is_empty() {
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
        let replies: Vec<Vec<String>> = match self.redis.query_each(batch.calls.clone()).await {
            Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                // A restarted or flushed Redis (or a cluster node) forgot the
                // script: load it (on every node) and run the idempotent
                // calls again.
                APPLY.prepare_invoke().load_async(&mut conn).await?;
                self.redis.query_each(batch.calls.clone()).await?
            }
            other => other?,
        };
        let mut decisions = Vec::with_capacity(batch.runs.len());
        for (call, reply) in batch.ranges.iter().zip(replies) {
            let runs = &batch.runs[call.clone()];
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
}

/// The writes that keep the [`keys::holds_key`] index of live reservations
/// after a batch's `decisions`: a reservation taken is added with its
/// deadline; a confirm, rollback or expire that leaves no hold removes its
/// order. Only each hold's last change is written: on a cluster the writes
/// are in flight together, so a reservation's add and its confirm's remove
/// must not both be sent. An entry left behind (a redelivery, a crash)
/// only makes the expirer send an expire that changes nothing.
fn hold_writes(prefix: &str, batch: &Prepared, decisions: &[Decision]) -> Vec<redis::Cmd> {
    let mut last: BTreeMap<(i32, &str), Option<i64>> = BTreeMap::new();
    for (hold, decision) in batch.holds.iter().zip(decisions) {
        let Some(hold) = hold else { continue };
        if let Some(change) = hold.after(decision) {
            last.insert((hold.partition, &hold.member), change);
        }
    }
    last.into_iter()
        .map(|((partition, member), change)| {
            let key = keys::holds_key(prefix, partition);
            match change {
                Some(deadline) => redis::Cmd::zadd(key, member, deadline),
                None => redis::Cmd::zrem(key, member),
            }
        })
        .collect()
}

/// The runs of each apply script call, as ranges of `runs`: on a single
/// Redis, consecutive runs until a call holds [`CALL_RECORDS`] records (or
/// [`CALL_RUNS`] runs); on a cluster, one run per call.
fn call_ranges(runs: &[Run<'_>], cluster: bool) -> Vec<Range<usize>> {
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
        CommandBody::Deduct(d) if !d.units.is_empty() => {
            cmd.arg("N")
                .arg(time)
                .arg(d.order_id.as_str())
                .arg(d.user_id.as_ref().map_or("", |u| u.as_str()));
            match d.expires_at {
                Some(t) => cmd.arg(t),
                None => cmd.arg(""),
            };
            cmd.arg(unit_lines(&d.units));
        }
        CommandBody::Restock(r) if !r.named().is_empty() => {
            cmd.arg("T")
                .arg(r.adjustment_id.as_str())
                .arg(unit_lines(r.named()));
        }
        CommandBody::Deduct(d) if d.location.is_some() => {
            cmd.arg("P")
                .arg(time)
                .arg(d.order_id.as_str())
                .arg(d.quantity.get())
                .arg(d.user_id.as_ref().map_or("", |u| u.as_str()));
            match d.expires_at {
                Some(t) => cmd.arg(t),
                None => cmd.arg(""),
            };
            cmd.arg(d.location.as_ref().map_or("", |l| l.as_str()));
        }
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
        CommandBody::Restock(r) if r.location().is_some() => {
            cmd.arg("Q")
                .arg(r.adjustment_id.as_str())
                .arg(r.quantity())
                .arg(r.mode().as_str())
                .arg(r.location().map_or("", |l| l.as_str()));
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
        CommandBody::Alerts(a) => {
            cmd.arg("A").arg(a.low_stock_below.map_or(0, |q| q.get()));
        }
        CommandBody::Transfer(t) => {
            cmd.arg("M")
                .arg(t.transfer_id.as_str())
                .arg(t.from().as_str())
                .arg(t.to().as_str())
                .arg(t.quantity().get());
        }
    }
}

/// Unit names as the apply script takes them: one per line.
fn unit_lines(units: &[UnitId]) -> String {
    let names: Vec<&str> = units.iter().map(UnitId::as_str).collect();
    names.join("\n")
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
