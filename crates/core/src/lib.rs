//! The pure core of stockledger. Nothing here does I/O, so everything is
//! tested with plain unit tests.
//!
//! - [`ids`]: validated identifiers and quantities; a bad value is refused
//!   with a [`ValidationError`] naming the field.
//! - [`command`]: the commands order services append to the log
//!   (`Deduct`, `Rollback`, `Restock`).
//! - [`outcome`]: log positions, the decision taken for one record, and the
//!   outcome message archived for it.
//! - [`machine`]: the reference state machine. The applier's Lua scripts
//!   must decide exactly what [`machine::SkuState::apply`] decides.
//! - [`keys`]: the Redis key layout (SKU as hash tag).
//! - [`codec`]: Avro single-object encoding of commands and outcomes, with
//!   the schemas from the repository's `schemas/` directory.

pub mod codec;
pub mod command;
pub mod ids;
pub mod keys;
pub mod machine;
pub mod outcome;
pub mod schema;

pub use command::{Command, CommandBody, CommandKind, Deduct, Restock, RestockMode, Rollback};
pub use ids::{AdjustmentId, CommandId, OrderId, Quantity, Sku, ValidationError};
pub use machine::{Ledger, OrderEntry, OrderStatus, SkuState};
pub use outcome::{Decision, LogPosition, Outcome, ResultCode};
