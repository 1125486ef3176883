//! Waiting for decisions by reading the outcomes topic: for an order
//! service that may reach Kafka and nothing else.
//!
//! A [`TopicDecisions`] reads every partition of the outcomes topic from
//! where each ended when it started, in one background task, and hands each
//! outcome to whoever waits for it. An outcome that comes before anybody
//! asks is kept a while ([`KEPT`] outcomes, the newest), so asking just
//! after the command was decided still finds it. Decisions of commands
//! decided before the watcher started are not seen: start it once, with
//! the service, before sending.
//!
//! Each watcher reads the whole outcomes topic (one outcome per command);
//! a service keeps one per process and shares it (it is cheap to clone).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use foldhash::HashMap;
use rdkafka::consumer::{Consumer, StreamConsumer};
use rdkafka::error::KafkaError;
use rdkafka::{Message, Offset, TopicPartitionList};
use stockledger_core::{codec, Decision, LogPosition};
use stockledger_kafka::topic::{partitions_of, watermarks};
use stockledger_kafka::KafkaConfig;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::outcome::OutcomeError;
use crate::Receipt;

/// How many outcomes nobody has asked for yet are kept.
///
/// ```
/// assert!(stockledger_client::decisions::KEPT >= 10_000);
/// ```
pub const KEPT: usize = 100_000;

/// Why a [`TopicDecisions`] could not start.
///
/// ```
/// use stockledger_client::decisions::WatchError;
///
/// let missing = WatchError::NoSuchTopic("stock.ledger.outcomes".into());
/// assert_eq!(missing.to_string(), "the outcomes topic stock.ledger.outcomes does not exist");
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WatchError {
    #[error("cannot read the outcomes topic {topic}")]
    Kafka {
        topic: String,
        #[source]
        source: KafkaError,
    },
    #[error("the outcomes topic {0} does not exist")]
    NoSuchTopic(String),
}

/// The decisions waited for and those read before anyone waited, by
/// position. Hashed with foldhash: the positions come from the outcomes
/// topic the applier writes, and each outcome read is looked up.
#[derive(Default)]
struct Shared {
    waiting: HashMap<LogPosition, Vec<oneshot::Sender<Decision>>>,
    kept: HashMap<LogPosition, Decision>,
    kept_order: VecDeque<LogPosition>,
}

impl Shared {
    fn deliver(&mut self, position: LogPosition, decision: Decision) {
        if let Some(waiters) = self.waiting.remove(&position) {
            for waiter in waiters {
                let _ = waiter.send(decision.clone());
            }
            return;
        }
        if self.kept_order.len() >= KEPT {
            if let Some(oldest) = self.kept_order.pop_front() {
                self.kept.remove(&oldest);
            }
        }
        self.kept_order.push_back(position.clone());
        self.kept.insert(position, decision);
    }
}

/// Hands out decisions read from the outcomes topic. Cheap to clone; the
/// reading stops when the last clone is dropped.
///
/// ```no_run
/// # async fn example(kafka: stockledger_client::KafkaConfig) -> Result<(), Box<dyn std::error::Error>> {
/// use stockledger_client::decisions::TopicDecisions;
///
/// // One per process, cloned into every task that waits.
/// let decisions = TopicDecisions::start(&kafka, "stock.ledger.outcomes").await?;
/// let for_a_task = decisions.clone();
/// assert!(for_a_task.is_running());
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct TopicDecisions {
    shared: Arc<Mutex<Shared>>,
    task: Arc<Reader>,
}

impl std::fmt::Debug for TopicDecisions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TopicDecisions").finish_non_exhaustive()
    }
}

/// The reading task, stopped when dropped.
struct Reader(JoinHandle<()>);

impl Drop for Reader {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl TopicDecisions {
    /// Starts reading `outcomes_topic` from where each of its partitions
    /// ends now: every command decided after this returns is seen.
    ///
    /// ```no_run
    /// # async fn example() -> Result<(), Box<dyn std::error::Error>> {
    /// use std::time::Duration;
    ///
    /// use stockledger_client::decisions::TopicDecisions;
    /// use stockledger_client::{CommandBody, Deduct, KafkaConfig, LedgerProducer, OrderId, Quantity, Sku};
    ///
    /// let kafka = KafkaConfig::new("127.0.0.1:9092");
    /// let decisions = TopicDecisions::start(&kafka, "stock.ledger.outcomes").await?;
    /// let producer = LedgerProducer::new(&kafka, "stock.ledger")?;
    /// let body = CommandBody::Deduct(Deduct::new(OrderId::new("order-42")?, Quantity::new(1)?));
    /// let receipt = producer.send(Sku::new("SKU-1")?, body).await?;
    /// let decision = decisions.wait(&receipt, Duration::from_secs(5)).await?;
    /// println!("{}", decision.result);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn start(kafka: &KafkaConfig, outcomes_topic: &str) -> Result<Self, WatchError> {
        let topic = outcomes_topic.to_owned();
        let kafka_error = |source| WatchError::Kafka {
            topic: topic.clone(),
            source,
        };
        let consumer: StreamConsumer = kafka
            .client_config(&[("enable.auto.commit", "false")])
            .set("group.id", "stockledger-decision-watcher")
            .create()
            .map_err(kafka_error)?;
        let consumer = Arc::new(consumer);
        let assignment = {
            let (consumer, topic) = (consumer.clone(), topic.clone());
            tokio::task::spawn_blocking(move || end_of_each_partition(&consumer, &topic))
                .await
                .map_err(|_| kafka_error(KafkaError::Canceled))?
                .map_err(kafka_error)?
        };
        if assignment.count() == 0 {
            return Err(WatchError::NoSuchTopic(topic));
        }
        consumer.assign(&assignment).map_err(kafka_error)?;
        let shared = Arc::new(Mutex::new(Shared::default()));
        let task = tokio::spawn(read(consumer, shared.clone()));
        Ok(Self {
            shared,
            task: Arc::new(Reader(task)),
        })
    }

    /// The decision for the command `receipt` names, waiting up to
    /// `timeout` for it (then [`OutcomeError::Timeout`]: the command is in
    /// the log and will still be decided).
    ///
    /// ```no_run
    /// # async fn example(decisions: stockledger_client::decisions::TopicDecisions, receipt: stockledger_client::Receipt) {
    /// use std::time::Duration;
    ///
    /// use stockledger_client::OutcomeError;
    ///
    /// match decisions.wait(&receipt, Duration::from_secs(2)).await {
    ///     Ok(decision) => println!("{}", decision.result),
    ///     // In the log, not decided yet: ask again later.
    ///     Err(OutcomeError::Timeout { position, .. }) => println!("pending at {position}"),
    ///     Err(e) => eprintln!("{e}"),
    /// }
    /// # }
    /// ```
    pub async fn wait(
        &self,
        receipt: &Receipt,
        timeout: Duration,
    ) -> Result<Decision, OutcomeError> {
        let (tx, rx) = oneshot::channel();
        {
            let mut shared = self.shared.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(decision) = shared.kept.get(&receipt.position) {
                return Ok(decision.clone());
            }
            shared
                .waiting
                .entry(receipt.position.clone())
                .or_default()
                .push(tx);
        }
        let timed_out = || OutcomeError::Timeout {
            sku: receipt.sku.to_string(),
            position: receipt.position.clone(),
            waited: timeout,
        };
        match tokio::time::timeout(timeout, rx).await {
            Ok(Ok(decision)) => Ok(decision),
            Ok(Err(_)) => Err(OutcomeError::WatcherStopped),
            Err(_) => {
                let mut shared = self.shared.lock().unwrap_or_else(|e| e.into_inner());
                if let Some(waiters) = shared.waiting.get_mut(&receipt.position) {
                    waiters.retain(|w| !w.is_closed());
                    if waiters.is_empty() {
                        shared.waiting.remove(&receipt.position);
                    }
                }
                Err(timed_out())
            }
        }
    }

    /// Whether the reading task is still running (it ends only on a
    /// panic, or when the watcher is dropped).
    ///
    /// ```no_run
    /// # async fn example(decisions: stockledger_client::decisions::TopicDecisions) {
    /// // A readiness probe of the order service.
    /// let ready = decisions.is_running();
    /// # }
    /// ```
    pub fn is_running(&self) -> bool {
        !self.task.0.is_finished()
    }
}

/// Where a process's waiting callers learn their decisions: the outcomes
/// topic through one shared consumer (needs Kafka only), or the projection
/// in Redis on the applier's announcements (about 2.6 ms sooner at p50 at
/// 5,000 commands/s on the benchmark machine, docs/BENCHMARKS.md,
/// "Latency"). Cheap to clone.
///
/// ```no_run
/// # async fn example(receipt: stockledger_client::Receipt) -> Result<(), Box<dyn std::error::Error>> {
/// use std::time::Duration;
///
/// use stockledger_client::decisions::DecisionSource;
/// use stockledger_client::RedisDecisions;
///
/// let source = DecisionSource::Redis(RedisDecisions::connect("redis://127.0.0.1:6379", "stockledger").await?);
/// let decision = source.wait(&receipt, Duration::from_secs(2)).await?;
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub enum DecisionSource {
    /// The outcomes topic, read by one consumer the callers share.
    Outcomes(TopicDecisions),
    /// The projection in Redis, read when the applier announces a batch.
    Redis(crate::RedisDecisions),
}

impl DecisionSource {
    /// The decision for `receipt`'s command, waiting up to `timeout` for
    /// it ([`OutcomeError::Timeout`] then: the command is in the log and
    /// will still be decided).
    ///
    /// ```no_run
    /// # async fn example(source: stockledger_client::decisions::DecisionSource, receipt: stockledger_client::Receipt) -> Result<(), Box<dyn std::error::Error>> {
    /// let decision = source.wait(&receipt, std::time::Duration::from_secs(2)).await?;
    /// println!("{}", decision.result);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn wait(
        &self,
        receipt: &Receipt,
        timeout: Duration,
    ) -> Result<Decision, OutcomeError> {
        match self {
            Self::Outcomes(watcher) => watcher.wait(receipt, timeout).await,
            Self::Redis(reader) => reader.wait(receipt, timeout).await,
        }
    }
}

/// Each partition of `topic` at its current end, waiting out a leader not
/// yet elected (a topic created a moment ago answers `NotLeaderForPartition`).
fn end_of_each_partition(
    consumer: &StreamConsumer,
    topic: &str,
) -> Result<TopicPartitionList, KafkaError> {
    let mut assignment = TopicPartitionList::new();
    for p in partitions_of(consumer, topic)? {
        let (_, end) = watermarks(consumer, topic, p, Duration::from_secs(10))?;
        assignment.add_partition_offset(topic, p, Offset::Offset(end))?;
    }
    Ok(assignment)
}

async fn read(consumer: Arc<StreamConsumer>, shared: Arc<Mutex<Shared>>) {
    loop {
        let message = match consumer.recv().await {
            Ok(message) => message,
            Err(error) => {
                // librdkafka retries by itself; say it and go on.
                tracing::warn!(%error, "reading the outcomes topic");
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
        };
        let Some(payload) = message.payload() else {
            continue;
        };
        match codec::decode_outcome(payload) {
            Ok(outcome) => shared
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .deliver(outcome.position, outcome.decision),
            Err(error) => tracing::warn!(
                %error,
                partition = message.partition(),
                offset = message.offset(),
                "an outcome that is not readable"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use stockledger_core::ResultCode;

    fn at(offset: i64) -> LogPosition {
        LogPosition {
            topic: "t".into(),
            partition: 0,
            offset,
        }
    }

    fn decision() -> Decision {
        Decision {
            result: ResultCode::Applied,
            delta: -1,
            available: 4,
            total: 5,
            reason: None,
            location: None,
            events: stockledger_core::StockEvents::NONE,
        }
    }

    #[test]
    fn an_outcome_goes_to_its_waiter_or_is_kept_and_the_oldest_kept_goes_first() {
        let mut shared = Shared::default();
        let (tx, mut rx) = oneshot::channel();
        shared.waiting.insert(at(1), vec![tx]);
        shared.deliver(at(1), decision());
        assert_eq!(rx.try_recv().ok(), Some(decision()));
        assert!(shared.kept.is_empty());

        for offset in 0..(KEPT as i64 + 1) {
            shared.deliver(at(offset + 10), decision());
        }
        assert_eq!(shared.kept.len(), KEPT);
        assert!(!shared.kept.contains_key(&at(10)));
        assert!(shared.kept.contains_key(&at(KEPT as i64 + 10)));
    }
}
