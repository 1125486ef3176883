//! The ordered applier and the services that append to the log beside it.
//!
//! - [`applier`]: the consumer-group member that turns the command log into
//!   decisions: batches per partition decided with the core's machine and
//!   written in one fenced transaction, outcomes published, offsets
//!   committed after, undecodable records dead-lettered.
//! - [`expiry`]: the expirer, which appends an `Expire` record for each
//!   reservation past its deadline, so the log decides every expiry.
//! - [`baskets`]: the settler, which refunds the sold lines of a basket
//!   left partly sold past its deadline, so no basket stays partly sold.
//! - [`deliveries`]: the applier's producer, its delivery reports counted
//!   a batch at a time, so a batch's offsets wait for its acknowledgements.
//!
//! What a command-topic record means is the core's
//! (`stockledger_core::record`); rebuilding the projection from the log,
//! repartitioning it, re-driving dead letters and checking the projection
//! against the log are operator tools (`stockledger-maintenance`).

pub mod applier;
pub mod baskets;
pub mod deliveries;
pub mod expiry;

pub use applier::{run, ApplierConfig, ApplierError, ApplierStats};
