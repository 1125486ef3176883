//! Awaiting a condition with a deadline.

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

/// Polls `check` until it returns `Some`, failing with `what` after
/// `timeout`. The poll interval starts at 5 ms and grows to 100 ms.
pub async fn wait_until<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = anyhow::Result<Option<T>>>,
{
    let deadline = Instant::now() + timeout;
    let mut interval = Duration::from_millis(5);
    loop {
        if let Some(value) = check().await? {
            return Ok(value);
        }
        if Instant::now() >= deadline {
            anyhow::bail!("timed out after {timeout:?} waiting for {what}");
        }
        tokio::time::sleep(interval).await;
        interval = (interval * 2).min(Duration::from_millis(100));
    }
}
