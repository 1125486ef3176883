//! `stockledger limit`: cap the units one user may hold and buy of a SKU.

use std::process::ExitCode;

use clap::Args as ClapArgs;
use stockledger_core::ids::{Quantity, Sku};
use stockledger_core::{CommandBody, Limit};

use super::parse_sku;
use super::send::{publish, WaitArgs};
use crate::Global;

#[derive(Debug, ClapArgs)]
#[command(group(clap::ArgGroup::new("cap").required(true).args(["per_user", "none"])))]
pub struct Args {
    #[arg(value_parser = parse_sku)]
    pub sku: Sku,
    /// Units one user's live reservations and purchases may add up to
    /// (at least 1); deducts must then name a --user.
    #[arg(long, value_name = "UNITS", allow_negative_numbers = true)]
    pub per_user: Option<i64>,
    /// Lift the limit.
    #[arg(long)]
    pub none: bool,
    #[command(flatten)]
    pub wait: WaitArgs,
}

pub async fn run(g: &Global, args: Args) -> anyhow::Result<ExitCode> {
    let per_user = args
        .per_user
        .map(|n| Quantity::of_field("per_user", n))
        .transpose()?;
    let body = CommandBody::Limit(Limit { per_user });
    publish(g, g.ledger(), args.sku, body, &args.wait).await
}
