//! One method per kind of command: each validates its fields into the
//! command's body, naming the field a refusal is about, then sends it
//! with [`LedgerProducer::send`].

use super::*;

impl LedgerProducer {
    /// Takes `quantity` units of `sku` for `order_id`. A field that breaks
    /// the rules is refused before anything is sent, naming the field.
    ///
    /// ```no_run
    /// # async fn example(producer: stockledger_client::LedgerProducer) {
    /// use stockledger_client::ProducerError;
    ///
    /// let refused = producer.deduct("SKU-1", "order-42", 0).await.unwrap_err();
    /// assert!(matches!(refused, ProducerError::Invalid(ref e) if e.field == "quantity"));
    /// # }
    /// ```
    pub async fn deduct(
        &self,
        sku: &str,
        order_id: &str,
        quantity: i64,
    ) -> Result<Receipt, ProducerError> {
        let body = CommandBody::Deduct(Deduct::new(
            OrderId::new(order_id)?,
            Quantity::new(quantity)?,
        ));
        self.send(Sku::new(sku)?, body).await
    }

    /// Holds `quantity` units of `sku` for `order_id` until `expires_at`
    /// (milliseconds since the Unix epoch; after now and at most seven days
    /// ahead), counted against `user_id` when the SKU has a per-user limit.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use stockledger_client::{KafkaConfig, LedgerProducer, ProducerError};
    ///
    /// let producer = LedgerProducer::new(&KafkaConfig::new("127.0.0.1:9092"), "stock.ledger")?;
    /// // Refused before anything is sent: no broker needed.
    /// let refused = producer.reserve("SKU-1", "order-42", 1, Some(""), 1_700_000_600_000).await.unwrap_err();
    /// assert!(matches!(refused, ProducerError::Invalid(ref e) if e.field == "user_id"));
    /// # Ok(())
    /// # }
    /// ```
    pub async fn reserve(
        &self,
        sku: &str,
        order_id: &str,
        quantity: i64,
        user_id: Option<&str>,
        expires_at: i64,
    ) -> Result<Receipt, ProducerError> {
        let body = CommandBody::Deduct(Deduct {
            user_id: user_id.map(UserId::new).transpose()?,
            expires_at: Some(expires_at),
            ..Deduct::new(OrderId::new(order_id)?, Quantity::new(quantity)?)
        });
        self.send(Sku::new(sku)?, body).await
    }

    /// Sells what the reservation `order_id` of `sku` holds.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use stockledger_client::{KafkaConfig, LedgerProducer, ProducerError};
    ///
    /// let producer = LedgerProducer::new(&KafkaConfig::new("127.0.0.1:9092"), "stock.ledger")?;
    /// // Refused before anything is sent: no broker needed.
    /// let refused = producer.confirm("SKU-1", "").await.unwrap_err();
    /// assert!(matches!(refused, ProducerError::Invalid(ref e) if e.field == "order_id"));
    /// # Ok(())
    /// # }
    /// ```
    pub async fn confirm(&self, sku: &str, order_id: &str) -> Result<Receipt, ProducerError> {
        let body = CommandBody::Confirm(Confirm {
            order_id: OrderId::new(order_id)?,
        });
        self.send(Sku::new(sku)?, body).await
    }

    /// Refunds a confirmed order of `sku` up to `total` units refunded in
    /// all (`None`: everything it bought). A running total, so a resend
    /// refunds once.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use stockledger_client::{KafkaConfig, LedgerProducer, ProducerError};
    ///
    /// let producer = LedgerProducer::new(&KafkaConfig::new("127.0.0.1:9092"), "stock.ledger")?;
    /// // Refused before anything is sent: no broker needed.
    /// let refused = producer.refund("SKU-1", "order-42", Some(0)).await.unwrap_err();
    /// assert!(matches!(refused, ProducerError::Invalid(ref e) if e.field == "quantity"));
    /// # Ok(())
    /// # }
    /// ```
    pub async fn refund(
        &self,
        sku: &str,
        order_id: &str,
        total: Option<i64>,
    ) -> Result<Receipt, ProducerError> {
        let body = CommandBody::Refund(Refund {
            order_id: OrderId::new(order_id)?,
            quantity: total.map(Quantity::new).transpose()?,
        });
        self.send(Sku::new(sku)?, body).await
    }

    /// Asks the ledger to end the reservation `order_id` of `sku`: it does
    /// once the record's timestamp is past the deadline.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use stockledger_client::{KafkaConfig, LedgerProducer, ProducerError};
    ///
    /// let producer = LedgerProducer::new(&KafkaConfig::new("127.0.0.1:9092"), "stock.ledger")?;
    /// // Refused before anything is sent: no broker needed.
    /// let refused = producer.expire("SKU{1}", "order-42").await.unwrap_err();
    /// assert!(matches!(refused, ProducerError::Invalid(ref e) if e.field == "sku"));
    /// # Ok(())
    /// # }
    /// ```
    pub async fn expire(&self, sku: &str, order_id: &str) -> Result<Receipt, ProducerError> {
        let body = CommandBody::Expire(Expire {
            order_id: OrderId::new(order_id)?,
        });
        self.send(Sku::new(sku)?, body).await
    }

    /// Caps the units one user may hold and buy of `sku` (`None` lifts it).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use stockledger_client::{KafkaConfig, LedgerProducer, ProducerError};
    ///
    /// let producer = LedgerProducer::new(&KafkaConfig::new("127.0.0.1:9092"), "stock.ledger")?;
    /// // Refused before anything is sent: no broker needed.
    /// let refused = producer.limit("SKU-1", Some(0)).await.unwrap_err();
    /// assert!(matches!(refused, ProducerError::Invalid(ref e) if e.field == "per_user"));
    /// # Ok(())
    /// # }
    /// ```
    pub async fn limit(&self, sku: &str, per_user: Option<i64>) -> Result<Receipt, ProducerError> {
        let per_user = per_user
            .map(|n| Quantity::of_field("per_user", n))
            .transpose()?;
        let body = CommandBody::Limit(Limit { per_user });
        self.send(Sku::new(sku)?, body).await
    }

    /// Gives back what `order_id` took of `sku`.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use stockledger_client::{KafkaConfig, LedgerProducer, ProducerError};
    ///
    /// let producer = LedgerProducer::new(&KafkaConfig::new("127.0.0.1:9092"), "stock.ledger")?;
    /// // Refused before anything is sent: no broker needed.
    /// let refused = producer.rollback("SKU-1", "order-42", Some(&"x".repeat(2000))).await.unwrap_err();
    /// assert!(matches!(refused, ProducerError::Invalid(ref e) if e.field == "reason"));
    /// # Ok(())
    /// # }
    /// ```
    pub async fn rollback(
        &self,
        sku: &str,
        order_id: &str,
        reason: Option<&str>,
    ) -> Result<Receipt, ProducerError> {
        let body = CommandBody::Rollback(Rollback::new(
            OrderId::new(order_id)?,
            reason.map(str::to_owned),
        )?);
        self.send(Sku::new(sku)?, body).await
    }

    /// Arranges the stock of `sku`; `adjustment_id` makes a resend harmless.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use stockledger_client::{KafkaConfig, LedgerProducer, ProducerError, RestockMode};
    ///
    /// let producer = LedgerProducer::new(&KafkaConfig::new("127.0.0.1:9092"), "stock.ledger")?;
    /// // ADD takes a non-zero amount: refused before anything is sent.
    /// let refused = producer.restock("SKU-1", "count-1", RestockMode::Add, 0).await.unwrap_err();
    /// assert!(matches!(refused, ProducerError::Invalid(ref e) if e.field == "quantity"));
    /// # Ok(())
    /// # }
    /// ```
    pub async fn restock(
        &self,
        sku: &str,
        adjustment_id: &str,
        mode: RestockMode,
        quantity: i64,
    ) -> Result<Receipt, ProducerError> {
        let body = CommandBody::Restock(Restock::new(
            AdjustmentId::new(adjustment_id)?,
            mode,
            quantity,
        )?);
        self.send(Sku::new(sku)?, body).await
    }
}
