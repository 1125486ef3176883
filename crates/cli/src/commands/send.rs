//! What `deduct`, `rollback` and `restock` print once a command is sent.

use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use stockledger_client::{OutcomeReader, Receipt};

use crate::Global;

/// Waiting for the decision after sending.
#[derive(Debug, Args)]
pub struct WaitArgs {
    /// Wait up to this many seconds for the applier's decision and print it
    /// (exit 1 if it does not come in time).
    #[arg(long, value_name = "SECONDS")]
    pub wait: Option<f64>,
}

pub async fn report_sent(
    g: &Global,
    receipt: &Receipt,
    wait: &WaitArgs,
) -> anyhow::Result<ExitCode> {
    println!(
        "sent {} for {} to {}",
        receipt.command_id, receipt.sku, receipt.position
    );
    let Some(seconds) = wait.wait else {
        return Ok(ExitCode::SUCCESS);
    };
    let reader = OutcomeReader::connect(&g.redis_url, g.prefix.clone()).await?;
    let timeout = Duration::try_from_secs_f64(seconds.max(0.0)).unwrap_or(Duration::MAX);
    let d = reader.wait(receipt, timeout).await?;
    println!(
        "{}: delta {}, available {}, total {}{}",
        d.result,
        d.delta,
        d.available,
        d.total,
        d.reason.map(|r| format!(" ({r})")).unwrap_or_default()
    );
    Ok(ExitCode::SUCCESS)
}
