//! One test's namespace and the components running in it.

use std::time::Duration;

use anyhow::Context;
use rdkafka::admin::{AdminClient, AdminOptions};
use rdkafka::client::DefaultClientContext;
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};
use sqlx::PgPool;
use stockledger_applier::{ApplierConfig, ApplierStats};
use stockledger_archiver::{ArchiverConfig, ArchiverStats};
use stockledger_client::{KafkaConfig, Ledger, LedgerBuilder};
use stockledger_kafka::admin::{
    command_topic_spec, create_topics, ledger_topic_specs, LedgerTopics, Retention,
};
use stockledger_kafka::config::CONTRACT_SETTINGS;
use stockledger_kafka::topic::{self, LogRecord};
use stockledger_maintenance::replay::{ReplayConfig, SwapConfig};
use stockledger_projection::Projection;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::services::{services, Services};
use crate::wait::wait_until;

/// How long a test waits for the pipeline to catch up before failing.
pub const CATCH_UP: Duration = Duration::from_secs(60);

/// Names private to one test.
#[derive(Debug, Clone)]
pub struct Namespace {
    pub id: String,
    pub topic: String,
    pub outcomes_topic: String,
    pub dlq_topic: String,
    pub events_topic: String,
    pub prefix: String,
    pub applier_group: String,
    pub archiver_group: String,
}

impl Namespace {
    pub fn new(test: &str) -> Self {
        let id = format!("{test}-{}", &uuid::Uuid::new_v4().simple().to_string()[..8]);
        Self {
            topic: format!("{id}.ledger"),
            outcomes_topic: format!("{id}.outcomes"),
            dlq_topic: format!("{id}.dlq"),
            // What an applier of `topic` writes stock events to unless told.
            events_topic: stockledger_kafka::admin::default_events_topic(&format!("{id}.ledger")),
            prefix: format!("t:{id}"),
            applier_group: format!("{id}-applier"),
            archiver_group: format!("{id}-archiver"),
            id,
        }
    }
}

/// A component running in a task, stopped on request.
#[derive(Debug)]
pub struct Component<T> {
    stop: oneshot::Sender<()>,
    task: JoinHandle<anyhow::Result<T>>,
}

impl<T: Send + 'static> Component<T> {
    /// Runs `start(stopped)` in a task; `stopped` resolves on [`Component::stop`].
    pub fn spawn<E, F>(start: impl FnOnce(oneshot::Receiver<()>) -> F) -> Self
    where
        F: std::future::Future<Output = Result<T, E>> + Send + 'static,
        E: std::error::Error + Send + Sync + 'static,
    {
        let (stop, stopped) = oneshot::channel();
        let run = start(stopped);
        let task = tokio::spawn(async move {
            let ended = run.await.map_err(anyhow::Error::from);
            // Logged as it happens: a test waiting on the component sees
            // only that nothing comes, and hears why only at `stop`.
            if let Err(e) = &ended {
                tracing::error!(error = format!("{e:#}"), "a component ended with an error");
            }
            ended
        });
        Self { stop, task }
    }

    /// Whether the component has ended by itself (or was stopped).
    pub fn is_finished(&self) -> bool {
        self.task.is_finished()
    }

    /// Asks the component to stop and returns what it reports.
    pub async fn stop(self) -> anyhow::Result<T> {
        let _ = self.stop.send(());
        self.task.await.context("component task panicked")?
    }
}

/// Everything one end-to-end test needs, in its own namespace.
#[derive(Debug)]
pub struct Harness {
    pub services: &'static Services,
    /// The brokers of this test (the shared ones unless [`Harness::with_kafka`]).
    pub kafka: KafkaConfig,
    /// The Redis of this test (the shared one unless [`Harness::with_redis`]).
    pub redis_url: String,
    pub ns: Namespace,
    /// The ledger's client on this test's command topic (send only: a
    /// test reads decisions from Redis or the outcomes topic itself).
    pub ledger: Ledger,
    pub projection: Projection,
    pub pool: PgPool,
}

impl Drop for Harness {
    /// Deletes the namespace's topics, so runs of the suite do not pile
    /// partitions up on the local broker (about 500 a run; after some days
    /// over 5,000, and everything on that broker slowed). Best effort, on a
    /// thread of its own since a drop cannot await: a broker that is gone
    /// is given a few seconds, no more.
    fn drop(&mut self) {
        let kafka = self.kafka.clone();
        let topics = [
            self.ns.topic.clone(),
            self.ns.outcomes_topic.clone(),
            self.ns.dlq_topic.clone(),
            self.ns.events_topic.clone(),
        ];
        let deleting = std::thread::spawn(move || {
            let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            runtime.block_on(async {
                let Ok(admin) = kafka
                    .client_config(&[])
                    .create::<AdminClient<DefaultClientContext>>()
                else {
                    return;
                };
                let options = AdminOptions::new()
                    .request_timeout(Some(Duration::from_secs(5)))
                    .operation_timeout(Some(Duration::from_secs(5)));
                let names: Vec<&str> = topics.iter().map(String::as_str).collect();
                let _ = tokio::time::timeout(
                    Duration::from_secs(6),
                    admin.delete_topics(&names, &options),
                )
                .await;
            });
        });
        let _ = deleting.join();
    }
}

impl Harness {
    /// A send-only [`Ledger`] on `topic` of `kafka`'s brokers.
    pub async fn ledger_on(kafka: &KafkaConfig, topic: &str) -> anyhow::Result<Ledger> {
        Ok(Self::builder_on(kafka, topic).build().await?)
    }

    fn builder_on(kafka: &KafkaConfig, topic: &str) -> LedgerBuilder {
        Ledger::builder()
            .kafka(kafka.clone())
            .topic(topic)
            .without_decisions()
    }

    /// A builder of a [`Ledger`] like [`Harness::ledger`], to be given
    /// more (order checks, the sold-out guard, decisions).
    pub fn ledger_builder(&self) -> LedgerBuilder {
        Self::builder_on(&self.kafka, &self.ns.topic)
    }

    /// Creates the namespace's topics (`partitions` each for commands and
    /// outcomes) and connects the clients.
    pub async fn new(test: &str, partitions: i32) -> anyhow::Result<Self> {
        let services = services().await?;
        Self::with_kafka(test, partitions, services.kafka.clone()).await
    }

    /// Like [`Harness::new`], on brokers of the test's own.
    pub async fn with_kafka(
        test: &str,
        partitions: i32,
        kafka: KafkaConfig,
    ) -> anyhow::Result<Self> {
        let services = services().await?;
        Self::build(test, partitions, kafka, services.redis_url.clone()).await
    }

    /// Like [`Harness::with_kafka`], the ledger's topics replicated
    /// `replication` times (`min.insync.replicas` a majority of it).
    pub async fn with_replicated_kafka(
        test: &str,
        partitions: i32,
        kafka: KafkaConfig,
        replication: i32,
    ) -> anyhow::Result<Self> {
        let services = services().await?;
        Self::build_replicated(
            test,
            partitions,
            kafka,
            services.redis_url.clone(),
            replication,
        )
        .await
    }

    /// Like [`Harness::with_replicated_kafka`], on a Redis (or Redis
    /// Cluster) of the test's own.
    pub async fn with_replicated_kafka_and_redis(
        test: &str,
        partitions: i32,
        kafka: KafkaConfig,
        replication: i32,
        redis_url: String,
    ) -> anyhow::Result<Self> {
        Self::build_replicated(test, partitions, kafka, redis_url, replication).await
    }

    /// Like [`Harness::new`], on a Redis (or Redis Cluster) of the test's own.
    pub async fn with_redis(
        test: &str,
        partitions: i32,
        redis_url: String,
    ) -> anyhow::Result<Self> {
        let services = services().await?;
        Self::build(test, partitions, services.kafka.clone(), redis_url).await
    }

    async fn build(
        test: &str,
        partitions: i32,
        kafka: KafkaConfig,
        redis_url: String,
    ) -> anyhow::Result<Self> {
        Self::build_replicated(test, partitions, kafka, redis_url, 1).await
    }

    async fn build_replicated(
        test: &str,
        partitions: i32,
        kafka: KafkaConfig,
        redis_url: String,
        replication: i32,
    ) -> anyhow::Result<Self> {
        let services = services().await?;
        let ns = Namespace::new(test);
        let topics = LedgerTopics {
            commands: &ns.topic,
            outcomes: &ns.outcomes_topic,
            dead_letters: &ns.dlq_topic,
            events: &ns.events_topic,
        };
        let specs = ledger_topic_specs(topics, partitions, replication, Retention::default());
        create_topics(&kafka, &specs).await?;
        let pool = stockledger_archiver::connect(&services.database_url, 4)
            .await
            .with_context(|| format!("connecting to {}", services.database_url))?;
        Ok(Self {
            ledger: Harness::ledger_on(&kafka, &ns.topic).await?,
            projection: Projection::connect(&redis_url, ns.prefix.clone())
                .await
                .with_context(|| {
                    format!(
                        "connecting to Redis at {}",
                        stockledger_runtime::redact_url(&redis_url)
                    )
                })?,
            pool,
            services,
            kafka,
            redis_url,
            ns,
        })
    }

    pub fn applier_config(&self) -> ApplierConfig {
        let mut c = ApplierConfig::new(self.kafka.clone(), self.redis_url.clone());
        c.prefix = self.ns.prefix.clone();
        c.topic = self.ns.topic.clone();
        c.outcomes_topic = self.ns.outcomes_topic.clone();
        c.dlq_topic = self.ns.dlq_topic.clone();
        c.group_id = self.ns.applier_group.clone();
        c
    }

    /// A replay of the command topic into `<prefix>:rebuild`, swapped into
    /// the live prefix at the end; the replaced live keys are dropped, or
    /// kept under `<prefix>:replaced`.
    pub fn replay_swap_config(&self, drop_replaced: bool) -> ReplayConfig {
        let mut config = ReplayConfig::new(
            self.kafka.clone(),
            self.redis_url.clone(),
            self.ns.topic.clone(),
            format!("{}:rebuild", self.ns.prefix),
        );
        config.swap = Some(SwapConfig {
            live_prefix: self.ns.prefix.clone(),
            old_prefix: (!drop_replaced).then(|| format!("{}:replaced", self.ns.prefix)),
        });
        config
    }

    pub fn archiver_config(&self) -> ArchiverConfig {
        let mut c = ArchiverConfig::new(self.kafka.clone(), self.services.database_url.clone());
        c.outcomes_topic = self.ns.outcomes_topic.clone();
        c.group_id = self.ns.archiver_group.clone();
        c.page_wait = Duration::from_millis(20);
        c
    }

    pub fn start_applier_with(&self, config: ApplierConfig) -> Component<ApplierStats> {
        Component::spawn(|stopped| {
            stockledger_applier::run(config, async {
                let _ = stopped.await;
            })
        })
    }

    pub fn start_applier(&self) -> Component<ApplierStats> {
        self.start_applier_with(self.applier_config())
    }

    pub fn start_archiver(&self) -> Component<ArchiverStats> {
        self.start_archiver_with(self.archiver_config())
    }

    pub fn start_archiver_with(&self, config: ArchiverConfig) -> Component<ArchiverStats> {
        Component::spawn(|stopped| {
            stockledger_archiver::run(config, async {
                let _ = stopped.await;
            })
        })
    }

    /// Records applied to `skus` so far: the decisions stored in Redis, one
    /// per applied offset.
    pub async fn applied(&self, skus: &[&str]) -> anyhow::Result<u64> {
        Ok(self.projection.decisions_held(skus).await?)
    }

    /// Restocks `skus`, then sends 600 orders over them
    /// ([`traffic::orders`](crate::traffic::orders)) from a task of their
    /// own, running `fault` once the applier has decided 50 of them; waits
    /// until everything sent is applied and checks, by identity, that the
    /// command log holds each acknowledged record at the position its
    /// receipt names and nothing else. Returns the records sent.
    pub async fn orders_through<F, Fut>(
        &self,
        skus: &'static [&'static str],
        fault: F,
    ) -> anyhow::Result<u64>
    where
        F: FnOnce() -> Fut,
        Fut: std::future::Future<Output = anyhow::Result<()>>,
    {
        let mut sent = crate::traffic::restock_all_receipts(&self.ledger, skus, 500).await?;
        let producer = self.ledger.clone();
        let load =
            tokio::spawn(
                async move { crate::traffic::order_receipts(&producer, skus, 0, 600).await },
            );
        let restocked = sent.len() as u64;
        wait_until("the load under way", CATCH_UP, || async {
            Ok((self.applied(skus).await? >= restocked + 50).then_some(()))
        })
        .await?;
        fault().await?;
        sent.extend(load.await??);
        let count = sent.len() as u64;
        wait_until("everything applied", CATCH_UP, || async {
            Ok((self.applied(skus).await? >= count).then_some(()))
        })
        .await?;
        // By identity: each acknowledged command is in the log at the
        // position its receipt names, and the log holds nothing else.
        let logged: std::collections::BTreeMap<(i32, i64), String> = (self.read(&self.ns.topic))
            .await?
            .into_iter()
            .filter_map(|r| {
                let command = stockledger_core::codec::decode_command(r.payload.as_deref()?);
                Some((
                    (r.partition, r.offset),
                    command.ok()?.command_id.as_str().to_owned(),
                ))
            })
            .collect();
        for receipt in &sent {
            let at = (receipt.position.partition, receipt.position.offset);
            let there = logged.get(&at).map(String::as_str);
            anyhow::ensure!(
                there == Some(receipt.command_id.as_str()),
                "{} was acknowledged at {at:?}, where the log holds {there:?}",
                receipt.command_id
            );
        }
        anyhow::ensure!(
            logged.len() == sent.len(),
            "the log holds {} commands, {} were acknowledged",
            logged.len(),
            sent.len()
        );
        Ok(count)
    }

    /// The archiver's stored progress: next offsets summed over partitions
    /// (0 before its first page).
    pub async fn archiver_progress(&self) -> anyhow::Result<i64> {
        let sum: Option<i64> = sqlx::query_scalar(
            "SELECT sum(next_offset)::bigint FROM archiver_progress WHERE consumer_group = $1",
        )
        .bind(&self.ns.archiver_group)
        .fetch_one(&self.pool)
        .await?;
        Ok(sum.unwrap_or(0))
    }

    /// Rows archived for this test's command topic.
    pub async fn archived_rows(&self) -> anyhow::Result<i64> {
        Ok(stockledger_analysts::query::count_rows(&self.pool, &self.ns.topic).await?)
    }

    /// Waits until exactly `rows` rows are archived (fails on more).
    pub async fn wait_for_archive(&self, rows: i64) -> anyhow::Result<()> {
        wait_until(&format!("{rows} archived rows"), CATCH_UP, || async {
            let n = self.archived_rows().await?;
            anyhow::ensure!(n <= rows, "{n} rows archived, more than the {rows} records");
            Ok((n == rows).then_some(()))
        })
        .await
    }

    /// Every record of a topic, read to its current end.
    pub async fn read(&self, topic: &str) -> anyhow::Result<Vec<LogRecord>> {
        Ok(topic::read_topic(&self.kafka, topic, CATCH_UP).await?)
    }

    /// Appends raw bytes to the command topic (for garbage and hand-made
    /// records), partitioned as the producer library does.
    pub async fn send_raw(&self, key: &str, payload: &[u8]) -> anyhow::Result<(i32, i64)> {
        self.send_raw_to(None, key, payload).await
    }

    /// Appends raw bytes to the command topic, on `partition` if given.
    pub async fn send_raw_to(
        &self,
        partition: Option<i32>,
        key: &str,
        payload: &[u8],
    ) -> anyhow::Result<(i32, i64)> {
        self.send_raw_with(partition, key, payload, &[]).await
    }

    /// Appends raw bytes with `headers` to the command topic, on
    /// `partition` if given.
    pub async fn send_raw_with(
        &self,
        partition: Option<i32>,
        key: &str,
        payload: &[u8],
        headers: &[(&str, &[u8])],
    ) -> anyhow::Result<(i32, i64)> {
        self.append(&self.ns.topic, partition, key, payload, headers)
            .await
    }

    /// Appends raw bytes to the outcomes topic, as a producer that is not
    /// the applier (an older release, say) could have written them.
    pub async fn send_raw_outcome(&self, key: &str, payload: &[u8]) -> anyhow::Result<(i32, i64)> {
        self.append(&self.ns.outcomes_topic, None, key, payload, &[])
            .await
    }

    async fn append(
        &self,
        topic: &str,
        partition: Option<i32>,
        key: &str,
        payload: &[u8],
        headers: &[(&str, &[u8])],
    ) -> anyhow::Result<(i32, i64)> {
        // The broker, not this producer, judges a record's size: librdkafka's
        // own limit is below the broker's, and a test sends records at it.
        let mut settings = CONTRACT_SETTINGS.to_vec();
        settings.push(("message.max.bytes", "4000000"));
        let producer: FutureProducer = self.kafka.client_config(&settings).create()?;
        let mut record = FutureRecord::to(topic).key(key).payload(payload);
        if let Some(partition) = partition {
            record = record.partition(partition);
        }
        if !headers.is_empty() {
            let headers = headers
                .iter()
                .fold(OwnedHeaders::new(), |all, (key, value)| {
                    all.insert(Header {
                        key,
                        value: Some(*value),
                    })
                });
            record = record.headers(headers);
        }
        let delivery = producer
            .send(record, Duration::from_secs(30))
            .await
            .map_err(|(e, _)| e)?;
        Ok((delivery.partition, delivery.offset))
    }

    /// Grows the command topic to `partitions`, as `kafka-topics --alter
    /// --partitions` does: every record stays at its partition and offset,
    /// the new partitions are empty. (tansu 0.6 has no CreatePartitions, so
    /// the topic is recreated and its records written back in order.)
    pub async fn grow_command_topic(&self, partitions: i32) -> anyhow::Result<()> {
        let records = self.read(&self.ns.topic).await?;
        let admin: AdminClient<DefaultClientContext> = self.kafka.client_config(&[]).create()?;
        let options = AdminOptions::new().operation_timeout(Some(Duration::from_secs(30)));
        for result in admin.delete_topics(&[&self.ns.topic], &options).await? {
            result.map_err(|(topic, code)| anyhow::anyhow!("deleting {topic}: {code}"))?;
        }
        wait_until("the command topic to be gone", CATCH_UP, || async {
            let left = topic::partition_count(&self.kafka, &self.ns.topic).await;
            Ok(matches!(left, Ok(0) | Err(_)).then_some(()))
        })
        .await?;
        create_topics(
            &self.kafka,
            &[command_topic_spec(&self.ns.topic, partitions, 1)],
        )
        .await?;
        let producer: FutureProducer = self.kafka.client_config(&CONTRACT_SETTINGS).create()?;
        for r in &records {
            let mut headers = OwnedHeaders::new();
            for (key, value) in &r.headers {
                headers = headers.insert(Header {
                    key,
                    value: Some(value),
                });
            }
            let mut record = FutureRecord::<[u8], [u8]>::to(&self.ns.topic)
                .partition(r.partition)
                .headers(headers);
            if let Some(key) = &r.key {
                record = record.key(key);
            }
            if let Some(payload) = &r.payload {
                record = record.payload(payload);
            }
            if let Some(at) = r.timestamp {
                record = record.timestamp(at);
            }
            let delivery = producer
                .send(record, Duration::from_secs(30))
                .await
                .map_err(|(e, _)| e)?;
            anyhow::ensure!(
                (delivery.partition, delivery.offset) == (r.partition, r.offset),
                "record {}/{} came back at {}/{}",
                r.partition,
                r.offset,
                delivery.partition,
                delivery.offset
            );
        }
        Ok(())
    }
}

/// Commits offset 0 for every partition of `topic` in `group`, as
/// `kafka-consumer-groups --reset-offsets --to-earliest` does. The group
/// must have no active member.
pub async fn reset_group_offsets(
    kafka: &stockledger_kafka::KafkaConfig,
    group: &str,
    topic: &str,
    partitions: i32,
) -> anyhow::Result<()> {
    use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
    use rdkafka::{Offset, TopicPartitionList};
    let consumer: BaseConsumer = kafka
        .client_config(&[("group.id", group), ("enable.auto.commit", "false")])
        .create()?;
    let mut offsets = TopicPartitionList::new();
    for p in 0..partitions {
        offsets.add_partition_offset(topic, p, Offset::Offset(0))?;
    }
    tokio::task::spawn_blocking(move || consumer.commit(&offsets, CommitMode::Sync))
        .await
        .context("offset reset task")??;
    Ok(())
}
