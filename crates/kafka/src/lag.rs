//! Consumer lag from librdkafka's statistics, and the partitions a group
//! member holds, for progress reports, metrics and readiness probes.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use rdkafka::client::ClientContext;
use rdkafka::consumer::{BaseConsumer, ConsumerContext, Rebalance};
use rdkafka::error::{KafkaError, KafkaResult};
use rdkafka::statistics::Statistics;
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::TopicPartitionList;

/// Gauge: records left to read on one partition of a consumed topic.
pub const LAG_GAUGE: &str = "stockledger_consumer_lag";
/// Gauge: partitions of the consumed topic this member holds.
pub const ASSIGNED_GAUGE: &str = "stockledger_partitions_assigned";

/// How many partitions a group member holds, kept up to date from the
/// consumer's rebalance callbacks. Cheap to clone; a readiness probe reads
/// it while the member runs.
#[derive(Debug, Clone, Default)]
pub struct Assignment {
    held: Arc<AtomicUsize>,
    /// Partitions revoked since [`Assignment::take_revoked`] last took them.
    revoked: Arc<Mutex<BTreeSet<i32>>>,
}

impl Assignment {
    pub fn new() -> Self {
        Self::default()
    }

    /// Partitions held now (0 before the first assignment and while the
    /// group rebalances).
    pub fn count(&self) -> usize {
        self.held.load(Ordering::Relaxed)
    }

    /// The partitions revoked since the last call (and not assigned back
    /// since), for a member that drops what it kept of them.
    pub fn take_revoked(&self) -> BTreeSet<i32> {
        std::mem::take(&mut *self.revoked.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

/// Keeps the records left to read on `topic` (high watermark of the last
/// fetch minus the next offset to hand out, over the assigned partitions)
/// in `lag`, updated every `statistics.interval.ms`, publishes it per
/// partition as [`LAG_GAUGE`], and tracks the member's [`Assignment`].
#[derive(Debug)]
pub struct LagContext {
    topic: String,
    lag: Arc<AtomicI64>,
    assignment: Assignment,
    /// The partitions of `topic` held now.
    held: Mutex<BTreeSet<i32>>,
    /// librdkafka said it could not read the committed offsets of
    /// partitions assigned here: it never fetches those ([`stranding`]).
    stranded: AtomicBool,
}

/// Whether librdkafka's error `reason` says it could not read the committed
/// offsets of partitions assigned to this member. librdkafka (2.12) then
/// never starts fetching them: a request-level error to its OffsetFetch
/// (`NOT_COORDINATOR` from a coordinator that just moved) leaves them
/// waiting for an answer that never comes, and a partition-level one leaves
/// them aside until the next assignment (confluentinc/librdkafka#5586). The
/// member holds its partitions, reports no lag and reads nothing; only a new
/// consumer starts them again.
pub fn stranding(reason: &str) -> bool {
    reason.starts_with("Failed to fetch committed offset")
}

impl LagContext {
    /// Also registers the gauges (with their help text; `partitions
    /// assigned` at 0), so they are there before the first rebalance.
    pub fn new(topic: &str, lag: Arc<AtomicI64>, assignment: Assignment) -> Self {
        metrics::describe_gauge!(
            LAG_GAUGE,
            "Records left to read on one partition of a consumed topic."
        );
        metrics::describe_gauge!(
            ASSIGNED_GAUGE,
            "Partitions of the consumed topic this group member holds."
        );
        metrics::gauge!(ASSIGNED_GAUGE, "topic" => topic.to_owned()).set(0.0);
        Self {
            topic: topic.to_owned(),
            lag,
            assignment,
            held: Mutex::new(BTreeSet::new()),
            stranded: AtomicBool::new(false),
        }
    }

    /// Whether librdkafka left partitions of this member unfetched for good
    /// ([`stranding`]): the member must rejoin with a new consumer. Set by
    /// the error the consumer hands out with it, before that error.
    pub fn stranded(&self) -> bool {
        self.stranded.load(Ordering::Relaxed)
    }
}

impl ClientContext for LagContext {
    fn stats(&self, statistics: Statistics) {
        if let Some(topic) = statistics.topics.get(&self.topic) {
            let mut total = 0;
            for p in topic.partitions.values() {
                if p.partition < 0 || p.hi_offset < 0 {
                    continue;
                }
                let lag = if p.app_offset >= 0 {
                    (p.hi_offset - p.app_offset).max(0)
                } else {
                    p.consumer_lag.max(0)
                };
                total += lag;
                metrics::gauge!(LAG_GAUGE, "topic" => self.topic.clone(), "partition" => p.partition.to_string())
                    .set(lag as f64);
            }
            self.lag.store(total, Ordering::Relaxed);
        }
    }

    fn error(&self, error: KafkaError, reason: &str) {
        // Reaching the end of a partition is how readers know they caught up.
        let end_of_partition = matches!(
            error,
            KafkaError::PartitionEOF(_) | KafkaError::Global(RDKafkaErrorCode::PartitionEOF)
        );
        if end_of_partition {
            return;
        }
        tracing::error!(%error, reason, "librdkafka error");
        if stranding(reason) {
            self.stranded.store(true, Ordering::Relaxed);
            tracing::warn!(
                topic = %self.topic,
                "librdkafka will not fetch the partitions whose committed offsets it could not \
                 read (confluentinc/librdkafka#5586); this member rejoins with a new consumer"
            );
        }
    }
}

impl ConsumerContext for LagContext {
    fn commit_callback(&self, result: KafkaResult<()>, offsets: &TopicPartitionList) {
        // Asynchronous commits fail quietly otherwise. Not fatal: what was
        // not committed is redelivered and recognised.
        if let Err(error) = result {
            let partitions: Vec<String> = offsets
                .elements()
                .iter()
                .map(|e| {
                    let offset = e.offset().to_raw().unwrap_or(-1);
                    format!("{}/{}@{offset}", e.topic(), e.partition())
                })
                .collect();
            tracing::warn!(%error, offsets = %partitions.join(","), "an offset commit failed");
        }
    }

    fn post_rebalance(&self, _consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        // Kept from the events themselves (eager: a revoke of all, then
        // the whole new assignment; cooperative: the changes), never by
        // asking the consumer: librdkafka can leave a request made from
        // this callback unanswered forever while the consumer closes
        // (confluentinc/librdkafka#4041), and the member would then never
        // leave its group.
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        let ours = |list: &TopicPartitionList| -> Vec<i32> {
            list.elements()
                .iter()
                .filter(|e| e.topic() == self.topic)
                .map(|e| e.partition())
                .collect()
        };
        let mut revoked = (self.assignment.revoked.lock()).unwrap_or_else(|e| e.into_inner());
        match rebalance {
            Rebalance::Assign(list) => {
                for partition in ours(list) {
                    held.insert(partition);
                    revoked.remove(&partition);
                }
            }
            Rebalance::Revoke(list) => {
                for partition in ours(list) {
                    held.remove(&partition);
                    revoked.insert(partition);
                }
            }
            Rebalance::Error(_) => {}
        }
        self.assignment.held.store(held.len(), Ordering::Relaxed);
        metrics::gauge!(ASSIGNED_GAUGE, "topic" => self.topic.clone()).set(held.len() as f64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The three ways librdkafka 2.12 words it (rdkafka_assignment.c).
    #[test]
    fn every_failed_offset_fetch_of_an_assignment_strands_it() {
        for reason in [
            "Failed to fetch committed offsets for 0 partition(s) in group \"g\": Broker: Not coordinator",
            "Failed to fetch committed offsets for partitions in group \"g\": Local: Broker transport failure",
            "Failed to fetch committed offset for group \"g\" topic t [2]: Broker: Unknown topic or partition",
        ] {
            assert!(stranding(reason), "{reason}");
        }
        for reason in [
            "127.0.0.1:9092/1: Connect to ipv4#127.0.0.1:9092 failed: Connection refused",
            "Fetch from broker 1 reached end of partition at offset 3 (HighwaterMark 3)",
        ] {
            assert!(!stranding(reason), "{reason}");
        }
    }
}
