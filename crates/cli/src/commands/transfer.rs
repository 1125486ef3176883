//! `stockledger transfer`: move available stock of a SKU between two of
//! its locations, all or nothing.

use std::process::ExitCode;

use clap::Args as ClapArgs;
use stockledger_core::ids::{LocationId, Quantity, Sku, TransferId};
use stockledger_core::{CommandBody, Transfer};

use super::send::{publish, WaitArgs};
use super::{parse_quantity, parse_sku};
use crate::Global;

#[derive(Debug, ClapArgs)]
pub struct Args {
    #[arg(value_parser = parse_sku)]
    pub sku: Sku,
    /// Units to move (they must be available at --from).
    #[arg(value_parser = parse_quantity, allow_negative_numbers = true)]
    pub quantity: Quantity,
    /// The location the stock leaves.
    #[arg(long, value_parser = |s: &str| LocationId::named("from", s).map_err(|e| e.to_string()))]
    pub from: LocationId,
    /// The location the stock goes to (added if not stocked before).
    #[arg(long, value_parser = |s: &str| LocationId::named("to", s).map_err(|e| e.to_string()))]
    pub to: LocationId,
    /// Names this transfer so that sending it twice moves the stock once
    /// (default: a fresh id). Restock adjustment ids and transfer ids
    /// share one namespace per SKU.
    #[arg(long, value_parser = |s: &str| TransferId::new(s).map_err(|e| e.to_string()))]
    pub transfer_id: Option<TransferId>,
    #[command(flatten)]
    pub wait: WaitArgs,
}

pub async fn run(g: &Global, args: Args) -> anyhow::Result<ExitCode> {
    let id = match args.transfer_id {
        Some(id) => id,
        None => TransferId::new(uuid::Uuid::new_v4().to_string())?,
    };
    let moved = Transfer::new(id, args.from, args.to, args.quantity)?;
    publish(
        g,
        g.ledger(),
        args.sku,
        CommandBody::Transfer(moved),
        &args.wait,
    )
    .await
}
