//! `stockledger stock`: a SKU's stock, from Redis, or from the archive as it
//! was at a time or a log offset.

use std::process::ExitCode;

use clap::Args as ClapArgs;
use stockledger_analysts::query::{self, AsOf, StockAsOf};
use stockledger_core::ids::Sku;
use stockledger_projection::Projection;

use serde_json::json;

use super::history::entry_json;
use super::table::Style;
use super::{parse_sku, query_error};
use crate::exit::Exit;
use crate::{connect_analyst, Global};

#[derive(Debug, ClapArgs)]
pub struct Args {
    #[arg(value_parser = parse_sku)]
    pub sku: Sku,
    /// Answer from the archive what the stock was at this moment: a log
    /// offset of the SKU's partition (a whole number), or a time (RFC 3339,
    /// `now`, or a time ago like -15m).
    #[arg(long, value_parser = parse_as_of, allow_hyphen_values = true)]
    pub as_of: Option<AsOf>,
    /// The seat map instead: each named unit and whether it is available,
    /// held or sold (and by which order), in the order they were added.
    #[arg(long, conflicts_with = "as_of")]
    pub units: bool,
    /// A sentence for people, or one JSON object for scripts.
    #[arg(long, value_enum, default_value = "text")]
    pub format: Style,
}

fn parse_as_of(s: &str) -> Result<AsOf, String> {
    query::parse_as_of(s, stockledger_runtime::clock::now_ms())
}

pub async fn run(g: &Global, args: Args) -> anyhow::Result<ExitCode> {
    let sku = args.sku;
    if let Some(at) = args.as_of {
        return as_of(g, &sku, at, args.format).await;
    }
    let projection = Projection::connect(&g.redis_url, g.prefix.clone()).await?;
    if args.units {
        return seat_map(&projection, &sku, args.format).await;
    }
    let state = projection.read_sku(sku.as_str()).await?;
    let shown = state.as_ref().map(|s| {
        json!({
            "sku": sku.as_str(),
            "available": s.available,
            "total": s.total,
            "held": s.held(),
            "reserved": s.reserved,
            "sold": s.sold(),
            "limit_per_user": s.limit,
            "partition": s.partition,
            "last_offset": s.last_offset,
            "locations": s.locations.iter().map(|l| json!({
                "location": l.name,
                "available": l.available,
                "total": l.total,
                "held": l.held(),
            })).collect::<Vec<_>>(),
            "sale": sale_json(s),
        })
    });
    match (args.format, &state) {
        (Style::Json, _) => println!("{}", shown.unwrap_or(json!({ "sku": sku.as_str() }))),
        (Style::Text, Some(s)) => println!(
            "{sku}: available {}, total {}, held {} (reserved {}, sold {}){}, last offset {}",
            s.available,
            s.total,
            s.held(),
            s.reserved,
            s.sold(),
            s.limit
                .map_or(String::new(), |l| format!(", limit {l} per user")),
            s.last_offset.map_or("-".into(), |o| o.to_string())
        ),
        (Style::Text, None) => println!(
            "{sku}: no state under prefix {} (never restocked?)",
            g.prefix
        ),
    }
    if let (Style::Text, Some(s)) = (args.format, &state) {
        if let Some(line) = sale_line(s) {
            println!("  {line}");
        }
        // One line per location, in the order a deduct naming none tries them.
        for l in &s.locations {
            println!(
                "  at {}: available {}, total {}, held {}",
                l.name,
                l.available,
                l.total,
                l.held()
            );
        }
    }
    Ok(if state.is_some() {
        Exit::Ok
    } else {
        Exit::NotFound
    }
    .into())
}

async fn as_of(g: &Global, sku: &Sku, at: AsOf, format: Style) -> anyhow::Result<ExitCode> {
    let pool = connect_analyst(g, 1).await?;
    let asked = match at {
        AsOf::Offset(offset) => format!("offset {offset}"),
        AsOf::Time(ms) => query::format_instant(ms),
    };
    let answer = query::stock_as_of(&pool, &g.topic, sku.as_str(), at)
        .await
        .map_err(query_error)?;
    let reach_json = |r: &query::Reach| json!({ "partition": r.partition, "offset": r.log_offset, "occurred_at": r.occurred_at });
    let (exit, shown, text) = match answer {
        StockAsOf::Known {
            entry: e,
            stock,
            reach,
        } => (
            Exit::Ok,
            json!({
                "sku": sku.as_str(), "as_of": asked, "state": "known",
                "available": stock.available, "total": stock.total,
                "held": stock.total - stock.available,
                "after": entry_json(&e), "archive_reaches": reach_json(&reach),
            }),
            format!(
                "{sku} as of {asked}: available {}, total {}, held {}\n  \
                 after {}@{} ({} {} {}, occurred {}); the archive holds partition {} up to offset {} (occurred {})",
                stock.available,
                stock.total,
                stock.total - stock.available,
                e.partition,
                e.log_offset,
                e.command.as_deref().unwrap_or("-"),
                e.order_id.as_deref().or(e.adjustment_id.as_deref()).unwrap_or("-"),
                e.result,
                e.occurred_at,
                reach.partition,
                reach.log_offset,
                reach.occurred_at
            ),
        ),
        StockAsOf::BeforeFirst { first } => (
            Exit::NotFound,
            json!({ "sku": sku.as_str(), "as_of": asked, "state": "before_first", "first": entry_json(&first) }),
            format!(
                "{sku} as of {asked}: no record yet (its first archived record is {}@{}, occurred {})",
                first.partition, first.log_offset, first.occurred_at
            ),
        ),
        StockAsOf::NotArchivedYet { asked, reach } => (
            Exit::NotFound,
            json!({ "sku": sku.as_str(), "as_of": format!("offset {asked}"), "state": "not_archived_yet", "archive_reaches": reach_json(&reach) }),
            format!(
                "{sku} as of offset {asked}: not archived yet: the archive holds partition {} up to offset {} \
                 (the archiver is behind, or the log does not reach offset {asked})",
                reach.partition, reach.log_offset
            ),
        ),
        StockAsOf::Unknown => (
            Exit::NotFound,
            json!({ "sku": sku.as_str(), "as_of": asked, "state": "unknown" }),
            format!("{sku}: no archived record on topic {}", g.topic),
        ),
    };
    match format {
        Style::Text => println!("{text}"),
        Style::Json => println!("{shown}"),
    }
    Ok(exit.into())
}

/// `--units`: the seat map, a line per unit or one JSON object keyed by
/// unit name, in the order the units were added.
async fn seat_map(projection: &Projection, sku: &Sku, format: Style) -> anyhow::Result<ExitCode> {
    let units = projection.units(sku.as_str()).await?;
    match format {
        Style::Json => {
            // Written by hand to keep the hall's order (a JSON map would
            // sort R1-10 before R1-2), as the gateway's seat map does.
            let pairs: Vec<String> = units
                .iter()
                .map(|(name, unit)| format!("{}:{}", json!(name), json!(unit.as_str())))
                .collect();
            println!("{{{}}}", pairs.join(","));
        }
        Style::Text if units.is_empty() => {
            println!("{sku}: no named units (unknown, or it sells counted stock)")
        }
        Style::Text => {
            for (name, unit) in &units {
                match unit.order() {
                    Some(order) => println!("{name}\t{}\t{order}", unit.as_str()),
                    None => println!("{name}\t{}", unit.as_str()),
                }
            }
        }
    }
    Ok(if units.is_empty() {
        Exit::NotFound
    } else {
        Exit::Ok
    }
    .into())
}

/// When the SKU sells, for `--format json` (`null` for one that always
/// sells, unpaused).
fn sale_json(s: &stockledger_core::SkuState) -> serde_json::Value {
    if sale_line(s).is_none() {
        return serde_json::Value::Null;
    }
    let at = |t: Option<i64>| t.map(stockledger_runtime::clock::rfc3339_ms);
    json!({
        "opens_at": at(s.window.opens_at()),
        "closes_at": at(s.window.closes_at()),
        "phase": s.phase.as_str(),
        "paused": s.paused,
    })
}

/// When the SKU sells, as one line (`None` for one that always sells,
/// unpaused).
fn sale_line(s: &stockledger_core::SkuState) -> Option<String> {
    if stockledger_core::sells_always(&s.window, s.phase, s.paused) {
        return None;
    }
    let at = |t: Option<i64>| t.map_or("-".to_owned(), stockledger_runtime::clock::rfc3339_ms);
    Some(format!(
        "sale: opens {}, closes {}, {}{}",
        at(s.window.opens_at()),
        at(s.window.closes_at()),
        s.phase.as_str().replace('_', " "),
        if s.paused { ", paused" } else { "" }
    ))
}
