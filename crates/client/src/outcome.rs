//! Learning what the applier decided for a command that was sent.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;
use stockledger_core::report::Chain;

use futures::StreamExt;
use stockledger_core::{Decision, LogPosition};
use stockledger_projection::keys;
use stockledger_projection::{Projection, ProjectionError};
use tokio::sync::watch;
use tokio::time::Instant;
use tracing::debug;

use crate::producer::Receipt;
use stockledger_redis::{seed_urls, RedisConn};

/// Why no decision could be read.
///
/// ```
/// use std::time::Duration;
///
/// use stockledger_client::outcome::OutcomeError;
/// use stockledger_core::LogPosition;
///
/// let late = OutcomeError::Timeout {
///     sku: "SKU-1".into(),
///     position: LogPosition { topic: "stock.ledger".into(), partition: 4, offset: 17 },
///     waited: Duration::from_secs(2),
/// };
/// assert!(late.to_string().ends_with("the command is in the log and will still be decided"));
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OutcomeError {
    /// The deadline passed before the applier decided. The command is in the
    /// log and will still be applied; ask again later.
    #[error("no decision for {sku} at {position} within {waited:?}; the command is in the log and will still be decided")]
    Timeout {
        sku: String,
        position: LogPosition,
        waited: Duration,
    },
    #[error("reading the decision from Redis failed")]
    Redis(#[from] redis::RedisError),
    /// The [`TopicDecisions`](crate::decisions::TopicDecisions)'s
    /// reading task ended (it was dropped, or panicked).
    #[error("the outcomes topic is no longer read")]
    WatcherStopped,
    #[error("the decision stored for {position} is not readable: {stored:?}")]
    Corrupt {
        position: LogPosition,
        stored: String,
    },
}

/// How often a waiter looks again when the applier's announcements are
/// being received and none has covered its command yet: only a lost
/// announcement makes this the path to the decision.
const ANNOUNCED_FALLBACK: Duration = Duration::from_millis(50);

/// Reads decisions from the Redis projection. Cheap to clone.
///
/// ```no_run
/// # async fn example(receipt: stockledger_client::Receipt) -> Result<(), Box<dyn std::error::Error>> {
/// use std::time::Duration;
///
/// use stockledger_client::RedisDecisions;
///
/// let reader = RedisDecisions::connect("redis://127.0.0.1:6379", "stockledger").await?;
/// let decision = reader.wait(&receipt, Duration::from_secs(2)).await?;
/// println!("{} (available after: {})", decision.result, decision.available);
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct RedisDecisions {
    projection: Projection,
    applied: Arc<Applied>,
}

impl std::fmt::Debug for RedisDecisions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisDecisions")
            .field("prefix", &self.projection.prefix())
            .finish_non_exhaustive()
    }
}

impl RedisDecisions {
    /// Connects to the projection's Redis and listens, in a background task
    /// that ends when the last clone is dropped, for the applier's
    /// announcements of what it has decided.
    ///
    /// ```no_run
    /// # async fn example() -> Result<(), stockledger_client::outcome::OutcomeError> {
    /// use stockledger_client::RedisDecisions;
    ///
    /// // The same prefix the applier writes under (`--prefix`).
    /// let reader = RedisDecisions::connect("redis://127.0.0.1:6379", "stockledger").await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn connect(redis_url: &str, prefix: impl Into<String>) -> Result<Self, OutcomeError> {
        let redis = RedisConn::connect(redis_url).await?;
        let prefix = prefix.into();
        let applied = Applied::listen(redis_url, &prefix);
        Ok(Self {
            projection: Projection::new(redis, prefix),
            applied,
        })
    }

    /// The decision for `receipt`, if the applier has taken it. A record on
    /// another partition than the one its SKU's state was built on is
    /// answered `MISROUTED` at once (see [`Projection::decision`]).
    ///
    /// ```no_run
    /// # async fn example(reader: stockledger_client::RedisDecisions, receipt: stockledger_client::Receipt) -> Result<(), stockledger_client::outcome::OutcomeError> {
    /// match reader.decision(&receipt).await? {
    ///     Some(decision) => println!("decided: {}", decision.result),
    ///     None => println!("not applied yet; ask again"),
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn decision(&self, receipt: &Receipt) -> Result<Option<Decision>, OutcomeError> {
        let position = &receipt.position;
        self.projection
            .decision(receipt.sku.as_str(), position.partition, position.offset)
            .await
            .map_err(|e| match e {
                ProjectionError::Redis(e) => OutcomeError::Redis(e),
                other => OutcomeError::Corrupt {
                    position: position.clone(),
                    stored: other.to_string(),
                },
            })
    }

    /// Waits up to `timeout` for the decision on `receipt`. Wakes when the
    /// applier announces it has decided the command's offset; without
    /// announcements (none received yet, or the subscription is down) polls
    /// with a short, growing interval (1 ms up to 50 ms), so a quick applier
    /// answers quickly and a slow one is not hammered. A Redis timeout or
    /// dropped connection is retried until the deadline.
    ///
    /// ```no_run
    /// # async fn example(reader: stockledger_client::RedisDecisions, receipt: stockledger_client::Receipt) -> Result<(), stockledger_client::outcome::OutcomeError> {
    /// use std::time::Duration;
    ///
    /// use stockledger_client::outcome::OutcomeError;
    ///
    /// match reader.wait(&receipt, Duration::from_millis(500)).await {
    ///     Ok(decision) => println!("decided: {}", decision.result),
    ///     Err(OutcomeError::Timeout { .. }) => println!("in the log; decided later"),
    ///     Err(e) => return Err(e),
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn wait(
        &self,
        receipt: &Receipt,
        timeout: Duration,
    ) -> Result<Decision, OutcomeError> {
        let start = Instant::now();
        let position = &receipt.position;
        let mut interval = Duration::from_millis(1);
        loop {
            // Looked at before reading: an announcement that comes after the
            // read is then still a reason to read again at once.
            let announced = self.applied.covers(position);
            match self.decision(receipt).await {
                Ok(Some(decision)) => return Ok(decision),
                Ok(None) => {}
                // A slow or dropped connection is retried until the deadline.
                Err(OutcomeError::Redis(e))
                    if e.is_timeout() || e.is_io_error() || e.is_connection_dropped() => {}
                Err(e) => return Err(e),
            }
            let waited = start.elapsed();
            if waited >= timeout {
                return Err(OutcomeError::Timeout {
                    sku: receipt.sku.to_string(),
                    position: position.clone(),
                    waited,
                });
            }
            let left = timeout - waited;
            if !announced && self.applied.is_listening() {
                let _ = tokio::time::timeout(
                    ANNOUNCED_FALLBACK.min(left),
                    self.applied.until_covers(position),
                )
                .await;
            } else {
                tokio::time::sleep(interval.min(left)).await;
                interval = (interval * 2).min(Duration::from_millis(50));
            }
        }
    }
}

/// The last offset the applier announced as decided, per topic and
/// partition, kept up to date by a task subscribed to the prefix's
/// [`keys::applied_channel`].
struct Applied {
    /// Topic -> partition -> last offset decided.
    marks: Mutex<HashMap<String, HashMap<i32, i64>>>,
    /// Bumped on every announcement.
    changed: watch::Sender<()>,
    /// Subscribed and receiving; waiters poll while this is false.
    listening: AtomicBool,
    task: OnceLock<tokio::task::AbortHandle>,
}

impl Drop for Applied {
    fn drop(&mut self) {
        if let Some(task) = self.task.get() {
            task.abort();
        }
    }
}

impl Applied {
    fn listen(redis_url: &str, prefix: &str) -> Arc<Self> {
        // Every node of a cluster delivers every PUBLISH: the first seed
        // will do.
        let url = seed_urls(redis_url)
            .first()
            .copied()
            .unwrap_or("")
            .to_owned();
        let channel = keys::applied_channel(prefix);
        let applied = Arc::new(Self {
            marks: Mutex::new(HashMap::new()),
            changed: watch::channel(()).0,
            listening: AtomicBool::new(false),
            task: OnceLock::new(),
        });
        let task = tokio::spawn(Self::subscribe(Arc::downgrade(&applied), url, channel));
        let _ = applied.task.set(task.abort_handle());
        applied
    }

    /// Receives announcements until the reader is dropped, subscribing
    /// again (after a pause) whenever the connection is lost.
    async fn subscribe(me: Weak<Self>, url: String, channel: String) {
        loop {
            let subscribed = async {
                let mut pubsub = redis::Client::open(url.as_str())?
                    .get_async_pubsub()
                    .await?;
                pubsub.subscribe(&channel).await?;
                redis::RedisResult::Ok(pubsub)
            };
            match subscribed.await {
                Ok(pubsub) => {
                    let mut messages = pubsub.into_on_message();
                    match me.upgrade() {
                        Some(applied) => applied.listening.store(true, Ordering::Release),
                        None => return,
                    }
                    while let Some(message) = messages.next().await {
                        let Some(applied) = me.upgrade() else { return };
                        if let Ok(payload) = message.get_payload::<String>() {
                            applied.record(&payload);
                        }
                    }
                    debug!(
                        channel,
                        "lost the announcement subscription; polling meanwhile"
                    );
                }
                Err(e) => {
                    debug!(error = %Chain(&e), channel, "cannot subscribe to announcements; polling")
                }
            }
            match me.upgrade() {
                Some(applied) => applied.listening.store(false, Ordering::Release),
                None => return,
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }

    fn record(&self, payload: &str) {
        let Some((topic, marks)) = keys::decode_applied(payload) else {
            debug!(payload, "ignoring an unreadable announcement");
            return;
        };
        {
            let mut known = self.marks.lock().unwrap_or_else(|e| e.into_inner());
            let partitions = known.entry(topic.to_owned()).or_default();
            for (partition, offset) in marks {
                let mark = partitions.entry(partition).or_insert(-1);
                *mark = (*mark).max(offset);
            }
        }
        self.changed.send_replace(());
    }

    fn is_listening(&self) -> bool {
        self.listening.load(Ordering::Acquire)
    }

    /// Whether an announcement has covered `position`.
    fn covers(&self, position: &LogPosition) -> bool {
        let marks = self.marks.lock().unwrap_or_else(|e| e.into_inner());
        marks
            .get(position.topic.as_str())
            .and_then(|partitions| partitions.get(&position.partition))
            .is_some_and(|&mark| mark >= position.offset)
    }

    /// Returns once an announcement covers `position`.
    async fn until_covers(&self, position: &LogPosition) {
        let mut changed = self.changed.subscribe();
        while !self.covers(position) {
            if changed.changed().await.is_err() {
                return;
            }
        }
    }
}
