//! `stockledger status`: how far the applier and the archiver are behind
//! the log, what the projection has folded, the holds waiting for the
//! expirer, the dead letters, and which service does not answer.
//!
//! Each service is asked on its own, within [`ASK_WITHIN`], so one that is
//! down leaves the others' figures in the report. The exit code says what
//! an operator's script needs: healthy, lagging or a service unreachable.

use std::process::ExitCode;

use clap::{Args as ClapArgs, ValueEnum};
use stockledger_core::report::{printable, Chain};
use stockledger_projection::Projection;
use stockledger_status::{Limits, Names, Report, State};

use super::ApplierGroup;
use crate::exit::Exit;
use crate::Global;

#[derive(Debug, ClapArgs)]
#[command(after_help = "Examples:
  stockledger status
  stockledger status --format json --max-lag 10000 || alert \"ledger exit $?\"

Exit codes: 0 healthy, 3 lagging (a partition beyond --max-lag, or a hold
overdue beyond --max-hold-overdue-ms) or stalled (the oldest record the
applier or the archiver has not taken waiting beyond --max-wait-ms: it is
not advancing, and its log says why), 69 a service unreachable, 4 a
ledger topic missing; the rest as `stockledger --help` lists them.")]
pub struct Args {
    #[command(flatten)]
    pub judged: Judged,
    /// A table for people, or one JSON document for scripts.
    #[arg(long, value_enum, default_value = "table")]
    pub format: StatusFormat,
}

/// The groups whose progress the status reports: for `status`, and for
/// `serve`'s console.
#[derive(Debug, ClapArgs)]
pub struct Groups {
    #[command(flatten)]
    pub applier: ApplierGroup,
    /// Consumer group of the archivers.
    #[arg(
        long,
        env = "STOCKLEDGER_ARCHIVER_GROUP",
        default_value = stockledger_kafka::names::ARCHIVER_GROUP
    )]
    pub archiver_group: String,
}

impl Groups {
    pub fn names(&self, g: &Global) -> Names {
        Names {
            topic: g.topic.clone(),
            outcomes_topic: g.outcomes_topic.clone(),
            dlq_topic: g.dlq_topic.clone(),
            prefix: g.prefix.clone(),
            applier_group: self.applier.applier_group.clone(),
            archiver_group: self.archiver_group.clone(),
        }
    }
}

/// Where the services' progress is kept, and what counts as behind.
#[derive(Debug, ClapArgs)]
pub struct Judged {
    #[command(flatten)]
    pub groups: Groups,
    /// Records a partition may be behind its log end and still count as
    /// healthy (for the applier on the command topic, for the archiver on
    /// the outcomes topic).
    #[arg(long, default_value_t = Limits::default().max_lag)]
    pub max_lag: i64,
    /// Milliseconds a hold may stay past its deadline before the expirer
    /// counts as behind (it looks every few seconds).
    #[arg(long, default_value_t = Limits::default().max_hold_overdue_ms)]
    pub max_hold_overdue_ms: i64,
    /// Milliseconds the oldest record the applier has not applied, or the
    /// archiver not archived, may have waited in the log before that
    /// service counts as stalled: a small lag that never shrinks is a
    /// service that stopped advancing.
    #[arg(long, default_value_t = Limits::default().max_wait_ms)]
    pub max_wait_ms: i64,
}

impl Judged {
    /// The limits, with `status`'s time for each service to answer.
    pub fn limits(&self) -> Limits {
        Limits {
            max_lag: self.max_lag,
            max_hold_overdue_ms: self.max_hold_overdue_ms,
            max_wait_ms: self.max_wait_ms,
            ..Limits::default()
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum StatusFormat {
    Table,
    Json,
}

pub async fn run(g: &Global, args: Args) -> anyhow::Result<ExitCode> {
    let names = args.judged.groups.names(g);
    let limits = args.judged.limits();
    let connect = tokio::time::timeout(
        limits.ask_within,
        Projection::connect(&g.redis_url, g.prefix.clone()),
    );
    let projection = match connect.await {
        Ok(Ok(projection)) => Ok(projection),
        Ok(Err(e)) => Err(format!("{}", Chain(&e))),
        Err(_) => Err(format!("no answer within {:?}", limits.ask_within)),
    };
    // Lazy: PostgreSQL away is the report's to say, not an error here.
    let archive = crate::analyst_pool(g, 1)?;
    let report = stockledger_status::gather(
        &g.kafka(),
        projection.as_ref().map_err(Clone::clone),
        &archive,
        &names,
        &limits,
    )
    .await;
    match args.format {
        StatusFormat::Json => println!("{}", serde_json::to_string_pretty(&report)?),
        StatusFormat::Table => print_table(&report),
    }
    Ok(match report.state {
        State::Healthy => ExitCode::SUCCESS,
        State::Lagging | State::Stalled => Exit::Check.into(),
        State::Unreachable => Exit::Unavailable.into(),
        State::TopicsMissing => Exit::NotFound.into(),
    })
}

fn print_table(report: &Report) {
    println!(
        "stockledger status: {} (topic {}, Redis prefix {})",
        report.state, report.topic, report.prefix
    );
    for problem in &report.problems {
        println!("  {problem}");
    }
    for (name, reach) in [
        ("kafka", &report.kafka),
        ("redis", &report.redis),
        ("postgres", &report.postgres),
    ] {
        // Why is among the problems above.
        match reach.reachable {
            true => println!("  {name:<9} reachable"),
            false => println!("  {name:<9} UNREACHABLE"),
        }
    }
    print_partitions(report);
    print_recent(report);
}

fn cell(v: Option<i64>) -> String {
    v.map_or("-".to_owned(), |v| v.to_string())
}

/// Each partition's figures, for the command and the outcomes topic.
fn print_partitions(report: &Report) {
    let rows: Vec<Vec<serde_json::Value>> = report
        .commands
        .iter()
        .map(|c| {
            vec![
                c.partition.into(),
                c.log_end.into(),
                cell(c.applier_committed).into(),
                c.applier_lag.into(),
                cell(c.applier_waiting_ms).into(),
                cell(c.projection_applied).into(),
                c.holds.map_or("-".to_owned(), |n| n.to_string()).into(),
                cell(c.hold_overdue_ms).into(),
            ]
        })
        .collect();
    println!();
    super::table::print(
        super::table::Format::Table,
        &[
            "partition",
            "log end",
            "applier at",
            "lag",
            "waiting ms",
            "folded to",
            "holds",
            "overdue ms",
        ],
        &rows,
    );
    let rows: Vec<Vec<serde_json::Value>> = report
        .outcomes
        .iter()
        .map(|o| {
            vec![
                o.partition.into(),
                o.log_end.into(),
                cell(o.archiver_committed).into(),
                o.archiver_lag.into(),
                cell(o.archiver_waiting_ms).into(),
            ]
        })
        .collect();
    println!();
    super::table::print(
        super::table::Format::Table,
        &[
            "outcomes partition",
            "log end",
            "archiver at",
            "lag",
            "waiting ms",
        ],
        &rows,
    );
}

/// The last minute's decisions and the dead letters.
fn print_recent(report: &Report) {
    println!();
    match &report.decisions_last_minute {
        Some(counts) => {
            let counts: Vec<String> = counts
                .iter()
                .map(|c| format!("{} {}", c.result, c.count))
                .collect();
            println!(
                "  decided in the last minute (archived): {}",
                match counts.is_empty() {
                    true => "none".to_owned(),
                    false => counts.join(", "),
                }
            );
        }
        None => println!("  decided in the last minute: - (PostgreSQL did not answer)"),
    }
    println!("  dead letters kept: {}", cell(report.dead_letters));
    for d in &report.newest_dead_letters {
        println!(
            "    {}@{} {} from {}: {}",
            d.partition,
            d.offset,
            d.time.as_deref().unwrap_or("-"),
            d.source.as_deref().unwrap_or("-"),
            printable(d.reason.as_deref().unwrap_or("-"))
        );
    }
}
