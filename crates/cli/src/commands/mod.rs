//! One module per subcommand, each in the same three steps: its `Args`
//! (clap derive; a flag's doc comment is its help), a call into a library
//! crate, and what it prints. `send` holds what the three commands that
//! publish share.

pub mod apply;
pub mod archive;
pub mod compact;
pub mod deduct;
pub mod demo;
pub mod history;
pub mod observe;
pub mod order;
pub mod reconcile;
pub mod repartition;
pub mod replay;
pub mod restock;
pub mod rollback;
mod send;
pub mod serve;
pub mod snapshot;
pub mod stock;
pub mod topics;

use stockledger_core::ids::{AdjustmentId, OrderId, Quantity, Sku};

pub(crate) fn parse_sku(s: &str) -> Result<Sku, String> {
    Sku::new(s).map_err(|e| e.to_string())
}

pub(crate) fn parse_order_id(s: &str) -> Result<OrderId, String> {
    OrderId::new(s).map_err(|e| e.to_string())
}

pub(crate) fn parse_adjustment_id(s: &str) -> Result<AdjustmentId, String> {
    AdjustmentId::new(s).map_err(|e| e.to_string())
}

pub(crate) fn parse_quantity(s: &str) -> Result<Quantity, String> {
    let n: i64 = s
        .parse()
        .map_err(|_| format!("quantity: {s:?} is not a whole number"))?;
    Quantity::new(n).map_err(|e| e.to_string())
}
