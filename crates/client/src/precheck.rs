//! Opt-in checks of confirms and refunds against the projection, before
//! they are sent.
//!
//! A confirm or refund of an order the ledger has never seen, or a refund
//! of a sale that the machine refuses (`machine::judge_refund`: more units
//! than the order bought, a named-unit order not refunded whole, a total
//! below what is refunded already), would be appended only to be refused
//! (`REJECTED_NOT_RESERVED`, `REJECTED_NOT_SOLD`, `REJECTED_REFUND`). With [`OrderChecks`] given to the producer
//! ([`crate::LedgerProducer::with_order_checks`]) they are refused before
//! publishing instead, as [`crate::ProducerError::Invalid`] naming the
//! field. The projection may be behind the log (a reservation sent a
//! moment ago may not be applied yet), so only what the projection shows
//! to be wrong is refused; everything else is sent and the log decides.

use stockledger_core::machine::judge_refund;
use stockledger_core::{Command, CommandBody, OrderStatus, ResultCode, ValidationError};
use stockledger_projection::{Projection, ProjectionError};

/// Reads an order's state before a confirm or refund of it is sent.
///
/// ```no_run
/// # async fn example() -> Result<(), Box<dyn std::error::Error>> {
/// use stockledger_client::{Ledger, OrderId, ProducerError, Quantity, Sku};
///
/// let ledger = Ledger::builder()
///     .order_checks("redis://127.0.0.1:6379", "stockledger")
///     .build()
///     .await?;
/// let (sku, order) = (Sku::new("SKU-1")?, OrderId::new("order-42")?);
/// match ledger.refund(&sku, &order, Some(Quantity::new(5)?)).await {
///     Err(ProducerError::Invalid(e)) => println!("not sent: {e}"),
///     other => println!("{:?}", other?.position),
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct OrderChecks {
    projection: Projection,
}

impl OrderChecks {
    /// Checks against the projection under `prefix` at `redis_url`.
    ///
    /// ```no_run
    /// # async fn example() -> Result<(), stockledger_projection::ProjectionError> {
    /// let checks = stockledger_client::OrderChecks::connect("redis://127.0.0.1:6379", "stockledger").await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn connect(redis_url: &str, prefix: &str) -> Result<Self, ProjectionError> {
        Ok(Self::new(Projection::connect(redis_url, prefix).await?))
    }

    /// Checks against `projection`, sharing its connection.
    ///
    /// ```no_run
    /// # async fn example() -> Result<(), stockledger_projection::ProjectionError> {
    /// use stockledger_client::OrderChecks;
    /// use stockledger_projection::Projection;
    ///
    /// let projection = Projection::connect("redis://127.0.0.1:6379", "stockledger").await?;
    /// let checks = OrderChecks::new(projection.clone());
    /// # Ok(())
    /// # }
    /// ```
    pub fn new(projection: Projection) -> Self {
        Self { projection }
    }

    /// `Ok(Err(_))` names what is wrong with `command`; `Ok(Ok(()))` lets
    /// it be sent (every command but a confirm or refund passes).
    ///
    /// ```no_run
    /// # async fn example(checks: stockledger_client::OrderChecks) -> Result<(), Box<dyn std::error::Error>> {
    /// use stockledger_core::{Command, CommandBody, CommandId, Confirm, OrderId, Sku};
    ///
    /// let confirm = Command {
    ///     command_id: CommandId::new("c-1")?,
    ///     sku: Sku::new("SKU-1")?,
    ///     occurred_at: 1_700_000_000_000,
    ///     body: CommandBody::Confirm(Confirm { order_id: OrderId::new("order-42")? }),
    /// };
    /// if let Err(refused) = checks.check(&confirm).await? {
    ///     println!("would be refused: {refused}");
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn check(
        &self,
        command: &Command,
    ) -> Result<Result<(), ValidationError>, ProjectionError> {
        let (order_id, refund_total) = match &command.body {
            CommandBody::Confirm(c) => (&c.order_id, None),
            CommandBody::Refund(r) => (&r.order_id, Some(r.quantity)),
            _ => return Ok(Ok(())),
        };
        let sku = command.sku.as_str();
        let entry = self.projection.order(sku, order_id.as_str()).await?;
        let Some(entry) = entry else {
            let what = if refund_total.is_some() {
                "sale"
            } else {
                "reservation"
            };
            return Ok(Err(ValidationError::new(
                "order_id",
                format!("the ledger has no {what} of {sku} for order {order_id}"),
            )));
        };
        // A sale's bought units and named units do not change, and its
        // refunded total only grows, so what the machine refuses of a
        // refund of it now it refuses however far behind the projection
        // is. A repeat (`DUPLICATE`) is harmless, and is sent.
        if let Some(total) = refund_total {
            if entry.status == OrderStatus::Confirmed {
                if let Err((ResultCode::RejectedRefund, reason)) = judge_refund(&entry, total) {
                    return Ok(Err(ValidationError::new(
                        "quantity",
                        format!("order {order_id}: {reason}"),
                    )));
                }
            }
        }
        Ok(Ok(()))
    }
}
