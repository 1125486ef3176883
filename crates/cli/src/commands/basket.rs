//! `stockledger basket`: several SKUs held, confirmed or released
//! together, all or none, and a basket as it stands.

use std::process::ExitCode;
use std::time::Duration;

use clap::{Args as ClapArgs, Subcommand};
use serde_json::json;
use stockledger_client::basket::{
    self, BasketAnswer, BasketHold, BasketStatus, InputError, Line, LineState, Unsettled,
};
use stockledger_core::ids::{BasketId, Sku, UserId};
use stockledger_projection::Projection;

use super::table::Style;
use super::{parse_span, parse_user_id};
use crate::exit::Exit;
use crate::Global;

#[derive(Debug, ClapArgs)]
pub struct Args {
    #[command(subcommand)]
    pub action: Action,
    /// Sentences for people, or one JSON object for scripts.
    #[arg(long, value_enum, default_value = "text", global = true)]
    pub format: Style,
    /// How long each line's decision is awaited (three times at most)
    /// before the basket is said to be unsettled (exit 75: run the same
    /// command again).
    #[arg(long, value_name = "SECONDS", default_value_t = 5.0, global = true)]
    pub wait: f64,
}

#[derive(Debug, Subcommand)]
pub enum Action {
    /// Hold every line until the deadline, or none: exit 0 when held, 3
    /// when a line was refused (no line is held then).
    #[command(
        after_help = "Examples:\n  stockledger basket hold cart-9 --line SKU-1=2 --line SKU-2=1 --hold 15m\n  stockledger basket hold cart-10 --line SKU-1=1 --hold 2m --user u-9 --format json"
    )]
    Hold {
        #[arg(value_parser = parse_basket_id)]
        basket_id: BasketId,
        /// A line, SKU=QUANTITY; repeat for each SKU (each SKU once, at
        /// most 50 lines).
        #[arg(long = "line", value_name = "SKU=QUANTITY", required = true)]
        lines: Vec<String>,
        /// How long the lines are held (e.g. 15m, at most 7d).
        #[arg(long, value_name = "SPAN", value_parser = parse_span)]
        hold: i64,
        /// The buyer, counted against each SKU's per-user limit.
        #[arg(long, value_name = "USER_ID", value_parser = parse_user_id)]
        user: Option<UserId>,
    },
    /// Sell every line, or none: exit 0 when confirmed, 3 when a line
    /// could not be (the lines confirmed are refunded then).
    #[command(after_help = "Examples:\n  stockledger basket confirm cart-9")]
    Confirm {
        #[arg(value_parser = parse_basket_id)]
        basket_id: BasketId,
    },
    /// Give back every line still held.
    #[command(
        after_help = "Examples:\n  stockledger basket release cart-9\n  stockledger basket release cart-9 --reason payment-failed"
    )]
    Release {
        #[arg(value_parser = parse_basket_id)]
        basket_id: BasketId,
        /// Why (carried by each line's rollback, at most 1,024 bytes).
        #[arg(long)]
        reason: Option<String>,
    },
    /// The basket and its lines, from Redis (exit 4 if unknown).
    #[command(after_help = "Examples:\n  stockledger basket show cart-9 --format json")]
    Show {
        #[arg(value_parser = parse_basket_id)]
        basket_id: BasketId,
    },
}

fn parse_basket_id(s: &str) -> Result<BasketId, String> {
    basket::basket_id(s).map_err(|e| e.to_string())
}

/// A `--line SKU=QUANTITY` list, checked as the gateway checks `lines`
/// (a refusal names `lines[i]`, counting the `--line`s from 0).
fn parse_lines(given: &[String]) -> Result<Vec<Line>, InputError> {
    given
        .iter()
        .enumerate()
        .map(|(i, text)| {
            let (sku, quantity) = text.rsplit_once('=').ok_or_else(|| {
                InputError::new(
                    format!("lines[{i}]"),
                    format!("--line {text:?}: give SKU=QUANTITY, e.g. SKU-1=2"),
                )
            })?;
            let quantity: i64 = quantity.parse().map_err(|_| {
                InputError::new(
                    format!("lines[{i}].quantity"),
                    format!("--line {text:?}: {quantity:?} is not a whole number"),
                )
            })?;
            Line::parse(i, sku, quantity)
        })
        .collect()
}

pub async fn run(g: &Global, args: Args) -> anyhow::Result<ExitCode> {
    let projection = Projection::connect(&g.redis_url, g.prefix.clone()).await?;
    let wait = Duration::try_from_secs_f64(args.wait.max(0.001)).unwrap_or(Duration::MAX);
    let settler = || async { anyhow::Ok(g.deciding(g.ledger(), wait).build().await?) };
    let known = |id: BasketId| {
        let projection = &projection;
        async move { anyhow::Ok(basket::read(projection, &id).await?) }
    };
    let answer: Result<Option<(BasketAnswer, bool)>, Unsettled> = match args.action {
        Action::Hold {
            basket_id,
            lines,
            hold,
            user,
        } => {
            let lines = parse_lines(&lines)?;
            let deadline = stockledger_runtime::clock::now_ms().saturating_add(hold);
            let asked = BasketHold::new(basket_id.clone(), user, deadline, lines)?;
            match known(basket_id).await? {
                Some(known) if known.status != BasketStatus::Pending => Ok(Some((known, true))),
                _ => basket::hold(&settler().await?, &asked)
                    .await
                    .map(|a| Some((a, false))),
            }
        }
        Action::Confirm { basket_id } => match known(basket_id.clone()).await? {
            None => Ok(None),
            Some(known) if known.status == BasketStatus::Confirmed => Ok(Some((known, true))),
            Some(known) => {
                if let Err(why) =
                    basket::check_confirmable(&known, stockledger_runtime::clock::now_ms())
                {
                    eprintln!("basket {basket_id}: {why}; nothing was sent");
                    return Ok(Exit::Check.into());
                }
                let skus: Vec<Sku> = known.lines.iter().map(|l| l.sku.clone()).collect();
                basket::confirm(&settler().await?, &basket_id, &skus)
                    .await
                    .map(|a| Some((a.filled_from(&known), false)))
            }
        },
        Action::Release { basket_id, reason } => {
            let reason = reason.map(stockledger_core::Reason::new).transpose()?;
            match known(basket_id.clone()).await? {
                None => Ok(None),
                Some(known)
                    if !known
                        .lines
                        .iter()
                        .any(|l| matches!(l.state, LineState::Held | LineState::Pending)) =>
                {
                    Ok(Some((known, true)))
                }
                Some(known) => {
                    let skus: Vec<Sku> = known.lines.iter().map(|l| l.sku.clone()).collect();
                    basket::release(&settler().await?, &basket_id, &skus, reason.as_ref())
                        .await
                        .map(|a| Some((a.filled_from(&known), false)))
                }
            }
        }
        Action::Show { basket_id } => Ok(known(basket_id).await?.map(|k| (k, false))),
    };
    Ok(answered(answer, args.format))
}

/// Prints the basket as the call left it (`repeat`: as found, nothing
/// sent), or why there is none; the exit code that says which.
fn answered(answer: Result<Option<(BasketAnswer, bool)>, Unsettled>, format: Style) -> ExitCode {
    let (answer, repeat) = match answer {
        Ok(Some(found)) => found,
        Ok(None) => {
            eprintln!("no line of this basket was applied");
            return Exit::NotFound.into();
        }
        Err(unsettled) => {
            eprintln!("{unsettled}");
            return Exit::TimedOut.into();
        }
    };
    print(&answer, repeat, format);
    let refused = matches!(answer.status, BasketStatus::Refused | BasketStatus::Failed);
    if refused { Exit::Check } else { Exit::Ok }.into()
}

fn print(answer: &BasketAnswer, repeat: bool, format: Style) {
    if format == Style::Json {
        let lines: Vec<serde_json::Value> = answer
            .lines
            .iter()
            .map(|l| {
                json!({
                    "sku": l.sku.as_str(), "order_id": l.order_id.as_str(),
                    "quantity": l.quantity, "state": l.state.as_str(),
                    "result": l.result.map(|r| r.as_str()), "reason": l.reason,
                })
            })
            .collect();
        println!(
            "{}",
            json!({
                "basket_id": answer.basket_id.as_str(), "status": answer.status.as_str(),
                "expires_at": answer.expires_at, "lines": lines, "repeat": repeat,
            })
        );
        return;
    }
    let until = answer
        .expires_at
        .map(|t| format!(", until {}", stockledger_analysts::query::format_instant(t)))
        .unwrap_or_default();
    let again = if repeat { " (as it already was)" } else { "" };
    println!(
        "basket {}: {}{until}{again}",
        answer.basket_id, answer.status
    );
    for l in &answer.lines {
        let quantity = l.quantity.map(|q| format!(" x{q}")).unwrap_or_default();
        let result = l.result.map(|r| format!(" [{r}]")).unwrap_or_default();
        let reason = l
            .reason
            .as_deref()
            .map(|r| format!(" ({r})"))
            .unwrap_or_default();
        println!("  {}{quantity}: {}{result}{reason}", l.sku, l.state);
    }
}
