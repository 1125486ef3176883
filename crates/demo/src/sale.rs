//! One whole run of the demo: the run's own topics and key prefix, the
//! applier and the archiver started on them in this process, the sale put
//! up, the buyers let in, the pipeline awaited, and the contract checked.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::Context;
use sqlx::PgPool;
use stockledger_analysts::query;
use stockledger_applier::{ApplierConfig, ApplierError, ApplierStats};
use stockledger_archiver::{ArchiverConfig, ArchiverError, ArchiverStats};
use stockledger_client::{Ledger, SoldOutGuard};
use stockledger_core::ids::MAX_UNITS_PER_RESTOCK;
use stockledger_core::{
    AdjustmentId, ChangeId, Quantity, RestockMode, ResultCode, Sku, SkuState, UnitId,
};
use stockledger_kafka::admin::{
    create_topics, default_events_topic, ledger_topic_specs, LedgerTopics, Retention,
};
use stockledger_kafka::KafkaConfig;
use stockledger_projection::Projection;
use stockledger_runtime::redact_url;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::checks::{self, Check, Run};
use crate::workload::{
    self, BasketsSent, SeatsSent, Sent, Workload, BASKET_SKUS, DECISION_WAIT, HOT_SKU, SHOW_SKU,
};

/// What the sale offers and how its buyers behave.
#[derive(Debug, Clone, Copy)]
pub struct Sale {
    /// The hot SKU's buyers (their orders, tasks, holds and habits).
    pub workload: Workload,
    /// Units of the hot SKU put on sale.
    pub stock: i64,
    /// Units one user may hold and buy.
    pub limit_per_user: i64,
    /// Baskets of one [`BASKET_SKUS`] each, both or neither; 0 for none.
    pub baskets: usize,
    /// Named seats of [`SHOW_SKU`] (rows of 20); 0 for no show.
    pub seats: usize,
    /// Refuse reservations of the sold-out SKU in the producer.
    pub sold_out_fast_path: bool,
    /// Seconds after the sale is set up that its window opens; 0 for no
    /// window.
    pub opens_in: u64,
    /// Partitions of the run's topics.
    pub partitions: i32,
    /// How long to wait for the pipeline to catch up.
    pub timeout: Duration,
}

impl Sale {
    /// Refuses counts the sale cannot run with, naming the count (as
    /// `stockledger demo`'s flag).
    pub fn check(&self) -> anyhow::Result<()> {
        anyhow::ensure!(self.workload.buyers > 0, "--buyers must be at least 1");
        anyhow::ensure!(self.stock > 0, "--stock must be at least 1");
        anyhow::ensure!(self.partitions > 0, "--partitions must be at least 1");
        Ok(())
    }

    /// Tasks of the baskets' shoppers and of the show's parties each.
    pub fn shoppers(&self) -> usize {
        (self.workload.buyers / 4).max(1)
    }

    /// Parties that want seats: two for every three seats.
    pub fn parties(&self) -> usize {
        self.seats * 2 / 3
    }

    /// The units of each basket SKU on sale: a third as many caps and a
    /// quarter as many tees as there are baskets.
    pub fn basket_stock(&self) -> [usize; 2] {
        [self.baskets.div_ceil(3), self.baskets.div_ceil(4)]
    }
}

/// The run's own topics and key prefix, so a demo never meets another's
/// records or keys.
#[derive(Debug, Clone)]
pub struct Names {
    pub run_id: String,
    pub topic: String,
    pub outcomes_topic: String,
    pub dlq_topic: String,
    pub prefix: String,
}

impl Names {
    /// A fresh run id (`demo-` and 8 hex digits) put before the configured
    /// topic names and after the configured key prefix.
    pub fn fresh(topic: &str, outcomes_topic: &str, dlq_topic: &str, prefix: &str) -> Self {
        let run_id = format!("demo-{}", &uuid::Uuid::new_v4().simple().to_string()[..8]);
        Self {
            topic: format!("{run_id}.{topic}"),
            outcomes_topic: format!("{run_id}.{outcomes_topic}"),
            dlq_topic: format!("{run_id}.{dlq_topic}"),
            prefix: format!("{prefix}:{run_id}"),
            run_id,
        }
    }
}

/// Where the demo runs: the services, and the applier's and archiver's
/// settings, which the run points at its own topics, prefix and groups.
pub struct Services {
    pub kafka: KafkaConfig,
    pub redis_url: String,
    /// The archive, migrated.
    pub pool: PgPool,
    pub applier: ApplierConfig,
    pub archiver: ArchiverConfig,
}

/// The Redis URL with its password masked, as every config here shows
/// it; the pool left out.
impl std::fmt::Debug for Services {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Services")
            .field("kafka", &self.kafka)
            .field("redis_url", &redact_url(&self.redis_url))
            .field("applier", &self.applier)
            .field("archiver", &self.archiver)
            .finish_non_exhaustive()
    }
}

/// What the buyers did, from the first order sent.
#[derive(Debug)]
pub struct Sold {
    /// Until the last buyer had its answer.
    pub produced_in: Duration,
    pub sent: Sent,
    pub baskets: BasketsSent,
    pub seats: SeatsSent,
}

impl Sold {
    /// Records the buyers sent.
    pub fn records(&self) -> u64 {
        self.sent.records + self.seats.records
    }
}

/// How many of the hot SKU's records ended with one kind of decision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tally {
    pub label: &'static str,
    pub count: i64,
}

/// A run, once it has ended and been checked.
#[derive(Debug)]
pub struct Report {
    pub sold: Sold,
    /// Rows archived for the run's command topic.
    pub archived: i64,
    /// From the first order sent until the archive had every record.
    pub end_to_end: Duration,
    /// Reservations the sold-out fast path refused in the producer.
    pub refused_in_producer: Option<u64>,
    /// What became of the hot SKU's records, a line per kind of decision,
    /// read back from the archive ([`DECISIONS`]).
    pub decisions: Vec<Tally>,
    /// The run's archived rows by result.
    pub by_result: Vec<(String, i64)>,
    /// The hot SKU's state in Redis at the end.
    pub stock: Option<SkuState>,
    /// The contract's checks.
    pub checks: Vec<Check>,
}

impl Report {
    /// Every check passed.
    pub fn passed(&self) -> bool {
        self.checks.iter().all(|c| c.ok)
    }
}

/// Runs the sale on `names` through the whole pipeline and checks it.
pub async fn run(services: Services, names: &Names, sale: &Sale) -> anyhow::Result<Report> {
    sale.check()?;
    let Services {
        kafka,
        redis_url,
        pool,
        applier,
        archiver,
    } = services;
    let pipeline = Pipeline::start(&kafka, applier, archiver, names, sale.partitions).await?;

    let mut builder = Ledger::builder()
        .kafka(kafka.clone())
        .topic(names.topic.clone())
        .decisions_from_redis(&redis_url, &names.prefix)
        .decision_timeout(DECISION_WAIT);
    let guard = if sale.sold_out_fast_path {
        let guard = SoldOutGuard::connect(&redis_url, &names.prefix).await?;
        builder = builder.sold_out_guard_from(guard.clone());
        Some(guard)
    } else {
        None
    };
    let ledger = builder.build().await?;
    let opens_at = open_sale(&ledger, &names.run_id, sale).await?;
    let started = Instant::now();
    let sold = sell(&ledger, &names.run_id, sale).await?;
    let projection = Projection::connect(&redis_url, names.prefix.clone()).await?;
    let archived = checks::settle(&kafka, &pool, &projection, &names.topic, sale.timeout).await?;
    let end_to_end = started.elapsed();
    pipeline.stop().await?;

    let run = Run {
        kafka: &kafka,
        pool: &pool,
        projection: &projection,
        topic: &names.topic,
        archived,
        baskets: &sold.baskets.ids,
        seats: (sale.seats > 0).then_some(&sold.seats),
        opens_at,
    };
    let checks = checks::check_contract(&run, sale.timeout).await?;
    let counts = query::count_by_command_and_result(&pool, &names.topic, HOT_SKU).await?;
    let decisions = DECISIONS
        .iter()
        .map(|&(label, command, result)| Tally {
            label,
            count: (counts.iter())
                .filter(|(c, r, _)| c.as_deref() == Some(command) && r == result.as_str())
                .map(|(_, _, n)| n)
                .sum(),
        })
        .collect();
    Ok(Report {
        sold,
        archived,
        end_to_end,
        refused_in_producer: guard.map(|g| g.refused()),
        decisions,
        by_result: query::count_by_result(&pool, &names.topic).await?,
        stock: projection.read_sku(HOT_SKU).await?,
        checks,
    })
}

/// What became of the hot SKU's orders, one line per kind of decision:
/// its label, the command and the result the archive counts.
pub const DECISIONS: [(&str, &str, ResultCode); 11] = [
    ("reservations granted", "DEDUCT", ResultCode::Applied),
    (
        "reservations refused: sold out",
        "DEDUCT",
        ResultCode::RejectedInsufficient,
    ),
    (
        "reservations refused: over the limit",
        "DEDUCT",
        ResultCode::RejectedLimit,
    ),
    (
        "reservations refused: cancelled first",
        "DEDUCT",
        ResultCode::RejectedCancelled,
    ),
    (
        "duplicate reservations ignored",
        "DEDUCT",
        ResultCode::Duplicate,
    ),
    ("paid (confirmed)", "CONFIRM", ResultCode::Confirmed),
    ("paid too late", "CONFIRM", ResultCode::RejectedExpired),
    ("cancelled (released)", "ROLLBACK", ResultCode::Applied),
    ("abandoned (expired)", "EXPIRE", ResultCode::Expired),
    ("refunded", "REFUND", ResultCode::Refunded),
    (
        "rollbacks before reserving (tombstones)",
        "ROLLBACK",
        ResultCode::IgnoredNoDeduction,
    ),
];

/// The sale: the orders, baskets and seats bought at once.
async fn sell(ledger: &Ledger, run_id: &str, sale: &Sale) -> anyhow::Result<Sold> {
    let started = Instant::now();
    let shoppers = sale.shoppers();
    let seed = sale.workload.seed;
    let hold_ms = sale.workload.hold_ms;
    let (sent, baskets, seats) = tokio::try_join!(
        workload::buy(ledger, &sale.workload),
        workload::buy_baskets(ledger, run_id, sale.baskets, shoppers, hold_ms, seed),
        workload::buy_seats(
            ledger,
            run_id,
            (sale.seats, sale.parties(), shoppers),
            hold_ms,
            seed
        )
    )?;
    Ok(Sold {
        produced_in: started.elapsed(),
        sent,
        baskets,
        seats,
    })
}

/// The applier and the archiver of the run, each in its own task.
struct Pipeline {
    stop_applier: oneshot::Sender<()>,
    stop_archiver: oneshot::Sender<()>,
    applier: JoinHandle<Result<ApplierStats, ApplierError>>,
    archiver: JoinHandle<Result<ArchiverStats, ArchiverError>>,
}

impl Pipeline {
    /// Creates the run's topics and starts both services on them.
    async fn start(
        kafka: &KafkaConfig,
        mut applier: ApplierConfig,
        mut archiver: ArchiverConfig,
        names: &Names,
        partitions: i32,
    ) -> anyhow::Result<Self> {
        let events = default_events_topic(&names.topic);
        let topics = LedgerTopics {
            commands: &names.topic,
            outcomes: &names.outcomes_topic,
            dead_letters: &names.dlq_topic,
            events: &events,
        };
        let specs = ledger_topic_specs(topics, partitions, 1, Retention::default());
        create_topics(kafka, &specs)
            .await
            .with_context(|| format!("creating topics on {}", kafka.brokers))?;

        applier.topic = names.topic.clone();
        applier.outcomes_topic = names.outcomes_topic.clone();
        applier.dlq_topic = names.dlq_topic.clone();
        applier.events_topic = None; // the run's: `<topic>.events`
        applier.prefix = names.prefix.clone();
        applier.group_id = format!("{}-applier", names.run_id);
        archiver.outcomes_topic = names.outcomes_topic.clone();
        archiver.group_id = format!("{}-archiver", names.run_id);
        archiver.page_wait = Duration::from_millis(20);
        let (stop_applier, applier_stopped) = oneshot::channel::<()>();
        let (stop_archiver, archiver_stopped) = oneshot::channel::<()>();
        Ok(Self {
            stop_applier,
            stop_archiver,
            applier: tokio::spawn(stockledger_applier::run(applier, async {
                let _ = applier_stopped.await;
            })),
            archiver: tokio::spawn(stockledger_archiver::run(archiver, async {
                let _ = archiver_stopped.await;
            })),
        })
    }

    /// Stops both services and reports the first failure of either.
    async fn stop(self) -> anyhow::Result<()> {
        let _ = self.stop_applier.send(());
        let _ = self.stop_archiver.send(());
        self.applier.await.context("applier task")??;
        self.archiver.await.context("archiver task")??;
        Ok(())
    }
}

/// Puts the hot SKU on sale: its stock, its per-user limit and, with
/// [`Sale::opens_in`], its sale window, each awaited until the applier has
/// taken it. The window's opening, if it has one.
async fn open_sale(ledger: &Ledger, run_id: &str, sale: &Sale) -> anyhow::Result<Option<i64>> {
    let timeout = sale.timeout;
    let initial = AdjustmentId::new(format!("{run_id}-initial"))?;
    let restock = ledger
        .restock(&Sku::new(HOT_SKU)?, &initial, RestockMode::Set, sale.stock)
        .await?;
    let decision = ledger
        .decision_within(&restock, timeout)
        .await
        .context("waiting for the applier to take the initial restock")?;
    anyhow::ensure!(
        decision.result == ResultCode::Applied,
        "initial restock: {decision:?}"
    );
    if sale.baskets > 0 {
        for (sku, stock) in BASKET_SKUS.into_iter().zip(sale.basket_stock()) {
            let restock = ledger
                .restock(&Sku::new(sku)?, &initial, RestockMode::Set, stock as i64)
                .await?;
            let decision = ledger.decision_within(&restock, timeout).await?;
            anyhow::ensure!(
                decision.result == ResultCode::Applied,
                "{sku} restock: {decision:?}"
            );
        }
    }
    let hall: Vec<String> = (0..sale.seats).map(workload::seat_name).collect();
    for (k, row) in hall.chunks(MAX_UNITS_PER_RESTOCK).enumerate() {
        let adjustment = AdjustmentId::new(format!("{run_id}-hall-{k}"))?;
        let units = (row.iter().map(UnitId::new)).collect::<Result<Vec<_>, _>>()?;
        let restock = ledger
            .add_units(&Sku::new(SHOW_SKU)?, &adjustment, &units)
            .await?;
        let decision = ledger.decision_within(&restock, timeout).await?;
        anyhow::ensure!(
            decision.result == ResultCode::Applied,
            "{SHOW_SKU} seats: {decision:?}"
        );
    }
    let per_user = Quantity::new(sale.limit_per_user)?;
    let limit = ledger.limit(&Sku::new(HOT_SKU)?, Some(per_user)).await?;
    let decision = ledger.decision_within(&limit, timeout).await?;
    anyhow::ensure!(
        decision.result == ResultCode::Applied,
        "per-user limit: {decision:?}"
    );
    if sale.opens_in == 0 || sale.workload.orders == 0 {
        return Ok(None);
    }
    let opens = SystemTime::now() + Duration::from_secs(sale.opens_in);
    let change = ChangeId::new(format!("{run_id}-opening"))?;
    let window = ledger
        .window(&Sku::new(HOT_SKU)?, &change, Some(opens), None)
        .await?;
    let decision = ledger.decision_within(&window, timeout).await?;
    anyhow::ensure!(
        decision.result == ResultCode::Applied,
        "sale window: {decision:?}"
    );
    let opens_at = opens.duration_since(UNIX_EPOCH)?.as_millis();
    Ok(Some(i64::try_from(opens_at)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_services_show_no_password() {
        let redis_url = "redis://:hunter2@127.0.0.1:6379";
        let kafka = KafkaConfig::new("127.0.0.1:9092");
        let services = Services {
            applier: ApplierConfig::new(kafka.clone(), redis_url),
            archiver: ArchiverConfig::new(kafka.clone(), "postgres://u:hunter2@127.0.0.1/db"),
            pool: PgPool::connect_lazy("postgres://u:hunter2@127.0.0.1/db").expect("a lazy pool"),
            kafka,
            redis_url: redis_url.to_owned(),
        };
        let shown = format!("{services:?}");
        assert!(!shown.contains("hunter2"), "{shown}");
        assert!(shown.contains("127.0.0.1:6379"), "{shown}");
    }
}
