//! `stockledger window`, `pause` and `resume`: when a SKU sells.

use std::process::ExitCode;

use clap::Args as ClapArgs;
use stockledger_core::ids::{ChangeId, Sku};
use stockledger_core::{CommandBody, Pause, Resume, SaleWindow, Window};

use super::parse_sku;
use super::send::{publish, WaitArgs};
use crate::Global;

#[derive(Debug, ClapArgs)]
pub struct WindowArgs {
    #[arg(value_parser = parse_sku)]
    pub sku: Sku,
    /// Names this change: sent again, it applies once.
    #[arg(value_parser = parse_change_id)]
    pub change_id: ChangeId,
    /// The first moment on sale, by the records' times in the log: RFC 3339
    /// (2026-12-01T10:00:00Z) or from now (+10m). Absent: open until it
    /// closes.
    #[arg(long, value_name = "TIME", value_parser = parse_moment, allow_hyphen_values = true)]
    pub opens_at: Option<i64>,
    /// The first moment no longer on sale, as --opens-at. Absent: never
    /// closes. Give neither to lift the window.
    #[arg(long, value_name = "TIME", value_parser = parse_moment, allow_hyphen_values = true)]
    pub closes_at: Option<i64>,
    #[command(flatten)]
    pub wait: WaitArgs,
}

#[derive(Debug, ClapArgs)]
pub struct SwitchArgs {
    #[arg(value_parser = parse_sku)]
    pub sku: Sku,
    /// Names this change: sent again, it applies once.
    #[arg(value_parser = parse_change_id)]
    pub change_id: ChangeId,
    #[command(flatten)]
    pub wait: WaitArgs,
}

fn parse_change_id(s: &str) -> Result<ChangeId, String> {
    ChangeId::new(s).map_err(|e| e.to_string())
}

/// An instant: RFC 3339, or a span from now like `+10m` (ms since the
/// epoch).
fn parse_moment(s: &str) -> Result<i64, String> {
    let now = stockledger_runtime::clock::now_ms();
    match s.strip_prefix('+') {
        Some(span) => Ok(now.saturating_add(super::parse_span(span)?)),
        None => stockledger_runtime::clock::parse_rfc3339_ms(s).map_err(|e| {
            format!("{s:?} is not a time: {e} (give RFC 3339 like 2026-12-01T10:00:00Z, or from now like +10m)")
        }),
    }
}

pub async fn window(g: &Global, args: WindowArgs) -> anyhow::Result<ExitCode> {
    let body = CommandBody::Window(Window {
        change_id: args.change_id,
        window: SaleWindow::new(args.opens_at, args.closes_at)?,
    });
    publish(g, g.ledger(), args.sku, body, &args.wait).await
}

pub async fn pause(g: &Global, args: SwitchArgs) -> anyhow::Result<ExitCode> {
    let body = CommandBody::Pause(Pause {
        change_id: args.change_id,
    });
    publish(g, g.ledger(), args.sku, body, &args.wait).await
}

pub async fn resume(g: &Global, args: SwitchArgs) -> anyhow::Result<ExitCode> {
    let body = CommandBody::Resume(Resume {
        change_id: args.change_id,
    });
    publish(g, g.ledger(), args.sku, body, &args.wait).await
}
