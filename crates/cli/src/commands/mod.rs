//! One module per subcommand, each in the same three steps: its `Args`
//! (clap derive; a flag's doc comment is its help), a call into a library
//! crate, and what it prints. `send` holds what the commands that publish
//! share.

pub mod alerts;
pub mod apply;
pub mod archive;
pub mod basket;
pub mod compact;
pub mod confirm;
pub mod deduct;
pub mod demo;
pub mod dlq;
pub mod export;
pub mod history;
pub mod keys;
pub mod limit;
pub mod membership;
pub mod observe;
pub mod order;
pub mod reconcile;
pub mod refund;
pub mod repartition;
pub mod replay;
pub mod report;
pub mod restock;
pub mod rollback;
pub mod sale;
mod send;
pub mod serve;
pub mod snapshot;
pub mod status;
pub mod stock;
mod table;
pub mod topics;
pub mod transfer;

use stockledger_analysts::query;
use stockledger_core::ids::{AdjustmentId, LocationId, OrderId, Quantity, Sku, UserId};
use stockledger_core::ResultCode;

/// `--applier-group`, for the commands that read where the applier is.
#[derive(Debug, clap::Args)]
pub struct ApplierGroup {
    /// The appliers' consumer group: its committed offsets say how far the
    /// applier is, and where a replay from a snapshot taken now starts.
    #[arg(
        long,
        env = "STOCKLEDGER_APPLIER_GROUP",
        default_value = stockledger_kafka::names::APPLIER_GROUP
    )]
    pub applier_group: String,
}

pub(crate) fn parse_sku(s: &str) -> Result<Sku, String> {
    Sku::new(s).map_err(|e| e.to_string())
}

pub(crate) fn parse_order_id(s: &str) -> Result<OrderId, String> {
    OrderId::new(s).map_err(|e| e.to_string())
}

pub(crate) fn parse_user_id(s: &str) -> Result<UserId, String> {
    UserId::new(s).map_err(|e| e.to_string())
}

pub(crate) fn parse_adjustment_id(s: &str) -> Result<AdjustmentId, String> {
    AdjustmentId::new(s).map_err(|e| e.to_string())
}

pub(crate) fn parse_location(s: &str) -> Result<LocationId, String> {
    LocationId::new(s).map_err(|e| e.to_string())
}

pub(crate) fn parse_quantity(s: &str) -> Result<Quantity, String> {
    let n: i64 = s
        .parse()
        .map_err(|_| format!("quantity: {s:?} is not a whole number"))?;
    Quantity::new(n).map_err(|e| e.to_string())
}

/// An instant: RFC 3339, `now`, or a time ago like `-15m` (ms since the epoch).
pub(crate) fn parse_time(s: &str) -> Result<i64, String> {
    query::parse_instant(s, stockledger_runtime::clock::now_ms())
}

/// A span like `1m`, `1h`, `1d` (milliseconds).
pub(crate) fn parse_span(s: &str) -> Result<i64, String> {
    query::parse_span_ms(s)
}

/// A result name, as the decision table spells it.
pub(crate) fn parse_result(s: &str) -> Result<ResultCode, String> {
    ResultCode::parse(&s.to_ascii_uppercase()).ok_or_else(|| {
        let names: Vec<&str> = ResultCode::ALL.iter().map(|r| r.as_str()).collect();
        format!("{s:?} is not a result (one of {})", names.join(", "))
    })
}

/// `since` must come before `until`.
pub(crate) fn check_range(since: Option<i64>, until: Option<i64>) -> anyhow::Result<()> {
    query::check_range(since, until).map_err(|_| {
        anyhow::anyhow!(
            "--since must be before --until (the range is since <= occurred_at < until)"
        )
    })
}

/// A refusal from the archive's queries, naming the flag.
pub(crate) fn query_error(e: query::QueryError) -> anyhow::Error {
    match e {
        query::QueryError::Invalid { field, problem } => {
            anyhow::anyhow!("--{field}: {problem}")
        }
        other => other.into(),
    }
}
