//! The library order services link to talk to the stock ledger.
//!
//! - [`ledger`]: [`Ledger`], built with [`Ledger::builder`], is the one
//!   handle: typed commands, holds as [`Duration`](std::time::Duration)s,
//!   and their decisions read from the outcomes topic (Kafka is all it
//!   needs) or from Redis. `examples/checkout.rs` is a whole checkout
//!   with it.
//! - [`basket`]: several SKUs held together, all or none, confirmed or
//!   released together ([`Ledger::hold_basket`] and its siblings).
//! - [`decisions`]: [`TopicDecisions`], the
//!   reader of the outcomes topic underneath.
//! - [`producer`]: [`LedgerProducer`], the transport under [`Ledger`]
//!   ([`Ledger::producer`]): validates a command, appends it to the
//!   command topic keyed by SKU with the idempotent producer, and returns
//!   its log position once the brokers hold it.
//! - [`outcome`]: [`RedisDecisions`] waits, with a deadline, for the decision
//!   the applier took for a sent command.
//! - [`precheck`]: [`OrderChecks`], opt-in checks that refuse a confirm
//!   or refund of an order the projection does not know before it is sent.
//! - [`soldout`]: [`SoldOutGuard`], the opt-in sold-out fast path that
//!   refuses a deduct of a sold-out SKU without writing to the log.
//!
//! [`KafkaConfig`] (where the brokers are, pass-through librdkafka settings),
//! the identifiers a command is made of ([`Sku`], [`OrderId`], [`UserId`],
//! [`AdjustmentId`], [`Quantity`], each checked when made, with
//! [`ValidationError`] naming the field; the bodies [`Ledger::send`]
//! takes, [`CommandBody`] and its parts) and the ledger's answers
//! ([`Decision`], [`ResultCode`], [`LogPosition`], with [`RestockMode`] to
//! ask for a restock) come from `stockledger-kafka` and `stockledger-core`
//! and are re-exported here, so an order service needs this crate alone.

pub mod basket;
pub mod decisions;
pub mod ledger;
pub mod outcome;
pub mod precheck;
pub mod producer;
pub mod soldout;

pub use decisions::TopicDecisions;
pub use ledger::{BuildError, Ledger, LedgerBuilder};
pub use outcome::{OutcomeError, RedisDecisions};

/// The decisions read from Redis: [`RedisDecisions`], its name before it
/// was named for where it reads.
#[deprecated(note = "renamed RedisDecisions, for where it reads")]
pub type OutcomeReader = RedisDecisions;

/// The decisions read from the outcomes topic: [`TopicDecisions`], its name
/// before it was named for where it reads.
#[deprecated(note = "renamed TopicDecisions, for where it reads")]
pub type DecisionWatcher = TopicDecisions;
pub use precheck::OrderChecks;
pub use producer::{LedgerProducer, ProducerError, Receipt};
pub use soldout::{SoldOut, SoldOutGuard};
pub use stockledger_core::ids::{
    AdjustmentId, BasketId, ChangeId, CommandId, LocationId, OrderId, Quantity, Sku, TransferId,
    UnitId, UserId,
};
pub use stockledger_core::{
    Alerts, CommandBody, Confirm, Deduct, Expire, Limit, LocationStock, Pause, Reason, Refund,
    Restock, Resume, Rollback, SalePhase, SaleWindow, StockEventKind, StockEvents, Transfer, Unit,
    Window,
};
pub use stockledger_core::{Decision, LogPosition, RestockMode, ResultCode, ValidationError};
pub use stockledger_kafka::KafkaConfig;

/// The README's and the producers' guide's Rust snippets, compiled as
/// doctests so they stay true.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
#[doc = include_str!("../../../docs/producers.md")]
pub struct DocumentedSnippets;
