//! Serving a router on a TCP listener, bounded against slow and numerous
//! clients.
//!
//! Written on hyper-util's connection builder rather than `axum::serve`
//! because the latter sets no header read deadline and no connection cap,
//! which a slow-loris client or a connection flood would exhaust.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use stockledger_core::report::Chain;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::time::Instant;

use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::{GracefulShutdown, Watcher};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tracing::{debug, warn};

use crate::tls::Tls;

/// Connections the kernel completes and holds for the server to accept
/// (the listen backlog; Linux caps it at `net.core.somaxconn`, 4,096 by
/// default). The standard library's and mio's 128 overflowed when 256
/// clients connected at once: the kernel dropped the handshakes beyond it,
/// and those clients' first requests waited a second for the SYN to be
/// sent again.
pub const LISTEN_BACKLOG: u32 = 4096;

/// A TCP listener on `addr` with [`LISTEN_BACKLOG`], reusing the address
/// as the standard library's listeners do. Called within a tokio runtime.
pub fn listen(addr: std::net::SocketAddr) -> io::Result<TcpListener> {
    let socket = match addr {
        std::net::SocketAddr::V4(_) => tokio::net::TcpSocket::new_v4()?,
        std::net::SocketAddr::V6(_) => tokio::net::TcpSocket::new_v6()?,
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(LISTEN_BACKLOG)
}

/// Bounds on what one client may hold.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Connections open at once; further clients wait in the listen backlog
    /// until one closes.
    pub max_connections: usize,
    /// Time a client has to send a request's headers (HTTP/1) once it has
    /// begun; a client that takes longer is disconnected.
    pub header_timeout: Duration,
    /// Time a connection may stay silent, in both directions, with no
    /// request under way, once it has sent something (a client that
    /// connects and says nothing has `header_timeout`).
    pub idle_timeout: Duration,
    /// Time a connection may stay open once the server stops, for requests
    /// already under way.
    pub shutdown_grace: Duration,
    /// Event streams open at once, in all: each holds a connection for as
    /// long as its client wants, so fewer than `max_connections` leaves
    /// room for every other request.
    pub max_streams: usize,
    /// Event streams one API key may hold open at once.
    pub max_streams_per_key: usize,
}

impl Limits {
    /// The default caps on event streams for `max_connections`: half the
    /// connections in all, a quarter of that for one key.
    ///
    /// ```
    /// let limits = stockledger_http::server::Limits::with_connections(60);
    /// assert_eq!((limits.max_streams, limits.max_streams_per_key), (30, 7));
    /// ```
    pub fn with_connections(max_connections: usize) -> Self {
        let max_connections = max_connections.max(1);
        let max_streams = (max_connections / 2).max(1);
        Self {
            max_connections,
            max_streams,
            max_streams_per_key: (max_streams / 4).max(1),
            ..Self::default()
        }
    }
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_connections: 10_000,
            header_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
            shutdown_grace: Duration::from_secs(10),
            max_streams: 5_000,
            max_streams_per_key: 1_250,
        }
    }
}

/// Serves `app` on `listener` (over TLS with `tls`) until `shutdown`
/// completes, then lets the requests under way finish (within
/// [`Limits::shutdown_grace`]).
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: Limits,
    tls: Option<Tls>,
    shutdown: impl Future<Output = ()>,
) {
    let connections = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let graceful = GracefulShutdown::new();
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout);
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_concurrent_streams(256)
        .keep_alive_interval(Some(Duration::from_secs(30)));
    tokio::pin!(shutdown);
    loop {
        let permit = tokio::select! {
            _ = &mut shutdown => break,
            permit = connections.clone().acquire_owned() => match permit {
                Ok(permit) => permit,
                Err(_) => break, // never closed
            },
        };
        let (stream, peer) = tokio::select! {
            _ = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Out of file descriptors, or a connection reset before
                    // it was taken: not the listener's end.
                    warn!(error = %Chain(&e), "accepting a connection failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let _ = stream.set_nodelay(true);
        let activity = Arc::new(Activity::default());
        let service = TowerToHyperService::new(Counted {
            inner: app.clone(),
            activity: activity.clone(),
        });
        let tracked = Tracked {
            inner: stream,
            activity: activity.clone(),
        };
        let (builder, watcher, tls) = (builder.clone(), graceful.watcher(), tls.clone());
        tokio::spawn(async move {
            let ended = match tls {
                None => drive(&builder, watcher, tracked, service, &activity, limits).await,
                // The handshake has the time a client has for its headers.
                Some(tls) => {
                    match tokio::time::timeout(limits.header_timeout, tls.acceptor.accept(tracked))
                        .await
                    {
                        Ok(Ok(stream)) => {
                            drive(&builder, watcher, stream, service, &activity, limits).await
                        }
                        Ok(Err(e)) => Err(format!("TLS handshake failed: {e}")),
                        Err(_) => Err("TLS handshake not finished in time".to_owned()),
                    }
                }
            };
            if let Err(error) = ended {
                debug!(%peer, error, "connection ended");
            }
            drop(permit);
        });
    }
    drop(listener);
    tokio::select! {
        _ = graceful.shutdown() => {}
        _ = tokio::time::sleep(limits.shutdown_grace) => {
            warn!(grace = ?limits.shutdown_grace, "connections still open at the end of the shutdown grace; closing them");
        }
    }
}

/// Serves one connection until it ends, or it has been silent too long.
async fn drive<I>(
    builder: &auto::Builder<TokioExecutor>,
    watcher: Watcher,
    io: I,
    service: TowerToHyperService<Counted>,
    activity: &Activity,
    limits: Limits,
) -> Result<(), String>
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let connection = builder
        .serve_connection_with_upgrades(TokioIo::new(io), service)
        .into_owned();
    tokio::select! {
        ended = watcher.watch(connection) => ended.map_err(|e| e.to_string()),
        () = activity.idle_for(limits.header_timeout, limits.idle_timeout) => {
            Err("closed a silent connection".to_owned())
        }
    }
}

/// When a connection last moved bytes, and how many of its requests are
/// being answered.
#[derive(Debug)]
struct Activity {
    started: Instant,
    /// Milliseconds after `started` of the last byte read or written.
    last: AtomicU64,
    /// Whether the client has sent anything yet.
    heard: AtomicBool,
    requests: AtomicUsize,
}

impl Default for Activity {
    fn default() -> Self {
        Self {
            started: Instant::now(),
            last: AtomicU64::new(0),
            heard: AtomicBool::new(false),
            requests: AtomicUsize::new(0),
        }
    }
}

impl Activity {
    fn touch(&self) {
        let now = self.started.elapsed().as_millis() as u64;
        self.last.store(now, Ordering::Relaxed);
    }

    /// Returns once the connection has moved no byte for `limit` while no
    /// request of it was under way (a long wait for a decision is not
    /// silence); `first` before the client has sent anything.
    async fn idle_for(&self, first: Duration, then: Duration) {
        loop {
            let limit = if self.heard.load(Ordering::Relaxed) {
                then
            } else {
                first
            };
            let last = self.started + Duration::from_millis(self.last.load(Ordering::Relaxed));
            let due = last + limit;
            if Instant::now() >= due && self.requests.load(Ordering::Relaxed) == 0 {
                return;
            }
            tokio::time::sleep_until(due.max(Instant::now() + Duration::from_millis(100))).await;
        }
    }
}

/// A connection's socket, noting its activity.
struct Tracked {
    inner: TcpStream,
    activity: Arc<Activity>,
}

impl AsyncRead for Tracked {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.activity.heard.store(true, Ordering::Relaxed);
            self.activity.touch();
        }
        polled
    }
}

impl AsyncWrite for Tracked {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, buf);
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.touch();
        }
        polled
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// The router, counting the connection's requests under way.
#[derive(Clone)]
struct Counted {
    inner: Router,
    activity: Arc<Activity>,
}

impl tower::Service<axum::extract::Request<hyper::body::Incoming>> for Counted {
    type Response = axum::response::Response;
    type Error = std::convert::Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: axum::extract::Request<hyper::body::Incoming>) -> Self::Future {
        let activity = self.activity.clone();
        activity.requests.fetch_add(1, Ordering::Relaxed);
        let answer = tower::ServiceExt::oneshot(self.inner.clone(), request);
        Box::pin(async move {
            let response = answer.await;
            activity.touch();
            activity.requests.fetch_sub(1, Ordering::Relaxed);
            response
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// More clients than the old backlog of 128 connect at once to a
    /// listener that accepts none of them yet: each handshake completes
    /// (held in the backlog), none is dropped to be retried a second later.
    #[tokio::test]
    async fn three_hundred_clients_connecting_at_once_all_get_through_the_handshake() {
        let listener = listen("127.0.0.1:0".parse().expect("an address")).expect("a listener");
        let addr = listener.local_addr().expect("its address");
        let clients: Vec<_> = (0..300)
            .map(|_| tokio::spawn(TcpStream::connect(addr)))
            .collect();
        let mut connected = 0;
        // A dropped handshake is retried after 1 s, 3 s, 7 s…: one that has
        // not completed within 5 s was dropped.
        let deadline = Instant::now() + Duration::from_secs(5);
        for client in clients {
            let done = tokio::time::timeout_at(deadline, client).await;
            if matches!(done, Ok(Ok(Ok(_)))) {
                connected += 1;
            }
        }
        assert_eq!(connected, 300, "handshakes completed without an accept");
        drop(listener);
    }
}
