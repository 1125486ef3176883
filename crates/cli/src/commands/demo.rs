//! `stockledger demo`: the checkout of [`crate::demo`] through the whole
//! pipeline, in one process, against the configured services, ending with
//! the contract's checks.

use std::process::ExitCode;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::Context;
use clap::Args;
use sqlx::PgPool;
use stockledger_analysts::query;
use stockledger_client::{Ledger, SoldOutGuard};
use stockledger_core::ids::MAX_UNITS_PER_RESTOCK;
use stockledger_core::{AdjustmentId, ChangeId, Quantity, RestockMode, ResultCode, Sku, UnitId};
use stockledger_kafka::admin::{create_topics, ledger_topic_specs, LedgerTopics, Retention};
use stockledger_projection::Projection;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use super::table::Style;
use crate::demo::{self, Workload, HOT_SKU};
use crate::exit::Exit;
use crate::Global;

#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Orders placed in total.
    #[arg(long, default_value_t = 5000)]
    pub orders: usize,
    /// Concurrent buyers (tasks) placing them.
    #[arg(long, default_value_t = 200)]
    pub buyers: usize,
    /// Units of the hot SKU put on sale.
    #[arg(long, default_value_t = 1000)]
    pub stock: i64,
    /// Units one user may hold and buy (each user places two orders).
    #[arg(long, default_value_t = 1)]
    pub limit_per_user: i64,
    /// How long a reservation holds its unit, in milliseconds.
    #[arg(long, default_value_t = 2000)]
    pub hold_ms: i64,
    /// Percent of reserved orders cancelled before paying (released).
    #[arg(long, default_value_t = 10)]
    pub cancel_percent: u32,
    /// Percent of reserved orders never paid (their holds expire).
    #[arg(long, default_value_t = 15)]
    pub abandon_percent: u32,
    /// Percent of reserved orders paid, then refunded.
    #[arg(long, default_value_t = 5)]
    pub refund_percent: u32,
    /// Percent of orders whose reservation is sent twice (a client retry).
    #[arg(long, default_value_t = 5)]
    pub duplicate_percent: u32,
    /// Percent of orders whose rollback is sent before their reservation.
    #[arg(long, default_value_t = 3)]
    pub early_rollback_percent: u32,
    /// Baskets checked out alongside the sale, each one unit of DEMO-CAP
    /// and one of DEMO-TEE, both or neither (a third as many caps and a
    /// quarter as many tees are on sale); 0 for none.
    #[arg(long, default_value_t = 300)]
    pub baskets: usize,
    /// Named seats of the show DEMO-SHOW sold alongside (rows of 20, R1-1
    /// onwards): parties of 1 to 4 (two for every three seats) each want
    /// adjacent seats of one row, all or none; 0 for no show.
    #[arg(long, default_value_t = 240)]
    pub seats: usize,
    /// `sale`: the flash sale, its baskets and the show; `cinema`: only the
    /// show (give it a big hall, e.g. --seats 2000).
    #[arg(long, value_enum, default_value = "sale")]
    pub scenario: Scenario,
    /// Refuse reservations of the sold-out SKU in the producer, without
    /// logging them (the sold-out fast path), and report how many.
    #[arg(long)]
    pub sold_out_fast_path: bool,
    /// Seconds after the sale is set up that the hot SKU's sale window
    /// opens: the buyers start at once, and what they send before the
    /// opening is refused REJECTED_NOT_OPEN (they try again); 0 opens it at
    /// once, with no window.
    #[arg(long, default_value_t = 2)]
    pub opens_in: u64,
    /// Partitions of the demo's topics.
    #[arg(long, default_value_t = 8)]
    pub partitions: i32,
    /// Seed of the workload's random choices.
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// Seconds to wait for the pipeline to catch up before failing.
    #[arg(long, default_value_t = 120)]
    pub timeout: u64,
    /// The story of the sale for people, or one JSON object for scripts
    /// (the run's names, its figures and each check); the exit code is the
    /// verdict either way.
    #[arg(long, value_enum, default_value = "text")]
    pub format: Style,
}

/// What the demo sells.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Scenario {
    /// The flash sale of DEMO-HOT, baskets of DEMO-CAP and DEMO-TEE, and
    /// the seats of DEMO-SHOW, all at once.
    Sale,
    /// Only the seats of DEMO-SHOW.
    Cinema,
}

pub async fn run(g: &Global, mut args: DemoArgs) -> anyhow::Result<ExitCode> {
    check_args(&mut args)?;
    let names = Names::new(g);
    let text = args.format == Style::Text;
    if text {
        names.print(args.partitions);
    }
    let kafka = g.kafka();
    let pool = crate::connect_archive(g, 2).await?;
    let pipeline = Pipeline::start(g, &names, args.partitions).await?;

    let mut builder = Ledger::builder()
        .kafka(kafka.clone())
        .topic(names.topic.clone())
        .decisions_from_redis(&g.redis_url, &names.prefix)
        .decision_timeout(demo::DECISION_WAIT);
    let guard = if args.sold_out_fast_path {
        let guard = SoldOutGuard::connect(&g.redis_url, &names.prefix).await?;
        builder = builder.sold_out_guard_from(guard.clone());
        Some(guard)
    } else {
        None
    };
    let ledger = builder.build().await?;
    let timeout = Duration::from_secs(args.timeout);
    let opens_at = open_sale(&ledger, &names.run_id, &args, timeout).await?;
    let sold = sell(&ledger, &names.run_id, &args).await?;
    let projection =
        stockledger_projection::Projection::connect(&g.redis_url, names.prefix.clone()).await?;
    let archived = demo::settle(&kafka, &pool, &projection, &names.topic, timeout).await?;
    let end_to_end = sold.started.elapsed();
    pipeline.stop().await?;

    let run = demo::Run {
        kafka: &kafka,
        pool: &pool,
        projection: &projection,
        topic: &names.topic,
        archived,
        baskets: &sold.baskets.ids,
        seats: (args.seats > 0).then_some(&sold.seats),
        opens_at,
    };
    let checks = demo::check_contract(&run, timeout).await?;
    let pass = checks.iter().all(|c| c.ok);
    if text {
        print_sale(&args, &sold, guard.as_ref(), archived, end_to_end);
        if args.orders > 0 {
            print_decisions(&pool, &names.topic).await?;
            print_stock(&projection).await?;
        }
        println!();
        for check in &checks {
            let mark = if check.ok { "PASS" } else { "FAIL" };
            println!("  {mark}  {}", check.what);
        }
    } else {
        print_json(&names, &args, &sold, archived, end_to_end, &checks);
    }
    Ok(if pass { Exit::Ok } else { Exit::Check }.into())
}

/// Refuses counts the sale cannot run with; a cinema sells seats alone.
fn check_args(args: &mut DemoArgs) -> anyhow::Result<()> {
    if args.scenario == Scenario::Cinema {
        anyhow::ensure!(
            args.seats > 0,
            "--scenario cinema needs --seats of at least 1"
        );
        (args.orders, args.baskets) = (0, 0);
    }
    anyhow::ensure!(args.buyers > 0, "--buyers must be at least 1");
    anyhow::ensure!(args.stock > 0, "--stock must be at least 1");
    Ok(())
}

/// What the buyers did, from the first order sent.
struct Sold {
    started: Instant,
    /// Until the last buyer had its answer.
    produced_in: Duration,
    shoppers: usize,
    parties: usize,
    sent: demo::Sent,
    baskets: demo::BasketsSent,
    seats: demo::SeatsSent,
}

/// The sale: the orders, baskets and seats bought at once.
async fn sell(ledger: &Ledger, run_id: &str, args: &DemoArgs) -> anyhow::Result<Sold> {
    let started = Instant::now();
    let shoppers = (args.buyers / 4).max(1);
    let orders = workload(args);
    let parties = args.seats * 2 / 3;
    let (sent, baskets, seats) = tokio::try_join!(
        demo::buy(ledger, &orders),
        demo::buy_baskets(
            ledger,
            run_id,
            args.baskets,
            shoppers,
            args.hold_ms,
            args.seed
        ),
        demo::buy_seats(
            ledger,
            run_id,
            (args.seats, parties, shoppers),
            args.hold_ms,
            args.seed
        )
    )?;
    Ok(Sold {
        started,
        produced_in: started.elapsed(),
        shoppers,
        parties,
        sent,
        baskets,
        seats,
    })
}

/// The run as one JSON object (`--format json`).
fn print_json(
    names: &Names,
    args: &DemoArgs,
    sold: &Sold,
    archived: i64,
    end_to_end: Duration,
    checks: &[demo::Check],
) {
    let (baskets, seats) = (&sold.baskets, &sold.seats);
    let pass = checks.iter().all(|c| c.ok);
    let checks: Vec<serde_json::Value> = checks
        .iter()
        .map(|c| serde_json::json!({ "pass": c.ok, "what": c.what }))
        .collect();
    let shown = serde_json::json!({
        "run": names.run_id, "topic": names.topic, "prefix": names.prefix,
        "records_sent": sold.sent.records + seats.records, "archived": archived,
        "baskets": {"held": baskets.held, "refused": baskets.refused, "paid": baskets.paid,
                    "failed": baskets.failed, "released": baskets.released,
                    "abandoned": baskets.abandoned},
        "seats": {"seats": args.seats, "parties": sold.parties, "held": seats.held,
                  "refused": seats.refused, "paid": seats.paid, "released": seats.released,
                  "abandoned": seats.abandoned, "sold": seats.sold.len()},
        "refused_not_open": sold.sent.not_open,
        "send_seconds": sold.produced_in.as_secs_f64(),
        "end_to_end_seconds": end_to_end.as_secs_f64(),
        "checks": checks, "pass": pass,
    });
    println!("{shown}");
}

/// What the buyers did and how long the log took, as text.
fn print_sale(
    args: &DemoArgs,
    sold: &Sold,
    guard: Option<&SoldOutGuard>,
    archived: i64,
    end_to_end: Duration,
) {
    let (baskets, seats, shoppers) = (&sold.baskets, &sold.seats, sold.shoppers);
    if args.orders > 0 {
        print_workload(args, &sold.sent, guard);
    }
    if args.baskets > 0 {
        println!(
            "  baskets  {} baskets of one {} and one {} ({shoppers} tasks, held {} ms): {} held, \
             {} refused, {} paid, {} failed at paying, {} released, {} abandoned",
            args.baskets,
            demo::BASKET_SKUS[0],
            demo::BASKET_SKUS[1],
            args.hold_ms,
            baskets.held,
            baskets.refused,
            baskets.paid,
            baskets.failed,
            baskets.released,
            baskets.abandoned
        );
    }
    if args.seats > 0 {
        println!(
            "  seats    {} parties of 1-4 for the {} seats of {} ({shoppers} tasks, held {} ms): \
             {} seated, {} refused (a seat taken), {} paid ({} seats sold), {} cancelled, {} abandoned",
            sold.parties,
            args.seats,
            demo::SHOW_SKU,
            args.hold_ms,
            seats.held,
            seats.refused,
            seats.paid,
            seats.sold.len(),
            seats.released,
            seats.abandoned
        );
    }
    let records = sold.sent.records + seats.records;
    let rate = (records as f64 / sold.produced_in.as_secs_f64()).round();
    println!(
        "  log      {records} records sent in {:.2} s ({rate}/s, each buyer waiting for its reservation's answer); \
         {archived} decided and archived, expiries included, in {:.2} s",
        sold.produced_in.as_secs_f64(),
        end_to_end.as_secs_f64(),
    );
    if cfg!(debug_assertions) {
        println!(
            "           (a debug build: its rates are not the ledger's; \
             `deploy/local/demo.sh --release` or the bench measure those)"
        );
    }
    println!();
}

/// The run's own topics and key prefix, so a demo never meets another's
/// records or keys.
struct Names {
    run_id: String,
    topic: String,
    outcomes_topic: String,
    dlq_topic: String,
    prefix: String,
}

impl Names {
    fn new(g: &Global) -> Self {
        let run_id = format!("demo-{}", &uuid::Uuid::new_v4().simple().to_string()[..8]);
        Self {
            topic: format!("{run_id}.{}", g.topic),
            outcomes_topic: format!("{run_id}.{}", g.outcomes_topic),
            dlq_topic: format!("{run_id}.{}", g.dlq_topic),
            prefix: format!("{}:{run_id}", g.prefix),
            run_id,
        }
    }

    fn print(&self, partitions: i32) {
        println!("stockledger demo {}", self.run_id);
        println!(
            "  topics   {}, {}, {} ({partitions} partitions)",
            self.topic, self.outcomes_topic, self.dlq_topic
        );
        println!("  redis    prefix {}", self.prefix);
    }
}

/// The applier and the archiver of the run, each in its own task.
struct Pipeline {
    stop_applier: oneshot::Sender<()>,
    stop_archiver: oneshot::Sender<()>,
    applier:
        JoinHandle<Result<stockledger_applier::ApplierStats, stockledger_applier::ApplierError>>,
    archiver: JoinHandle<
        Result<stockledger_archiver::ArchiverStats, stockledger_archiver::ArchiverError>,
    >,
}

impl Pipeline {
    /// Creates the run's topics and starts both services on them.
    async fn start(g: &Global, names: &Names, partitions: i32) -> anyhow::Result<Self> {
        let events = stockledger_kafka::admin::default_events_topic(&names.topic);
        let topics = LedgerTopics {
            commands: &names.topic,
            outcomes: &names.outcomes_topic,
            dead_letters: &names.dlq_topic,
            events: &events,
        };
        let specs = ledger_topic_specs(topics, partitions, 1, Retention::default());
        create_topics(&g.kafka(), &specs)
            .await
            .with_context(|| format!("creating topics on {}", g.brokers))?;

        let mut applier = crate::applier_config(g);
        applier.topic = names.topic.clone();
        applier.outcomes_topic = names.outcomes_topic.clone();
        applier.dlq_topic = names.dlq_topic.clone();
        applier.events_topic = None; // the run's: `<topic>.events`
        applier.prefix = names.prefix.clone();
        applier.group_id = format!("{}-applier", names.run_id);
        let mut archiver = crate::archiver_config(g);
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
/// `--opens-in`, its sale window, each awaited until the applier has taken
/// it. The window's opening, if it has one.
async fn open_sale(
    ledger: &Ledger,
    run_id: &str,
    args: &DemoArgs,
    timeout: Duration,
) -> anyhow::Result<Option<i64>> {
    let initial = AdjustmentId::new(format!("{run_id}-initial"))?;
    let restock = ledger
        .restock(&Sku::new(HOT_SKU)?, &initial, RestockMode::Set, args.stock)
        .await?;
    let decision = ledger
        .decision_within(&restock, timeout)
        .await
        .context("waiting for the applier to take the initial restock")?;
    anyhow::ensure!(
        decision.result == ResultCode::Applied,
        "initial restock: {decision:?}"
    );
    if args.baskets > 0 {
        let stocks = [args.baskets.div_ceil(3), args.baskets.div_ceil(4)];
        for (sku, stock) in demo::BASKET_SKUS.into_iter().zip(stocks) {
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
    let hall: Vec<String> = (0..args.seats).map(demo::seat_name).collect();
    for (k, row) in hall.chunks(MAX_UNITS_PER_RESTOCK).enumerate() {
        let adjustment = AdjustmentId::new(format!("{run_id}-hall-{k}"))?;
        let units = (row.iter().map(UnitId::new)).collect::<Result<Vec<_>, _>>()?;
        let restock = ledger
            .add_units(&Sku::new(demo::SHOW_SKU)?, &adjustment, &units)
            .await?;
        let decision = ledger.decision_within(&restock, timeout).await?;
        anyhow::ensure!(
            decision.result == ResultCode::Applied,
            "{} seats: {decision:?}",
            demo::SHOW_SKU
        );
    }
    let per_user = Quantity::new(args.limit_per_user)?;
    let limit = ledger.limit(&Sku::new(HOT_SKU)?, Some(per_user)).await?;
    let decision = ledger.decision_within(&limit, timeout).await?;
    anyhow::ensure!(
        decision.result == ResultCode::Applied,
        "per-user limit: {decision:?}"
    );
    if args.opens_in == 0 || args.orders == 0 {
        return Ok(None);
    }
    let opens = SystemTime::now() + Duration::from_secs(args.opens_in);
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

fn workload(args: &DemoArgs) -> Workload {
    Workload {
        orders: args.orders,
        buyers: args.buyers,
        hold_ms: args.hold_ms,
        cancel_percent: args.cancel_percent,
        abandon_percent: args.abandon_percent,
        refund_percent: args.refund_percent,
        duplicate_percent: args.duplicate_percent,
        early_rollback_percent: args.early_rollback_percent,
        seed: args.seed,
    }
}

fn print_workload(args: &DemoArgs, sent: &demo::Sent, guard: Option<&SoldOutGuard>) {
    println!(
        "  workload {} orders of {} users ({} tasks) on {HOT_SKU} ({} units, {} per user, held {} ms): \
         {} reserved, {} paid, {} cancelled, {} abandoned, {} refunded, {} sent twice, \
         {} rolled back before their reservation",
        args.orders,
        args.orders.div_ceil(2),
        args.buyers,
        args.stock,
        args.limit_per_user,
        args.hold_ms,
        sent.reserved,
        sent.paid,
        sent.cancelled,
        sent.abandoned,
        sent.refunded,
        sent.duplicated,
        sent.early_rollbacks
    );
    if args.opens_in > 0 {
        println!(
            "  the sale opened {} s after it was set up: {} reservations came early and were \
             refused REJECTED_NOT_OPEN; their buyers sent them again",
            args.opens_in, sent.not_open
        );
    }
    if let Some(guard) = guard {
        println!(
            "  sold-out fast path: {} reservations refused in the producer, never logged",
            guard.refused()
        );
    }
}

/// What became of the orders, one line per kind of decision, read back
/// from the analysts' archive.
const DECISIONS: [(&str, &str, ResultCode); 11] = [
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

async fn print_decisions(pool: &PgPool, topic: &str) -> anyhow::Result<()> {
    let by_result = query::count_by_result(pool, topic).await?;
    let counts = query::count_by_command_and_result(pool, topic, HOT_SKU).await?;
    for (label, command, result) in DECISIONS {
        let n: i64 = counts
            .iter()
            .filter(|(c, r, _)| c.as_deref() == Some(command) && r == result.as_str())
            .map(|(_, _, n)| n)
            .sum();
        println!("  {label:<40} {n:>6}");
    }
    println!(
        "  rows by result: {}",
        by_result
            .iter()
            .map(|(r, n)| format!("{r}={n}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    Ok(())
}

async fn print_stock(projection: &Projection) -> anyhow::Result<()> {
    match projection.read_sku(HOT_SKU).await? {
        Some(s) => println!(
            "  stock left {} of {} ({} sold, {} still held)",
            s.available,
            s.total,
            s.sold(),
            s.reserved
        ),
        None => println!("  stock left: no state in Redis"),
    }
    Ok(())
}
