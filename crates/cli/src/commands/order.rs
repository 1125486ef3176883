//! `stockledger order`: one order of a SKU, from Redis.

use std::process::ExitCode;

use clap::Args as ClapArgs;
use stockledger_core::ids::{OrderId, Sku};
use stockledger_projection::Projection;

use super::{parse_order_id, parse_sku};
use crate::Global;

#[derive(Debug, ClapArgs)]
pub struct Args {
    #[arg(value_parser = parse_sku)]
    pub sku: Sku,
    #[arg(value_parser = parse_order_id)]
    pub order_id: OrderId,
}

pub async fn run(g: &Global, args: Args) -> anyhow::Result<ExitCode> {
    let Args { sku, order_id } = args;
    let projection = Projection::connect(&g.redis_url, g.prefix.clone()).await?;
    let entry = projection.order(sku.as_str(), order_id.as_str()).await?;
    match entry {
        Some(e) => println!(
            "{sku} / {order_id}: {}, quantity {}, at offset {}",
            e.status.as_str(),
            e.quantity,
            e.offset
        ),
        None => {
            println!("{sku} / {order_id}: unknown (no deduct or rollback applied)");
            return Ok(ExitCode::from(1));
        }
    }
    Ok(ExitCode::SUCCESS)
}
