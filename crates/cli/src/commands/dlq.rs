//! `stockledger dlq`: the records the applier dead-lettered, each with
//! where it came from and why, one of them decoded as far as it goes, and
//! sending them back once what refused them is fixed.

use std::process::ExitCode;
use std::time::Duration;

use clap::{Args as ClapArgs, Subcommand};
use serde_json::{json, Value};
use stockledger_analysts::query::format_instant;
use stockledger_kafka::names::{DLQ_REASON_HEADER, DLQ_SOURCE_HEADER};
use stockledger_kafka::topic::{read_at, read_topic, LogRecord};
use stockledger_maintenance::redrive::{self, RedriveConfig, Verdict};
use stockledger_projection::Projection;

use super::table::{self, Format};
use crate::exit::{fail, Exit};
use crate::progress::Progress;
use crate::Global;

/// How long reading the dead-letter topic may take.
const READ_WITHIN: Duration = Duration::from_secs(60);

#[derive(Debug, Subcommand)]
pub enum Command {
    /// List dead letters, newest last: where each came from, when, and why.
    #[command(after_help = "Examples:
  stockledger dlq list
  stockledger dlq list --limit 20 --format json | jq .reason")]
    List(ListArgs),
    /// Show one dead letter: its headers, and its payload decoded as far as it goes.
    #[command(after_help = "Examples:
  stockledger dlq show 0 41
  stockledger dlq show 0 41 --format json")]
    Show(ShowArgs),
    /// Send dead letters back to the command topic once what refused them
    /// is fixed: each is judged as the applier would judge it; one still
    /// invalid stays (exit 65, with why), one sent back before is skipped.
    #[command(after_help = "Examples:
  stockledger dlq redrive --all --dry-run
  stockledger dlq redrive --partition 0 --from 40 --to 45
  stockledger dlq redrive --reason-contains murmur2 --format json")]
    Redrive(RedriveArgs),
}

#[derive(Debug, ClapArgs)]
#[command(group(clap::ArgGroup::new("which").required(true).multiple(true)
    .args(["all", "partition", "reason_contains"])))]
pub struct RedriveArgs {
    /// Every dead letter.
    #[arg(long)]
    pub all: bool,
    /// Dead letters on this partition of the dead-letter topic.
    #[arg(long)]
    pub partition: Option<i32>,
    /// With --partition: from this offset (inclusive).
    #[arg(long, requires = "partition")]
    pub from: Option<i64>,
    /// With --partition: up to this offset (inclusive).
    #[arg(long, requires = "partition")]
    pub to: Option<i64>,
    /// Dead letters whose reason contains this text.
    #[arg(long, value_name = "TEXT")]
    pub reason_contains: Option<String>,
    /// Say what would happen to each; send nothing.
    #[arg(long)]
    pub dry_run: bool,
    #[arg(long, value_enum, default_value = "table")]
    pub format: Format,
}

#[derive(Debug, ClapArgs)]
pub struct ListArgs {
    /// Show the newest N dead letters only.
    #[arg(long)]
    pub limit: Option<usize>,
    #[arg(long, value_enum, default_value = "table")]
    pub format: Format,
}

#[derive(Debug, ClapArgs)]
pub struct ShowArgs {
    /// Partition of the dead-letter topic.
    pub partition: i32,
    /// Offset in that partition (`dlq list` shows both).
    pub offset: i64,
    /// Key-value lines for people, or one JSON object.
    #[arg(long, value_enum, default_value = "lines")]
    pub format: ShowFormat,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ShowFormat {
    Lines,
    Json,
}

pub async fn run(g: &Global, command: Command) -> anyhow::Result<ExitCode> {
    match command {
        Command::List(args) => list(g, args).await,
        Command::Show(args) => show(g, args).await,
        Command::Redrive(args) => redrive(g, args).await,
    }
}

async fn list(g: &Global, args: ListArgs) -> anyhow::Result<ExitCode> {
    let mut records = read_topic(&g.kafka(), &g.dlq_topic, READ_WITHIN).await?;
    records.sort_by_key(|r| (r.timestamp, r.partition, r.offset));
    let skip = args
        .limit
        .map_or(0, |limit| records.len().saturating_sub(limit));
    let rows: Vec<Vec<Value>> = records[skip..]
        .iter()
        .map(|r| {
            vec![
                r.partition.into(),
                r.offset.into(),
                r.timestamp.map(format_instant).into(),
                r.header(DLQ_SOURCE_HEADER).into(),
                key(r).into(),
                r.header(DLQ_REASON_HEADER).into(),
            ]
        })
        .collect();
    table::print(
        args.format,
        &["partition", "offset", "time", "source", "key", "reason"],
        &rows,
    );
    if args.format == Format::Table {
        println!("{} dead letters in {}", records.len(), g.dlq_topic);
    }
    Ok(ExitCode::SUCCESS)
}

async fn show(g: &Global, args: ShowArgs) -> anyhow::Result<ExitCode> {
    let Some(record) = read_at(
        &g.kafka(),
        &g.dlq_topic,
        args.partition,
        args.offset,
        READ_WITHIN,
    )
    .await?
    else {
        return Err(fail(
            Exit::NotFound,
            format!(
                "no dead letter at partition {} offset {} of {} (`stockledger dlq list` shows them)",
                args.partition, args.offset, g.dlq_topic
            ),
        ));
    };
    let payload = record.payload.as_deref().unwrap_or_default();
    let decoded = match stockledger_core::codec::decode_command(payload) {
        Ok(command) => json!({ "command": format!("{command:?}") }),
        Err(e) => json!({ "error": e.to_string() }),
    };
    let headers: serde_json::Map<String, Value> = record
        .headers
        .iter()
        .map(|(k, v)| (k.clone(), String::from_utf8_lossy(v).into_owned().into()))
        .collect();
    let shown = json!({
        "partition": record.partition,
        "offset": record.offset,
        "time": record.timestamp.map(format_instant),
        "key": key(&record),
        "headers": headers,
        "payload_bytes": payload.len(),
        "payload_hex": hex(&payload[..payload.len().min(64)]),
        "decoded": decoded,
    });
    if args.format == ShowFormat::Lines {
        for (field, value) in shown.as_object().into_iter().flatten() {
            println!("{field:<14} {}", table::text(value));
        }
    } else {
        println!("{shown}");
    }
    Ok(ExitCode::SUCCESS)
}

async fn redrive(g: &Global, args: RedriveArgs) -> anyhow::Result<ExitCode> {
    let mut records = read_topic(&g.kafka(), &g.dlq_topic, READ_WITHIN).await?;
    records.retain(|r| {
        args.partition.is_none_or(|p| r.partition == p)
            && args.from.is_none_or(|o| r.offset >= o)
            && args.to.is_none_or(|o| r.offset <= o)
            && args.reason_contains.as_deref().is_none_or(|text| {
                r.header(DLQ_REASON_HEADER)
                    .is_some_and(|reason| reason.contains(text))
            })
    });
    records.sort_by_key(|r| (r.timestamp, r.partition, r.offset));
    if records.is_empty() {
        return Err(fail(
            Exit::NotFound,
            format!("no dead letter in {} matches", g.dlq_topic),
        ));
    }
    let projection = Projection::connect(&g.redis_url, g.prefix.clone()).await?;
    let config = RedriveConfig {
        kafka: g.kafka(),
        dlq_topic: g.dlq_topic.clone(),
        command_topic: g.topic.clone(),
        dry_run: args.dry_run,
    };
    let what = format!("re-drive {} to {}", g.dlq_topic, g.topic);
    let mut progress = Progress::new(what, "dead letters", Some(records.len() as u64));
    let verdicts =
        redrive::redrive(&config, &projection, &records, |done| progress.set(done)).await?;
    progress.finish();
    table::print(
        args.format,
        &["partition", "offset", "key", "verdict", "detail"],
        &verdict_rows(&records, &verdicts),
    );
    let invalid = verdicts
        .iter()
        .filter(|v| matches!(v, Verdict::StillInvalid(_)))
        .count();
    if args.format == Format::Table {
        let sent = verdicts
            .iter()
            .filter(|v| matches!(v, Verdict::Redriven(_)))
            .count();
        println!(
            "{} dead letters: {sent} re-driven to {}, {invalid} still invalid{}",
            verdicts.len(),
            g.topic,
            if args.dry_run {
                " (dry run: nothing sent)"
            } else {
                ""
            }
        );
    }
    Ok(if invalid > 0 {
        Exit::DataError
    } else {
        Exit::Ok
    }
    .into())
}

/// A row per dead letter: where it is, its key, and what became of it.
fn verdict_rows(records: &[LogRecord], verdicts: &[Verdict]) -> Vec<Vec<Value>> {
    records
        .iter()
        .zip(verdicts)
        .map(|(r, v)| {
            let (verdict, detail) = match v {
                Verdict::Redriven(to) => ("re-driven", to.to_string()),
                Verdict::WouldRedrive => ("would re-drive", String::new()),
                Verdict::AlreadyRedriven(to) => ("already re-driven", to.clone()),
                Verdict::StillInvalid(why) => ("still invalid", why.clone()),
                _ => ("?", String::new()),
            };
            vec![
                r.partition.into(),
                r.offset.into(),
                key(r).into(),
                verdict.into(),
                detail.into(),
            ]
        })
        .collect()
}

/// A header of `record` as text, if it has it.
fn key(record: &LogRecord) -> Option<String> {
    record
        .key
        .as_deref()
        .map(|k| String::from_utf8_lossy(k).into_owned())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
