//! A batch from the log to Redis: decoded, prepared, applied from a task
//! of its own, and its decisions taken back.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};
use stockledger_core::report::Chain;

use rdkafka::message::{BorrowedMessage, Headers, Message, OwnedMessage};
use stockledger_core::partition::home_partition;
use stockledger_core::trace::traceparent_among;
use stockledger_core::{Command, Decision, LogPosition};
use stockledger_kafka::topic::offset_ranges;
use stockledger_runtime::retry;
use tokio::task::{JoinError, JoinHandle};
use tracing::{debug, warn};

use stockledger_core::record::{interpret, key_text};
use stockledger_projection::{Entry, Prepared, ProjectionError};

use super::hops::Pending;
use super::start::partition_count;
use super::{
    Applier, ApplierError, APPLY_SECONDS_METRIC, BATCH_RECORDS_METRIC, BATCH_RUNS_METRIC,
    FENCE_REFUSALS_METRIC,
};

/// One record of a batch, decoded or refused, taken from the consumer
/// where it lay ([`Item::take`]).
pub(super) struct Item {
    pub(super) position: LogPosition,
    pub(super) timestamp: i64,
    /// Its producer's W3C `traceparent`, when it carries a valid one: the
    /// one header of its outcome and stock events.
    pub(super) traceparent: Option<String>,
    pub(super) command: Result<Command, Refused>,
    /// The record whole, for its dead letter: kept for a record that is
    /// not a valid command or is not on its SKU's home partition (the
    /// machine decides it misrouted), and for no other.
    pub(super) record: Option<OwnedMessage>,
}

/// A record that is not a valid command: its key for reports and its
/// outcome (bounded in length), and why.
pub(super) struct Refused {
    pub(super) key: String,
    pub(super) reason: String,
}

impl Item {
    /// Decodes `m` from the consumer's own bytes, with `partitions` the
    /// command topic's count: a valid command on its SKU's home partition
    /// (nearly every record) is not copied whole.
    pub(super) fn take(m: &BorrowedMessage<'_>, partitions: i32) -> Self {
        let command = interpret(m.key(), m.payload()).map_err(|reason| Refused {
            key: key_text(m.key()),
            reason,
        });
        let at_home = command.as_ref().is_ok_and(|command| {
            home_partition(command.sku.as_str().as_bytes(), partitions) == m.partition()
        });
        let traceparent = m.headers().and_then(|headers| {
            traceparent_among(headers.iter().map(|h| (h.key, h.value))).map(str::to_owned)
        });
        Self {
            position: LogPosition {
                topic: m.topic().to_owned(),
                partition: m.partition(),
                offset: m.offset(),
            },
            timestamp: m.timestamp().to_millis().unwrap_or_default(),
            traceparent,
            command,
            record: (!at_home).then(|| m.detach()),
        }
    }

    /// The record's key for reports and outcomes: a valid command's SKU
    /// (its key, as [`interpret`] checked), else the key as read.
    pub(super) fn key(&self) -> &str {
        match &self.command {
            Ok(command) => command.sku.as_str(),
            Err(refused) => &refused.key,
        }
    }
}

/// A batch read and decoded, with its script calls built.
pub(super) struct Decoded {
    /// What each record holds, in log order.
    pub(super) items: Vec<Item>,
    /// The script runs the batch makes.
    pub(super) runs: usize,
    /// The next offset of each partition of the command topic (the one
    /// topic the consumer reads) in the batch.
    pub(super) next: BTreeMap<i32, i64>,
    /// When each record was read, with hops timed (else empty).
    pub(super) read: Vec<Instant>,
}

/// What applying a batch in its own task came to: `None` when asked to
/// stop before Redis answered (whether it applied the batch or not, a
/// redelivery settles it).
pub(super) type Applied = Result<Option<Answered>, ProjectionError>;

/// Redis's answer for a batch: a decision for each valid command, in
/// record order, and when the batch was decided and written.
pub(super) struct Answered {
    decisions: Vec<Decision>,
    decided: Instant,
    written: Instant,
}

/// A batch whose script calls are on their way to Redis, sent by a task of
/// their own while the applier reads the next batch and publishes the
/// previous one.
pub(super) struct Applying {
    pub(super) batch: Decoded,
    pub(super) task: JoinHandle<Applied>,
}

/// The decisions of the batch being applied, once Redis has answered;
/// never ready without one.
pub(super) async fn applied(applying: &mut Option<Applying>) -> Result<Applied, JoinError> {
    match applying {
        Some(batch) => (&mut batch.task).await,
        None => std::future::pending().await,
    }
}

/// Logs a failed Redis request that is tried again in `wait`.
pub(super) fn redis_away(e: &ProjectionError, wait: Duration) {
    warn!(error = %Chain(&e), retry_in = ?wait, "Redis unavailable; nothing committed, retrying");
}

/// A batch with the decision for each valid command, in record order.
pub(super) struct Decided {
    pub(super) batch: Decoded,
    pub(super) decisions: Vec<Decision>,
    /// With hops timed, the batch's steps so far.
    pub(super) hops: Option<Pending>,
}

impl Applier {
    /// Prepares the valid commands of `items` for Redis; refuses a batch
    /// from a partition beyond the count the projection was built with.
    pub(super) async fn prepare(
        &self,
        items: Vec<Item>,
        read: Vec<Instant>,
    ) -> Result<(Decoded, Prepared), ApplierError> {
        if let Some(beyond) = items
            .iter()
            .map(|item| item.position.partition)
            .find(|&p| p >= self.partitions)
        {
            // Partitions were added since the count was read: stop before
            // applying anything of this batch, as a restart would refuse.
            return Err(ApplierError::PartitionsChanged {
                topic: self.config.topic.clone(),
                marked: self.partitions,
                now: partition_count(&self.config).await?.max(beyond + 1),
            });
        }
        let prepared = self.projection.prepare(
            items.iter().map(|item| Entry {
                partition: item.position.partition,
                offset: item.position.offset,
                timestamp: item.timestamp,
                command: item.command.as_ref().ok(),
            }),
            self.partitions,
        );
        metrics::histogram!(BATCH_RECORDS_METRIC).record(items.len() as f64);
        metrics::histogram!(BATCH_RUNS_METRIC).record(prepared.runs() as f64);
        let batch = Decoded {
            items,
            runs: prepared.runs(),
            next: prepared
                .marks()
                .iter()
                .map(|&(p, last)| (p, last + 1))
                .collect(),
            read,
        };
        Ok((batch, prepared))
    }

    /// Applies `batch` to Redis from a task of its own, retrying while
    /// Redis is unreachable until asked to stop.
    pub(super) fn start_apply(&self, (batch, prepared): (Decoded, Prepared)) -> Applying {
        let revoked = self.config.assignment.take_revoked();
        if !revoked.is_empty() {
            let forgotten = self.projection.forget_partitions(&revoked);
            debug!(?revoked, forgotten, "forgot the SKUs of partitions revoked");
        }
        let projection = self.projection.clone();
        let mut stop = self.stop.clone();
        let task = tokio::spawn(async move {
            retry::until_stopped(
                || async {
                    let started = Instant::now();
                    let applied = projection.apply_timed(&prepared).await;
                    let written = Instant::now();
                    metrics::histogram!(APPLY_SECONDS_METRIC)
                        .record((written - started).as_secs_f64());
                    applied.map(|(decisions, decided)| Answered {
                        decisions,
                        decided,
                        written,
                    })
                },
                ProjectionError::is_transient,
                redis_away,
                &mut stop,
            )
            .await
        });
        Applying { batch, task }
    }

    /// The decisions of a batch Redis has applied (`joined`), in record
    /// order; `None` when the task gave up on Redis to stop (nothing of the
    /// batch is published or committed).
    // Large, as every ApplierError is: it ends the run, once.
    #[allow(clippy::result_large_err)]
    pub(super) fn conclude(
        &self,
        applying: Applying,
        joined: Result<Applied, JoinError>,
    ) -> Result<Option<Decided>, ApplierError> {
        let batch = applying.batch;
        let applied = match joined {
            Ok(applied) => applied,
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            // The runtime is shutting down: as good as asked to stop.
            Err(_) => Ok(None),
        };
        let offsets = || {
            offset_ranges(
                batch
                    .items
                    .iter()
                    .map(|i| (i.position.partition, i.position.offset)),
            )
        };
        let applied = applied.map_err(|source| ApplierError::Apply {
            topic: self.config.topic.clone(),
            offsets: offsets(),
            source,
        })?;
        let Some(Answered {
            decisions,
            decided,
            written,
        }) = applied
        else {
            return Ok(None);
        };
        let hops = (!batch.read.is_empty()).then(|| Pending {
            records: (batch.items.iter().zip(&batch.read))
                .map(|(item, &read)| (item.position.partition, item.position.offset, read))
                .collect(),
            decided,
            written,
        });
        debug!(runs = batch.runs, offsets = %offsets(), "applied to Redis");
        metrics::counter!(FENCE_REFUSALS_METRIC).absolute(self.projection.fence_refusals());
        Ok(Some(Decided {
            batch,
            decisions,
            hops,
        }))
    }
}
