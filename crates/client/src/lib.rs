//! The library order services link to talk to the stock ledger.
//!
//! - [`producer`]: [`LedgerProducer`] validates a command, appends it to the
//!   command topic keyed by SKU with the idempotent producer, and returns
//!   its log position once the brokers hold it.
//! - [`outcome`]: [`OutcomeReader`] waits, with a deadline, for the decision
//!   the applier took for a sent command.
//! - [`precheck`]: [`OrderChecks`], opt-in checks that refuse a confirm
//!   or refund of an order the projection does not know before it is sent.
//! - [`soldout`]: [`SoldOutGuard`], the opt-in sold-out fast path that
//!   refuses a deduct of a sold-out SKU without writing to the log.
//!
//! [`KafkaConfig`] (where the brokers are, pass-through librdkafka settings)
//! and the ledger's answers ([`Decision`], [`ResultCode`], [`LogPosition`],
//! with [`RestockMode`] to ask for a restock) come from `stockledger-kafka`
//! and `stockledger-core` and are re-exported here, so an order service
//! needs this crate alone.

pub mod outcome;
pub mod precheck;
pub mod producer;
pub mod soldout;

pub use outcome::OutcomeReader;
pub use precheck::OrderChecks;
pub use producer::{LedgerProducer, ProducerError, Receipt};
pub use soldout::{SoldOut, SoldOutGuard};
pub use stockledger_core::{Decision, LogPosition, RestockMode, ResultCode};
pub use stockledger_kafka::KafkaConfig;
