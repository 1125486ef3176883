//! `stockledger rollback`: give back what an order took.

use std::process::ExitCode;

use clap::Args as ClapArgs;
use stockledger_core::ids::{OrderId, Sku};
use stockledger_core::{CommandBody, Rollback};

use super::send::{publish, WaitArgs};
use super::{parse_order_id, parse_sku};
use crate::Global;

#[derive(Debug, ClapArgs)]
pub struct Args {
    #[arg(value_parser = parse_sku)]
    pub sku: Sku,
    #[arg(value_parser = parse_order_id)]
    pub order_id: OrderId,
    /// Why the order is rolled back (kept in the log).
    #[arg(long)]
    pub reason: Option<String>,
    #[command(flatten)]
    pub wait: WaitArgs,
}

pub async fn run(g: &Global, args: Args) -> anyhow::Result<ExitCode> {
    let body = CommandBody::Rollback(Rollback::new(args.order_id, args.reason)?);
    publish(g, g.ledger(), args.sku, body, &args.wait).await
}
