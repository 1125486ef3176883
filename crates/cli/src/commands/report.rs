//! `stockledger report`: per-SKU totals per interval, from the archive.

use std::process::ExitCode;

use clap::Args as ClapArgs;
use serde_json::{json, Value};
use stockledger_analysts::query;
use stockledger_core::ids::Sku;

use super::table::{self, Format};
use super::{check_range, parse_sku, parse_span, parse_time, query_error};
use crate::{connect_analyst, Global};

#[derive(Debug, ClapArgs)]
pub struct Args {
    /// One SKU only (every SKU with records in the range otherwise).
    #[arg(long, value_parser = parse_sku)]
    pub sku: Option<Sku>,
    /// Interval length: 1m, 15m, 1h, 1d, ... (aligned on the Unix epoch, UTC;
    /// the range is widened to whole intervals).
    #[arg(long, value_parser = parse_span, default_value = "1h")]
    pub every: i64,
    /// Start of the range (inclusive): RFC 3339, `now`, or a time ago (-1d).
    #[arg(long, value_parser = parse_time, allow_hyphen_values = true, default_value = "-1d")]
    pub since: i64,
    /// End of the range (exclusive), in the same forms.
    #[arg(long, value_parser = parse_time, allow_hyphen_values = true, default_value = "now")]
    pub until: i64,
    #[arg(long, value_enum, default_value = "table")]
    pub format: Format,
}

const COLUMNS: [&str; 18] = [
    "sku",
    "interval_start",
    "records",
    "deducts_applied",
    "units_taken",
    "rollbacks_applied",
    "units_returned",
    "net_taken",
    "restocks_applied",
    "restock_delta",
    "rejected_insufficient",
    "rejected_cancelled",
    "rejected_restock",
    "ignored_no_deduction",
    "duplicates",
    "invalid",
    "lowest_available",
    "sold_out_at",
];

pub async fn run(g: &Global, args: Args) -> anyhow::Result<ExitCode> {
    check_range(Some(args.since), Some(args.until))?;
    let pool = connect_analyst(g, 1).await?;
    let rows = query::report(
        &pool,
        &g.topic,
        args.every / 1000,
        args.since,
        args.until,
        args.sku.as_ref().map(Sku::as_str),
        i64::MAX,
    )
    .await
    .map_err(query_error)?;
    let rows: Vec<Vec<Value>> = rows
        .into_iter()
        .map(|r| {
            vec![
                json!(r.sku),
                json!(r.bucket),
                json!(r.records),
                json!(r.deducts_applied),
                json!(r.units_taken),
                json!(r.rollbacks_applied),
                json!(r.units_returned),
                json!(r.net_taken),
                json!(r.restocks_applied),
                json!(r.restock_delta),
                json!(r.rejected_insufficient),
                json!(r.rejected_cancelled),
                json!(r.rejected_restock),
                json!(r.ignored_no_deduction),
                json!(r.duplicates),
                json!(r.invalid),
                json!(r.lowest_available),
                json!(r.sold_out_at),
            ]
        })
        .collect();
    let empty = rows.is_empty();
    table::print(args.format, &COLUMNS, &rows);
    if empty && args.format == Format::Table {
        println!("(no archived records in the range)");
    }
    Ok(ExitCode::SUCCESS)
}
