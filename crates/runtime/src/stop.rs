//! Turning a shutdown future into a flag every loop can check or await.

use std::future::Future;

use tokio::sync::watch;

/// A receiver that turns `true` once `shutdown` completes.
pub fn stop_flag(shutdown: impl Future<Output = ()> + Send + 'static) -> watch::Receiver<bool> {
    let (tx, rx) = watch::channel(false);
    tokio::spawn(async move {
        shutdown.await;
        let _ = tx.send(true);
    });
    rx
}
