//! What `deduct`, `rollback`, `confirm`, `refund`, `limit` and `restock`
//! print once a command is sent, and the decision when asked to wait.

use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use serde_json::json;
use stockledger_client::{Decision, OutcomeReader, Receipt};

use super::table::Style;
use crate::exit::Exit;
use crate::Global;

/// Waiting for the decision after sending, and how to print both.
#[derive(Debug, Args)]
pub struct WaitArgs {
    /// Wait up to this many seconds for the applier's decision and print it:
    /// exit 3 if the ledger refused the command, 75 if the decision did not
    /// come in time (the command is in the log and will still be decided).
    #[arg(long, value_name = "SECONDS")]
    pub wait: Option<f64>,
    /// Sentences for people, or one JSON object for scripts.
    #[arg(long, value_enum, default_value = "text")]
    pub format: Style,
}

pub async fn report_sent(
    g: &Global,
    receipt: &Receipt,
    wait: &WaitArgs,
) -> anyhow::Result<ExitCode> {
    if wait.format == Style::Text {
        println!(
            "sent {} for {} to {}",
            receipt.command_id, receipt.sku, receipt.position
        );
    }
    let decision = match wait.wait {
        Some(seconds) => {
            let reader = OutcomeReader::connect(&g.redis_url, g.prefix.clone()).await?;
            let timeout = Duration::try_from_secs_f64(seconds.max(0.0)).unwrap_or(Duration::MAX);
            Some(reader.wait(receipt, timeout).await?)
        }
        None => None,
    };
    match (wait.format, &decision) {
        (Style::Text, Some(d)) => println!(
            "{}: delta {}, available {}, total {}{}",
            d.result,
            d.delta,
            d.available,
            d.total,
            d.reason
                .as_ref()
                .map(|r| format!(" ({r})"))
                .unwrap_or_default()
        ),
        (Style::Text, None) => {}
        (Style::Json, _) => println!(
            "{}",
            json!({
                "command_id": receipt.command_id.as_str(),
                "sku": receipt.sku.as_str(),
                "topic": receipt.position.topic,
                "partition": receipt.position.partition,
                "offset": receipt.position.offset,
                "decision": decision.as_ref().map(decision_json),
            })
        ),
    }
    let refused = decision.is_some_and(|d| d.result.is_refusal());
    Ok(if refused { Exit::Check } else { Exit::Ok }.into())
}

/// A decision as the outcomes' JSON spells it.
pub fn decision_json(d: &Decision) -> serde_json::Value {
    json!({
        "result": d.result.as_str(),
        "delta": d.delta,
        "available": d.available,
        "total": d.total,
        "reason": d.reason,
    })
}
