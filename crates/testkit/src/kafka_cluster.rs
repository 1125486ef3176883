//! A replicated Apache Kafka of the test's own: three (or more) nodes in
//! KRaft mode, each broker and controller, on free loopback ports, through
//! `deploy/local/kafka.sh` as `deploy/local/cluster.sh` runs them. Internal
//! topics are replicated to every node with a majority in sync; a node can
//! be killed and started again on its log. The nodes stop once the test
//! process is gone.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use rdkafka::consumer::{BaseConsumer, Consumer};
use stockledger_kafka::KafkaConfig;

use crate::services::{
    await_gone, free_port, kafka_script, signal_matching, spawn_tied, wait_for_brokers,
};

/// Asks a cluster for its partitions' leaders ([`KafkaCluster::leaders`]).
pub struct Leaders(BaseConsumer);

impl std::fmt::Debug for Leaders {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Leaders")
    }
}

impl Leaders {
    /// The node leading each partition of every topic (the internal ones
    /// too: a group's coordinator is the leader of its `__consumer_offsets`
    /// partition), as one metadata request says now; a partition without a
    /// leader is left out.
    pub fn now(&self) -> anyhow::Result<BTreeMap<(String, i32), i32>> {
        let metadata = self.0.fetch_metadata(None, Duration::from_secs(10))?;
        let mut leaders = BTreeMap::new();
        for topic in metadata.topics() {
            for partition in topic.partitions().iter().filter(|p| p.leader() >= 0) {
                leaders.insert(
                    (topic.name().to_owned(), partition.id()),
                    partition.leader(),
                );
            }
        }
        Ok(leaders)
    }
}

/// One node: its client and controller ports.
#[derive(Debug, Clone, Copy)]
pub struct Node {
    pub id: i32,
    pub port: u16,
    pub controller: u16,
}

/// A running cluster.
#[derive(Debug, Clone)]
pub struct KafkaCluster {
    pub nodes: Vec<Node>,
    dir: PathBuf,
}

impl KafkaCluster {
    /// Starts `size` nodes and waits until every one is a registered
    /// broker of the cluster. A port taken by another process between
    /// drawing it and a node binding it gets the cluster started again on
    /// other ports, at most three times.
    pub async fn start(size: usize) -> anyhow::Result<Self> {
        anyhow::ensure!(size > 0, "a cluster needs a node");
        let mut tries = 0;
        loop {
            tries += 1;
            let cluster = Self::on_free_ports(size)?;
            match cluster.wait_for_brokers(size).await {
                Ok(()) => return Ok(cluster),
                Err(e) if tries < 3 && cluster.a_port_was_taken() => {
                    eprintln!("a Kafka node found its port taken ({e:#}); starting again");
                    for node in &cluster.nodes {
                        let _ = cluster.kill(node.id);
                        await_gone(&cluster.pattern(node.id)).await?;
                    }
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Spawns `size` nodes on ports free a moment ago.
    fn on_free_ports(size: usize) -> anyhow::Result<Self> {
        let nodes = (1..=size)
            .map(|id| {
                Ok(Node {
                    id: i32::try_from(id)?,
                    port: free_port()?,
                    controller: free_port()?,
                })
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        let first = nodes.first().map_or(0, |n| n.port);
        let dir = std::env::temp_dir().join(format!("stockledger-kafka-cluster-{first}"));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)?;
        let cluster = Self { nodes, dir };
        for node in &cluster.nodes {
            cluster.spawn(node)?;
        }
        Ok(cluster)
    }

    /// Whether a node's log says it could not bind its port.
    fn a_port_was_taken(&self) -> bool {
        self.nodes.iter().any(|node| {
            std::fs::read_to_string(self.node_dir(node.id).join("server.log"))
                .is_ok_and(|log| log.contains("Address already in use"))
        })
    }

    /// The bootstrap servers, every node.
    pub fn brokers(&self) -> String {
        self.nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// A client configuration for the whole cluster.
    pub fn kafka(&self) -> KafkaConfig {
        KafkaConfig::new(self.brokers())
    }

    /// `kill -9` of node `id`: its log stays on disk.
    pub fn kill(&self, id: i32) -> anyhow::Result<()> {
        signal_matching(&self.pattern(id), "KILL").with_context(|| format!("no node {id} to kill"))
    }

    /// Starts node `id` again on its log, once the old process is gone,
    /// and waits until the cluster has every broker again.
    pub async fn restart(&self, id: i32) -> anyhow::Result<()> {
        await_gone(&self.pattern(id)).await?;
        let node = self
            .nodes
            .iter()
            .find(|n| n.id == id)
            .copied()
            .with_context(|| format!("no node {id}"))?;
        self.spawn(&node)?;
        self.wait_for_brokers(self.nodes.len()).await
    }

    /// The node leading `partition` of `topic`, as the metadata says now.
    pub fn leader(&self, topic: &str, partition: i32) -> anyhow::Result<i32> {
        let consumer: BaseConsumer = self.kafka().client_config(&[]).create()?;
        let metadata = consumer.fetch_metadata(Some(topic), Duration::from_secs(10))?;
        metadata
            .topics()
            .iter()
            .flat_map(|t| t.partitions())
            .find(|p| p.id() == partition)
            .map(|p| p.leader())
            .filter(|&leader| leader >= 0)
            .with_context(|| format!("{topic}/{partition} has no leader"))
    }

    /// A client that asks the cluster which node leads each partition,
    /// made once for a caller that asks again and again.
    pub fn leaders(&self) -> anyhow::Result<Leaders> {
        Ok(Leaders(self.kafka().client_config(&[]).create()?))
    }

    fn node_dir(&self, id: i32) -> PathBuf {
        self.dir.join(format!("node-{id}"))
    }

    /// What tells node `id`'s process apart from every other one.
    fn pattern(&self, id: i32) -> String {
        format!("{}/server.properties", self.node_dir(id).display())
    }

    fn spawn(&self, node: &Node) -> anyhow::Result<()> {
        let voters = self
            .nodes
            .iter()
            .map(|n| format!("{}@127.0.0.1:{}", n.id, n.controller))
            .collect::<Vec<_>>()
            .join(",");
        let dir = self.node_dir(node.id);
        std::fs::create_dir_all(&dir)?;
        let log = dir.join("console.log").to_string_lossy().into_owned();
        spawn_tied(
            "env",
            &[
                "KAFKA_HEAP_OPTS=-Xmx384m -Xms384m".into(),
                format!("KAFKA_NODE_ID={}", node.id),
                format!("KAFKA_VOTERS={voters}"),
                format!(
                    "KAFKA_CLUSTER_ID_FILE={}",
                    self.dir.join("cluster.id").display()
                ),
                format!("KAFKA_REPLICATION={}", self.nodes.len()),
                kafka_script().to_string_lossy().into_owned(),
                "run".into(),
                dir.to_string_lossy().into_owned(),
                node.port.to_string(),
                node.controller.to_string(),
            ],
            &log,
        )
    }

    async fn wait_for_brokers(&self, size: usize) -> anyhow::Result<()> {
        let (brokers, logs) = (self.brokers(), self.dir.display().to_string());
        tokio::task::spawn_blocking(move || {
            wait_for_brokers(&brokers, size, Duration::from_secs(120), &logs)
        })
        .await
        .context("waiting for the cluster")?
    }
}
