//! The bench's own HTTP/1.1 client: keep-alive connections lent to one
//! request at a time (each request timed from its due time), and
//! pipelined deducts, several written to a connection before their answers
//! are read.

use std::sync::{Arc, Mutex};

use anyhow::Context;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::sync::Semaphore;

use super::SKUS;

/// Keep-alive HTTP/1.1 connections to the gateway, each lent to one request
/// at a time. Written here rather than driven through oha because the
/// latency plot needs every request's own time from its due time.
pub(super) struct Connections {
    free: Semaphore,
    idle: Mutex<Vec<BufReader<TcpStream>>>,
    port: u16,
}

impl Connections {
    pub(super) async fn open(port: u16, count: usize) -> anyhow::Result<Self> {
        let mut idle = Vec::with_capacity(count);
        for _ in 0..count {
            let stream = TcpStream::connect(("127.0.0.1", port)).await?;
            stream.set_nodelay(true)?;
            idle.push(BufReader::new(stream));
        }
        Ok(Self {
            free: Semaphore::new(count),
            idle: Mutex::new(idle),
            port,
        })
    }

    /// POSTs `body` (JSON) to `path` on an idle connection and reads the
    /// answer; an error unless its status is `expected`. A connection that
    /// failed is dropped, and its permit with it.
    /// POSTs `body` to `path` on an idle connection; the answer's body,
    /// once its status is `expected`.
    pub(super) async fn post(
        &self,
        path: &str,
        body: &str,
        expected: u16,
    ) -> anyhow::Result<Vec<u8>> {
        let permit = self.free.acquire().await?;
        let mut conn = self
            .idle
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .pop()
            .context("a permit without an idle connection")?;
        let (status, answer) = match self.exchange(&mut conn, path, body).await {
            Ok(answered) => answered,
            Err(e) => {
                permit.forget();
                return Err(e);
            }
        };
        // Answered in full, whatever the status: the connection is reusable.
        self.idle
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(conn);
        anyhow::ensure!(
            status == expected,
            "POST {path}: {status} {}",
            String::from_utf8_lossy(&answer)
        );
        Ok(answer)
    }

    /// One request on `conn` and its answer: the status and the body.
    pub(super) async fn exchange(
        &self,
        conn: &mut BufReader<TcpStream>,
        path: &str,
        body: &str,
    ) -> anyhow::Result<(u16, Vec<u8>)> {
        let mut request = String::new();
        post_request(&mut request, self.port, path, body);
        conn.get_mut().write_all(request.as_bytes()).await?;
        read_answer(conn).await
    }
}

/// The path of deduct number `i` of the gateway scenarios: its own order,
/// on one of the [`SKUS`] SKUs in turn.
pub(super) fn deduct_path(i: u64) -> String {
    format!("/v1/skus/SKU-{:05}/orders/o{i:012}/deduct", i % SKUS as u64)
}

/// Appends to `out` an HTTP/1.1 POST of `body` (JSON) to `path`.
pub(super) fn post_request(out: &mut String, port: u16, path: &str, body: &str) {
    use std::fmt::Write;
    let _ = write!(
        out,
        "POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
}

/// The next answer on `conn`: its status and its body (by
/// `Content-Length`, which the gateway always sends).
pub(super) async fn read_answer(conn: &mut BufReader<TcpStream>) -> anyhow::Result<(u16, Vec<u8>)> {
    let mut line = String::new();
    conn.read_line(&mut line).await?;
    let status: u16 = line
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .with_context(|| format!("no HTTP status line: {line:?}"))?;
    let mut length = 0;
    loop {
        line.clear();
        conn.read_line(&mut line).await?;
        let header = line.trim_end();
        if header.is_empty() {
            break;
        }
        if let Some((name, value)) = header.split_once(':') {
            if name.eq_ignore_ascii_case("content-length") {
                length = value.trim().parse()?;
            }
        }
    }
    let mut answer = vec![0; length];
    conn.read_exact(&mut answer).await?;
    Ok((status, answer))
}

/// Deducts numbered `range` sent over `connections` keep-alive connections,
/// each writing the next `depth` requests in one go and then reading their
/// answers, until none are left; an error at the first answer that is not
/// `202`.
pub(super) async fn pipelined_load(
    port: u16,
    connections: usize,
    depth: usize,
    range: std::ops::Range<u64>,
) -> anyhow::Result<()> {
    use std::sync::atomic::{AtomicU64, Ordering};
    let next = Arc::new(AtomicU64::new(range.start));
    let end = range.end;
    let tasks: Vec<_> = (0..connections.max(1))
        .map(|_| {
            let next = next.clone();
            tokio::spawn(async move {
                let stream = TcpStream::connect(("127.0.0.1", port)).await?;
                stream.set_nodelay(true)?;
                let mut conn = BufReader::new(stream);
                let mut requests = String::new();
                loop {
                    let first = next.fetch_add(depth as u64, Ordering::Relaxed);
                    if first >= end {
                        return anyhow::Ok(());
                    }
                    let last = (first + depth as u64).min(end);
                    requests.clear();
                    for i in first..last {
                        post_request(&mut requests, port, &deduct_path(i), r#"{"quantity":1}"#);
                    }
                    conn.get_mut().write_all(requests.as_bytes()).await?;
                    for _ in first..last {
                        let (status, answer) = read_answer(&mut conn).await?;
                        anyhow::ensure!(
                            status == 202,
                            "a pipelined deduct: {status} {}",
                            String::from_utf8_lossy(&answer)
                        );
                    }
                }
            })
        })
        .collect();
    for task in tasks {
        task.await??;
    }
    Ok(())
}
