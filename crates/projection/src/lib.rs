//! The Redis projection of the ledger: the one place that knows how a
//! SKU's state is laid out in Redis, and every read and write of it. The
//! applier, replay, swap, snapshot and restore, reconcile, compaction and
//! the order services' decision lookup all go through [`Projection`].
//!
//! - [`keys`]: the key of each hash of a SKU (the SKU as hash tag, so one
//!   Lua call may touch them all in a Redis Cluster), the marker, the
//!   channel announcing applied offsets.
//! - [`encoding`]: the fields of the stock hash and the compact forms of an
//!   order's entry and of a decision.
//! - [`fold`]: the one fold path, [`Projection::prepare`] then
//!   [`Projection::apply`], which the applier and replay both take.
//! - `batch` (private to [`fold`]): a batch of records grouped into runs,
//!   one script call each.
//! - [`Projection`]: one prefix in one Redis or Redis Cluster, with the Lua
//!   scripts in `lua/` (apply, swap, compact).

mod batch;
pub mod encoding;
pub mod fold;
pub mod keys;
mod projection;

pub use fold::{Entry, Prepared};
pub use projection::{BasketLine, Marker, Projection, ProjectionError, SkuExport, SkuPages, Stock};
