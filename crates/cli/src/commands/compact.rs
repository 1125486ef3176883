//! `stockledger compact`: prune archived history older than a window from Redis.

use std::process::ExitCode;
use std::time::Duration;

use clap::Args as ClapArgs;
use stockledger_projection::Projection;

use super::table::Style;
use crate::progress::Progress;
use crate::{connect_archive, Global};

#[derive(Debug, ClapArgs)]
pub struct Args {
    /// Keep history whose records occurred within this many days.
    #[arg(long, env = "STOCKLEDGER_RETENTION_DAYS", default_value_t = 7.0)]
    pub retention_days: f64,
    /// SKUs handled per page (bounds memory).
    #[arg(long, default_value_t = 1000)]
    pub page_size: usize,
    /// Sentences for people, or one JSON object for scripts.
    #[arg(long, value_enum, default_value = "text")]
    pub format: Style,
}

pub async fn run(g: &Global, args: Args) -> anyhow::Result<ExitCode> {
    anyhow::ensure!(
        args.retention_days.is_finite() && args.retention_days >= 0.0,
        "--retention-days must be a number of days, 0 or more"
    );
    let pool = connect_archive(g, 2).await?;
    let projection = Projection::connect(&g.redis_url, g.prefix.clone()).await?;
    let retention = Duration::from_secs_f64(args.retention_days * 86_400.0);
    let page_size = args.page_size.max(1);
    let mut progress =
        Progress::over_skus(&projection, format!("compact {}", g.prefix), page_size).await?;
    let report = stockledger_maintenance::compact::compact(
        &projection.connection(),
        &g.prefix,
        &pool,
        &g.topic,
        retention,
        page_size,
        |done| progress.set(done),
    )
    .await?;
    progress.finish();
    if args.format == Style::Json {
        println!(
            "{}",
            serde_json::json!({
                "skus_checked": report.skus_checked, "orders_removed": report.orders_removed,
                "decisions_removed": report.decisions_removed, "retention_days": args.retention_days,
            })
        );
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "checked {} SKUs: removed {} finished orders and {} decisions older than {} days",
        report.skus_checked, report.orders_removed, report.decisions_removed, args.retention_days
    );
    Ok(ExitCode::SUCCESS)
}
