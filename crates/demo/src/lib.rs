//! The demo's flash sale, as a library: `stockledger demo` runs it and
//! prints its report, and the tests run its parts against the test stack.
//!
//! - [`sale`]: one whole run: its own topics and prefix, the applier and
//!   the archiver started beside it, the sale put up, the buyers let in,
//!   the pipeline awaited, a [`sale::Report`].
//! - [`workload`]: the buyers (the hot SKU's orders, the baskets, the
//!   show's parties) and what each was answered.
//! - [`checks`]: waiting for the sale to settle, and the contract's
//!   checks once it has, against the log, Redis and the archive.
//!
//! It prints nothing; what a run shows is the CLI's.

pub mod checks;
pub mod sale;
pub mod workload;

pub use checks::{check_contract, settle, Check, Run};
pub use sale::{run, Names, Report, Sale, Services};
pub use workload::{
    buy, buy_baskets, buy_seats, seat_name, Workload, BASKET_SKUS, DECISION_WAIT, HOT_SKU, SHOW_SKU,
};
