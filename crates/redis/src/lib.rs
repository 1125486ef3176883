//! The connection to the Redis that holds the projection: one type for a
//! single server or a Redis Cluster ([`RedisConn`]), and a walk over every
//! master's keys ([`KeyScan`]). It knows no key layout: that is
//! `stockledger-projection`'s alone.

mod conn;

pub use conn::{seed_urls, KeyScan, RedisConn};
