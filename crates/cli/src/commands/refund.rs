//! `stockledger refund`: give back units a confirmed order bought.

use std::process::ExitCode;

use clap::Args as ClapArgs;
use stockledger_core::ids::{OrderId, Quantity, Sku};
use stockledger_core::{CommandBody, Refund};

use super::send::{publish, WaitArgs};
use super::{parse_order_id, parse_quantity, parse_sku};
use crate::Global;

#[derive(Debug, ClapArgs)]
pub struct Args {
    #[arg(value_parser = parse_sku)]
    pub sku: Sku,
    #[arg(value_parser = parse_order_id)]
    pub order_id: OrderId,
    /// The order's refunded units once this refund is done, a running
    /// total (so sending it twice refunds once); without it, everything
    /// the order bought.
    #[arg(long, value_name = "UNITS", value_parser = parse_quantity, allow_negative_numbers = true)]
    pub total: Option<Quantity>,
    #[command(flatten)]
    pub wait: WaitArgs,
}

pub async fn run(g: &Global, args: Args) -> anyhow::Result<ExitCode> {
    // An order the projection does not know (or, for a refund, a total
    // above what it bought) is refused before anything is published.
    let ledger = g.ledger().order_checks(&g.redis_url, &g.prefix);
    let body = CommandBody::Refund(Refund {
        order_id: args.order_id,
        quantity: args.total,
    });
    publish(g, ledger, args.sku, body, &args.wait).await
}
