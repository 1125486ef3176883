//! `stockledger restock`: add to, or set, a SKU's stock (at one location,
//! if it keeps stock by location), or add named units.

use std::process::ExitCode;

use clap::Args as ClapArgs;
use stockledger_core::ids::{AdjustmentId, LocationId, Sku};
use stockledger_core::{CommandBody, Restock, RestockMode};

use super::send::{publish, WaitArgs};
use super::{parse_adjustment_id, parse_location, parse_sku};
use crate::Global;

#[derive(Debug, ClapArgs)]
#[command(group(clap::ArgGroup::new("mode").required(true).args(["add", "set", "units"])))]
pub struct Args {
    #[arg(value_parser = parse_sku)]
    pub sku: Sku,
    /// Add this many units to what is available (negative to remove).
    #[arg(long, allow_negative_numbers = true)]
    pub add: Option<i64>,
    /// Make the total stock this number; units held by orders stay held.
    #[arg(long)]
    pub set: Option<i64>,
    /// Add these named units, free (a show's seats: `--units A1,A2,A3`; at
    /// most 1000, none twice). A SKU sells named units or counted stock,
    /// never both.
    #[arg(long, value_delimiter = ',', num_args = 1..)]
    pub units: Vec<String>,
    /// Restock this location only (a warehouse, a store: 1 to 64 ASCII
    /// letters, digits, `-`, `_`, `.`). A SKU keeps its stock in one place
    /// or by location, never both: the first restock naming a location
    /// moves a SKU whose total is 0 to locations.
    #[arg(long, value_parser = parse_location, conflicts_with = "units")]
    pub location: Option<LocationId>,
    /// Names this adjustment so that sending it twice applies it once
    /// (default: a fresh id).
    #[arg(long, value_parser = parse_adjustment_id)]
    pub adjustment_id: Option<AdjustmentId>,
    #[command(flatten)]
    pub wait: WaitArgs,
}

pub async fn run(g: &Global, args: Args) -> anyhow::Result<ExitCode> {
    let adjustment = match args.adjustment_id {
        Some(id) => id,
        None => AdjustmentId::new(uuid::Uuid::new_v4().to_string())?,
    };
    let restock = match (args.add, args.set) {
        _ if !args.units.is_empty() => Restock::units(adjustment, &args.units)?,
        (Some(n), _) => Restock::new(adjustment, RestockMode::Add, n)?,
        (None, Some(n)) => Restock::new(adjustment, RestockMode::Set, n)?,
        (None, None) => anyhow::bail!("restock needs --add, --set or --units"),
    };
    let restock = match args.location {
        Some(location) => restock.at(location)?,
        None => restock,
    };
    let body = CommandBody::Restock(restock);
    publish(g, g.ledger(), args.sku, body, &args.wait).await
}
