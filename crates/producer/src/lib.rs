//! The library order services link to talk to the stock ledger.
//!
//! - [`kafka`]: broker address and librdkafka settings shared by every
//!   stockledger client, with secrets kept out of `Debug`.
//! - [`admin`]: creating the ledger's topics.
//! - [`producer`]: [`LedgerProducer`] validates a command, appends it to the
//!   command topic keyed by SKU with the idempotent producer, and returns
//!   its log position once the brokers hold it.
//! - [`outcome`]: [`OutcomeReader`] waits, with a deadline, for the decision
//!   the applier took for a sent command.
//! - [`redis_conn`]: [`RedisConn`], a connection to a single Redis or a
//!   Redis Cluster, shared by every component that reads the projection.

pub mod admin;
pub mod kafka;
pub mod outcome;
pub mod producer;
pub mod redis_conn;

pub use kafka::{redact_url, KafkaConfig};
pub use outcome::OutcomeReader;
pub use producer::{LedgerProducer, ProducerError, Receipt};
pub use redis_conn::{KeyScan, RedisConn};
