//! `stockledger deduct`: take stock for an order, at once or as a
//! reservation that lapses unless confirmed.

use std::process::ExitCode;

use clap::Args as ClapArgs;
use stockledger_core::ids::{LocationId, OrderId, Quantity, Sku, UserId};
use stockledger_core::{CommandBody, Deduct};

use super::send::{publish, WaitArgs};
use super::{parse_location, parse_order_id, parse_quantity, parse_sku, parse_span, parse_user_id};
use crate::Global;

#[derive(Debug, ClapArgs)]
pub struct Args {
    #[arg(value_parser = parse_sku)]
    pub sku: Sku,
    #[arg(value_parser = parse_order_id)]
    pub order_id: OrderId,
    /// Units to take (with --units: their number, or leave it out).
    #[arg(value_parser = parse_quantity, allow_negative_numbers = true, required_unless_present = "units")]
    pub quantity: Option<Quantity>,
    /// Take exactly these named units, all or none (seats: `--units
    /// 7-12,7-13`; at most 50, none twice).
    #[arg(long, value_delimiter = ',', num_args = 1..)]
    pub units: Vec<String>,
    /// The buyer, counted against the SKU's per-user limit (`limit`).
    #[arg(long, value_name = "USER_ID", value_parser = parse_user_id)]
    pub user: Option<UserId>,
    /// Hold the units for this long (e.g. 15m, at most 7d) instead of
    /// selling them: `confirm` sells them, `rollback` releases them, and
    /// past the deadline they come back by themselves.
    #[arg(long, value_name = "SPAN", value_parser = parse_span)]
    pub hold: Option<i64>,
    /// Take from this location only; without it a SKU that keeps stock by
    /// location is served by the first location, in the order they were
    /// first stocked, that has the whole quantity (the decision says which).
    #[arg(long, value_parser = parse_location, conflicts_with = "units")]
    pub location: Option<LocationId>,
    #[command(flatten)]
    pub wait: WaitArgs,
}

pub async fn run(g: &Global, args: Args) -> anyhow::Result<ExitCode> {
    let units = (!args.units.is_empty()).then_some(&args.units[..]);
    let mut deduct = Deduct::taking(args.order_id, args.quantity.map(Quantity::get), units)?;
    if let Some(location) = args.location {
        deduct = deduct.at(location)?;
    }
    let body = CommandBody::Deduct(Deduct {
        user_id: args.user,
        expires_at: args
            .hold
            .map(|hold| stockledger_runtime::clock::now_ms().saturating_add(hold)),
        ..deduct
    });
    publish(g, g.ledger(), args.sku, body, &args.wait).await
}
