//! `stockledger demo`: the demo's sale (`stockledger_demo`) through the
//! whole pipeline, in one process, against the configured services, ending
//! with the contract's checks; this prints what it reports.

use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use stockledger_demo::{Names, Report, Sale, Services, Workload, BASKET_SKUS, HOT_SKU, SHOW_SKU};

use super::table::Style;
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
    let sale = sale(&args);
    sale.check()?;
    let names = Names::fresh(&g.topic, &g.outcomes_topic, &g.dlq_topic, &g.prefix);
    let text = args.format == Style::Text;
    if text {
        print_names(&names, args.partitions);
    }
    let services = Services {
        kafka: g.kafka(),
        redis_url: g.redis_url.clone(),
        pool: crate::connect_archive(g, 2).await?,
        applier: crate::applier_config(g),
        archiver: crate::archiver_config(g),
    };
    let report = stockledger_demo::run(services, &names, &sale).await?;
    if text {
        print_sale(&args, &sale, &report);
        if args.orders > 0 {
            print_decisions(&report);
        }
        println!();
        for check in &report.checks {
            let mark = if check.ok { "PASS" } else { "FAIL" };
            println!("  {mark}  {}", check.what);
        }
    } else {
        print_json(&names, &args, &sale, &report);
    }
    Ok(if report.passed() {
        Exit::Ok
    } else {
        Exit::Check
    }
    .into())
}

/// A cinema sells seats alone, and needs some; the sale's own counts are
/// checked by [`Sale::check`].
fn check_args(args: &mut DemoArgs) -> anyhow::Result<()> {
    if args.scenario == Scenario::Cinema {
        anyhow::ensure!(
            args.seats > 0,
            "--scenario cinema needs --seats of at least 1"
        );
        (args.orders, args.baskets) = (0, 0);
    }
    Ok(())
}

fn sale(args: &DemoArgs) -> Sale {
    Sale {
        workload: Workload {
            orders: args.orders,
            buyers: args.buyers,
            hold_ms: args.hold_ms,
            cancel_percent: args.cancel_percent,
            abandon_percent: args.abandon_percent,
            refund_percent: args.refund_percent,
            duplicate_percent: args.duplicate_percent,
            early_rollback_percent: args.early_rollback_percent,
            seed: args.seed,
        },
        stock: args.stock,
        limit_per_user: args.limit_per_user,
        baskets: args.baskets,
        seats: args.seats,
        sold_out_fast_path: args.sold_out_fast_path,
        opens_in: args.opens_in,
        partitions: args.partitions,
        timeout: Duration::from_secs(args.timeout),
    }
}

fn print_names(names: &Names, partitions: i32) {
    println!("stockledger demo {}", names.run_id);
    println!(
        "  topics   {}, {}, {} ({partitions} partitions)",
        names.topic, names.outcomes_topic, names.dlq_topic
    );
    println!("  redis    prefix {}", names.prefix);
}

/// The run as one JSON object (`--format json`).
fn print_json(names: &Names, args: &DemoArgs, sale: &Sale, report: &Report) {
    let (sold, baskets, seats) = (&report.sold, &report.sold.baskets, &report.sold.seats);
    let checks: Vec<serde_json::Value> = (report.checks.iter())
        .map(|c| serde_json::json!({ "pass": c.ok, "what": c.what }))
        .collect();
    let shown = serde_json::json!({
        "run": names.run_id, "topic": names.topic, "prefix": names.prefix,
        "records_sent": sold.records(), "archived": report.archived,
        "baskets": {"held": baskets.held, "refused": baskets.refused, "paid": baskets.paid,
                    "failed": baskets.failed, "released": baskets.released,
                    "abandoned": baskets.abandoned},
        "seats": {"seats": args.seats, "parties": sale.parties(), "held": seats.held,
                  "refused": seats.refused, "paid": seats.paid, "released": seats.released,
                  "abandoned": seats.abandoned, "sold": seats.sold.len()},
        "refused_not_open": sold.sent.not_open,
        "send_seconds": sold.produced_in.as_secs_f64(),
        "end_to_end_seconds": report.end_to_end.as_secs_f64(),
        "checks": checks, "pass": report.passed(),
    });
    println!("{shown}");
}

/// What the buyers did and how long the log took, as text.
fn print_sale(args: &DemoArgs, sale: &Sale, report: &Report) {
    let sold = &report.sold;
    let (baskets, seats, shoppers) = (&sold.baskets, &sold.seats, sale.shoppers());
    if args.orders > 0 {
        print_workload(args, report);
    }
    if args.baskets > 0 {
        println!(
            "  baskets  {} baskets of one {} and one {} ({shoppers} tasks, held {} ms): {} held, \
             {} refused, {} paid, {} failed at paying, {} released, {} abandoned",
            args.baskets,
            BASKET_SKUS[0],
            BASKET_SKUS[1],
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
            "  seats    {} parties of 1-4 for the {} seats of {SHOW_SKU} ({shoppers} tasks, held {} ms): \
             {} seated, {} refused (a seat taken), {} paid ({} seats sold), {} cancelled, {} abandoned",
            sale.parties(),
            args.seats,
            args.hold_ms,
            seats.held,
            seats.refused,
            seats.paid,
            seats.sold.len(),
            seats.released,
            seats.abandoned
        );
    }
    let records = sold.records();
    let rate = (records as f64 / sold.produced_in.as_secs_f64()).round();
    println!(
        "  log      {records} records sent in {:.2} s ({rate}/s, each buyer waiting for its reservation's answer); \
         {} decided and archived, expiries included, in {:.2} s",
        sold.produced_in.as_secs_f64(),
        report.archived,
        report.end_to_end.as_secs_f64(),
    );
    if cfg!(debug_assertions) {
        println!(
            "           (a debug build: its rates are not the ledger's; \
             `deploy/local/demo.sh --release` or the bench measure those)"
        );
    }
    println!();
}

fn print_workload(args: &DemoArgs, report: &Report) {
    let sent = &report.sold.sent;
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
    if let Some(refused) = report.refused_in_producer {
        println!(
            "  sold-out fast path: {refused} reservations refused in the producer, never logged"
        );
    }
}

/// What became of the orders, one line per kind of decision, and the
/// stock left.
fn print_decisions(report: &Report) {
    for tally in &report.decisions {
        println!("  {:<40} {:>6}", tally.label, tally.count);
    }
    println!(
        "  rows by result: {}",
        (report.by_result.iter())
            .map(|(r, n)| format!("{r}={n}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    match &report.stock {
        Some(s) => println!(
            "  stock left {} of {} ({} sold, {} still held)",
            s.available,
            s.total,
            s.sold(),
            s.reserved
        ),
        None => println!("  stock left: no state in Redis"),
    }
}
