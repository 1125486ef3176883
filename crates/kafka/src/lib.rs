//! Shared plumbing of stockledger. It knows nothing of commands, so the
//! library order services link, the applier and the archiver all build on
//! it without depending on each other.
//!
//! - [`kafka`]: brokers and pass-through librdkafka settings, with secrets
//!   kept out of logs; URL redaction.
//! - [`admin`]: creating the ledger's topics.
//! - [`group`]: static group membership and a bounded final commit.
//! - [`topic`]: reading a whole topic to its end, partitions, a group's
//!   committed offsets.
//! - [`lag`]: consumer lag from librdkafka's statistics.
//! - [`redis_conn`]: one connection type for a single Redis or a Redis
//!   Cluster.
//! - [`retry`]: retrying with exponential backoff while a service is away.
//! - [`stop`]: the stop flag every long-running loop watches.

pub mod admin;
pub mod group;
pub mod kafka;
pub mod lag;
pub mod redis_conn;
pub mod retry;
pub mod stop;
pub mod topic;

pub use kafka::{redact_url, KafkaConfig};
pub use redis_conn::{KeyScan, RedisConn};
