//! Learning what the applier decided for a command that was sent.

use std::time::Duration;

use stockledger_core::keys::SkuKeys;
use stockledger_core::{Decision, LogPosition};
use tokio::time::Instant;

use crate::producer::Receipt;
use crate::redis_conn::RedisConn;

#[derive(Debug, thiserror::Error)]
pub enum OutcomeError {
    /// The deadline passed before the applier decided. The command is in the
    /// log and will still be applied; ask again later.
    #[error("no decision for {sku} at {position} within {waited:?}; the command is in the log and will still be decided")]
    Timeout {
        sku: String,
        position: LogPosition,
        waited: Duration,
    },
    #[error("reading the decision from Redis failed: {0}")]
    Redis(#[from] redis::RedisError),
    #[error("the decision stored for {position} is not readable: {stored:?}")]
    Corrupt {
        position: LogPosition,
        stored: String,
    },
}

/// Reads decisions from the Redis projection. Cheap to clone.
#[derive(Clone)]
pub struct OutcomeReader {
    redis: RedisConn,
    prefix: String,
}

impl std::fmt::Debug for OutcomeReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OutcomeReader")
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

impl OutcomeReader {
    pub async fn connect(redis_url: &str, prefix: impl Into<String>) -> Result<Self, OutcomeError> {
        let redis = RedisConn::connect(redis_url).await?;
        Ok(Self {
            redis,
            prefix: prefix.into(),
        })
    }

    /// The decision for `receipt`, if the applier has taken it.
    pub async fn decision(&self, receipt: &Receipt) -> Result<Option<Decision>, OutcomeError> {
        let keys = SkuKeys::new(&self.prefix, receipt.sku.as_str());
        let stored: Option<String> = redis::cmd("HGET")
            .arg(&keys.decisions)
            .arg(receipt.position.offset)
            .query_async(&mut self.redis.clone())
            .await?;
        stored
            .map(|s| {
                Decision::from_compact(&s).ok_or_else(|| OutcomeError::Corrupt {
                    position: receipt.position.clone(),
                    stored: s,
                })
            })
            .transpose()
    }

    /// Waits up to `timeout` for the decision on `receipt`. Polls with a
    /// short, growing interval (1 ms up to 50 ms) so a quick applier answers
    /// quickly and a slow one is not hammered; a Redis timeout or dropped
    /// connection is retried until the deadline.
    pub async fn wait(
        &self,
        receipt: &Receipt,
        timeout: Duration,
    ) -> Result<Decision, OutcomeError> {
        let start = Instant::now();
        let mut interval = Duration::from_millis(1);
        loop {
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
                    position: receipt.position.clone(),
                    waited,
                });
            }
            tokio::time::sleep(interval.min(timeout - waited)).await;
            interval = (interval * 2).min(Duration::from_millis(50));
        }
    }
}
