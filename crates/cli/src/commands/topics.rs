//! `stockledger topics create`: the command, outcomes, dead-letter and stock
//! events topics.

use std::process::ExitCode;

use clap::Subcommand;
use stockledger_kafka::admin::{
    create_topics, ledger_topic_specs, min_insync_replicas, LedgerTopics, Retention, TopicSpec,
};

use super::table::Style;
use crate::Global;

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Create the command, outcomes, dead-letter and stock events topics (existing ones are
    /// kept as they are). The command topic keeps every record
    /// (retention.ms=-1, retention.bytes=-1); min.insync.replicas is a
    /// majority of the replication factor.
    #[command(after_help = "Examples:
  stockledger topics create
  stockledger topics create --partitions 24 --replication 3 --format json")]
    Create {
        /// Partitions of the command and outcomes topics.
        #[arg(long, env = "STOCKLEDGER_PARTITIONS", default_value_t = 12)]
        partitions: i32,
        /// Replication factor.
        #[arg(long, env = "STOCKLEDGER_REPLICATION", default_value_t = 1)]
        replication: i32,
        /// retention.ms of the outcomes topic (-1: forever). Waiters read
        /// outcomes within seconds and the archive keeps them for good.
        #[arg(
            long,
            env = "STOCKLEDGER_OUTCOMES_RETENTION_MS",
            default_value_t = Retention::default().outcomes_ms,
            allow_negative_numbers = true,
            value_parser = clap::value_parser!(i64).range(-1..)
        )]
        outcomes_retention_ms: i64,
        /// retention.ms of the dead-letter topic (-1: forever).
        #[arg(
            long,
            env = "STOCKLEDGER_DLQ_RETENTION_MS",
            default_value_t = Retention::default().dead_letters_ms,
            allow_negative_numbers = true,
            value_parser = clap::value_parser!(i64).range(-1..)
        )]
        dlq_retention_ms: i64,
        /// Lines for people, or one JSON object for scripts.
        #[arg(long, value_enum, default_value = "text")]
        format: Style,
    },
}

pub async fn run(g: &Global, command: Command) -> anyhow::Result<ExitCode> {
    let Command::Create {
        partitions,
        replication,
        outcomes_retention_ms,
        dlq_retention_ms,
        format,
    } = command;
    anyhow::ensure!(
        partitions >= 1,
        "--partitions: must be at least 1, got {partitions}"
    );
    anyhow::ensure!(
        replication >= 1,
        "--replication: must be at least 1, got {replication}"
    );
    let events = g.events_topic();
    let topics = LedgerTopics {
        commands: &g.topic,
        outcomes: &g.outcomes_topic,
        dead_letters: &g.dlq_topic,
        events: &events,
    };
    let retention = Retention {
        outcomes_ms: outcomes_retention_ms,
        dead_letters_ms: dlq_retention_ms,
    };
    let specs = ledger_topic_specs(topics, partitions, replication, retention);
    let created = create_topics(&g.kafka(), &specs).await?;
    if format == Style::Json {
        print_json(&specs, &created, replication);
    } else {
        print_text(&specs, &created, replication);
    }
    Ok(ExitCode::SUCCESS)
}

/// The topics as one JSON object.
fn print_json(specs: &[TopicSpec], created: &[String], replication: i32) {
    let topics: Vec<serde_json::Value> = specs
        .iter()
        .map(|s| {
            let configs: serde_json::Map<String, serde_json::Value> = s
                .configs
                .iter()
                .map(|(k, v)| (k.clone(), v.clone().into()))
                .collect();
            serde_json::json!({
                "topic": s.name, "created": created.contains(&s.name),
                "partitions": s.partitions, "configs": configs,
            })
        })
        .collect();
    let shown = serde_json::json!({
        "topics": topics, "replication": replication,
        "min_insync_replicas": min_insync_replicas(replication),
    });
    println!("{shown}");
}

/// The topics, a line each, as text.
fn print_text(specs: &[TopicSpec], created: &[String], replication: i32) {
    for spec in specs {
        let state = if created.contains(&spec.name) {
            "created"
        } else {
            "exists"
        };
        let retention = spec
            .configs
            .iter()
            .find(|(k, _)| k == "retention.ms")
            .map_or("", |(_, v)| v.as_str());
        let retention = if retention == "-1" {
            "kept forever".to_owned()
        } else {
            format!("retention.ms={retention}")
        };
        println!(
            "{state:8} {} ({} partitions, {retention})",
            spec.name, spec.partitions
        );
    }
    println!(
        "replication {replication}, min.insync.replicas {}",
        min_insync_replicas(replication)
    );
    if created.len() < specs.len() {
        println!("existing topics keep their configuration; `apply` checks the command topic's");
    }
}
