//! Consumer lag from librdkafka's statistics, and the partitions a group
//! member holds, for progress reports, metrics and readiness probes.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use rdkafka::client::ClientContext;
use rdkafka::consumer::{BaseConsumer, ConsumerContext, Rebalance};
use rdkafka::error::KafkaError;
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
        }
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
        if !end_of_partition {
            tracing::error!(%error, reason, "librdkafka error");
        }
    }
}

impl ConsumerContext for LagContext {
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
