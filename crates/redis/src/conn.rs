//! One connection to the Redis holding the projection: a single server or a
//! Redis Cluster, chosen by the URL.
//!
//! Every key of one SKU shares a hash slot (see `stockledger_projection::keys`),
//! so whatever the ledger does to one SKU works the same on both. What
//! differs is how many SKUs one request may touch: a single Redis takes a
//! whole batch in one pipeline, a cluster refuses a pipeline that spans
//! slots. [`RedisConn::query_each`] and [`RedisConn::transact_each`] hide
//! that: one round trip on a single server, one request per command (or
//! group) in flight together on a cluster. [`KeyScan`] walks every master.

use std::fmt;
use std::time::Duration;

use futures::stream::{self, StreamExt, TryStreamExt};
use redis::aio::{
    ConnectionLike, ConnectionManager, ConnectionManagerConfig, MultiplexedConnection,
};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};
use redis::AsyncConnectionConfig;
use redis::{Cmd, FromRedisValue, Pipeline, RedisFuture, RedisResult, Value};

/// Requests a cluster connection keeps in flight for one
/// [`RedisConn::query_each`] call.
const CLUSTER_IN_FLIGHT: usize = 256;

/// How long a request (a whole pipeline on a single Redis) may take. The
/// client's default, 500 ms, is shorter than a 10,000-script batch takes on
/// a busy Redis; a batch that times out is applied again (harmlessly) but
/// the time is lost.
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(10);

/// A connection to a single Redis or to a Redis Cluster. Cheap to clone;
/// clones share the underlying connections. Both kinds reconnect by
/// themselves after a failure.
#[derive(Clone)]
pub enum RedisConn {
    /// The shared connection, and the client that made it (for
    /// [`RedisConn::dedicated`]).
    Single(ConnectionManager, Box<redis::Client>),
    Cluster(ClusterConnection),
}

impl fmt::Debug for RedisConn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Single(..) => "RedisConn::Single",
            Self::Cluster(_) => "RedisConn::Cluster",
        })
    }
}

/// The `redis://` URLs in `url`: one, or the comma-separated seed nodes of
/// a cluster.
pub fn seed_urls(url: &str) -> Vec<&str> {
    url.split(',')
        .map(str::trim)
        .filter(|u| !u.is_empty())
        .collect()
}

impl RedisConn {
    /// Connects to `url`: one `redis://` URL, or several separated by commas
    /// naming seed nodes of one cluster. A single URL whose server has
    /// cluster mode on is treated as a seed too, so pointing at any node of
    /// a cluster works.
    pub async fn connect(url: &str) -> RedisResult<Self> {
        let urls = seed_urls(url);
        if let [single] = urls.as_slice() {
            let client = redis::Client::open(*single)?;
            let config =
                ConnectionManagerConfig::new().set_response_timeout(Some(RESPONSE_TIMEOUT));
            let mut conn = ConnectionManager::new_with_config(client.clone(), config).await?;
            let info: String = redis::cmd("INFO")
                .arg("cluster")
                .query_async(&mut conn)
                .await?;
            if !info.lines().any(|l| l.trim() == "cluster_enabled:1") {
                return Ok(Self::Single(conn, Box::new(client)));
            }
        }
        let client = ClusterClient::builder(urls)
            .response_timeout(RESPONSE_TIMEOUT)
            .build()?;
        Ok(Self::Cluster(client.get_async_connection().await?))
    }

    pub fn is_cluster(&self) -> bool {
        matches!(self, Self::Cluster(_))
    }

    /// A new connection to a single Redis that nobody else sends on, for
    /// commands that must not interleave with others' (`WATCH` … `EXEC`);
    /// `None` on a cluster. It does not reconnect: drop it after an error.
    pub async fn dedicated(&self) -> RedisResult<Option<MultiplexedConnection>> {
        match self {
            Self::Single(_, client) => {
                let config =
                    AsyncConnectionConfig::new().set_response_timeout(Some(RESPONSE_TIMEOUT));
                let conn = client
                    .get_multiplexed_async_connection_with_config(&config)
                    .await?;
                Ok(Some(conn))
            }
            Self::Cluster(_) => Ok(None),
        }
    }

    /// Runs every command and returns their replies in order. A single
    /// Redis gets them as one pipeline; a cluster gets one request per
    /// command, many in flight at once, each routed by its key. Each
    /// command on its own must keep to one hash slot.
    pub async fn query_each<T: FromRedisValue>(&self, cmds: Vec<Cmd>) -> RedisResult<Vec<T>> {
        match self {
            Self::Single(conn, _) => {
                if cmds.is_empty() {
                    return Ok(Vec::new());
                }
                let mut pipe = redis::pipe();
                for cmd in cmds {
                    pipe.add_command(cmd);
                }
                pipe.query_async(&mut conn.clone()).await
            }
            Self::Cluster(conn) => {
                // Futures made up front, not in a stream combinator's
                // closure, so the whole stays `Send` for spawned tasks.
                let calls: Vec<_> = cmds
                    .into_iter()
                    .map(|cmd| {
                        let mut conn = conn.clone();
                        async move { cmd.query_async::<T>(&mut conn).await }
                    })
                    .collect();
                in_order(calls).await
            }
        }
    }

    /// Runs each group of commands as one `MULTI`/`EXEC` transaction and
    /// returns each group's replies (as one value per group). The keys of
    /// one group must share a hash slot; different groups need not. A
    /// single Redis gets all groups in one pipeline.
    pub async fn transact_each<T: FromRedisValue>(
        &self,
        groups: Vec<Vec<Cmd>>,
    ) -> RedisResult<Vec<T>> {
        match self {
            Self::Single(conn, _) => {
                if groups.is_empty() {
                    return Ok(Vec::new());
                }
                let mut pipe = redis::pipe();
                for group in groups {
                    pipe.cmd("MULTI").ignore();
                    for cmd in group {
                        pipe.add_command(cmd).ignore();
                    }
                    pipe.cmd("EXEC");
                }
                pipe.query_async(&mut conn.clone()).await
            }
            Self::Cluster(conn) => {
                let transactions: Vec<_> = groups
                    .into_iter()
                    .map(|group| {
                        let mut conn = conn.clone();
                        let mut pipe = redis::pipe();
                        pipe.atomic();
                        for cmd in group {
                            pipe.add_command(cmd);
                        }
                        async move { pipe.query_async::<T>(&mut conn).await }
                    })
                    .collect();
                in_order(transactions).await
            }
        }
    }

    /// Walks the keys matching `pattern` with `SCAN`, about `count` per
    /// step, on every master of a cluster in turn.
    pub async fn scan(&self, pattern: &str, count: usize) -> RedisResult<KeyScan> {
        let nodes = match self {
            Self::Single(..) => vec![None],
            Self::Cluster(conn) => {
                let nodes: String = FromRedisValue::from_redis_value(
                    conn.clone()
                        .route_command(
                            redis::cmd("CLUSTER").arg("NODES").clone(),
                            RoutingInfo::SingleNode(SingleNodeRoutingInfo::Random),
                        )
                        .await?,
                )?;
                masters(&nodes).into_iter().map(Some).collect()
            }
        };
        Ok(KeyScan {
            conn: self.clone(),
            nodes,
            node: 0,
            cursor: 0,
            pattern: pattern.to_owned(),
            count,
        })
    }

    /// Every key matching `pattern`, sorted, found with `SCAN` so Redis is
    /// never blocked.
    pub async fn scan_all(&self, pattern: &str) -> RedisResult<Vec<String>> {
        let mut scan = self.scan(pattern, 1000).await?;
        let mut keys = Vec::new();
        while let Some(page) = scan.next_page().await? {
            keys.extend(page);
        }
        keys.sort();
        keys.dedup();
        Ok(keys)
    }
}

impl ConnectionLike for RedisConn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Self::Single(c, _) => c.req_packed_command(cmd),
            Self::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Self::Single(c, _) => c.req_packed_commands(pipeline, offset, count),
            Self::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Self::Single(c, _) => c.get_db(),
            Self::Cluster(c) => c.get_db(),
        }
    }
}

/// Runs `requests` with up to [`CLUSTER_IN_FLIGHT`] in flight at once;
/// their replies in the order given, or the first error.
async fn in_order<T>(
    requests: Vec<impl std::future::Future<Output = RedisResult<T>>>,
) -> RedisResult<Vec<T>> {
    stream::iter(requests)
        .buffered(CLUSTER_IN_FLIGHT)
        .try_collect()
        .await
}

/// A `SCAN` in progress over one Redis or every master of a cluster. A key
/// may be returned more than once; keys added or moved between nodes
/// during the walk may be missed, as with `SCAN` itself.
#[derive(Debug)]
pub struct KeyScan {
    conn: RedisConn,
    /// `None` for a single Redis, else each master's address.
    nodes: Vec<Option<(String, u16)>>,
    node: usize,
    cursor: u64,
    pattern: String,
    count: usize,
}

impl KeyScan {
    /// The next step's keys (possibly none), or `None` once every node has
    /// been walked.
    pub async fn next_page(&mut self) -> RedisResult<Option<Vec<String>>> {
        let Some(node) = self.nodes.get(self.node) else {
            return Ok(None);
        };
        let mut scan = redis::cmd("SCAN");
        scan.arg(self.cursor)
            .arg("MATCH")
            .arg(&self.pattern)
            .arg("COUNT")
            .arg(self.count.max(1));
        let (next, keys): (u64, Vec<String>) = match (&self.conn, node) {
            (RedisConn::Cluster(conn), Some((host, port))) => {
                let routing = RoutingInfo::SingleNode(SingleNodeRoutingInfo::ByAddress {
                    host: host.clone(),
                    port: *port,
                });
                let reply = conn.clone().route_command(scan, routing).await?;
                FromRedisValue::from_redis_value(reply)?
            }
            (conn, _) => scan.query_async(&mut conn.clone()).await?,
        };
        if next == 0 {
            self.node += 1;
        }
        self.cursor = next;
        Ok(Some(keys))
    }
}

/// The addresses of the masters that serve slots, from `CLUSTER NODES`.
fn masters(nodes: &str) -> Vec<(String, u16)> {
    let mut masters: Vec<(String, u16)> = nodes
        .lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let flags = fields.get(2)?;
            if !flags.split(',').any(|f| f == "master")
                || flags.split(',').any(|f| f == "fail" || f == "noaddr")
                || fields.len() < 9
            {
                return None; // a replica, a failed node, or one without slots
            }
            // ip:port@cport[,hostname]
            let address = fields[1].split(['@', ',']).next()?;
            let (host, port) = address.rsplit_once(':')?;
            Some((host.to_owned(), port.parse().ok()?))
        })
        .collect();
    masters.sort();
    masters
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masters_with_slots_are_read_from_cluster_nodes() {
        let nodes = "\
07c3 127.0.0.1:30001@40001 myself,master - 0 0 1 connected 0-5460
67ed 127.0.0.1:30002@40002,node-b master - 0 1426238316232 2 connected 5461-10922
292f 127.0.0.1:30003@40003 master - 0 1426238318243 3 connected 10923-16383
6ec2 127.0.0.1:30004@40004 slave 07c3 0 1426238316232 1 connected
824f 127.0.0.1:30005@40005 master,fail - 0 1426238316232 5 connected
e7d1 127.0.0.1:30006@40006 master - 0 1426238316232 6 connected
";
        assert_eq!(
            masters(nodes),
            vec![
                ("127.0.0.1".to_owned(), 30001),
                ("127.0.0.1".to_owned(), 30002),
                ("127.0.0.1".to_owned(), 30003),
            ]
        );
    }
}
