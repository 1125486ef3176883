//! `stockledger reconcile`: compare Redis with the archive; exit 3 on a difference.

use std::process::ExitCode;

use clap::Args as ClapArgs;
use stockledger_projection::Projection;

use super::table::Style;
use crate::exit::Exit;
use crate::progress::Progress;
use crate::{connect_archive, Global};

#[derive(Debug, ClapArgs)]
pub struct Args {
    /// SKUs read per page (bounds memory).
    #[arg(long, default_value_t = 1000)]
    pub page_size: usize,
    /// Lines for people, or one JSON object per difference and then a
    /// summary object, for scripts.
    #[arg(long, value_enum, default_value = "text")]
    pub format: Style,
    /// The same as --format json.
    #[arg(long, hide = true)]
    pub json: bool,
}

pub async fn run(g: &Global, args: Args) -> anyhow::Result<ExitCode> {
    let pool = connect_archive(g, 2).await?;
    let projection = Projection::connect(&g.redis_url, g.prefix.clone()).await?;
    let json = args.json || args.format == Style::Json;
    let page_size = args.page_size.max(1);
    let mut progress =
        Progress::over_skus(&projection, format!("reconcile {}", g.prefix), page_size).await?;
    let report = stockledger_maintenance::reconcile::reconcile(
        &projection.connection(),
        &g.prefix,
        &pool,
        &g.topic,
        page_size,
        |done| progress.set(done),
    )
    .await?;
    progress.finish();
    for d in &report.differences {
        if json {
            let line = serde_json::json!({
                "sku": d.sku, "field": d.field, "redis": d.redis,
                "archive": d.archive, "offset": d.offset,
            });
            println!("{line}");
        } else {
            let at = d
                .offset
                .map(|o| format!(" (offset {o})"))
                .unwrap_or_default();
            println!(
                "{}: {}: Redis {}, archive {}{at}",
                d.sku, d.field, d.redis, d.archive
            );
        }
    }
    if json {
        let summary = serde_json::json!({
            "skus_checked": report.skus_checked,
            "differences": report.differences.len(),
        });
        println!("{summary}");
    } else {
        println!(
            "checked {} SKUs: {}",
            report.skus_checked,
            match report.differences.len() {
                0 => "Redis and the archive agree".to_owned(),
                n => format!("{n} differences"),
            }
        );
    }
    if !report.differences.is_empty() {
        return Ok(Exit::Check.into());
    }
    Ok(ExitCode::SUCCESS)
}
