//! How stockledger talks to Kafka. It knows nothing of commands, so the
//! library order services link, the applier and the archiver all build on
//! it without depending on each other; it touches neither Redis nor
//! PostgreSQL.
//!
//! - [`config`]: brokers and pass-through librdkafka settings, with secrets
//!   kept out of logs; the settings the contract needs.
//! - [`admin`]: creating the ledger's topics, reading their configuration.
//! - [`group`]: static group membership and a bounded final commit.
//! - [`topic`]: reading a whole topic to its end, partitions, a group's
//!   committed offsets.
//! - [`lag`]: consumer lag from librdkafka's statistics.
//! - [`names`]: the services' default consumer groups and the dead-letter
//!   topic's headers.

pub mod admin;
pub mod config;
pub mod group;
pub mod lag;
pub mod names;
pub mod topic;

pub use config::KafkaConfig;
