//! A Redis Cluster of the test's own: `redis-server` processes in cluster
//! mode on free loopback ports, the slots split evenly over the masters,
//! with or without a replica for each, which can take over from its master,
//! handed over (`CLUSTER FAILOVER`) or after the master is killed (the
//! cluster's own failover). The nodes stop once the test process is gone.

use std::time::Duration;

use anyhow::{bail, Context};

use crate::services::{free_port, spawn_tied, wait_to_listen, Listening};
use crate::wait::wait_until;

/// Hash slots in a Redis Cluster.
const SLOTS: u16 = 16_384;

/// A running cluster.
#[derive(Debug, Clone)]
pub struct RedisCluster {
    /// Each node's client port: the masters in slot order, then their
    /// replicas.
    pub ports: Vec<u16>,
    /// Each node's cluster bus port, in the order of `ports`.
    buses: Vec<u16>,
}

impl RedisCluster {
    /// Starts `masters` nodes and waits until every one of them sees the
    /// whole cluster serving every slot.
    pub async fn start(masters: usize) -> anyhow::Result<Self> {
        Self::start_with(masters, false).await
    }

    /// Like [`RedisCluster::start`], each master with a replica that has
    /// caught up with it.
    pub async fn start_replicated(masters: usize) -> anyhow::Result<Self> {
        Self::start_with(masters, true).await
    }

    async fn start_with(masters: usize, replicas: bool) -> anyhow::Result<Self> {
        anyhow::ensure!(masters > 0, "a cluster needs at least one master");
        let count = if replicas { 2 * masters } else { masters };
        let nodes = tokio::task::spawn_blocking(move || {
            (0..count)
                .map(|_| start_node())
                .collect::<anyhow::Result<Vec<_>>>()
        })
        .await
        .context("cluster start task")??;
        let per_node = SLOTS as usize / masters;
        for (i, (port, _)) in nodes.iter().take(masters).enumerate() {
            let first = i * per_node;
            let last = if i + 1 == masters {
                SLOTS as usize - 1
            } else {
                first + per_node - 1
            };
            let _: () = redis::cmd("CLUSTER")
                .arg("ADDSLOTSRANGE")
                .arg(first)
                .arg(last)
                .query_async(&mut node(*port).await?)
                .await
                .with_context(|| format!("assigning slots {first}-{last} to node {port}"))?;
        }
        let mut first = node(nodes[0].0).await?;
        for (port, bus) in &nodes[1..] {
            let _: () = redis::cmd("CLUSTER")
                .arg("MEET")
                .arg("127.0.0.1")
                .arg(port)
                .arg(bus)
                .query_async(&mut first)
                .await
                .with_context(|| format!("introducing node {port}"))?;
        }
        let cluster = Self {
            ports: nodes.iter().map(|(port, _)| *port).collect(),
            buses: nodes.iter().map(|(_, bus)| *bus).collect(),
        };
        cluster.wait_until_whole(count).await?;
        if replicas {
            for (master, replica) in cluster.ports[..masters]
                .iter()
                .zip(&cluster.ports[masters..])
            {
                let id: String = redis::cmd("CLUSTER")
                    .arg("MYID")
                    .query_async(&mut node(*master).await?)
                    .await?;
                let _: () = redis::cmd("CLUSTER")
                    .arg("REPLICATE")
                    .arg(&id)
                    .query_async(&mut node(*replica).await?)
                    .await
                    .with_context(|| format!("making node {replica} a replica of {master}"))?;
            }
            for &replica in &cluster.ports[masters..] {
                wait_caught_up(replica, Duration::from_secs(30)).await?;
            }
        }
        Ok(cluster)
    }

    /// Waits until every node sees `count` nodes and every slot served.
    async fn wait_until_whole(&self, count: usize) -> anyhow::Result<()> {
        self.wait_until(&self.ports, Some(count)).await
    }

    /// Waits until each of `ports` sees every slot served.
    async fn wait_until_serving(&self, ports: &[u16]) -> anyhow::Result<()> {
        self.wait_until(ports, None).await
    }

    async fn wait_until(&self, ports: &[u16], count: Option<usize>) -> anyhow::Result<()> {
        for &port in ports {
            let conn = node(port).await?;
            wait_until(
                &format!("cluster node {port} to see the whole cluster"),
                Duration::from_secs(30),
                || {
                    let mut conn = conn.clone();
                    async move {
                        let info: String = redis::cmd("CLUSTER")
                            .arg("INFO")
                            .query_async(&mut conn)
                            .await?;
                        let known = count.is_none_or(|count| {
                            info.lines()
                                .any(|l| l.trim() == format!("cluster_known_nodes:{count}"))
                        });
                        let ok = info.lines().any(|l| l.trim() == "cluster_state:ok") && known;
                        Ok(ok.then_some(()))
                    }
                },
            )
            .await?;
        }
        Ok(())
    }

    /// A replica of the `n`th master (by address, modulo the masters)
    /// takes over from it, as `CLUSTER FAILOVER` does: the master stops
    /// taking writes, the replica catches up and is promoted, the old
    /// master becomes its replica; nothing acknowledged is lost. Waits
    /// until the promoted node says it is a master and the cluster serves
    /// every slot. Returns the promoted node's port.
    pub async fn failover(&self, n: usize) -> anyhow::Result<u16> {
        let (_, port) = self.master_and_replica(n).await?;
        let _: () = redis::cmd("CLUSTER")
            .arg("FAILOVER")
            .query_async(&mut node(port).await?)
            .await
            .with_context(|| format!("failing over to node {port}"))?;
        wait_to_lead(port).await?;
        self.wait_until_whole(self.ports.len()).await?;
        Ok(port)
    }

    /// Kills the `n`th master (by address, modulo the masters) with
    /// SIGKILL, as a crash does: no handover. Its replica is promoted by
    /// the cluster's own failover once the other masters have seen it fail
    /// ([`NODE_TIMEOUT`]); waits for that. What the master acknowledged and
    /// had not sent its replica yet is lost, as Redis replication is
    /// asynchronous. Returns the killed node's port and the promoted one's.
    pub async fn kill_master(&self, n: usize) -> anyhow::Result<(u16, u16)> {
        let (master, replica) = self.master_and_replica(n).await?;
        let info: String = redis::cmd("INFO")
            .arg("server")
            .query_async(&mut node(master).await?)
            .await?;
        let pid: i32 = info
            .lines()
            .find_map(|l| l.trim().strip_prefix("process_id:"))
            .and_then(|p| p.parse().ok())
            .with_context(|| format!("node {master} gave no process id"))?;
        let killed = std::process::Command::new("kill")
            .args(["-KILL", &pid.to_string()])
            .status()
            .with_context(|| format!("killing node {master} (pid {pid})"))?;
        anyhow::ensure!(killed.success(), "kill -KILL {pid} (node {master}) failed");
        wait_to_lead(replica).await?;
        let alive: Vec<u16> = self
            .ports
            .iter()
            .copied()
            .filter(|&p| p != master)
            .collect();
        self.wait_until_serving(&alive).await?;
        Ok((master, replica))
    }

    /// Starts the node on `port` again (killed by
    /// [`RedisCluster::kill_master`]) with the cluster configuration it
    /// kept: it comes back empty, rejoins as a replica of the node that
    /// took its slots and copies it. Waits until it has caught up and
    /// every node sees the whole cluster.
    pub async fn restart(&self, port: u16) -> anyhow::Result<()> {
        let at = self
            .ports
            .iter()
            .position(|&p| p == port)
            .with_context(|| format!("no node of this cluster has port {port}"))?;
        let bus = self.buses[at];
        tokio::task::spawn_blocking(move || {
            let log = start_node_in(port, bus, Keep::Config)?;
            crate::services::wait_for_port(port, "a restarted cluster node", &log)
        })
        .await
        .context("cluster restart task")??;
        wait_caught_up(port, Duration::from_secs(60)).await?;
        self.wait_until_whole(self.ports.len()).await
    }

    /// The client ports of the `n`th master (by address, modulo the
    /// masters) and of its replica.
    async fn master_and_replica(&self, n: usize) -> anyhow::Result<(u16, u16)> {
        let alive = node_of(&self.ports).await?;
        let nodes: String = redis::cmd("CLUSTER")
            .arg("NODES")
            .query_async(&mut node(alive).await?)
            .await?;
        // <id> <ip:port@bus> <flags> <master id or -> …
        let fields: Vec<Vec<&str>> = nodes
            .lines()
            .map(|l| l.split_whitespace().collect())
            .filter(|f: &Vec<&str>| f.len() >= 4)
            .collect();
        let mut masters: Vec<&Vec<&str>> = fields
            .iter()
            .filter(|f| {
                let flags: Vec<&str> = f[2].split(',').collect();
                flags.contains(&"master") && !flags.contains(&"fail")
            })
            .collect();
        masters.sort_by_key(|f| f[1]);
        anyhow::ensure!(!masters.is_empty(), "no master in {nodes}");
        let master = masters[n % masters.len()];
        let replica = fields
            .iter()
            .find(|f| f[3] == master[0] && !f[2].split(',').any(|flag| flag == "fail"))
            .with_context(|| format!("master {} has no replica: {nodes}", master[0]))?;
        Ok((port_of(master[1])?, port_of(replica[1])?))
    }

    /// The seed URLs of every node, comma-separated, as `REDIS_URL` takes
    /// them.
    pub fn url(&self) -> String {
        self.ports
            .iter()
            .map(|p| format!("redis://127.0.0.1:{p}"))
            .collect::<Vec<_>>()
            .join(",")
    }
}

/// How long a master may not answer before the others hold it failed and
/// its replica takes over (`cluster-node-timeout`; Redis's default is 15 s).
pub const NODE_TIMEOUT: Duration = Duration::from_secs(5);

/// Waits until the node on `port` is a replica whose link to its master
/// is up: it has copied the master's data and follows it.
async fn wait_caught_up(port: u16, within: Duration) -> anyhow::Result<()> {
    wait_until(
        &format!("node {port} to be a replica that has caught up"),
        within,
        || async move {
            let info: String = redis::cmd("INFO")
                .arg("replication")
                .query_async(&mut node(port).await?)
                .await?;
            let caught_up = info.lines().any(|l| l.trim() == "role:slave")
                && info.lines().any(|l| l.trim() == "master_link_status:up");
            Ok(caught_up.then_some(()))
        },
    )
    .await
}

/// Waits until the node on `port` says it is a master.
async fn wait_to_lead(port: u16) -> anyhow::Result<()> {
    wait_until(
        &format!("node {port} to take over as master"),
        NODE_TIMEOUT + Duration::from_secs(30),
        || async move {
            let role: Vec<redis::Value> = redis::cmd("ROLE")
                .query_async(&mut node(port).await?)
                .await?;
            let master = matches!(
                role.first(),
                Some(redis::Value::BulkString(b)) if b.as_slice() == b"master"
            );
            Ok(master.then_some(()))
        },
    )
    .await
}

/// The first of `ports` whose node answers.
async fn node_of(ports: &[u16]) -> anyhow::Result<u16> {
    for &port in ports {
        if node(port).await.is_ok() {
            return Ok(port);
        }
    }
    bail!("no node of the cluster answers")
}

/// The client port in a `CLUSTER NODES` address, `ip:port@bus`.
fn port_of(address: &str) -> anyhow::Result<u16> {
    address
        .split(['@', ':'])
        .nth(1)
        .and_then(|p| p.parse().ok())
        .with_context(|| format!("no port in {address}"))
}

async fn node(port: u16) -> anyhow::Result<redis::aio::MultiplexedConnection> {
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}"))?;
    Ok(client.get_multiplexed_async_connection().await?)
}

/// Starts one empty cluster-mode node; returns its client and bus ports.
/// A port taken by another process before the node bound it
/// ([`Listening::PortTaken`]) gets the node started again on other ports,
/// at most three times.
fn start_node() -> anyhow::Result<(u16, u16)> {
    for _ in 0..3 {
        let (port, bus) = (free_port()?, free_port()?);
        let log = start_node_on(port, bus)?;
        match wait_to_listen(port, "a redis-server cluster node", &log)? {
            Listening::Up => return Ok((port, bus)),
            Listening::PortTaken => {
                eprintln!("a cluster node's port was taken before it bound it ({log}); again")
            }
        }
    }
    bail!("a redis-server cluster node found its ports taken three times")
}

/// What a node started on a port keeps of an earlier node there.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Keep {
    /// Nothing: a nodes.conf left by an earlier run that got the same
    /// port would bring back that node's slots ("slot already busy").
    Nothing,
    /// Its cluster configuration (id, epoch, peers): the same node again.
    Config,
}

/// Starts a cluster-mode node on `port` and `bus`; returns its log's path.
fn start_node_on(port: u16, bus: u16) -> anyhow::Result<String> {
    start_node_in(port, bus, Keep::Nothing)
}

/// Starts a cluster-mode node on `port` and `bus` in its directory, kept
/// or emptied; returns its log's path.
fn start_node_in(port: u16, bus: u16, keep: Keep) -> anyhow::Result<String> {
    let dir =
        std::env::temp_dir().join(format!("stockledger-cluster-{}-{port}", std::process::id()));
    if keep == Keep::Nothing {
        let _ = std::fs::remove_dir_all(&dir);
    }
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let log = dir.join("redis.log").to_string_lossy().into_owned();
    let arg = |s: &str| s.to_owned();
    spawn_tied(
        "redis-server",
        &[
            arg("--bind"),
            arg("127.0.0.1"),
            arg("--port"),
            port.to_string(),
            arg("--cluster-enabled"),
            arg("yes"),
            arg("--cluster-port"),
            bus.to_string(),
            arg("--cluster-node-timeout"),
            NODE_TIMEOUT.as_millis().to_string(),
            arg("--cluster-config-file"),
            dir.join("nodes.conf").to_string_lossy().into_owned(),
            arg("--dir"),
            dir.to_string_lossy().into_owned(),
            arg("--save"),
            String::new(),
            arg("--appendonly"),
            arg("no"),
        ],
        &log,
    )?;
    Ok(log)
}
