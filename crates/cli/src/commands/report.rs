//! `stockledger report`: per-SKU (or per-location) totals per interval,
//! from the archive.

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
    /// Totals per SKU, or per SKU and location (SKUs that keep stock by
    /// location: taken, returned, restocked, moved out and in, refused).
    #[arg(long, value_enum, default_value = "sku")]
    pub by: By,
    #[arg(long, value_enum, default_value = "table")]
    pub format: Format,
}

/// What a report's rows are totals of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum By {
    Sku,
    Location,
}

const LOCATION_COLUMNS: [&str; 10] = [
    "sku",
    "location",
    "interval_start",
    "records",
    "units_taken",
    "units_returned",
    "restock_delta",
    "transferred_out",
    "transferred_in",
    "rejected_insufficient",
];

impl Args {
    /// What the report covers, every row of it.
    fn range<'a>(&'a self, topic: &'a str) -> query::ReportRange<'a> {
        query::ReportRange {
            topic,
            every_secs: self.every / 1000,
            since_ms: self.since,
            until_ms: self.until,
            sku: self.sku.as_ref().map(Sku::as_str),
            max_rows: i64::MAX,
        }
    }
}

/// The report per SKU and location.
async fn by_location(g: &Global, args: &Args) -> anyhow::Result<Vec<Vec<Value>>> {
    let pool = connect_analyst(g, 1).await?;
    let rows = query::report_by_location(&pool, &args.range(&g.topic))
        .await
        .map_err(query_error)?;
    Ok(rows
        .into_iter()
        .map(|r| {
            vec![
                json!(r.sku),
                json!(r.location),
                json!(r.bucket),
                json!(r.records),
                json!(r.units_taken),
                json!(r.units_returned),
                json!(r.restock_delta),
                json!(r.transferred_out),
                json!(r.transferred_in),
                json!(r.rejected_insufficient),
            ]
        })
        .collect())
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
    if args.by == By::Location {
        let rows = by_location(g, &args).await?;
        table::print(args.format, &LOCATION_COLUMNS, &rows);
        if rows.is_empty() && args.format == Format::Table {
            println!("(no archived records of locations in the range)");
        }
        return Ok(ExitCode::SUCCESS);
    }
    let pool = connect_analyst(g, 1).await?;
    let rows = query::report(&pool, &args.range(&g.topic))
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
