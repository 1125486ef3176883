//! `stockledger stock`: a SKU's stock, from Redis.

use std::process::ExitCode;

use clap::Args as ClapArgs;
use stockledger_core::ids::Sku;
use stockledger_projection::Projection;

use super::parse_sku;
use crate::Global;

#[derive(Debug, ClapArgs)]
pub struct Args {
    #[arg(value_parser = parse_sku)]
    pub sku: Sku,
}

pub async fn run(g: &Global, args: Args) -> anyhow::Result<ExitCode> {
    let sku = args.sku;
    let projection = Projection::connect(&g.redis_url, g.prefix.clone()).await?;
    match projection.read_sku(sku.as_str()).await? {
        Some(s) => println!(
            "{sku}: available {}, total {}, held {}, last offset {}",
            s.available,
            s.total,
            s.held(),
            s.last_offset.map_or("-".into(), |o| o.to_string())
        ),
        None => {
            println!(
                "{sku}: no state under prefix {} (never restocked?)",
                g.prefix
            );
            return Ok(ExitCode::from(1));
        }
    }
    Ok(ExitCode::SUCCESS)
}
