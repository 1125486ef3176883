//! The ordered applier and the Redis projection it maintains.
//!
//! - [`applier`]: the consumer-group member that turns the command log into
//!   decisions: batches per partition, one Lua call per SKU run, outcomes
//!   published, offsets committed after, undecodable records dead-lettered.
//! - [`projection`]: the Redis side: the apply script (`lua/apply.lua`) and
//!   reading a SKU's state back.
//! - [`check`]: comparing the projection with the reference fold of the log.
//! - [`record`]: what a command-topic record means (command or refusal).
//! - [`replay`]: rebuilding a prefix from the log and swapping it in.
//! - [`stop`]: a shutdown future as a flag loops can check.
//! - [`log`]: reading a topic to its end and folding the command log through
//!   the reference state machine (for checks, demo and replay).

pub mod applier;
pub mod check;
mod lag;
pub mod log;
pub mod projection;
pub mod record;
pub mod replay;
pub mod stop;

pub use applier::{run, ApplierConfig, ApplierError, ApplierStats};
pub use projection::{Projection, ProjectionError};
