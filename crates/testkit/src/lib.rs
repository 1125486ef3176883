//! Test services for stockledger.
//!
//! - [`services`](mod@services): where Kafka, Redis and PostgreSQL are for this test
//!   process: URLs from the environment (`KAFKA_BROKERS`, `REDIS_URL`,
//!   `DATABASE_URL`) when set, else local binaries started on free loopback
//!   ports (a Kafka-compatible `tansu` broker, `redis-server`) that stop
//!   when the test process ends.
//! - [`harness`]: a fresh namespace per test (topics, key prefix, consumer
//!   groups) so tests run in parallel, with the applier and archiver run
//!   in-process and stopped deterministically.
//! - [`ids`]: identifiers made from literals, for commands in tests.
//! - [`contract`]: the contract checked against the reference fold of the
//!   log, as [`Harness`] methods (`assert_contract` and its parts).
//! - [`cluster`]: a local Redis Cluster of the test's own.
//! - [`kafka_cluster`]: a replicated Apache Kafka (three KRaft nodes) of the
//!   test's own, whose nodes can be killed and started again.
//! - [`fault`]: a loopback TCP proxy that cuts a service off and lets it back.
//! - [`nemesis`]: seeded schedules of faults for a nemesis run.
//! - [`poison`]: records that are not valid commands.
//! - [`traffic`]: order traffic for end-to-end and fault tests.
//! - [`wait`]: awaiting a condition with a deadline, instead of sleeping.
//! - [`workload`]: random command logs and delivery schedules (proptest).
//! - [`redis_dump`]: every key of a prefix, dumped, for byte-level comparison.

pub mod cluster;
pub mod contract;
pub mod fault;
pub mod harness;
pub mod ids;
pub mod kafka_cluster;
pub mod log;
pub mod nemesis;
pub mod poison;
pub mod redis_dump;
pub mod services;
pub mod traffic;
pub mod wait;
pub mod workload;

pub use harness::{reset_group_offsets, Component, Harness, Namespace};
pub use services::{services, Services};
pub use wait::wait_until;
