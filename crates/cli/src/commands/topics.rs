//! `stockledger topics create`: the command, outcomes and dead-letter topics.

use std::process::ExitCode;

use clap::Subcommand;
use stockledger_io::admin::{create_topics, TopicSpec};

use crate::Global;

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Create the command, outcomes and dead-letter topics (existing ones are kept).
    Create {
        /// Partitions of the command and outcomes topics.
        #[arg(long, env = "STOCKLEDGER_PARTITIONS", default_value_t = 12)]
        partitions: i32,
        /// Replication factor.
        #[arg(long, env = "STOCKLEDGER_REPLICATION", default_value_t = 1)]
        replication: i32,
    },
}

pub async fn run(g: &Global, command: Command) -> anyhow::Result<ExitCode> {
    let Command::Create {
        partitions,
        replication,
    } = command;
    let specs = [
        (&g.topic, partitions),
        (&g.outcomes_topic, partitions),
        (&g.dlq_topic, 1),
    ]
    .map(|(name, partitions)| TopicSpec {
        name: name.clone(),
        partitions,
        replication,
    });
    let created = create_topics(&g.kafka(), &specs).await?;
    for spec in &specs {
        let state = if created.contains(&spec.name) {
            "created"
        } else {
            "exists"
        };
        println!("{state:8} {} ({} partitions)", spec.name, spec.partitions);
    }
    Ok(ExitCode::SUCCESS)
}
