//! Keeping the Redis projection sound and small, by the operator's hand.
//!
//! - [`snapshot`]: a snapshot of the projection, with the applier group's
//!   offsets, stored in PostgreSQL; and restoring one, for a replay that
//!   starts from it.
//! - [`reconcile`]: checking Redis against the archive, SKU by SKU.
//! - [`compact`]: pruning from Redis the history older than a retention
//!   window that the archive already holds.
//!
//! Every read and write of a SKU's state goes through
//! `stockledger_projection::Projection`; nothing here knows the Redis
//! layout, and nothing here writes the archive's rows.

pub mod compact;
pub mod reconcile;
pub mod snapshot;
