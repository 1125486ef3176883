//! Retrying an operation while a service is unreachable, until it succeeds,
//! fails for good, or the component is asked to stop.

use std::future::Future;
use std::time::Duration;

use tokio::sync::watch;

/// The first wait after a failure.
pub const FIRST_WAIT: Duration = Duration::from_millis(100);
/// The longest wait: an outage of minutes is noticed within this much of
/// its end.
pub const LONGEST_WAIT: Duration = Duration::from_secs(5);

/// Runs `op` until it succeeds or fails with an error `transient` refuses,
/// waiting 100 ms, then twice as long each time up to 5 s, for as long as
/// it takes; `notify` hears of each failure and the wait before the next
/// try. The first try always runs and every try is finished: what a
/// healthy service is doing when a stop comes is not abandoned half-way (a
/// caller that may not wait for a service that hangs bounds its own
/// shutdown). Once `stop` is raised no further try starts: `Ok(None)`.
///
/// Written out rather than with backon: its retry future can only be
/// dropped whole, which abandons the try in flight.
pub async fn until_stopped<T, E, Fut>(
    mut op: impl FnMut() -> Fut,
    mut transient: impl FnMut(&E) -> bool,
    mut notify: impl FnMut(&E, Duration),
    stop: &mut watch::Receiver<bool>,
) -> Result<Option<T>, E>
where
    Fut: Future<Output = Result<T, E>>,
{
    let mut wait = FIRST_WAIT;
    loop {
        match op().await {
            Ok(done) => return Ok(Some(done)),
            Err(e) if !transient(&e) => return Err(e),
            Err(e) => notify(&e, wait),
        }
        tokio::select! {
            biased;
            _ = stop.wait_for(|stopped| *stopped) => return Ok(None),
            () = tokio::time::sleep(wait) => {}
        }
        wait = (wait * 2).min(LONGEST_WAIT);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};

    use super::*;

    #[derive(Debug, PartialEq)]
    enum Failure {
        Away,
        Broken,
    }

    /// An operation that fails `away` times as unreachable, then succeeds.
    fn flaky(
        away: u32,
        calls: &AtomicU32,
    ) -> impl FnMut() -> std::future::Ready<Result<u32, Failure>> + '_ {
        move || {
            let n = calls.fetch_add(1, Ordering::SeqCst);
            std::future::ready(if n < away { Err(Failure::Away) } else { Ok(n) })
        }
    }

    #[tokio::test(start_paused = true)]
    async fn waits_double_from_100_ms_up_to_5_s_until_the_service_is_back() {
        let calls = AtomicU32::new(0);
        let mut waits = Vec::new();
        let (_raise, mut stop) = watch::channel(false);
        let start = tokio::time::Instant::now();
        let result = until_stopped(
            flaky(8, &calls),
            |e| *e == Failure::Away,
            |_, wait| waits.push(wait.as_millis()),
            &mut stop,
        )
        .await;
        assert_eq!(result, Ok(Some(8)));
        assert_eq!(waits, [100, 200, 400, 800, 1600, 3200, 5000, 5000]);
        // The paused clock jumps to each deadline (rounded up to tokio's
        // millisecond timer), so the waits, not wall time, are what passed.
        let elapsed = start.elapsed();
        assert!(
            elapsed >= Duration::from_millis(16_300) && elapsed < Duration::from_millis(16_400),
            "{elapsed:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn an_error_that_is_not_transient_ends_at_once() {
        let (_raise, mut stop) = watch::channel(false);
        let result: Result<Option<()>, Failure> = until_stopped(
            || std::future::ready(Err(Failure::Broken)),
            |e| *e == Failure::Away,
            |_, _| panic!("no retry for a lasting failure"),
            &mut stop,
        )
        .await;
        assert_eq!(result, Err(Failure::Broken));
    }

    #[tokio::test(start_paused = true)]
    async fn a_try_under_way_when_the_stop_comes_is_finished_and_answered() {
        let (raise, mut stop) = watch::channel(false);
        let result = until_stopped(
            || async {
                let _ = raise.send(true);
                tokio::time::sleep(Duration::from_millis(50)).await;
                Ok::<_, Failure>(7)
            },
            |_| true,
            |_, _| {},
            &mut stop,
        )
        .await;
        assert_eq!(result, Ok(Some(7)));
        // Raised before the first try: that one still runs, and one that
        // fails is not tried again.
        let calls = AtomicU32::new(0);
        let result = until_stopped(flaky(0, &calls), |_| true, |_, _| {}, &mut stop).await;
        assert_eq!((result, calls.load(Ordering::SeqCst)), (Ok(Some(0)), 1));
        let result = until_stopped(flaky(2, &calls), |_| true, |_, _| {}, &mut stop).await;
        assert_eq!((result, calls.load(Ordering::SeqCst)), (Ok(None), 2));
    }

    #[tokio::test(start_paused = true)]
    async fn a_stop_during_the_wait_ends_it_without_another_try() {
        let calls = AtomicU32::new(0);
        let (raise, mut stop) = watch::channel(false);
        let stopper = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(250)).await;
            let _ = raise.send(true);
        });
        let result = until_stopped(flaky(u32::MAX, &calls), |_| true, |_, _| {}, &mut stop).await;
        assert_eq!(result, Ok(None));
        // Tried at 0, 100 and 300 ms would be three; the stop at 250 ms
        // came during the second wait.
        assert_eq!(calls.load(Ordering::SeqCst), 2);
        stopper.await.unwrap_or_default();
    }
}
