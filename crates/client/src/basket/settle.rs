//! Each step of the basket protocol for one line: send the command, await
//! its decision, and try again (await once more, then send again) up to
//! [`ATTEMPTS`] times; what the protocol needs of a ledger ([`Decide`]).

use std::future::Future;
use std::time::Duration;

use stockledger_core::{BasketId, CommandBody, Decision, Sku};

use crate::outcome::OutcomeError;
use crate::producer::{ProducerError, Receipt};

/// How many times a step of the protocol is tried for one line (a send
/// that failed, a decision not seen in time) before the call gives up and
/// says the basket is unsettled.
pub const ATTEMPTS: u32 = 3;

/// A basket call that could not settle every line: which, and why. The
/// basket may be partly held or sold; the same call again settles it (and
/// holds end by themselves at the deadline).
#[derive(Debug, thiserror::Error)]
#[error(
    "basket {basket_id}: line {sku} is unsettled after {ATTEMPTS} attempts ({cause}); ask again"
)]
pub struct Unsettled {
    pub basket_id: BasketId,
    pub sku: Sku,
    pub cause: String,
}

/// What the protocol needs of a ledger: send a command, wait for its
/// decision. [`Ledger`](crate::Ledger) is one; the gateway is another.
pub trait Decide {
    /// Appends `body` for `sku` to the log.
    fn send(
        &self,
        sku: &Sku,
        body: CommandBody,
    ) -> impl Future<Output = Result<Receipt, ProducerError>> + Send;

    /// The decision for `receipt`'s command, within the caller's timeout.
    fn wait(
        &self,
        receipt: &Receipt,
    ) -> impl Future<Output = Result<Decision, OutcomeError>> + Send;
}

/// Sends `body` and waits for its decision, trying up to [`ATTEMPTS`]
/// times: a decision not seen in time is awaited again, then the command
/// is sent again (only commands whose repeat is harmless come here).
pub(super) async fn settle<D: Decide + Sync>(
    ledger: &D,
    basket_id: &BasketId,
    sku: &Sku,
    body: &CommandBody,
) -> Result<Decision, Unsettled> {
    let mut cause = String::new();
    let mut receipt: Option<Receipt> = None;
    for attempt in 0..ATTEMPTS {
        if attempt > 0 {
            tokio::time::sleep(Duration::from_millis(100 << attempt)).await;
        }
        let sent = match receipt.take() {
            Some(sent) => sent,
            None => match ledger.send(sku, body.clone()).await {
                Ok(sent) => sent,
                Err(e) => {
                    cause = e.to_string();
                    continue;
                }
            },
        };
        match ledger.wait(&sent).await {
            Ok(decision) => return Ok(decision),
            // In the log: wait for it once more before sending again.
            Err(e @ OutcomeError::Timeout { .. }) if attempt + 1 < ATTEMPTS => {
                cause = e.to_string();
                receipt = Some(sent);
            }
            Err(e) => cause = e.to_string(),
        }
    }
    Err(Unsettled {
        basket_id: basket_id.clone(),
        sku: sku.clone(),
        cause,
    })
}

/// Settles `bodies` (one per SKU) at once; each line's decision.
pub(super) async fn settle_all<D: Decide + Sync>(
    ledger: &D,
    basket_id: &BasketId,
    bodies: Vec<(Sku, CommandBody)>,
) -> Vec<(Sku, Result<Decision, Unsettled>)> {
    let settled = futures::future::join_all(
        bodies
            .iter()
            .map(|(sku, body)| settle(ledger, basket_id, sku, body)),
    )
    .await;
    bodies
        .into_iter()
        .map(|(sku, _)| sku)
        .zip(settled)
        .collect()
}
