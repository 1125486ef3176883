//! Consumer lag from librdkafka's statistics, for progress reports.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

use rdkafka::client::ClientContext;
use rdkafka::consumer::ConsumerContext;
use rdkafka::error::KafkaError;
use rdkafka::statistics::Statistics;
use rdkafka::types::RDKafkaErrorCode;

/// Keeps the records left to read on `topic` (high watermark of the last
/// fetch minus the next offset to hand out, over the assigned partitions)
/// in `lag`, updated every `statistics.interval.ms`.
#[derive(Debug)]
pub struct LagContext {
    topic: String,
    lag: Arc<AtomicI64>,
}

impl LagContext {
    pub fn new(topic: &str, lag: Arc<AtomicI64>) -> Self {
        Self {
            topic: topic.to_owned(),
            lag,
        }
    }
}

impl ClientContext for LagContext {
    fn stats(&self, statistics: Statistics) {
        if let Some(topic) = statistics.topics.get(&self.topic) {
            let lag: i64 = topic
                .partitions
                .values()
                .filter(|p| p.partition >= 0 && p.hi_offset >= 0)
                .map(|p| {
                    if p.app_offset >= 0 {
                        (p.hi_offset - p.app_offset).max(0)
                    } else {
                        p.consumer_lag.max(0)
                    }
                })
                .sum();
            self.lag.store(lag, Ordering::Relaxed);
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

impl ConsumerContext for LagContext {}
