//! `stockledger dlq`: the records the applier dead-lettered, each with
//! where it came from and why, and one of them decoded as far as it goes.

use std::process::ExitCode;
use std::time::Duration;

use clap::{Args as ClapArgs, Subcommand};
use serde_json::{json, Value};
use stockledger_analysts::query::format_instant;
use stockledger_applier::applier::{DLQ_REASON_HEADER, DLQ_SOURCE_HEADER};
use stockledger_kafka::topic::{read_at, read_topic, LogRecord};

use super::table::{self, Format};
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
                header(r, DLQ_SOURCE_HEADER).into(),
                key(r).into(),
                header(r, DLQ_REASON_HEADER).into(),
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
        anyhow::bail!(
            "no dead letter at partition {} offset {} of {} (`stockledger dlq list` shows them)",
            args.partition,
            args.offset,
            g.dlq_topic
        );
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

/// A header of `record` as text, if it has it.
fn header(record: &LogRecord, name: &str) -> Option<String> {
    record
        .headers
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| String::from_utf8_lossy(v).into_owned())
}

fn key(record: &LogRecord) -> Option<String> {
    record
        .key
        .as_deref()
        .map(|k| String::from_utf8_lossy(k).into_owned())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
