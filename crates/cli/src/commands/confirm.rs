//! `stockledger confirm`: sell what a reservation holds.

use std::process::ExitCode;

use clap::Args as ClapArgs;
use stockledger_core::ids::{OrderId, Sku};
use stockledger_core::{CommandBody, Confirm};

use super::send::{publish, WaitArgs};
use super::{parse_order_id, parse_sku};
use crate::Global;

#[derive(Debug, ClapArgs)]
pub struct Args {
    #[arg(value_parser = parse_sku)]
    pub sku: Sku,
    #[arg(value_parser = parse_order_id)]
    pub order_id: OrderId,
    #[command(flatten)]
    pub wait: WaitArgs,
}

pub async fn run(g: &Global, args: Args) -> anyhow::Result<ExitCode> {
    // An order the projection does not know (or, for a refund, a total
    // above what it bought) is refused before anything is published.
    let ledger = g.ledger().order_checks(&g.redis_url, &g.prefix);
    let body = CommandBody::Confirm(Confirm {
        order_id: args.order_id,
    });
    publish(g, ledger, args.sku, body, &args.wait).await
}
