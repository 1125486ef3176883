//! [`Ledger`]: the client an order service holds, built once with
//! [`Ledger::builder`], with typed arguments that cannot be swapped
//! ([`Sku`], [`OrderId`], [`Quantity`]…), [`Duration`]s for holds and
//! timeouts, and decisions read from the outcomes topic: Kafka is all it
//! needs to reach (or, quicker, from Redis:
//! [`LedgerBuilder::decisions_from_redis`]).
//!
//! ```no_run
//! # async fn checkout() -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//!
//! use stockledger_client::{Ledger, OrderId, Quantity, ResultCode, Sku, UserId};
//!
//! let ledger = Ledger::builder()
//!     .brokers("127.0.0.1:9092")
//!     .decision_timeout(Duration::from_secs(5))
//!     .build()
//!     .await?;
//! let (sku, order) = (Sku::new("SKU-1")?, OrderId::new("order-43")?);
//! let buyer = UserId::new("user-7")?;
//! let hold = Duration::from_secs(15 * 60);
//! let held = ledger
//!     .reserve(&sku, &order, Quantity::new(1)?, hold, Some(&buyer))
//!     .await?;
//! if ledger.decision(&held).await?.result == ResultCode::Applied {
//!     // Paid: sell the held unit (or `rollback` to release it).
//!     let sold = ledger.confirm(&sku, &order).await?;
//!     assert_eq!(ledger.decision(&sold).await?.result, ResultCode::Confirmed);
//! }
//! # Ok(())
//! # }
//! ```

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use stockledger_core::ids::{
    AdjustmentId, BasketId, ChangeId, LocationId, OrderId, Quantity, Sku, TransferId, UnitId,
    UserId,
};
use stockledger_core::{
    Alerts, CommandBody, Confirm, Decision, Deduct, Expire, Limit, Pause, Refund, Restock,
    RestockMode, Resume, Rollback, SaleWindow, Transfer, ValidationError, Window,
};
use stockledger_kafka::KafkaConfig;
use stockledger_projection::ProjectionError;

use crate::decisions::{DecisionSource, TopicDecisions, WatchError};
use crate::outcome::OutcomeError;
use crate::producer::{now_millis, LedgerProducer, ProducerError, Receipt, Tuning};
use crate::{OrderChecks, RedisDecisions, SoldOutGuard};

/// Why a [`Ledger`] could not be built.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use stockledger_client::{BuildError, Ledger};
///
/// let refused = Ledger::builder().property("acks", "1").without_decisions().build().await;
/// assert!(matches!(refused, Err(BuildError::Producer(_))));
/// # }
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BuildError {
    #[error("the producer could not be made")]
    Producer(#[from] ProducerError),
    #[error("decisions cannot be read")]
    Decisions(#[from] WatchError),
    /// [`LedgerBuilder::decisions_from_redis`] could not reach Redis.
    #[error("decisions cannot be read from the projection in Redis")]
    DecisionsFromRedis(#[source] OutcomeError),
    /// The order checks or the sold-out guard could not reach Redis.
    #[error("the projection in Redis cannot be reached for the checks before sending")]
    Projection(#[from] ProjectionError),
}

/// Builds a [`Ledger`]; every option has the ledger's default.
///
/// ```
/// use std::time::Duration;
///
/// use stockledger_client::Ledger;
///
/// let builder = Ledger::builder()
///     .brokers("kafka-1:9092,kafka-2:9092")
///     .topic("shop.stock")
///     .outcomes_topic("shop.stock.outcomes")
///     .decision_timeout(Duration::from_secs(2));
/// ```
#[derive(Debug, Clone)]
#[must_use]
pub struct LedgerBuilder {
    kafka: KafkaConfig,
    topic: String,
    outcomes_topic: String,
    decision_timeout: Duration,
    read_decisions: bool,
    /// Redis URL and key prefix of the projection decisions are read
    /// from, instead of the outcomes topic.
    decisions_from_redis: Option<(String, String)>,
    /// The checks before a confirm or refund is sent.
    order_checks: Option<Reach<OrderChecks>>,
    /// The sold-out fast path.
    sold_out_guard: Option<Reach<SoldOutGuard>>,
    tuning: Tuning,
}

/// A piece of the builder that reads the projection: where to connect to
/// it, or one the caller made.
#[derive(Debug, Clone)]
enum Reach<T> {
    /// Redis URL and key prefix.
    At(String, String),
    Ready(T),
}

impl Default for LedgerBuilder {
    fn default() -> Self {
        Self {
            kafka: KafkaConfig::new("127.0.0.1:9092"),
            topic: "stock.ledger".into(),
            outcomes_topic: "stock.ledger.outcomes".into(),
            decision_timeout: Duration::from_secs(5),
            read_decisions: true,
            decisions_from_redis: None,
            order_checks: None,
            sold_out_guard: None,
            tuning: Tuning::default(),
        }
    }
}

impl LedgerBuilder {
    /// The Kafka bootstrap servers (`host:port`, comma-separated);
    /// default `127.0.0.1:9092`.
    ///
    /// ```
    /// let builder = stockledger_client::Ledger::builder().brokers("kafka-1:9092,kafka-2:9092");
    /// ```
    pub fn brokers(mut self, brokers: impl Into<String>) -> Self {
        self.kafka.brokers = brokers.into();
        self
    }

    /// A librdkafka property passed through as is (TLS, SASL, tuning). One
    /// the ledger's contract fixes (`acks`, idempotence…) is refused at
    /// [`build`](Self::build) if set to another value.
    ///
    /// ```
    /// let builder = stockledger_client::Ledger::builder()
    ///     .property("security.protocol", "SASL_SSL")
    ///     .property("sasl.mechanism", "SCRAM-SHA-512");
    /// ```
    pub fn property(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.kafka.properties.push((name.into(), value.into()));
        self
    }

    /// The whole Kafka configuration at once (e.g. one shared with other
    /// parts of the service).
    ///
    /// ```
    /// use stockledger_client::{KafkaConfig, Ledger};
    ///
    /// let kafka = KafkaConfig::new("kafka-1:9092");
    /// let builder = Ledger::builder().kafka(kafka);
    /// ```
    pub fn kafka(mut self, kafka: KafkaConfig) -> Self {
        self.kafka = kafka;
        self
    }

    /// The command topic; default `stock.ledger`.
    ///
    /// ```
    /// let builder = stockledger_client::Ledger::builder().topic("shop.stock");
    /// ```
    pub fn topic(mut self, topic: impl Into<String>) -> Self {
        self.topic = topic.into();
        self
    }

    /// The outcomes topic decisions are read from; default
    /// `stock.ledger.outcomes`.
    ///
    /// ```
    /// let builder = stockledger_client::Ledger::builder().outcomes_topic("shop.stock.outcomes");
    /// ```
    pub fn outcomes_topic(mut self, topic: impl Into<String>) -> Self {
        self.outcomes_topic = topic.into();
        self
    }

    /// How long [`Ledger::decision`] waits; default 5 s.
    ///
    /// ```
    /// let builder = stockledger_client::Ledger::builder().decision_timeout(std::time::Duration::from_millis(500));
    /// ```
    pub fn decision_timeout(mut self, timeout: Duration) -> Self {
        self.decision_timeout = timeout;
        self
    }

    /// Send only: read no decisions ([`Ledger::decision`] then fails with
    /// [`OutcomeError::WatcherStopped`]). Of this and
    /// [`decisions_from_redis`](Self::decisions_from_redis), the last one
    /// called holds.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use stockledger_client::{Ledger, OutcomeError};
    ///
    /// // Built without a broker in reach: a producer connects when it sends.
    /// let ledger = Ledger::builder().without_decisions().build().await?;
    /// # let receipt = stockledger_client::Receipt {
    /// #     command_id: stockledger_client::CommandId::new("c-1")?,
    /// #     sku: stockledger_client::Sku::new("SKU-1")?,
    /// #     position: stockledger_client::LogPosition { topic: "stock.ledger".into(), partition: 0, offset: 0 },
    /// # };
    /// assert!(matches!(ledger.decision(&receipt).await, Err(OutcomeError::WatcherStopped)));
    /// # Ok(())
    /// # }
    /// ```
    pub fn without_decisions(mut self) -> Self {
        self.read_decisions = false;
        self.decisions_from_redis = None;
        self
    }

    /// Read decisions from the projection (Redis at `redis_url`, keys
    /// under `prefix`, as the applier's `--prefix`) when the applier
    /// announces each batch there, instead of from the outcomes topic: for
    /// a service that reaches Redis, about 2.6 ms sooner at p50 at 5,000
    /// commands/s on the benchmark machine (docs/BENCHMARKS.md,
    /// "Latency"). See [`DecisionSource`]. Of this and
    /// [`without_decisions`](Self::without_decisions), the last one called
    /// holds.
    ///
    /// ```
    /// let builder = stockledger_client::Ledger::builder()
    ///     .decisions_from_redis("redis://127.0.0.1:6379", "stockledger");
    /// ```
    pub fn decisions_from_redis(
        mut self,
        redis_url: impl Into<String>,
        prefix: impl Into<String>,
    ) -> Self {
        self.decisions_from_redis = Some((redis_url.into(), prefix.into()));
        self.read_decisions = true;
        self
    }

    /// Refuse, before sending, a confirm or refund of an order the
    /// projection (Redis at `redis_url`, keys under `prefix`) shows to be
    /// wrong (see [`OrderChecks`]).
    ///
    /// ```
    /// let builder = stockledger_client::Ledger::builder()
    ///     .order_checks("redis://127.0.0.1:6379", "stockledger");
    /// ```
    pub fn order_checks(mut self, redis_url: impl Into<String>, prefix: impl Into<String>) -> Self {
        self.order_checks = Some(Reach::At(redis_url.into(), prefix.into()));
        self
    }

    /// [`order_checks`](Self::order_checks) with checks the caller made
    /// (on a projection it already holds).
    ///
    /// ```no_run
    /// # async fn example(projection: stockledger_projection::Projection) {
    /// use stockledger_client::{Ledger, OrderChecks};
    ///
    /// let builder = Ledger::builder().order_checks_from(OrderChecks::new(projection));
    /// # }
    /// ```
    pub fn order_checks_from(mut self, checks: OrderChecks) -> Self {
        self.order_checks = Some(Reach::Ready(checks));
        self
    }

    /// Refuse a deduct of a sold-out SKU at once, without logging it (the
    /// opt-in sold-out fast path, see [`SoldOutGuard`]).
    ///
    /// ```
    /// let builder = stockledger_client::Ledger::builder()
    ///     .sold_out_guard("redis://127.0.0.1:6379", "stockledger");
    /// ```
    pub fn sold_out_guard(
        mut self,
        redis_url: impl Into<String>,
        prefix: impl Into<String>,
    ) -> Self {
        self.sold_out_guard = Some(Reach::At(redis_url.into(), prefix.into()));
        self
    }

    /// [`sold_out_guard`](Self::sold_out_guard) with a guard the caller
    /// made: on a projection it already holds, or kept to read its count
    /// of refusals ([`SoldOutGuard::refused`]).
    ///
    /// ```no_run
    /// # async fn example(projection: stockledger_projection::Projection) {
    /// use stockledger_client::{Ledger, SoldOutGuard};
    ///
    /// let guard = SoldOutGuard::new(projection);
    /// let builder = Ledger::builder().sold_out_guard_from(guard.clone());
    /// # }
    /// ```
    pub fn sold_out_guard_from(mut self, guard: SoldOutGuard) -> Self {
        self.sold_out_guard = Some(Reach::Ready(guard));
        self
    }

    /// What the producer is tuned for: callers that wait on each command
    /// (the default), or a loader that sends many at once ([`Tuning`]).
    ///
    /// ```
    /// use stockledger_client::producer::Tuning;
    ///
    /// let loader = stockledger_client::Ledger::builder().tuning(Tuning::Throughput);
    /// ```
    pub fn tuning(mut self, tuning: Tuning) -> Self {
        self.tuning = tuning;
        self
    }

    /// Makes the producer and starts reading decisions (from the outcomes
    /// topic's end: commands sent from now on).
    ///
    /// ```no_run
    /// # async fn example() -> Result<(), stockledger_client::BuildError> {
    /// let ledger = stockledger_client::Ledger::builder().build().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn build(self) -> Result<Ledger, BuildError> {
        let mut producer = LedgerProducer::tuned(&self.kafka, self.topic, self.tuning)?;
        match self.order_checks {
            Some(Reach::At(url, prefix)) => {
                producer = producer.with_order_checks(OrderChecks::connect(&url, &prefix).await?);
            }
            Some(Reach::Ready(checks)) => producer = producer.with_order_checks(checks),
            None => {}
        }
        match self.sold_out_guard {
            Some(Reach::At(url, prefix)) => {
                producer =
                    producer.with_sold_out_guard(SoldOutGuard::connect(&url, &prefix).await?);
            }
            Some(Reach::Ready(guard)) => producer = producer.with_sold_out_guard(guard),
            None => {}
        }
        let decisions = match (self.read_decisions, &self.decisions_from_redis) {
            (false, _) => None,
            (true, Some((url, prefix))) => Some(DecisionSource::Redis(
                RedisDecisions::connect(url, prefix.as_str())
                    .await
                    .map_err(BuildError::DecisionsFromRedis)?,
            )),
            (true, None) => Some(DecisionSource::Outcomes(
                TopicDecisions::start(&self.kafka, &self.outcomes_topic).await?,
            )),
        };
        Ok(Ledger {
            producer,
            decisions,
            decision_timeout: self.decision_timeout,
        })
    }
}

/// An order service's handle on the ledger: sends commands (each returns
/// its [`Receipt`] once the brokers hold it) and reads their decisions.
/// Cheap to clone; clones share one producer and one reader.
///
/// ```no_run
/// # async fn example(ledger: stockledger_client::Ledger) {
/// // Each request handler gets a clone: one producer, one reader.
/// let for_handler = ledger.clone();
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct Ledger {
    producer: LedgerProducer,
    decisions: Option<DecisionSource>,
    decision_timeout: Duration,
}

impl Ledger {
    /// A builder with the defaults (local brokers, the default topics).
    ///
    /// ```
    /// let builder = stockledger_client::Ledger::builder();
    /// ```
    pub fn builder() -> LedgerBuilder {
        LedgerBuilder::default()
    }

    /// Takes `quantity` of `sku` for `order` at once (sold), counted
    /// against `user`'s per-user limit if given (a SKU with a limit refuses
    /// a deduct that names no user: `REJECTED_LIMIT`).
    ///
    /// ```no_run
    /// # async fn example(ledger: stockledger_client::Ledger) -> Result<(), Box<dyn std::error::Error>> {
    /// use stockledger_client::{OrderId, Quantity, Sku};
    ///
    /// let sent = ledger.deduct(&Sku::new("SKU-1")?, &OrderId::new("o-1")?, Quantity::new(2)?, None).await?;
    /// println!("in the log at {}", sent.position);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn deduct(
        &self,
        sku: &Sku,
        order: &OrderId,
        quantity: Quantity,
        user: Option<&UserId>,
    ) -> Result<Receipt, ProducerError> {
        let body = CommandBody::Deduct(Deduct {
            user_id: user.cloned(),
            ..Deduct::new(order.clone(), quantity)
        });
        self.producer.send(sku.clone(), body).await
    }

    /// Holds `quantity` of `sku` for `order` for `hold` (at most 7 days),
    /// counted against `user`'s per-user limit if given; [`confirm`](Self::confirm)
    /// sells it, [`rollback`](Self::rollback) releases it, and past the
    /// deadline it comes back by itself.
    ///
    /// ```no_run
    /// # async fn example(ledger: stockledger_client::Ledger) -> Result<(), Box<dyn std::error::Error>> {
    /// use std::time::Duration;
    ///
    /// use stockledger_client::{OrderId, Quantity, Sku, UserId};
    ///
    /// let (sku, order, buyer) = (Sku::new("SKU-1")?, OrderId::new("o-2")?, UserId::new("u-7")?);
    /// let held = ledger
    ///     .reserve(&sku, &order, Quantity::new(1)?, Duration::from_secs(900), Some(&buyer))
    ///     .await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn reserve(
        &self,
        sku: &Sku,
        order: &OrderId,
        quantity: Quantity,
        hold: Duration,
        user: Option<&UserId>,
    ) -> Result<Receipt, ProducerError> {
        let hold_ms = i64::try_from(hold.as_millis()).unwrap_or(i64::MAX);
        let body = CommandBody::Deduct(Deduct {
            user_id: user.cloned(),
            expires_at: Some(now_millis().saturating_add(hold_ms)),
            ..Deduct::new(order.clone(), quantity)
        });
        self.producer.send(sku.clone(), body).await
    }

    /// [`reserve`](Self::reserve) with a deadline of the caller's instead
    /// of a span from now (a payment window's end, say): after now and at
    /// most 7 days ahead, or refused naming `expires_at`.
    ///
    /// ```no_run
    /// # async fn example(ledger: stockledger_client::Ledger) -> Result<(), Box<dyn std::error::Error>> {
    /// use std::time::{Duration, SystemTime};
    ///
    /// use stockledger_client::{OrderId, Quantity, Sku};
    ///
    /// let window_ends = SystemTime::now() + Duration::from_secs(600);
    /// let (sku, order) = (Sku::new("SKU-1")?, OrderId::new("o-3")?);
    /// ledger.reserve_until(&sku, &order, Quantity::new(1)?, window_ends, None).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn reserve_until(
        &self,
        sku: &Sku,
        order: &OrderId,
        quantity: Quantity,
        until: SystemTime,
        user: Option<&UserId>,
    ) -> Result<Receipt, ProducerError> {
        let since_epoch = until.duration_since(UNIX_EPOCH).unwrap_or_default();
        let body = CommandBody::Deduct(Deduct {
            user_id: user.cloned(),
            expires_at: Some(i64::try_from(since_epoch.as_millis()).unwrap_or(i64::MAX)),
            ..Deduct::new(order.clone(), quantity)
        });
        self.producer.send(sku.clone(), body).await
    }

    /// Sells what `order` holds of `sku` (on time: up to its deadline).
    ///
    /// ```no_run
    /// # async fn example(ledger: stockledger_client::Ledger) -> Result<(), Box<dyn std::error::Error>> {
    /// use stockledger_client::{OrderId, ResultCode, Sku};
    ///
    /// let sold = ledger.confirm(&Sku::new("SKU-1")?, &OrderId::new("o-2")?).await?;
    /// let on_time = ledger.decision(&sold).await?.result == ResultCode::Confirmed;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn confirm(&self, sku: &Sku, order: &OrderId) -> Result<Receipt, ProducerError> {
        let body = CommandBody::Confirm(Confirm {
            order_id: order.clone(),
        });
        self.producer.send(sku.clone(), body).await
    }

    /// Gives back what `order` took or holds of `sku`; sent before its
    /// deduction, that deduction is refused when it comes.
    ///
    /// ```no_run
    /// # async fn example(ledger: stockledger_client::Ledger) -> Result<(), Box<dyn std::error::Error>> {
    /// use stockledger_client::{OrderId, Sku};
    ///
    /// ledger.rollback(&Sku::new("SKU-1")?, &OrderId::new("o-2")?, Some("payment failed")).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn rollback(
        &self,
        sku: &Sku,
        order: &OrderId,
        reason: Option<&str>,
    ) -> Result<Receipt, ProducerError> {
        let body = CommandBody::Rollback(Rollback::new(order.clone(), reason.map(str::to_owned))?);
        self.producer.send(sku.clone(), body).await
    }

    /// Gives back units `order` bought: `total` is the order's refunded
    /// units once done (a running total, so a repeat refunds once); `None`
    /// refunds all of it.
    ///
    /// ```no_run
    /// # async fn example(ledger: stockledger_client::Ledger) -> Result<(), Box<dyn std::error::Error>> {
    /// use stockledger_client::{OrderId, Quantity, Sku};
    ///
    /// let (sku, order) = (Sku::new("SKU-1")?, OrderId::new("o-1")?);
    /// ledger.refund(&sku, &order, Some(Quantity::new(1)?)).await?; // one of the two back
    /// ledger.refund(&sku, &order, None).await?; // and the rest
    /// # Ok(())
    /// # }
    /// ```
    pub async fn refund(
        &self,
        sku: &Sku,
        order: &OrderId,
        total: Option<Quantity>,
    ) -> Result<Receipt, ProducerError> {
        let body = CommandBody::Refund(Refund {
            order_id: order.clone(),
            quantity: total,
        });
        self.producer.send(sku.clone(), body).await
    }

    /// Adds to (`RestockMode::Add`, negative to remove) or sets
    /// (`RestockMode::Set`) the stock of `sku`; `adjustment` names it so a
    /// repeat applies once.
    ///
    /// ```no_run
    /// # async fn example(ledger: stockledger_client::Ledger) -> Result<(), Box<dyn std::error::Error>> {
    /// use stockledger_client::{AdjustmentId, RestockMode, Sku};
    ///
    /// let sku = Sku::new("SKU-1")?;
    /// ledger.restock(&sku, &AdjustmentId::new("count-2026-11")?, RestockMode::Set, 40).await?;
    /// ledger.restock(&sku, &AdjustmentId::new("delivery-17")?, RestockMode::Add, 10).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn restock(
        &self,
        sku: &Sku,
        adjustment: &AdjustmentId,
        mode: RestockMode,
        quantity: i64,
    ) -> Result<Receipt, ProducerError> {
        let body = CommandBody::Restock(Restock::new(adjustment.clone(), mode, quantity)?);
        self.producer.send(sku.clone(), body).await
    }

    /// Restocks the stock of `sku` at `location` (a warehouse, a store):
    /// `ADD` a signed amount there or `SET` its total there. A SKU keeps
    /// its stock in one place or by location, never both: the first
    /// restock naming a location moves a SKU whose total is 0 to
    /// locations, and from then on every restock names one.
    ///
    /// ```no_run
    /// # async fn example(ledger: stockledger_client::Ledger) -> Result<(), Box<dyn std::error::Error>> {
    /// use stockledger_client::{AdjustmentId, LocationId, RestockMode, Sku};
    ///
    /// let (sku, berlin) = (Sku::new("MUG-1")?, LocationId::new("berlin")?);
    /// ledger.restock_at(&sku, &AdjustmentId::new("po-17")?, &berlin, RestockMode::Add, 40).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn restock_at(
        &self,
        sku: &Sku,
        adjustment: &AdjustmentId,
        location: &LocationId,
        mode: RestockMode,
        quantity: i64,
    ) -> Result<Receipt, ProducerError> {
        let restock = Restock::new(adjustment.clone(), mode, quantity)?.at(location.clone())?;
        self.producer
            .send(sku.clone(), CommandBody::Restock(restock))
            .await
    }

    /// Takes `quantity` of `sku` for `order` from `location` only (sold),
    /// counted against `user`'s per-user limit if given. Refused
    /// (`REJECTED_INSUFFICIENT`) when the location is unknown or has too
    /// little; [`deduct`](Self::deduct) leaves the choice of location to
    /// the ledger, and its decision's `location` says which it took.
    ///
    /// ```no_run
    /// # async fn example(ledger: stockledger_client::Ledger) -> Result<(), Box<dyn std::error::Error>> {
    /// use stockledger_client::{LocationId, OrderId, Quantity, Sku};
    ///
    /// let sku = Sku::new("MUG-1")?;
    /// let sent = ledger
    ///     .deduct_from(&sku, &LocationId::new("paris")?, &OrderId::new("o-1")?, Quantity::new(2)?, None)
    ///     .await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn deduct_from(
        &self,
        sku: &Sku,
        location: &LocationId,
        order: &OrderId,
        quantity: Quantity,
        user: Option<&UserId>,
    ) -> Result<Receipt, ProducerError> {
        let body = CommandBody::Deduct(Deduct {
            user_id: user.cloned(),
            ..Deduct::new(order.clone(), quantity).at(location.clone())?
        });
        self.producer.send(sku.clone(), body).await
    }

    /// Moves `quantity` available units of `sku` from one location to
    /// another (added if not stocked before), all or nothing; `transfer`
    /// names it so a repeat moves once. What orders hold stays where it is.
    ///
    /// ```no_run
    /// # async fn example(ledger: stockledger_client::Ledger) -> Result<(), Box<dyn std::error::Error>> {
    /// use stockledger_client::{LocationId, Quantity, Sku, TransferId};
    ///
    /// let (berlin, paris) = (LocationId::new("berlin")?, LocationId::new("paris")?);
    /// let moved = ledger
    ///     .transfer(&Sku::new("MUG-1")?, &TransferId::new("tr-9")?, &berlin, &paris, Quantity::new(3)?)
    ///     .await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn transfer(
        &self,
        sku: &Sku,
        transfer: &TransferId,
        from: &LocationId,
        to: &LocationId,
        quantity: Quantity,
    ) -> Result<Receipt, ProducerError> {
        let moved = Transfer::new(transfer.clone(), from.clone(), to.clone(), quantity)?;
        self.producer
            .send(sku.clone(), CommandBody::Transfer(moved))
            .await
    }

    /// Takes exactly these named units of `sku` for `order` (seats), all
    /// or none, in one step: sold at once, or with `hold` held that long
    /// (at most 7 days) until confirmed, rolled back or expired. Refused
    /// (`REJECTED_INSUFFICIENT`) naming the units that were not free.
    ///
    /// ```no_run
    /// # async fn example(ledger: stockledger_client::Ledger) -> Result<(), Box<dyn std::error::Error>> {
    /// use std::time::Duration;
    ///
    /// use stockledger_client::{OrderId, Sku, UnitId};
    ///
    /// let seats = [UnitId::new("7-12")?, UnitId::new("7-13")?];
    /// let sku = Sku::new("show-2026-12-01-20h")?;
    /// let held = ledger
    ///     .take_units(&sku, &OrderId::new("o-9")?, &seats, Some(Duration::from_secs(900)), None)
    ///     .await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn take_units(
        &self,
        sku: &Sku,
        order: &OrderId,
        units: &[UnitId],
        hold: Option<Duration>,
        user: Option<&UserId>,
    ) -> Result<Receipt, ProducerError> {
        let expires_at = hold.map(|hold| {
            let hold_ms = i64::try_from(hold.as_millis()).unwrap_or(i64::MAX);
            now_millis().saturating_add(hold_ms)
        });
        let body = CommandBody::Deduct(Deduct {
            user_id: user.cloned(),
            expires_at,
            ..Deduct::for_units(order.clone(), units)?
        });
        self.producer.send(sku.clone(), body).await
    }

    /// Adds these named units to `sku`, free (a show's seats, at most
    /// 1,000 a restock); `adjustment` names it so a repeat applies once.
    /// A SKU sells named units or counted stock, never both.
    ///
    /// ```no_run
    /// # async fn example(ledger: stockledger_client::Ledger) -> Result<(), Box<dyn std::error::Error>> {
    /// use stockledger_client::{AdjustmentId, Sku, UnitId};
    ///
    /// let row: Vec<UnitId> = (1..=20).map(|n| UnitId::new(format!("7-{n}"))).collect::<Result<_, _>>()?;
    /// ledger.add_units(&Sku::new("show-2026-12-01-20h")?, &AdjustmentId::new("row-7")?, &row).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn add_units(
        &self,
        sku: &Sku,
        adjustment: &AdjustmentId,
        units: &[UnitId],
    ) -> Result<Receipt, ProducerError> {
        let body = CommandBody::Restock(Restock::units(adjustment.clone(), units)?);
        self.producer.send(sku.clone(), body).await
    }

    /// Caps what one user may hold and buy of `sku` (`None`: no cap).
    ///
    /// ```no_run
    /// # async fn example(ledger: stockledger_client::Ledger) -> Result<(), Box<dyn std::error::Error>> {
    /// use stockledger_client::{Quantity, Sku};
    ///
    /// ledger.limit(&Sku::new("SKU-1")?, Some(Quantity::new(1)?)).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn limit(
        &self,
        sku: &Sku,
        per_user: Option<Quantity>,
    ) -> Result<Receipt, ProducerError> {
        let body = CommandBody::Limit(Limit { per_user });
        self.producer.send(sku.clone(), body).await
    }

    /// Sets (or, with `None`, lifts) the low-stock threshold of `sku`: a
    /// decision that takes available stock from at or above it to below it
    /// says `LOW_STOCK` among its [`Decision::events`].
    ///
    /// ```no_run
    /// # async fn example(ledger: stockledger_client::Ledger) -> Result<(), Box<dyn std::error::Error>> {
    /// use stockledger_client::{Quantity, Sku};
    ///
    /// ledger.alerts(&Sku::new("SKU-1")?, Some(Quantity::new(10)?)).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn alerts(
        &self,
        sku: &Sku,
        low_stock_below: Option<Quantity>,
    ) -> Result<Receipt, ProducerError> {
        let body = CommandBody::Alerts(Alerts { low_stock_below });
        self.producer.send(sku.clone(), body).await
    }

    /// Sets when `sku` sells: from `opens_at` until `closes_at` (either
    /// `None`: no opening, no closing; both: the window is lifted), by the
    /// records' times in the log. Deducts, holds and basket lines stamped
    /// before the opening are refused `REJECTED_NOT_OPEN`, from the
    /// closing `REJECTED_CLOSED`; settling commands never. `change` names
    /// it, so a repeat applies once. Refused before sending when
    /// `closes_at` is not after `opens_at` or either is more than a year
    /// ahead.
    ///
    /// ```no_run
    /// # async fn example(ledger: stockledger_client::Ledger) -> Result<(), Box<dyn std::error::Error>> {
    /// use std::time::{Duration, SystemTime};
    ///
    /// use stockledger_client::{ChangeId, Sku};
    ///
    /// // A flash sale that opens in ten minutes, for an hour.
    /// let opens = SystemTime::now() + Duration::from_secs(600);
    /// let sku = Sku::new("SKU-1")?;
    /// ledger.window(&sku, &ChangeId::new("sale-1")?, Some(opens), Some(opens + Duration::from_secs(3_600))).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn window(
        &self,
        sku: &Sku,
        change: &ChangeId,
        opens_at: Option<SystemTime>,
        closes_at: Option<SystemTime>,
    ) -> Result<Receipt, ProducerError> {
        let millis =
            |field, at: Option<SystemTime>| at.map(|at| epoch_millis(field, at)).transpose();
        let window = SaleWindow::new(
            millis("opens_at", opens_at)?,
            millis("closes_at", closes_at)?,
        )?;
        let body = CommandBody::Window(Window {
            change_id: change.clone(),
            window,
        });
        self.producer.send(sku.clone(), body).await
    }

    /// Stops selling `sku` at once: deducts, holds and basket lines are
    /// refused `REJECTED_PAUSED` until [`Ledger::resume`]; confirms,
    /// rollbacks, refunds, expiries and restocks are still taken. `change`
    /// names it, so a repeat applies once.
    ///
    /// ```no_run
    /// # async fn example(ledger: stockledger_client::Ledger) -> Result<(), Box<dyn std::error::Error>> {
    /// use stockledger_client::{ChangeId, Sku};
    ///
    /// ledger.pause(&Sku::new("SKU-1")?, &ChangeId::new("stop-1")?).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn pause(&self, sku: &Sku, change: &ChangeId) -> Result<Receipt, ProducerError> {
        let body = CommandBody::Pause(Pause {
            change_id: change.clone(),
        });
        self.producer.send(sku.clone(), body).await
    }

    /// Ends a pause of `sku`. `change` names it, so a repeat applies once.
    ///
    /// ```no_run
    /// # async fn example(ledger: stockledger_client::Ledger) -> Result<(), Box<dyn std::error::Error>> {
    /// use stockledger_client::{ChangeId, Sku};
    ///
    /// ledger.resume(&Sku::new("SKU-1")?, &ChangeId::new("go-1")?).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn resume(&self, sku: &Sku, change: &ChangeId) -> Result<Receipt, ProducerError> {
        let body = CommandBody::Resume(Resume {
            change_id: change.clone(),
        });
        self.producer.send(sku.clone(), body).await
    }

    /// Sends a command whose body was made elsewhere (parsed from a
    /// request, read from a file): checked as the typed methods' are.
    ///
    /// ```no_run
    /// # async fn example(ledger: stockledger_client::Ledger) -> Result<(), Box<dyn std::error::Error>> {
    /// use stockledger_client::{CommandBody, Deduct, OrderId, Quantity, Sku};
    ///
    /// let body = CommandBody::Deduct(Deduct::new(OrderId::new("o-9")?, Quantity::new(1)?));
    /// let sent = ledger.send(&Sku::new("SKU-1")?, body).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn send(&self, sku: &Sku, body: CommandBody) -> Result<Receipt, ProducerError> {
        self.producer.send(sku.clone(), body).await
    }

    /// Asks the ledger to end the hold of `order` on `sku`: it does once
    /// the record's time is past the hold's deadline (`IGNORED_NOT_DUE`
    /// before). The applier sends these itself; an operator may too.
    ///
    /// ```no_run
    /// # async fn example(ledger: stockledger_client::Ledger) -> Result<(), Box<dyn std::error::Error>> {
    /// use stockledger_client::{OrderId, Sku};
    ///
    /// ledger.expire(&Sku::new("SKU-1")?, &OrderId::new("o-2")?).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn expire(&self, sku: &Sku, order: &OrderId) -> Result<Receipt, ProducerError> {
        let body = CommandBody::Expire(Expire {
            order_id: order.clone(),
        });
        self.producer.send(sku.clone(), body).await
    }

    /// The decision for `receipt`'s command, waiting up to the builder's
    /// [`decision_timeout`](LedgerBuilder::decision_timeout).
    ///
    /// ```no_run
    /// # async fn example(ledger: stockledger_client::Ledger, sent: stockledger_client::Receipt) -> Result<(), Box<dyn std::error::Error>> {
    /// let decision = ledger.decision(&sent).await?;
    /// println!("{}: available {}", decision.result, decision.available);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn decision(&self, receipt: &Receipt) -> Result<Decision, OutcomeError> {
        self.decision_within(receipt, self.decision_timeout).await
    }

    /// The decision for `receipt`'s command, waiting up to `timeout`
    /// ([`OutcomeError::Timeout`] then: the command is in the log and will
    /// still be decided).
    ///
    /// ```no_run
    /// # async fn example(ledger: stockledger_client::Ledger, sent: stockledger_client::Receipt) -> Result<(), Box<dyn std::error::Error>> {
    /// let decision = ledger.decision_within(&sent, std::time::Duration::from_millis(200)).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn decision_within(
        &self,
        receipt: &Receipt,
        timeout: Duration,
    ) -> Result<Decision, OutcomeError> {
        match &self.decisions {
            Some(source) => source.wait(receipt, timeout).await,
            None => Err(OutcomeError::WatcherStopped),
        }
    }

    /// Holds every line of `basket` until its deadline, or none: a line
    /// refused makes the lines granted rolled back before the answer says
    /// `refused` (see [`basket`](crate::basket) for the protocol). `Err`
    /// when a line could not be settled: ask again with the same basket.
    ///
    /// ```no_run
    /// # async fn example(ledger: stockledger_client::Ledger) -> Result<(), Box<dyn std::error::Error>> {
    /// use stockledger_client::basket::{BasketHold, BasketStatus, Line};
    /// use stockledger_client::{BasketId, Quantity, Sku};
    ///
    /// let lines = vec![
    ///     Line { sku: Sku::new("SKU-1")?, quantity: Quantity::new(2)? },
    ///     Line { sku: Sku::new("SKU-2")?, quantity: Quantity::new(1)? },
    /// ];
    /// let deadline = std::time::SystemTime::now()
    ///     .duration_since(std::time::UNIX_EPOCH)?
    ///     .as_millis() as i64
    ///     + 900_000;
    /// let basket = BasketHold::new(BasketId::new("cart-9")?, None, deadline, lines)?;
    /// let held = ledger.hold_basket(&basket).await?;
    /// if held.status == BasketStatus::Held {
    ///     let skus: Vec<Sku> = held.lines.iter().map(|l| l.sku.clone()).collect();
    ///     ledger.confirm_basket(basket.basket_id(), &skus).await?;
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn hold_basket(
        &self,
        basket: &crate::basket::BasketHold,
    ) -> Result<crate::basket::BasketAnswer, crate::basket::Unsettled> {
        crate::basket::hold(self, basket).await
    }

    /// Sells every line of basket `basket_id` (its lines are on `skus`), or
    /// none: the answer is `confirmed`, or `failed` naming the line that
    /// could not be and why, the others refunded.
    pub async fn confirm_basket(
        &self,
        basket_id: &BasketId,
        skus: &[Sku],
    ) -> Result<crate::basket::BasketAnswer, crate::basket::Unsettled> {
        crate::basket::confirm(self, basket_id, skus).await
    }

    /// Gives back every line of basket `basket_id` (on `skus`).
    pub async fn release_basket(
        &self,
        basket_id: &BasketId,
        skus: &[Sku],
        reason: Option<&stockledger_core::Reason>,
    ) -> Result<crate::basket::BasketAnswer, crate::basket::Unsettled> {
        crate::basket::release(self, basket_id, skus, reason).await
    }

    /// The producer underneath, for what only it offers (`try_send`,
    /// `send_traced`).
    ///
    /// ```no_run
    /// # async fn example(ledger: stockledger_client::Ledger) -> Result<(), Box<dyn std::error::Error>> {
    /// use stockledger_client::{CommandBody, Deduct, OrderId, Quantity, Sku};
    ///
    /// // Refused at once when librdkafka's queue is full, instead of waiting.
    /// let body = CommandBody::Deduct(Deduct::new(OrderId::new("o-9")?, Quantity::new(1)?));
    /// ledger.producer().try_send(Sku::new("SKU-1")?, body).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn producer(&self) -> &LedgerProducer {
        &self.producer
    }
}

impl crate::basket::Decide for Ledger {
    async fn send(&self, sku: &Sku, body: CommandBody) -> Result<Receipt, ProducerError> {
        self.producer.send(sku.clone(), body).await
    }

    async fn wait(&self, receipt: &Receipt) -> Result<Decision, OutcomeError> {
        self.decision(receipt).await
    }
}

/// `at` in milliseconds since the Unix epoch, refused naming `field` when
/// it is before the epoch.
fn epoch_millis(field: &'static str, at: SystemTime) -> Result<i64, ValidationError> {
    at.duration_since(UNIX_EPOCH)
        .ok()
        .and_then(|d| i64::try_from(d.as_millis()).ok())
        .ok_or_else(|| ValidationError::new(field, "is before 1970-01-01T00:00:00Z"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_contract_setting_is_refused_when_built_naming_it() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap_or_else(|e| panic!("{e}"));
        let built = runtime.block_on(
            Ledger::builder()
                .property("enable.idempotence", "false")
                .without_decisions()
                .build(),
        );
        match built {
            Err(BuildError::Producer(ProducerError::ContractSetting { name, .. })) => {
                assert_eq!(name, "enable.idempotence")
            }
            other => panic!("{other:?}"),
        }
    }
}
