//! `stockledger history`: archived decisions of a SKU, an order, a basket or
//! a named unit, a page at a time.

use std::process::ExitCode;

use clap::Args as ClapArgs;
use serde_json::{json, Value};
use stockledger_analysts::query::{self, Cursor, HistoryOf, HistoryQuery, MAX_PAGE};
use stockledger_core::ids::{BasketId, OrderId, Sku, UnitId};
use stockledger_core::{ResultCode, ValidationError};

use super::table::{self, Format};
use super::{check_range, parse_order_id, parse_result, parse_sku, parse_time, query_error};
use crate::{connect_analyst, Global};

#[derive(Debug, ClapArgs)]
// One of them at least; --sku narrows --order and names --unit's SKU, and
// the conflicts below keep the rest apart.
#[command(group(
    clap::ArgGroup::new("of")
        .required(true)
        .multiple(true)
        .args(["sku", "order", "basket", "unit"])
))]
pub struct Args {
    /// History of this SKU (or, with --order, the order's entries for this SKU only).
    #[arg(long, value_parser = parse_sku)]
    pub sku: Option<Sku>,
    /// History of this order.
    #[arg(long, value_parser = parse_order_id)]
    pub order: Option<OrderId>,
    /// History of this basket: its lines' holds and what befell them, by SKU.
    #[arg(long, value_parser = parse_basket_id, conflicts_with_all = ["sku", "order"])]
    pub basket: Option<BasketId>,
    /// History of one named unit, as SKU/UNIT (split at the first `/`; or
    /// give --sku and the unit's name alone): the restock that added it,
    /// the deducts that asked for it and what befell the orders that took
    /// it, in log order.
    #[arg(long, conflicts_with_all = ["order", "basket"])]
    pub unit: Option<String>,
    /// Only records that occurred at or after this: RFC 3339
    /// (2026-11-23T10:00:00Z), `now`, or a time ago (-15m, -2h, -7d).
    #[arg(long, value_parser = parse_time, allow_hyphen_values = true)]
    pub since: Option<i64>,
    /// Only records that occurred before this (same forms as --since).
    #[arg(long, value_parser = parse_time, allow_hyphen_values = true)]
    pub until: Option<i64>,
    /// Only these results (repeat the flag or separate with commas), e.g.
    /// REJECTED_INSUFFICIENT.
    #[arg(long, value_parser = parse_result, value_delimiter = ',')]
    pub result: Vec<ResultCode>,
    /// Newest first (log order reversed).
    #[arg(long)]
    pub newest_first: bool,
    /// Continue after this position: the cursor printed at the end of the
    /// previous page (TOPIC:PARTITION:OFFSET:SKU). Give the same filters.
    #[arg(long)]
    pub after: Option<String>,
    /// Entries per page, at most 10000.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(i64).range(1..=MAX_PAGE))]
    pub limit: i64,
    /// How to print the entries. With json and csv, the next page's cursor
    /// goes to standard error.
    #[arg(long, value_enum, default_value = "table")]
    pub format: Format,
    /// Same as --format json (kept for scripts written before --format).
    #[arg(long, hide = true, conflicts_with = "format")]
    pub json: bool,
}

fn parse_basket_id(s: &str) -> Result<BasketId, String> {
    BasketId::new(s).map_err(|e| e.to_string())
}

/// The SKU and unit `--unit` names, with `--sku` when given.
fn unit_of(unit: &str, sku: Option<Sku>) -> anyhow::Result<HistoryOf> {
    let (sku, unit) = match sku {
        Some(sku) => (sku, unit),
        None => {
            let Some((sku, unit)) = unit.split_once('/') else {
                let problem =
                    format!("{unit:?} is not SKU/UNIT (or give --sku and the unit alone)");
                return Err(ValidationError::new("unit", problem).into());
            };
            (Sku::new(sku)?, unit)
        }
    };
    let unit = UnitId::new(unit).map_err(|e| ValidationError::new("unit", e.problem))?;
    Ok(HistoryOf::Unit {
        sku: sku.into_string(),
        unit: unit.into_string(),
    })
}

pub async fn run(g: &Global, args: Args) -> anyhow::Result<ExitCode> {
    let of = match (args.order, args.sku) {
        _ if args.basket.is_some() => {
            HistoryOf::Basket(args.basket.map(BasketId::into_string).unwrap_or_default())
        }
        (None, sku) if args.unit.is_some() => unit_of(args.unit.as_deref().unwrap_or(""), sku)?,
        (Some(order), sku) => HistoryOf::Order {
            order_id: order.into_string(),
            sku: sku.map(Sku::into_string),
        },
        (None, Some(sku)) => HistoryOf::Sku(sku.into_string()),
        (None, None) => anyhow::bail!("history needs --sku or --order"),
    };
    check_range(args.since, args.until)?;
    let after = args
        .after
        .as_deref()
        .map(str::parse::<Cursor>)
        .transpose()
        .map_err(|e| anyhow::anyhow!("--after: {e}"))?;
    let format = if args.json { Format::Json } else { args.format };
    let q = HistoryQuery {
        of,
        since_ms: args.since,
        until_ms: args.until,
        results: args.result,
        newest_first: args.newest_first,
        after,
        limit: args.limit,
    };
    let pool = connect_analyst(g, 1).await?;
    let page = query::history_page(&pool, &g.topic, &q)
        .await
        .map_err(query_error)?;
    print_page(&page, format);
    Ok(ExitCode::SUCCESS)
}

const COLUMNS: [&str; 18] = [
    "occurred_at",
    "position",
    "sku",
    "command",
    "order/adjustment",
    "quantity",
    "result",
    "delta",
    "available",
    "total",
    "reason",
    "rollback_reason",
    "restock_mode",
    "command_id",
    "user_id",
    "expires_at",
    "units",
    "location",
];

/// An archived entry as JSON, the fields named as the archive names them
/// (stable for scripts).
pub fn entry_json(e: &query::Entry) -> Value {
    json!({
        "topic": e.topic, "partition": e.partition, "offset": e.log_offset,
        "sku": e.sku, "command": e.command, "command_id": e.command_id,
        "order_id": e.order_id, "adjustment_id": e.adjustment_id,
        "quantity": e.quantity, "restock_mode": e.restock_mode, "result": e.result,
        "delta": e.delta, "available_after": e.available_after,
        "total_after": e.total_after, "reason": e.reason,
        "rollback_reason": e.rollback_reason, "occurred_at": e.occurred_at,
        "user_id": e.user_id, "expires_at": e.expires_at, "traceparent": e.traceparent,
        "basket_id": e.basket_id, "units": e.units, "location": e.location,
        "to_location": e.to_location, "events": e.events,
        "opens_at": e.opens_at, "closes_at": e.closes_at,
    })
}

fn print_page(page: &query::Page, format: Format) {
    if format == Format::Json {
        for e in &page.entries {
            let line = entry_json(e);
            println!("{line}");
        }
    } else {
        let rows: Vec<Vec<Value>> = page
            .entries
            .iter()
            .map(|e| {
                vec![
                    json!(e.occurred_at),
                    json!(format!("{}@{}", e.partition, e.log_offset)),
                    json!(e.sku),
                    json!(e.command),
                    json!(e.order_id.as_deref().or(e.adjustment_id.as_deref())),
                    json!(e.quantity),
                    json!(e.result),
                    json!(e.delta),
                    json!(e.available_after),
                    json!(e.total_after),
                    json!(e.reason),
                    json!(e.rollback_reason),
                    json!(e.restock_mode),
                    json!(e.command_id),
                    json!(e.user_id),
                    json!(e.expires_at),
                    json!(e.units.as_ref().map(|u| u.join(" "))),
                    // A transfer's two ends, `from->to`.
                    json!(match (&e.location, &e.to_location) {
                        (Some(from), Some(to)) => Some(format!("{from}->{to}")),
                        (at, _) => at.clone(),
                    }),
                ]
            })
            .collect();
        // The table leaves out what CSV carries for tools: the restock mode
        // (a restock's delta shows its effect), the command id, the buyer
        // and the deadline; it keeps the units and the location, last.
        let keep = |i: usize| format != Format::Table || !(12..16).contains(&i);
        let columns: Vec<&str> = (0..COLUMNS.len())
            .filter(|i| keep(*i))
            .map(|i| COLUMNS[i])
            .collect();
        let rows: Vec<Vec<Value>> = rows
            .into_iter()
            .map(|r| {
                r.into_iter()
                    .enumerate()
                    .filter(|(i, _)| keep(*i))
                    .map(|(_, v)| v)
                    .collect()
            })
            .collect();
        table::print(format, &columns, &rows);
    }
    match (&page.next, format) {
        (Some(next), Format::Table) => println!("more: --after {next}"),
        (Some(next), _) => eprintln!("more: --after {next}"),
        (None, Format::Table) if page.entries.is_empty() => println!("(no archived entries)"),
        (None, _) => {}
    }
}
