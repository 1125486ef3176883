//! `stockledger repartition`: copy the command log into a new topic with
//! another partition count, each record on its SKU's home partition there.

use std::process::ExitCode;

use clap::Args as ClapArgs;
use stockledger_maintenance::repartition::{repartition, RepartitionConfig};

use super::table::Style;
use crate::exit::Exit;
use crate::progress::Progress;
use crate::{shutdown_signal, Global};

#[derive(Debug, ClapArgs)]
pub struct Args {
    /// The new command topic; it must not exist (or be empty).
    #[arg(long, value_name = "NEW_TOPIC")]
    pub to: String,
    /// Partitions of the new topic.
    #[arg(long)]
    pub partitions: i32,
    /// Replication factor of the new topic.
    #[arg(long, env = "STOCKLEDGER_REPLICATION", default_value_t = 1)]
    pub replication: i32,
    /// Sentences for people, or one JSON object for scripts.
    #[arg(long, value_enum, default_value = "text")]
    pub format: Style,
}

pub async fn run(g: &Global, args: Args) -> anyhow::Result<ExitCode> {
    let config = RepartitionConfig {
        kafka: g.kafka(),
        from: g.topic.clone(),
        to: args.to.clone(),
        partitions: args.partitions,
        replication: args.replication,
    };
    let mut progress = Progress::new(
        format!("copy {} to {}", g.topic, args.to),
        "records",
        Some(0),
    );
    let report = repartition(config, shutdown_signal(), |done, total| {
        progress.set_total(total);
        progress.set(done);
    })
    .await?;
    progress.finish();
    if args.format == Style::Json {
        println!(
            "{}",
            serde_json::json!({
                "from": g.topic, "to": args.to, "records": report.records,
                "source_partitions": report.source_partitions,
                "per_partition": report.per_partition, "interrupted": report.interrupted,
            })
        );
        return Ok(if report.interrupted {
            Exit::Interrupted
        } else {
            Exit::Ok
        }
        .into());
    }
    println!(
        "copied {} records from {} ({} partitions) to {} ({} partitions)",
        report.records,
        g.topic,
        report.source_partitions,
        args.to,
        report.per_partition.len()
    );
    if report.interrupted {
        println!("interrupted before the end; {} is incomplete", args.to);
        return Ok(Exit::Interrupted.into());
    }
    println!(
        "next: point producers at {to}; rebuild the projection with \
         `stockledger --topic {to} --prefix NEW_PREFIX replay --into NEW_PREFIX`; \
         then run `stockledger --topic {to} --prefix NEW_PREFIX apply`",
        to = args.to
    );
    Ok(ExitCode::SUCCESS)
}
