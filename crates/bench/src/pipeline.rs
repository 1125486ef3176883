//! The scenarios' pipeline: the run's topics, an applier (a task of the
//! bench, or a `stockledger apply` process whose memory can be read
//! alone), a producer, and every SKU restocked before the clock starts.

use std::sync::mpsc::Receiver;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use anyhow::Context;
use futures::stream::{self, StreamExt};
use stockledger_applier::applier::hops::{HopSink, RecordHops};
use stockledger_cli::{applier_config, Global};
use stockledger_client::producer::Tuning;
use stockledger_client::{KafkaConfig, Ledger, LedgerBuilder, ProducerError, Receipt};
use stockledger_core::RestockMode;
use stockledger_kafka::admin::{create_topics, ledger_topic_specs, LedgerTopics, Retention};
use stockledger_kafka::topic::committed_offsets;
use stockledger_testkit::ids;
use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::contract::wait_archived;
use crate::process::Component;
use crate::{BenchArgs, ROLLBACK_EVERY};

/// A pipeline for `records` commands over `skus` SKUs whose applier is a
/// `stockledger apply` process, with a `stockledger archive` process on its
/// outcomes (and that archiver's group), so each one's memory can be read.
pub(crate) async fn with_processes(
    g: &Global,
    args: &BenchArgs,
    run_id: &str,
    name: &str,
    skus: usize,
    records: u64,
) -> anyhow::Result<(Pipeline, Component, String)> {
    let per_sku = (records / skus as u64 + 1) as i64;
    let pipeline = Pipeline::start(g, args, run_id, name, skus, per_sku, false).await?;
    let group = format!("{run_id}-{name}-archiver");
    let archiver = Component::start(
        g,
        &[
            ("STOCKLEDGER_OUTCOMES_TOPIC", &pipeline.outcomes_topic),
            ("STOCKLEDGER_ARCHIVER_GROUP", &group),
            ("STOCKLEDGER_PAGE_SIZE", &args.page_size.max(1).to_string()),
            (
                "STOCKLEDGER_ARCHIVE_WRITERS",
                &args.writers.max(1).to_string(),
            ),
        ],
        "archive",
    )?;
    Ok((pipeline, archiver, group))
}

/// How long after [`publish_and_wait`] began the applier and the archiver
/// had each taken every command.
pub(crate) struct Taken {
    pub(crate) applied: Duration,
    pub(crate) archived: Duration,
}

/// Sends the commands numbered `range`, `in_flight` at once, and waits
/// until the applier has taken every command up to its end and `archiver`
/// (of `archiver_group`) every outcome up to it, the restocks of the
/// `skus` SKUs included.
pub(crate) async fn publish_and_wait(
    pool: &sqlx::PgPool,
    pipeline: &Pipeline,
    (archiver, archiver_group): (&Component, &str),
    range: std::ops::Range<u64>,
    skus: usize,
    in_flight: usize,
) -> anyhow::Result<Taken> {
    let started = Instant::now();
    let end = range.end;
    pipeline.publish_range(range, in_flight).await?;
    pipeline.wait_applied(end).await?;
    let applied = started.elapsed();
    let log = end + skus as u64;
    wait_archived(pool, archiver_group, &pipeline.outcomes_topic, log, || {
        archiver.check_running()
    })
    .await?;
    Ok(Taken {
        applied,
        archived: started.elapsed(),
    })
}

/// A `stockledger apply` process with `env`.
fn start_applier(g: &Global, env: &[(&'static str, String)]) -> anyhow::Result<Component> {
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    Component::start(g, &env, "apply")
}

/// The peak resident set, in MiB, of the applier and archiver processes.
pub(crate) fn peak_rss(pipeline: &Pipeline, archiver: &Component) -> anyhow::Result<[f64; 2]> {
    let applier = match &pipeline.applier {
        Applier::Process(p) => p.peak_rss_mib(),
        Applier::Task { .. } => None,
    };
    match (applier, archiver.peak_rss_mib()) {
        (Some(applier), Some(archiver)) => Ok([applier, archiver]),
        _ => anyhow::bail!(
            "no peak RSS of the applier and archiver processes in /proc (needs Linux)"
        ),
    }
}

/// Where a scenario's applier runs.
pub(crate) enum Applier {
    /// A task of the bench process, on a runtime of its own or not.
    Task {
        stop: oneshot::Sender<()>,
        task: tokio::task::JoinHandle<
            Result<stockledger_applier::ApplierStats, stockledger_applier::ApplierError>,
        >,
        runtime: Option<tokio::runtime::Runtime>,
    },
    /// A `stockledger apply` process, so its memory can be read alone.
    Process(Component),
}

impl Applier {
    /// Starts the applier of `config`: a task of the bench (on a runtime
    /// of its own when `timed`: as in a process of its own, so the
    /// thousands of callers the latency scenarios keep waiting do not
    /// delay its turns), or a `stockledger apply` process with `env`.
    fn start(
        g: &Global,
        config: stockledger_applier::ApplierConfig,
        env: &[(&'static str, String)],
        in_process: bool,
        timed: bool,
    ) -> anyhow::Result<Self> {
        if !in_process {
            return Ok(Self::Process(start_applier(g, env)?));
        }
        let (stop, stopped) = oneshot::channel::<()>();
        let run = stockledger_applier::run(config, async {
            let _ = stopped.await;
        });
        let runtime = match timed {
            true => Some(
                tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(2)
                    .thread_name("applier")
                    .enable_all()
                    .build()?,
            ),
            false => None,
        };
        let task = match &runtime {
            Some(runtime) => runtime.spawn(run),
            None => tokio::spawn(run),
        };
        Ok(Self::Task {
            stop,
            task,
            runtime,
        })
    }
}

/// Topics, an applier and a producer for one scenario, with every SKU
/// restocked and the restocks applied.
pub(crate) struct Pipeline {
    pub(crate) kafka: stockledger_kafka::KafkaConfig,
    pub(crate) topic: String,
    pub(crate) outcomes_topic: String,
    pub(crate) group: String,
    pub(crate) prefix: String,
    pub(crate) skus: usize,
    pub(crate) producer: Ledger,
    pub(crate) restocks: i64,
    pub(crate) applier: Applier,
    /// The settings of an applier process, for more of them in its group.
    applier_env: Vec<(&'static str, String)>,
    /// Appliers added to the group by [`Pipeline::add_applier`].
    more_appliers: Vec<Component>,
    /// The applier's steps of each batch, for [`Pipeline::start_timed`].
    hops: Option<Mutex<Receiver<Vec<RecordHops>>>>,
}

/// How a pipeline's applier runs: a task of the bench or a process, with
/// its stock events published or not, and its steps reported or not.
struct Setup {
    in_process: bool,
    stock_events: bool,
    hops: Option<HopSink>,
}

impl Pipeline {
    pub(crate) async fn start(
        g: &Global,
        args: &BenchArgs,
        run_id: &str,
        name: &str,
        skus: usize,
        per_sku: i64,
        in_process: bool,
    ) -> anyhow::Result<Self> {
        Self::start_with_events(g, args, run_id, name, skus, per_sku, in_process, true).await
    }

    /// [`Pipeline::start`] with its applier a task on a runtime of its own
    /// (as in a process of its own) that reports when each record passed
    /// its steps ([`Pipeline::take_hops`]).
    pub(crate) async fn start_timed(
        g: &Global,
        args: &BenchArgs,
        run_id: &str,
        name: &str,
        skus: usize,
        per_sku: i64,
    ) -> anyhow::Result<Self> {
        let (sink, hops) = std::sync::mpsc::channel();
        let setup = Setup {
            in_process: true,
            stock_events: true,
            hops: Some(HopSink::new(sink)),
        };
        let mut pipeline = Self::start_inner(g, args, (run_id, name), skus, per_sku, setup).await?;
        pipeline.hops = Some(Mutex::new(hops));
        Ok(pipeline)
    }

    /// Where the applier of a pipeline started with
    /// [`Pipeline::start_timed`] reports its steps: read it once the
    /// applier has stopped ([`crate::hops::steps`]).
    pub(crate) fn take_hops(&mut self) -> Option<Receiver<Vec<RecordHops>>> {
        let hops = self.hops.take()?;
        Some(hops.into_inner().unwrap_or_else(PoisonError::into_inner))
    }

    /// [`Pipeline::start`], its applier publishing stock events or not.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn start_with_events(
        g: &Global,
        args: &BenchArgs,
        run_id: &str,
        name: &str,
        skus: usize,
        per_sku: i64,
        in_process: bool,
        stock_events: bool,
    ) -> anyhow::Result<Self> {
        let setup = Setup {
            in_process,
            stock_events,
            hops: None,
        };
        Self::start_inner(g, args, (run_id, name), skus, per_sku, setup).await
    }

    async fn start_inner(
        g: &Global,
        args: &BenchArgs,
        (run_id, name): (&str, &str),
        skus: usize,
        per_sku: i64,
        setup: Setup,
    ) -> anyhow::Result<Self> {
        let Setup {
            in_process,
            stock_events,
            hops,
        } = setup;
        let topic = format!("{run_id}.{name}.ledger");
        let outcomes_topic = format!("{run_id}.{name}.outcomes");
        let dlq_topic = format!("{run_id}.{name}.dlq");
        let kafka = g.kafka();
        let topics = LedgerTopics {
            commands: &topic,
            outcomes: &outcomes_topic,
            dead_letters: &dlq_topic,
            events: &stockledger_kafka::admin::default_events_topic(&topic),
        };
        let specs = ledger_topic_specs(topics, args.partitions, 1, Retention::default());
        create_topics(&kafka, &specs).await?;
        let mut config = applier_config(g);
        config.topic = topic.clone();
        config.outcomes_topic = outcomes_topic.clone();
        config.dlq_topic = dlq_topic;
        config.events_topic = None; // the run's: `<topic>.events`
        config.stock_events = stock_events;
        config.prefix = format!("{}:{run_id}:{name}", g.prefix);
        config.group_id = format!("{run_id}-{name}-applier");
        config.batch_size = args.batch_size.max(1);
        config.batch_wait = Duration::from_millis(args.batch_wait_ms);
        let timed = hops.is_some();
        config.hops = hops;
        let (group, prefix) = (config.group_id.clone(), config.prefix.clone());
        let applier_env = vec![
            ("STOCKLEDGER_TOPIC", config.topic.clone()),
            ("STOCKLEDGER_OUTCOMES_TOPIC", config.outcomes_topic.clone()),
            ("STOCKLEDGER_DLQ_TOPIC", config.dlq_topic.clone()),
            ("STOCKLEDGER_PREFIX", config.prefix.clone()),
            ("STOCKLEDGER_APPLIER_GROUP", config.group_id.clone()),
            ("STOCKLEDGER_BATCH_SIZE", config.batch_size.to_string()),
            ("STOCKLEDGER_BATCH_WAIT_MS", args.batch_wait_ms.to_string()),
            ("STOCKLEDGER_NO_STOCK_EVENTS", (!stock_events).to_string()),
        ];
        let applier = Applier::start(g, config, &applier_env, in_process, timed)?;
        // The scenarios that time a caller's wait make producers of their
        // own; these publish as much as they can.
        let producer = (Self::builder(&kafka, &topic).tuning(Tuning::Throughput))
            .build()
            .await?;
        let pipeline = Self {
            kafka,
            topic,
            outcomes_topic,
            group,
            prefix,
            skus,
            producer,
            restocks: skus as i64 * if args.sale_windows { 2 } else { 1 },
            applier,
            applier_env,
            more_appliers: Vec::new(),
            hops: None,
        };
        pipeline.stock_every_sku(per_sku, args.in_flight).await?;
        if args.sale_windows {
            pipeline.window_every_sku(args.in_flight).await?;
        }
        pipeline.wait_applied(0).await?;
        Ok(pipeline)
    }

    /// Sets every SKU's stock to `per_sku`, `in_flight` restocks at a time.
    async fn stock_every_sku(&self, per_sku: i64, in_flight: usize) -> anyhow::Result<()> {
        stream::iter(0..self.skus as u64)
            .map(|i| async move {
                self.producer
                    .restock(
                        &ids::sku(self.sku(i)),
                        &ids::adjustment("initial"),
                        RestockMode::Set,
                        per_sku,
                    )
                    .await
            })
            .buffer_unordered(in_flight)
            .collect::<Vec<_>>()
            .await
            .into_iter()
            .collect::<Result<Vec<_>, _>>()?;
        Ok(())
    }

    /// Gives every SKU a sale window, open from an hour ago for a day, so
    /// that every deduct is checked against one (`--sale-windows`).
    async fn window_every_sku(&self, in_flight: usize) -> anyhow::Result<()> {
        let now = std::time::SystemTime::now();
        let hour = Duration::from_secs(3_600);
        let change = stockledger_core::ChangeId::new("bench-window")?;
        stream::iter(0..self.skus as u64)
            .map(|i| {
                let change = &change;
                async move {
                    self.producer
                        .window(
                            &ids::sku(self.sku(i)),
                            change,
                            Some(now - hour),
                            Some(now + 24 * hour),
                        )
                        .await
                }
            })
            .buffer_unordered(in_flight)
            .collect::<Vec<_>>()
            .await
            .into_iter()
            .collect::<Result<Vec<_>, _>>()?;
        Ok(())
    }

    fn builder(kafka: &KafkaConfig, topic: &str) -> LedgerBuilder {
        Ledger::builder()
            .kafka(kafka.clone())
            .topic(topic)
            .without_decisions()
    }

    /// A ledger's client tuned as an order service's, for scenarios timing
    /// callers that wait on each command (the pipeline's own publishes in
    /// bulk); it reads no decisions unless `decisions` gives the Redis
    /// URL to read them from and how long to wait for each.
    pub(crate) async fn waiting_ledger(
        &self,
        decisions: Option<(&str, Duration)>,
    ) -> anyhow::Result<Ledger> {
        let mut builder = Self::builder(&self.kafka, &self.topic);
        if let Some((redis_url, wait)) = decisions {
            builder = builder
                .decisions_from_redis(redis_url, &self.prefix)
                .decision_timeout(wait);
        }
        Ok(builder.build().await?)
    }

    /// One more `stockledger apply` process in the applier's group, under a
    /// static member id of its own (the pipeline's own applier must be a
    /// process too).
    pub(crate) fn add_applier(&mut self, g: &Global) -> anyhow::Result<()> {
        anyhow::ensure!(
            matches!(self.applier, Applier::Process(_)),
            "appliers are added beside an applier process"
        );
        // Members of one group on one host need distinct static ids (the
        // default is the host's name, which the first applier has).
        let mut env = self.applier_env.clone();
        let id = format!("{}-{}", self.group, self.more_appliers.len() + 1);
        env.push(("STOCKLEDGER_INSTANCE_ID", id));
        self.more_appliers.push(start_applier(g, &env)?);
        Ok(())
    }

    /// The process ids of the applier processes.
    pub(crate) fn applier_pids(&self) -> Vec<u32> {
        let first = match &self.applier {
            Applier::Process(p) => p.pid(),
            Applier::Task { .. } => None,
        };
        first
            .into_iter()
            .chain(self.more_appliers.iter().filter_map(Component::pid))
            .collect()
    }

    /// The SKU of the `i`-th command.
    pub(crate) fn sku(&self, i: u64) -> String {
        format!("SKU-{:05}", i % self.skus as u64)
    }

    /// Waits until the restocks and `records` more are applied and committed.
    pub(crate) async fn wait_applied(&self, records: u64) -> anyhow::Result<()> {
        let records = self.restocks + records as i64;
        let deadline = Instant::now() + Duration::from_secs(600);
        loop {
            let done: i64 = committed_offsets(&self.kafka, &self.group, &self.topic)
                .await?
                .values()
                .sum();
            if done >= records {
                return Ok(());
            }
            if let Applier::Process(p) = &self.applier {
                p.check_running()?;
            }
            for p in &self.more_appliers {
                p.check_running()?;
            }
            anyhow::ensure!(
                Instant::now() < deadline,
                "{} committed {done} of {records} records in 10 minutes",
                self.group
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Sends `records` commands, `in_flight` at a time, and returns when the
    /// broker holds them all. Nine in ten are deducts of one unit; every
    /// tenth is the rollback of an order deducted at least `in_flight`
    /// commands earlier (a cancelled or unpaid order), so by the time it is
    /// sent its deduct is already queued ahead of it on the SKU's partition.
    pub(crate) async fn publish(&self, records: u64, in_flight: usize) -> anyhow::Result<()> {
        self.publish_range(0..records, in_flight).await
    }

    /// [`Pipeline::publish`] of the commands numbered `range` (a scenario
    /// publishing in steps gets the same commands as one publishing at once).
    pub(crate) async fn publish_range(
        &self,
        range: std::ops::Range<u64>,
        in_flight: usize,
    ) -> anyhow::Result<()> {
        self.publish_by(&self.producer, range, in_flight).await
    }

    /// [`Pipeline::publish_range`] through `producer` (one tuned for
    /// another use than the bulk loading the pipeline's own is).
    pub(crate) async fn publish_by(
        &self,
        producer: &Ledger,
        range: std::ops::Range<u64>,
        in_flight: usize,
    ) -> anyhow::Result<()> {
        let lag = (in_flight as u64).min(range.end / 2) / ROLLBACK_EVERY * ROLLBACK_EVERY
            + ROLLBACK_EVERY;
        stream::iter(range)
            .map(|i| async move {
                if i % ROLLBACK_EVERY == 0 && i >= lag {
                    let order = i - lag + 1;
                    producer
                        .rollback(
                            &ids::sku(self.sku(order)),
                            &ids::order(format!("order-{order}")),
                            None,
                        )
                        .await
                } else {
                    producer
                        .deduct(
                            &ids::sku(self.sku(i)),
                            &ids::order(format!("order-{i}")),
                            ids::qty(1),
                            None,
                        )
                        .await
                }
            })
            .buffer_unordered(in_flight)
            .collect::<Vec<_>>()
            .await
            .into_iter()
            .collect::<Result<Vec<_>, _>>()?;
        Ok(())
    }

    /// Sends `records` commands that each raise a stock event: over SKUs
    /// holding one unit, a round of deducts of every SKU (each sells it
    /// out), then a round of their rollbacks (each brings it back). A
    /// rollback is sent once at least `skus` commands after its deduct
    /// were, so with at most that many in flight its deduct is delivered.
    pub(crate) async fn publish_flips(&self, records: u64, in_flight: usize) -> anyhow::Result<()> {
        stream::iter(0..records)
            .map(|i| self.flip(&self.producer, i))
            .buffer_unordered(in_flight.min(self.skus).max(1))
            .collect::<Vec<_>>()
            .await
            .into_iter()
            .collect::<Result<Vec<_>, _>>()?;
        Ok(())
    }

    /// Command `i` of [`Pipeline::publish_flips`] through `producer`: in
    /// round `i / skus`, a deduct of SKU `i`'s one unit (even rounds) or its
    /// rollback (odd ones).
    pub(crate) async fn flip(&self, producer: &Ledger, i: u64) -> Result<Receipt, ProducerError> {
        let round = i / self.skus as u64;
        let (sku, order) = (
            ids::sku(self.sku(i)),
            ids::order(format!("order-{}", round / 2)),
        );
        if round.is_multiple_of(2) {
            producer.deduct(&sku, &order, ids::qty(1), None).await
        } else {
            producer.rollback(&sku, &order, None).await
        }
    }

    pub(crate) async fn stop(self) -> anyhow::Result<()> {
        for process in self.more_appliers {
            process.stop().await?;
        }
        match self.applier {
            Applier::Task {
                stop,
                task,
                runtime,
            } => {
                let _ = stop.send(());
                task.await.context("applier task")??;
                if let Some(runtime) = runtime {
                    // Its applier has stopped: nothing of it is left to wait for.
                    runtime.shutdown_background();
                }
            }
            Applier::Process(process) => process.stop().await?,
        }
        Ok(())
    }
}
