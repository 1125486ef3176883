//! The ordered applier and the Redis projection it maintains.
//!
//! - [`applier`]: the consumer-group member that turns the command log into
//!   decisions: batches per partition, one Lua call per SKU run, outcomes
//!   published, offsets committed after, undecodable records dead-lettered.
//! - [`projection`]: the Redis side: the apply script (`lua/apply.lua`) and
//!   reading a SKU's state back.
//! - [`check`]: the reference fold of the command log, and comparing the
//!   projection with it.
//! - [`record`]: what a command-topic record means (command or refusal).
//! - [`replay`]: rebuilding a prefix from the log and swapping it in.

pub mod applier;
pub mod check;
pub mod projection;
pub mod record;
pub mod replay;

pub use applier::{run, ApplierConfig, ApplierError, ApplierStats};
pub use projection::{Projection, ProjectionError};
