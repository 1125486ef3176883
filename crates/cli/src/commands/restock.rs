//! `stockledger restock`: add to, or set, a SKU's stock.

use std::process::ExitCode;

use clap::Args as ClapArgs;
use stockledger_client::LedgerProducer;
use stockledger_core::ids::{AdjustmentId, Sku};
use stockledger_core::{CommandBody, Restock, RestockMode};

use super::send::{publish, WaitArgs};
use super::{parse_adjustment_id, parse_sku};
use crate::Global;

#[derive(Debug, ClapArgs)]
#[command(group(clap::ArgGroup::new("mode").required(true).args(["add", "set"])))]
pub struct Args {
    #[arg(value_parser = parse_sku)]
    pub sku: Sku,
    /// Add this many units to what is available (negative to remove).
    #[arg(long, allow_negative_numbers = true)]
    pub add: Option<i64>,
    /// Make the total stock this number; units held by orders stay held.
    #[arg(long)]
    pub set: Option<i64>,
    /// Names this adjustment so that sending it twice applies it once
    /// (default: a fresh id).
    #[arg(long, value_parser = parse_adjustment_id)]
    pub adjustment_id: Option<AdjustmentId>,
    #[command(flatten)]
    pub wait: WaitArgs,
}

pub async fn run(g: &Global, args: Args) -> anyhow::Result<ExitCode> {
    let (mode, quantity) = match (args.add, args.set) {
        (Some(n), _) => (RestockMode::Add, n),
        (None, Some(n)) => (RestockMode::Set, n),
        (None, None) => anyhow::bail!("restock needs --add or --set"),
    };
    let adjustment = match args.adjustment_id {
        Some(id) => id,
        None => AdjustmentId::new(uuid::Uuid::new_v4().to_string())?,
    };
    let producer = LedgerProducer::new(&g.kafka(), g.topic.clone())?;
    let body = CommandBody::Restock(Restock::new(adjustment, mode, quantity)?);
    publish(g, &producer, args.sku, body, &args.wait).await
}
