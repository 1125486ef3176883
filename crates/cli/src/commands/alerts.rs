//! `stockledger alerts`: set or lift a SKU's low-stock threshold.

use std::process::ExitCode;

use clap::Args as ClapArgs;
use stockledger_core::ids::{Quantity, Sku};
use stockledger_core::{Alerts, CommandBody};

use super::parse_sku;
use super::send::{publish, WaitArgs};
use crate::Global;

#[derive(Debug, ClapArgs)]
#[command(group(clap::ArgGroup::new("threshold").required(true).args(["low_stock_below", "none"])))]
pub struct Args {
    #[arg(value_parser = parse_sku)]
    pub sku: Sku,
    /// Raise LOW_STOCK when available stock goes from at or above this to
    /// below it (at least 1).
    #[arg(long, value_name = "UNITS", allow_negative_numbers = true)]
    pub low_stock_below: Option<i64>,
    /// Lift the threshold.
    #[arg(long)]
    pub none: bool,
    #[command(flatten)]
    pub wait: WaitArgs,
}

pub async fn run(g: &Global, args: Args) -> anyhow::Result<ExitCode> {
    let low_stock_below = args
        .low_stock_below
        .map(|n| Quantity::of_field("low_stock_below", n))
        .transpose()?;
    let body = CommandBody::Alerts(Alerts { low_stock_below });
    publish(g, g.ledger(), args.sku, body, &args.wait).await
}
