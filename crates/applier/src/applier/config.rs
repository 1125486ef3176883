//! How an applier is set up.

use std::time::Duration;

use stockledger_kafka::group::default_instance_id;
use stockledger_kafka::KafkaConfig;
use stockledger_runtime::redact_url;

use stockledger_kafka::lag::Assignment;

use super::hops::HopSink;

#[derive(Clone)]
pub struct ApplierConfig {
    pub kafka: KafkaConfig,
    pub redis_url: String,
    /// Key prefix of the projection in Redis.
    pub prefix: String,
    pub topic: String,
    pub outcomes_topic: String,
    pub dlq_topic: String,
    /// Where stock events go; `None`: the command topic's name and
    /// `.events` ([`ApplierConfig::events_topic`]). Created at start when
    /// missing, with the command topic's partition count.
    pub events_topic: Option<String>,
    /// Publish the stock events (on by default). Off, decisions still say
    /// which events their records caused, but none is published and the
    /// events topic is neither created nor read; events of records applied
    /// meanwhile are never published.
    pub stock_events: bool,
    pub group_id: String,
    /// `group.instance.id` (static membership): a restarted applier with
    /// the same id takes its partitions back at once. `None`: a dynamic
    /// member. Defaults to the host's name.
    pub instance_id: Option<String>,
    /// Run even though the command topic has a finite retention (snapshots
    /// must then cover what the broker deletes).
    pub allow_finite_retention: bool,
    /// Most records taken into one batch.
    pub batch_size: usize,
    /// How long a batch waits at most to fill once its first record is in,
    /// and only while Redis is still applying the batch before: with
    /// Redis idle a batch goes with what the consumer already holds. So
    /// batches grow with load and a lone record is not held back (at 5k/s
    /// offered, a fixed 5 ms wait was a quarter of produce-to-decision; no
    /// wait at all made batches so small at 20k/s that the applier fell
    /// behind, p50 200+ ms).
    pub batch_wait: Duration,
    /// `linger.ms` of the producer of outcomes, dead letters and stock
    /// events. A batch is handed over whole, so no wait makes it larger;
    /// none (the default) gives a reader of the outcomes topic its outcome
    /// about 1 ms sooner at 5,000 commands/s (and the applier its next
    /// batch sooner), for 1-2 µs more machine CPU a record at full load.
    pub outcome_linger_ms: u32,
    /// How often throughput and lag are logged.
    pub stats_interval: Duration,
    /// Most SKUs kept between batches (their stock hashes, and their
    /// orders and adjustments hashes while known whole), so a batch reads
    /// only what is not kept (0: none kept).
    pub cached_skus: usize,
    /// Most fields of orders and adjustments hashes kept whole, over all
    /// SKUs; past it, SKUs are kept by their stock hash alone.
    pub cached_fields: usize,
    /// The partitions this member holds, kept up to date while it runs
    /// (clone it before `run` to probe readiness).
    pub assignment: Assignment,
    /// Where to send when each record passed the applier's steps (off:
    /// `None`, and no clock is read a record). For timing decisions hop
    /// by hop, as the bench's latency scenarios do.
    pub hops: Option<HopSink>,
}

impl std::fmt::Debug for ApplierConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApplierConfig")
            .field("kafka", &self.kafka)
            .field("redis_url", &redact_url(&self.redis_url))
            .field("prefix", &self.prefix)
            .field("topic", &self.topic)
            .field("outcomes_topic", &self.outcomes_topic)
            .field("dlq_topic", &self.dlq_topic)
            .field("events_topic", &self.events_topic())
            .field("stock_events", &self.stock_events)
            .field("group_id", &self.group_id)
            .field("instance_id", &self.instance_id)
            .field("allow_finite_retention", &self.allow_finite_retention)
            .field("batch_size", &self.batch_size)
            .field("batch_wait", &self.batch_wait)
            .field("outcome_linger_ms", &self.outcome_linger_ms)
            .field("stats_interval", &self.stats_interval)
            .field("cached_skus", &self.cached_skus)
            .field("cached_fields", &self.cached_fields)
            .field("hops", &self.hops.is_some())
            .finish()
    }
}

impl ApplierConfig {
    /// A configuration with the documented defaults for everything but the
    /// connections.
    pub fn new(kafka: KafkaConfig, redis_url: impl Into<String>) -> Self {
        Self {
            kafka,
            redis_url: redis_url.into(),
            prefix: "stockledger".into(),
            topic: "stock.ledger".into(),
            outcomes_topic: "stock.ledger.outcomes".into(),
            dlq_topic: "stock.ledger.dlq".into(),
            events_topic: None,
            stock_events: true,
            group_id: stockledger_kafka::names::APPLIER_GROUP.into(),
            instance_id: Some(default_instance_id()),
            allow_finite_retention: false,
            batch_size: 10_000,
            batch_wait: Duration::from_millis(1),
            outcome_linger_ms: 0,
            stats_interval: Duration::from_secs(10),
            cached_skus: stockledger_projection::DEFAULT_CACHED_SKUS,
            cached_fields: stockledger_projection::DEFAULT_CACHED_FIELDS,
            assignment: Assignment::new(),
            hops: None,
        }
    }
}

impl ApplierConfig {
    /// The stock events topic: as configured, or the command topic's name
    /// and `.events`, so a repartitioned log gets a topic of its own.
    ///
    /// ```
    /// use stockledger_applier::applier::ApplierConfig;
    /// use stockledger_kafka::KafkaConfig;
    ///
    /// let c = ApplierConfig::new(KafkaConfig::new("127.0.0.1:9092"), "redis://127.0.0.1");
    /// assert_eq!(c.events_topic(), "stock.ledger.events");
    /// ```
    pub fn events_topic(&self) -> String {
        self.events_topic
            .clone()
            .unwrap_or_else(|| stockledger_kafka::admin::default_events_topic(&self.topic))
    }
}
