//! What `deduct`, `rollback`, `confirm`, `refund`, `limit` and `restock`
//! print once a command is sent, and the decision when asked to wait.

use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use serde_json::json;
use stockledger_client::{CommandBody, Decision, Ledger, LedgerBuilder, Receipt, Sku};
use stockledger_core::trace::valid_traceparent;

use super::table::Style;
use crate::exit::Exit;
use crate::Global;

/// How a command is sent (with the caller's trace context), whether to
/// wait for its decision, and how to print both.
#[derive(Debug, Args)]
pub struct WaitArgs {
    /// A W3C traceparent to send the command with (00-<trace id>-<parent
    /// id>-<flags>): it is carried to the outcome and the archived row.
    #[arg(long, env = "TRACEPARENT", value_parser = parse_traceparent)]
    pub traceparent: Option<String>,
    /// Wait up to this many seconds for the applier's decision and print it:
    /// exit 3 if the ledger refused the command, 75 if the decision did not
    /// come in time (the command is in the log and will still be decided).
    #[arg(long, value_name = "SECONDS")]
    pub wait: Option<f64>,
    /// Sentences for people, or one JSON object for scripts.
    #[arg(long, value_enum, default_value = "text")]
    pub format: Style,
}

fn parse_traceparent(s: &str) -> Result<String, String> {
    valid_traceparent(s.as_bytes())
        .map(str::to_owned)
        .ok_or_else(|| {
            "is not a W3C traceparent (00-<32 hex>-<16 hex>-<2 hex>, lower case, ids not all zeros)"
                .to_owned()
        })
}

/// Builds the ledger's client from `builder` (reading decisions from the
/// projection when `--wait` asks for them), sends `body` for `sku` (with
/// `--traceparent` if given), then prints what [`report_sent`] prints.
pub async fn publish(
    g: &Global,
    builder: LedgerBuilder,
    sku: Sku,
    body: CommandBody,
    wait: &WaitArgs,
) -> anyhow::Result<ExitCode> {
    let builder = match wait.timeout() {
        Some(timeout) => g.deciding(builder, timeout),
        None => builder,
    };
    let ledger = builder.build().await?;
    let receipt = match &wait.traceparent {
        Some(traceparent) => {
            (ledger.producer())
                .send_traced(sku, body, traceparent, false)
                .await?
        }
        None => ledger.send(&sku, body).await?,
    };
    report_sent(&ledger, &receipt, wait).await
}

impl WaitArgs {
    /// How long `--wait` waits for the decision, if it was given.
    fn timeout(&self) -> Option<Duration> {
        let seconds = self.wait?;
        Some(Duration::try_from_secs_f64(seconds.max(0.0)).unwrap_or(Duration::MAX))
    }
}

async fn report_sent(
    ledger: &Ledger,
    receipt: &Receipt,
    wait: &WaitArgs,
) -> anyhow::Result<ExitCode> {
    if wait.format == Style::Text {
        println!(
            "sent {} for {} to {}",
            receipt.command_id, receipt.sku, receipt.position
        );
    }
    let decision = match wait.timeout() {
        Some(_) => Some(ledger.decision(receipt).await?),
        None => None,
    };
    match (wait.format, &decision) {
        (Style::Text, Some(d)) => println!(
            "{}: delta {}, available {}, total {}{}{}",
            d.result,
            d.delta,
            d.available,
            d.total,
            d.location
                .as_ref()
                .map(|l| format!(", at {l}"))
                .unwrap_or_default(),
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
        "location": d.location,
        "events": d.events.kinds().map(|k| k.as_str()).collect::<Vec<_>>(),
    })
}
