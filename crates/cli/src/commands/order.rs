//! `stockledger order`: one order of a SKU, from Redis.

use std::process::ExitCode;

use clap::Args as ClapArgs;
use stockledger_core::ids::{OrderId, Sku};
use stockledger_projection::Projection;

use serde_json::json;

use super::table::Style;
use super::{parse_order_id, parse_sku};
use crate::exit::Exit;
use crate::Global;

#[derive(Debug, ClapArgs)]
pub struct Args {
    #[arg(value_parser = parse_sku)]
    pub sku: Sku,
    #[arg(value_parser = parse_order_id)]
    pub order_id: OrderId,
    /// A sentence for people, or one JSON object for scripts.
    #[arg(long, value_enum, default_value = "text")]
    pub format: Style,
}

pub async fn run(g: &Global, args: Args) -> anyhow::Result<ExitCode> {
    let Args {
        sku,
        order_id,
        format,
    } = args;
    let projection = Projection::connect(&g.redis_url, g.prefix.clone()).await?;
    let entry = projection.order(sku.as_str(), order_id.as_str()).await?;
    if format == Style::Json {
        let shown = entry.as_ref().map(|e| {
            json!({
                "status": e.status.as_str(), "quantity": e.quantity, "offset": e.offset,
                "user_id": e.user, "expires_at": e.expires_at, "refunded": e.refunded,
            })
        });
        println!(
            "{}",
            json!({ "sku": sku.as_str(), "order_id": order_id.as_str(), "order": shown })
        );
        return Ok(if entry.is_some() {
            Exit::Ok
        } else {
            Exit::NotFound
        }
        .into());
    }
    match entry {
        Some(e) => {
            let mut extra = String::new();
            if let Some(user) = &e.user {
                extra.push_str(&format!(", user {user}"));
            }
            if let Some(deadline) = e.expires_at {
                extra.push_str(&format!(
                    ", hold until {}",
                    stockledger_analysts::query::format_instant(deadline)
                ));
            }
            if e.refunded > 0 {
                extra.push_str(&format!(", refunded {}", e.refunded));
            }
            println!(
                "{sku} / {order_id}: {}, quantity {}{extra}, at offset {}",
                e.status.as_str(),
                e.quantity,
                e.offset
            )
        }
        None => {
            println!("{sku} / {order_id}: unknown (no deduct, reservation or rollback applied)");
            return Ok(ExitCode::from(Exit::NotFound));
        }
    }
    Ok(ExitCode::SUCCESS)
}
