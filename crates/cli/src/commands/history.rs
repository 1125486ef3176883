//! `stockledger history`: archived decisions of a SKU or an order.

use std::process::ExitCode;

use clap::Args as ClapArgs;
use stockledger_archiver::query::{self, HistoryOf};
use stockledger_core::ids::{OrderId, Sku};

use super::{parse_order_id, parse_sku};
use crate::{connect_archive, Global};

#[derive(Debug, ClapArgs)]
#[command(group(clap::ArgGroup::new("of").required(true).args(["sku", "order"])))]
pub struct Args {
    /// History of this SKU (or, with --order, the order's entries for this SKU only).
    #[arg(long, value_parser = parse_sku)]
    pub sku: Option<Sku>,
    /// History of this order.
    #[arg(long, value_parser = parse_order_id)]
    pub order: Option<OrderId>,
    /// Most entries shown.
    #[arg(long, default_value_t = 100)]
    pub limit: i64,
    /// One JSON object per line instead of a table.
    #[arg(long)]
    pub json: bool,
}

pub async fn run(g: &Global, args: Args) -> anyhow::Result<ExitCode> {
    let of = match (args.order, args.sku) {
        (Some(order), sku) => HistoryOf::Order {
            order_id: order.into_string(),
            sku: sku.map(Sku::into_string),
        },
        (None, Some(sku)) => HistoryOf::Sku(sku.into_string()),
        (None, None) => anyhow::bail!("history needs --sku or --order"),
    };
    let pool = connect_archive(g, 1).await?;
    let entries = query::history(&pool, &g.topic, &of, args.limit.max(1)).await?;
    print_history(&entries, args.json);
    Ok(ExitCode::SUCCESS)
}

fn print_history(entries: &[query::Entry], json: bool) {
    if json {
        for e in entries {
            let line = serde_json::json!({
                "topic": e.topic, "partition": e.partition, "offset": e.log_offset,
                "sku": e.sku, "command": e.command, "order_id": e.order_id,
                "adjustment_id": e.adjustment_id, "quantity": e.quantity, "result": e.result,
                "delta": e.delta, "available_after": e.available_after,
                "total_after": e.total_after, "reason": e.reason, "occurred_at": e.occurred_at,
            });
            println!("{line}");
        }
        return;
    }
    println!(
        "{:<24} {:<14} {:<9} {:<16} {:<22} {:>6} {:>9} {:>9}  reason",
        "occurred_at",
        "position",
        "command",
        "order/adjustment",
        "result",
        "delta",
        "available",
        "total"
    );
    for e in entries {
        println!(
            "{:<24} {:<14} {:<9} {:<16} {:<22} {:>6} {:>9} {:>9}  {}",
            e.occurred_at,
            format!("{}@{}", e.partition, e.log_offset),
            e.command.as_deref().unwrap_or("-"),
            e.order_id
                .as_deref()
                .or(e.adjustment_id.as_deref())
                .unwrap_or("-"),
            e.result,
            e.delta,
            e.available_after,
            e.total_after,
            e.reason.as_deref().unwrap_or("")
        );
    }
    if entries.is_empty() {
        println!("(no archived entries)");
    }
}
