//! The analysts' read side of the archive the archiver writes in
//! PostgreSQL. It only reads: connect it as the `stockledger_analyst`
//! role (`stockledger_archiver::connect_as`), which may not write.
//!
//! - [`query`]: history pages with time ranges and result filters, stock
//!   as of a time or an offset, per-interval reports and counts, for the
//!   CLI, the HTTP gateway and the checks.
//! - [`export`]: archived rows to a new CSV or Parquet file.
//! - [`live`]: the last minutes, for the console and `status`.
//!
//! It touches neither Kafka nor Redis, and owns no table: the archive's
//! schema and roles are the archiver's (`stockledger_archiver::MIGRATOR`).

pub mod export;
#[macro_use]
mod sql;
pub mod live;
pub mod query;
mod report;
mod time;
