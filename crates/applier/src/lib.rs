//! The ordered applier, replay, and the checks of the Redis projection
//! (`stockledger-projection`) against the log.
//!
//! - [`applier`]: the consumer-group member that turns the command log into
//!   decisions: batches per partition decided with the core's machine and
//!   written in one fenced transaction, outcomes published, offsets
//!   committed after, undecodable records dead-lettered.
//! - [`expiry`]: the expirer, which appends an `Expire` record for each
//!   reservation past its deadline, so the log decides every expiry.
//! - [`baskets`]: the settler, which refunds the sold lines of a basket
//!   left partly sold past its deadline, so no basket stays partly sold.
//! - [`check`]: the reference fold of the command log, and comparing the
//!   projection with it.
//! - [`record`]: what a command-topic record means (command or refusal).
//! - [`replay`]: rebuilding a prefix from the log and swapping it in.
//! - [`repartition`]: copying the log into a topic with another partition
//!   count, each record on its SKU's new home partition.
//! - [`redrive`]: sending dead letters back to the command topic once they
//!   are commands the applier would decide, each once.

pub mod applier;
pub mod baskets;
pub mod check;
pub mod deliveries;
pub mod expiry;
pub mod record;
pub mod redrive;
pub mod repartition;
pub mod replay;

pub use applier::{run, ApplierConfig, ApplierError, ApplierStats};
