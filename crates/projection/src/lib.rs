//! The Redis projection of the ledger: the one place that knows how a
//! SKU's state is laid out in Redis, and every read and write of it. The
//! applier, replay, swap, snapshot and restore, reconcile, compaction and
//! the order services' decision lookup all go through [`Projection`].
//!
//! - [`keys`]: the key of each hash of a SKU (the SKU as hash tag, so one
//!   transaction may touch them all in a Redis Cluster), the marker, the
//!   channel announcing applied offsets.
//! - [`encoding`]: the fields of the stock hash and the compact forms of an
//!   order's entry and of a decision.
//! - [`fold`]: the one fold path, [`Projection::prepare`] then
//!   [`Projection::apply`], which the applier and replay both take: read
//!   what a batch needs, decide with the core's machine, write what changed
//!   in one fenced step.
//! - `fence` (private): what the projection last saw of its marker, which
//!   a write on a single Redis must still find there to land, and that
//!   write: a transaction under `WATCH`, no script.
//! - `stage` (private to [`fold`]): one SKU's share of a batch: the part of
//!   its state the records read, the decisions, the fields they changed.
//! - `write` (private): how those changes reach Redis, fenced.
//! - [`Projection`]: one prefix in one Redis or Redis Cluster, with the Lua
//!   scripts in `lua/`. None of them decides anything: `load` reads a
//!   batch's fields, `write` writes a batch's changes on a cluster, fenced
//!   per SKU, and marks alone, `generation` moves a marked prefix's
//!   generation for a restore, `swap` swaps a rebuilt SKU in, `compact` prunes history, `units` reads a seat map.

pub mod encoding;
mod fence;
pub mod fold;
mod heads;
pub mod keys;
mod projection;
mod reply;
mod stage;
mod write;

pub use fold::{Entry, Prepared};
pub use heads::{DEFAULT_CACHED_FIELDS, DEFAULT_CACHED_SKUS};
pub use projection::{
    redis_is_transient, BasketLine, Marker, Projection, ProjectionError, Sale, SkuExport, SkuPages,
    Stock, StopNote,
};
#[doc(hidden)]
pub use stage::stage_without_redis;
