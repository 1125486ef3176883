//! `stockledger stock`: a SKU's stock, from Redis, or from the archive as it
//! was at a time or a log offset.

use std::process::ExitCode;

use clap::Args as ClapArgs;
use stockledger_analysts::query::{self, AsOf, StockAsOf};
use stockledger_core::ids::Sku;
use stockledger_projection::Projection;

use super::{parse_sku, query_error};
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
}

fn parse_as_of(s: &str) -> Result<AsOf, String> {
    query::parse_as_of(s, query::now_ms())
}

pub async fn run(g: &Global, args: Args) -> anyhow::Result<ExitCode> {
    let sku = args.sku;
    if let Some(at) = args.as_of {
        return as_of(g, &sku, at).await;
    }
    let projection = Projection::connect(&g.redis_url, g.prefix.clone()).await?;
    match projection.read_sku(sku.as_str()).await? {
        Some(s) => println!(
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

async fn as_of(g: &Global, sku: &Sku, at: AsOf) -> anyhow::Result<ExitCode> {
    let pool = connect_analyst(g, 1).await?;
    let asked = match at {
        AsOf::Offset(offset) => format!("offset {offset}"),
        AsOf::Time(ms) => query::format_instant(ms),
    };
    let answer = query::stock_as_of(&pool, &g.topic, sku.as_str(), at)
        .await
        .map_err(query_error)?;
    match answer {
        StockAsOf::Known { entry: e, reach } => {
            println!(
                "{sku} as of {asked}: available {}, total {}, held {}",
                e.available_after,
                e.total_after,
                e.total_after - e.available_after
            );
            println!(
                "  after {}@{} ({} {} {}, occurred {}); the archive holds partition {} up to offset {} (occurred {})",
                e.partition,
                e.log_offset,
                e.command.as_deref().unwrap_or("-"),
                e.order_id.as_deref().or(e.adjustment_id.as_deref()).unwrap_or("-"),
                e.result,
                e.occurred_at,
                reach.partition,
                reach.log_offset,
                reach.occurred_at
            );
            Ok(ExitCode::SUCCESS)
        }
        StockAsOf::BeforeFirst { first } => {
            println!(
                "{sku} as of {asked}: no record yet (its first archived record is {}@{}, occurred {})",
                first.partition, first.log_offset, first.occurred_at
            );
            Ok(ExitCode::from(1))
        }
        StockAsOf::NotArchivedYet { asked, reach } => {
            println!(
                "{sku} as of offset {asked}: not archived yet: the archive holds partition {} up to offset {} \
                 (the archiver is behind, or the log does not reach offset {asked})",
                reach.partition, reach.log_offset
            );
            Ok(ExitCode::from(1))
        }
        StockAsOf::Unknown => {
            println!("{sku}: no archived record on topic {}", g.topic);
            Ok(ExitCode::from(1))
        }
    }
}
