//! `stockledger snapshot`: every SKU's state and where a replay resumes.

use std::process::ExitCode;

use clap::Args as ClapArgs;
use stockledger_maintenance::snapshot;
use stockledger_projection::Projection;

use super::table::Style;
use super::ApplierGroup;
use crate::progress::Progress;
use crate::{connect_archive, Global};

#[derive(Debug, ClapArgs)]
pub struct Args {
    #[command(flatten)]
    pub applier: ApplierGroup,
    /// SKUs read and written per page (bounds memory).
    #[arg(long, default_value_t = 1000)]
    pub page_size: usize,
    /// Sentences for people, or one JSON object for scripts.
    #[arg(long, value_enum, default_value = "text")]
    pub format: Style,
}

pub async fn run(g: &Global, args: Args) -> anyhow::Result<ExitCode> {
    let pool = connect_archive(g, 2).await?;
    let projection = Projection::connect(&g.redis_url, g.prefix.clone()).await?;
    let start =
        snapshot::committed_offsets(&g.kafka(), &args.applier.applier_group, &g.topic).await?;
    let page_size = args.page_size.max(1);
    let mut progress =
        Progress::over_skus(&projection, format!("snapshot of {}", g.prefix), page_size).await?;
    let taken = snapshot::take(
        &pool,
        &projection.connection(),
        &g.prefix,
        &g.topic,
        &start,
        page_size,
        |done| progress.set(done),
    )
    .await?;
    progress.finish();
    let mut starts: Vec<_> = taken.start.iter().collect();
    starts.sort();
    if args.format == Style::Json {
        let starts: serde_json::Map<String, serde_json::Value> = starts
            .iter()
            .map(|(p, o)| (p.to_string(), (**o).into()))
            .collect();
        println!(
            "{}",
            serde_json::json!({
                "snapshot": taken.id, "prefix": g.prefix, "topic": g.topic,
                "skus": taken.skus, "replay_starts": starts,
            })
        );
        return Ok(ExitCode::SUCCESS);
    }
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
