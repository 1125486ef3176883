//! The pure core of stockledger. Nothing here does I/O, so everything is
//! tested with plain unit tests.
//!
//! - [`ids`]: validated identifiers and quantities; a bad value is refused
//!   with a [`ValidationError`] naming the field.
//! - [`command`]: the commands order services append to the log
//!   (`Deduct`, which may be a reservation, `Rollback`, `Restock`,
//!   `Confirm`, `Refund`, `Expire`, `Limit`, `Transfer`, `Alerts`,
//!   `Window`, `Pause`, `Resume`).
//! - [`outcome`]: log positions, the decision taken for one record, and the
//!   outcome message archived for it.
//! - [`machine`]: the state machine. The applier and replay decide every
//!   record with [`machine::SkuState::apply`].
//! - [`basket`]: the one judge of a basket's lines: where it stands, and
//!   what one past its deadline needs to end sold whole or not at all.
//! - [`partition`]: which partition a SKU's commands belong on (the
//!   Java clients' murmur2 partitioner).
//! - [`record`]: what a command-topic record means: its command, or why it
//!   is none (its key must be the command's SKU).
//! - [`schema`]: the released schema versions (`schemas/history/`) and
//!   their fingerprints by the Avro specification's canonical form.
//! - [`codec`]: Avro single-object encoding of commands and outcomes: the
//!   newest version written, every released version read.
//! - [`report`]: an error and its causes as one line, each said once.

pub mod basket;
pub mod codec;
pub mod command;
pub mod ids;
pub mod machine;
pub mod outcome;
pub mod partition;
pub mod record;
pub mod report;
pub mod schema;
pub mod trace;

pub use command::{
    sells_always, Alerts, Command, CommandBody, CommandKind, Confirm, Deduct, Expire, Limit, Pause,
    Reason, Refund, Refused, Restock, RestockMode, Resume, Rollback, SalePhase, SaleWindow,
    Transfer, Window,
};
pub use ids::{
    AdjustmentId, BasketId, ChangeId, CommandId, LocationId, OrderId, Quantity, Sku, TransferId,
    UnitId, UserId, ValidationError,
};
pub use machine::{
    Changes, Hold, LocationStock, LogFold, OrderEntry, OrderStatus, Placement, SkuState, Unit,
    UnitState,
};
pub use outcome::{
    sold_out, sold_out_for_good, Decision, EventDedupe, Figures, LogPosition, Outcome, OutcomeView,
    ResultCode, StockEvent, StockEventKind, StockEvents,
};
