//! Fault injection on loopback: a TCP proxy that can cut a service off and
//! let it back, and helpers to point a URL at it.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use anyhow::Context;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::{AbortHandle, JoinHandle};

/// A TCP proxy on a free loopback port in front of one service. While
/// paused it cuts every open connection and refuses new ones, as a service
/// that went away would; resumed, it forwards again. It counts the
/// connections it refused, so a test sees a client retry during an outage.
#[derive(Debug)]
pub struct Proxy {
    addr: SocketAddr,
    paused: Arc<AtomicBool>,
    refused: Arc<AtomicU64>,
    connections: Arc<Mutex<Vec<AbortHandle>>>,
    accept: JoinHandle<()>,
}

impl Proxy {
    pub async fn start(upstream: SocketAddr) -> anyhow::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let paused = Arc::new(AtomicBool::new(false));
        let refused = Arc::new(AtomicU64::new(0));
        let connections: Arc<Mutex<Vec<AbortHandle>>> = Arc::default();
        let accept = tokio::spawn({
            let paused = paused.clone();
            let refused = refused.clone();
            let connections = connections.clone();
            async move {
                while let Ok((mut client, _)) = listener.accept().await {
                    if paused.load(Ordering::SeqCst) {
                        refused.fetch_add(1, Ordering::SeqCst);
                        continue; // dropped: the client sees the connection close
                    }
                    let task = tokio::spawn(async move {
                        if let Ok(mut server) = TcpStream::connect(upstream).await {
                            let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                        }
                    });
                    if let Ok(mut open) = connections.lock() {
                        open.retain(|c| !c.is_finished());
                        open.push(task.abort_handle());
                    }
                }
            }
        });
        Ok(Self {
            addr,
            paused,
            refused,
            connections,
            accept,
        })
    }

    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// Cuts every connection and refuses new ones until [`Proxy::resume`].
    pub fn pause(&self) {
        self.paused.store(true, Ordering::SeqCst);
        if let Ok(mut open) = self.connections.lock() {
            for connection in open.drain(..) {
                connection.abort();
            }
        }
    }

    /// Connections refused while paused, since the proxy started.
    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::SeqCst)
    }

    pub fn resume(&self) {
        self.paused.store(false, Ordering::SeqCst);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.accept.abort();
        self.pause();
    }
}

/// The `host:port` a service URL points at (`redis://…`, `postgres://…`),
/// with the scheme's default port when none is given.
pub fn address_of(url: &str) -> anyhow::Result<SocketAddr> {
    let (scheme, rest) = url.split_once("://").context("a URL with a scheme")?;
    let authority = rest.split('/').next().unwrap_or(rest);
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let with_port = if host_port.contains(':') {
        host_port.to_owned()
    } else {
        let port = match scheme {
            "redis" => 6379,
            "postgres" | "postgresql" => 5432,
            other => anyhow::bail!("no default port for {other}"),
        };
        format!("{host_port}:{port}")
    };
    let with_port = with_port.replace("localhost", "127.0.0.1");
    with_port
        .parse()
        .with_context(|| format!("parsing {with_port}"))
}

/// `url` pointed at `127.0.0.1:port` instead, credentials and path kept.
pub fn via_port(url: &str, port: u16) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let userinfo = authority
        .rsplit_once('@')
        .map(|(u, _)| format!("{u}@"))
        .unwrap_or_default();
    format!("{scheme}://{userinfo}127.0.0.1:{port}{path}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_pointed_at_the_proxy_keeping_credentials() {
        assert_eq!(
            via_port("postgres://postgres:pw@127.0.0.1:5432/test", 9),
            "postgres://postgres:pw@127.0.0.1:9/test"
        );
        assert_eq!(via_port("redis://127.0.0.1:6379", 9), "redis://127.0.0.1:9");
        assert_eq!(address_of("redis://localhost").unwrap().port(), 6379);
        assert_eq!(
            address_of("postgres://u@127.0.0.1:5433/db").unwrap().port(),
            5433
        );
    }
}
