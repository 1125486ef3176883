//! `stockledger snapshot`: every SKU's state and where a replay resumes.

use std::process::ExitCode;

use clap::Args as ClapArgs;
use stockledger_maintenance::snapshot;
use stockledger_projection::Projection;

use crate::{connect_archive, Global};

#[derive(Debug, ClapArgs)]
pub struct Args {
    /// The applier group whose committed offsets say where a replay from
    /// this snapshot starts.
    #[arg(
        long,
        env = "STOCKLEDGER_APPLIER_GROUP",
        default_value = "stockledger-applier"
    )]
    pub applier_group: String,
    /// SKUs read and written per page (bounds memory).
    #[arg(long, default_value_t = 1000)]
    pub page_size: usize,
}

pub async fn run(g: &Global, args: Args) -> anyhow::Result<ExitCode> {
    let pool = connect_archive(g, 2).await?;
    let projection = Projection::connect(&g.redis_url, g.prefix.clone()).await?;
    let start = snapshot::committed_offsets(&g.kafka(), &args.applier_group, &g.topic).await?;
    let taken = snapshot::take(
        &pool,
        &projection.connection(),
        &g.prefix,
        &g.topic,
        &start,
        args.page_size.max(1),
    )
    .await?;
    let mut starts: Vec<_> = taken.start.iter().collect();
    starts.sort();
    println!(
        "snapshot {} of {}: {} SKUs; a replay from it starts at {}",
        taken.id,
        g.prefix,
        taken.skus,
        if starts.is_empty() {
            "the beginning of every partition".to_owned()
        } else {
            starts
                .iter()
                .map(|(p, o)| format!("{p}@{o}"))
                .collect::<Vec<_>>()
                .join(", ")
        }
    );
    Ok(ExitCode::SUCCESS)
}
