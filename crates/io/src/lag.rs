//! Consumer lag from librdkafka's statistics, and the partitions a group
//! member holds, for progress reports, metrics and readiness probes.

use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};
use std::sync::Arc;

use rdkafka::client::ClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext, Rebalance};
use rdkafka::error::KafkaError;
use rdkafka::statistics::Statistics;
use rdkafka::types::RDKafkaErrorCode;

/// Gauge: records left to read on one partition of a consumed topic.
pub const LAG_GAUGE: &str = "stockledger_consumer_lag";
/// Gauge: partitions of the consumed topic this member holds.
pub const ASSIGNED_GAUGE: &str = "stockledger_partitions_assigned";

/// How many partitions a group member holds, kept up to date from the
/// consumer's rebalance callbacks. Cheap to clone; a readiness probe reads
/// it while the member runs.
#[derive(Debug, Clone, Default)]
pub struct Assignment(Arc<AtomicUsize>);

impl Assignment {
    pub fn new() -> Self {
        Self::default()
    }

    /// Partitions held now (0 before the first assignment and while the
    /// group rebalances).
    pub fn count(&self) -> usize {
        self.0.load(Ordering::Relaxed)
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
    fn post_rebalance(&self, consumer: &BaseConsumer<Self>, _rebalance: &Rebalance<'_>) {
        // The whole assignment as it now is, whichever protocol (eager or
        // cooperative) the group uses.
        let held = consumer
            .assignment()
            .map(|list| {
                list.elements()
                    .iter()
                    .filter(|e| e.topic() == self.topic)
                    .count()
            })
            .unwrap_or(0);
        self.assignment.0.store(held, Ordering::Relaxed);
        metrics::gauge!(ASSIGNED_GAUGE, "topic" => self.topic.clone()).set(held as f64);
    }
}
