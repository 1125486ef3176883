//! The operator's tools: rebuilding, moving and checking what the applier
//! built, and keeping the Redis projection sound and small.
//!
//! - [`replay`]: rebuilding a prefix of the projection from the log and
//!   swapping it in.
//! - [`repartition`]: copying the log into a topic with another partition
//!   count, each record on its SKU's new home partition.
//! - [`redrive`]: sending dead letters back to the command topic once they
//!   are commands the applier would decide, each once.
//! - [`check`]: the reference fold of the command log, and comparing the
//!   projection with it.
//! - [`snapshot`]: a snapshot of the projection, with the applier group's
//!   offsets, stored in PostgreSQL; and restoring one, for a replay that
//!   starts from it.
//! - [`reconcile`]: checking Redis against the archive, SKU by SKU.
//! - [`compact`]: pruning from Redis the history older than a retention
//!   window that the archive already holds.
//!
//! Every read and write of a SKU's state goes through
//! `stockledger_projection::Projection`, and every record is decided by the
//! core's machine; nothing here knows the Redis layout, and nothing here
//! writes the archive's rows.

pub mod check;
pub mod compact;
pub mod reconcile;
pub mod redrive;
pub mod repartition;
pub mod replay;
pub mod snapshot;
