//! The JSON the gateway's routes take and answer, and their query
//! parameters: the schemas of `docs/openapi.json`, with every validation
//! rule the handlers apply written as schema.

use serde::{Deserialize, Serialize};
use stockledger_core::{Decision, OrderEntry, OrderId, Sku};
use utoipa::{IntoParams, ToSchema};

/// Most entries one history page holds.
pub const MAX_HISTORY_LIMIT: i64 = 1000;

/// `?wait_ms=N`: wait up to N ms for the applier's decision.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct WaitParams {
    /// Milliseconds to wait for the decision (at most the gateway's
    /// `--max-wait-ms`, 30,000 by default). Without it the answer is `202`
    /// once the command is in the log.
    pub wait_ms: Option<u64>,
}

/// The W3C trace context of the caller's span, from the `traceparent`
/// request header. A valid one goes on the command record, from there to
/// the outcome's headers and into the archived row; an invalid one is
/// ignored (the W3C rule), never refused.
#[derive(Debug, Default, IntoParams)]
#[into_params(parameter_in = Header)]
pub struct TraceHeader {
    /// W3C trace context, `00-<32 hex trace id>-<16 hex parent id>-<2 hex flags>`:
    /// carried to the outcome and the archived row. Any other value is
    /// ignored, as the W3C asks, never refused.
    pub traceparent: Option<String>,
}

impl<S: Send + Sync> axum::extract::FromRequestParts<S> for TraceHeader {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        _state: &S,
    ) -> Result<Self, Self::Rejection> {
        let traceparent = parts
            .headers
            .get(stockledger_core::trace::TRACEPARENT_HEADER)
            .and_then(|v| stockledger_core::trace::valid_traceparent(v.as_bytes()))
            .map(str::to_owned);
        Ok(Self { traceparent })
    }
}

/// Take stock for an order: a quantity of counted stock, or named units.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DeductRequest {
    /// Units to take, 1 to 1,000,000,000 (with `units`, their number if
    /// given at all).
    #[schema(minimum = 1, maximum = 1_000_000_000)]
    pub quantity: Option<i64>,
    /// The named units to take (seats), all or none: 1 to 50 names (each
    /// 1 to 128 bytes, no control characters, no braces), none twice. For a SKU that sells named units, instead of `quantity`.
    #[schema(min_items = 1, max_items = 50)]
    pub units: Option<Vec<String>>,
    /// The buyer, counted against the SKU's per-user limit.
    pub user_id: Option<String>,
    /// Make it a reservation held this many milliseconds (1 s to 7 days):
    /// `confirm` sells it, `rollback` releases it, past the deadline it
    /// expires by itself.
    pub hold_ms: Option<i64>,
    /// Make it a reservation held until this instant (ms since the Unix
    /// epoch, after now, at most 7 days ahead); not with `hold_ms`.
    #[schema(minimum = 1)]
    pub expires_at: Option<i64>,
    /// Take from this location only (a SKU that keeps stock by location);
    /// without it the ledger takes from the first location, in the order
    /// they were first stocked, that has the whole quantity. Not with
    /// `units`.
    pub location: Option<String>,
}

/// One line of a basket.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BasketLineRequest {
    /// The SKU (each at most once per basket).
    pub sku: String,
    /// Units to hold, 1 to 1,000,000,000.
    #[schema(minimum = 1, maximum = 1_000_000_000)]
    pub quantity: i64,
}

/// Hold several SKUs together, all or none.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BasketHoldRequest {
    /// The buyer, counted against each SKU's per-user limit.
    pub user_id: Option<String>,
    /// How long every line is held, in milliseconds (at most 7 days).
    /// Required unless `expires_at` is given.
    pub hold_ms: Option<i64>,
    /// Held until this instant (ms since the Unix epoch); not with `hold_ms`.
    #[schema(minimum = 1)]
    pub expires_at: Option<i64>,
    /// 1 to 50 lines, each SKU once.
    #[schema(min_items = 1, max_items = 50)]
    pub lines: Vec<BasketLineRequest>,
}

/// One line of a basket as it stands.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct BasketLineBody {
    pub sku: String,
    /// The line's order on its SKU: the basket id.
    pub order_id: String,
    /// Units the line takes, when known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub quantity: Option<i64>,
    /// `held`, `confirmed`, `refunded`, `refused`, `released`, `expired`,
    /// `pending` (in the log, not decided) or `deducted`.
    pub state: String,
    /// The decision of this request's command for the line, if it sent one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub result: Option<String>,
    /// Why the line was refused, released or refunded.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// A basket as it stands after a request.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct BasketResponse {
    pub basket_id: String,
    /// `held`, `refused` (no line held), `confirmed`, `failed` (no line
    /// sold), `released`, `pending` or `partial` (a caller stopped
    /// half-way: confirm or release again).
    pub status: String,
    /// The holds' deadline (ms since the Unix epoch), when known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<i64>,
    pub lines: Vec<BasketLineBody>,
    /// The basket was already as asked: nothing was sent.
    pub repeat: bool,
}

impl BasketResponse {
    pub fn new(basket: &stockledger_client::basket::BasketAnswer, repeat: bool) -> Self {
        Self {
            basket_id: basket.basket_id.to_string(),
            status: basket.status.as_str().to_owned(),
            expires_at: basket.expires_at,
            lines: basket.lines.iter().map(line_body).collect(),
            repeat,
        }
    }
}

/// Give back units a confirmed order bought.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RefundRequest {
    /// The order's refunded units once this refund is done (a running
    /// total, so a resend refunds once); absent: everything it bought.
    #[schema(minimum = 1, maximum = 1_000_000_000)]
    pub total: Option<i64>,
}

/// Cap the units one user may hold and buy of a SKU.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct LimitRequest {
    /// Units one user's live reservations and purchases may add up to (at
    /// least 1); `null` lifts the limit. Required: `{}` is refused, so a
    /// limit is never lifted by a field left out.
    #[serde(deserialize_with = "present")]
    #[schema(required = true, minimum = 1, maximum = 1_000_000_000)]
    pub per_user: Option<i64>,
}

/// Set or lift a SKU's low-stock threshold.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AlertsRequest {
    /// `LOW_STOCK` is raised when available stock goes from at or above
    /// this to below it (at least 1); `null` lifts the threshold.
    /// Required: `{}` is refused, so a threshold is never lifted by a field
    /// left out.
    #[serde(deserialize_with = "present")]
    #[schema(required = true, minimum = 1, maximum = 1_000_000_000)]
    pub low_stock_below: Option<i64>,
}

/// A field that must be there, though it may be `null` (serde treats a
/// missing `Option` field as `None` unless told otherwise).
fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<i64>, D::Error> {
    Option::deserialize(d)
}

/// Give back what an order took; before its deduction, refuse that deduction.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RollbackRequest {
    /// Why (at most 1,024 bytes).
    #[schema(max_length = 1024)]
    pub reason: Option<String>,
}

/// `ADD` changes available stock by `quantity`; `SET` makes the total `quantity`.
#[derive(Debug, Clone, Copy, Deserialize, ToSchema)]
pub enum Mode {
    #[serde(rename = "ADD")]
    Add,
    #[serde(rename = "SET")]
    Set,
}

/// Add to, or set, a SKU's stock: `mode` and `quantity` for counted
/// stock, or `units` to add named units.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RestockRequest {
    /// Required for counted stock; with `units`, `ADD` if given.
    pub mode: Option<Mode>,
    /// `ADD`: non-zero, within ±10¹⁵; `SET`: 0 to 10¹⁵. Required for
    /// counted stock; with `units`, their number if given.
    #[schema(minimum = -1_000_000_000_000_000_i64, maximum = 1_000_000_000_000_000_i64)]
    pub quantity: Option<i64>,
    /// Named units to add, free (a show's seats): 1 to 1,000 names (each
    /// 1 to 128 bytes, no control characters, no braces), none twice, none
    /// the SKU has already. A SKU sells named units or counted
    /// stock, never both.
    #[schema(min_items = 1, max_items = 1000)]
    pub units: Option<Vec<String>>,
    /// The location whose stock this changes (1 to 64 ASCII letters,
    /// digits, `-`, `_`, `.`). A SKU keeps its stock in one place or by
    /// location, never both: a restock naming a location moves a SKU whose
    /// total is 0 to locations. Not with `units`.
    pub location: Option<String>,
}

/// Move available stock between two locations of a SKU, all or nothing.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TransferRequest {
    /// The location the stock leaves: it must have `quantity` available.
    pub from: String,
    /// The location the stock goes to (added if not stocked before); not
    /// `from`.
    pub to: String,
    /// Units to move, 1 to 1,000,000,000.
    #[schema(minimum = 1, maximum = 1_000_000_000)]
    pub quantity: i64,
}

/// Where a command landed in the log.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Position {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
}

/// The applier's decision on a command.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct DecisionBody {
    /// `APPLIED`, `REJECTED_INSUFFICIENT`, `REJECTED_CANCELLED`,
    /// `REJECTED_RESTOCK`, `IGNORED_NO_DEDUCTION`, `DUPLICATE`, `MISROUTED`.
    pub result: String,
    /// Change in available stock.
    pub delta: i64,
    /// The SKU's stock after the command; absent for a record not decided
    /// on it (`MISROUTED`), which says nothing of the stock.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub available: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub total: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The location the command named or acted on: where a deduct naming
    /// none took from, where an order's units went back (a transfer: its
    /// `from`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub location: Option<String>,
    /// The stock events the command caused: `SOLD_OUT` (available reached
    /// 0), `BACK_IN_STOCK` (it left 0), `LOW_STOCK` (it crossed the SKU's
    /// threshold downwards).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub events: Vec<String>,
}

impl From<Decision> for DecisionBody {
    fn from(d: Decision) -> Self {
        let figures = d.figures();
        Self {
            result: d.result.as_str().to_owned(),
            delta: d.delta,
            available: figures.map(|f| f.available),
            total: figures.map(|f| f.total),
            reason: d.reason,
            location: d.location,
            events: d.events.kinds().map(|k| k.as_str().to_owned()).collect(),
        }
    }
}

/// One order of one SKU, as the ledger knows it.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct OrderBody {
    pub sku: String,
    pub order_id: String,
    /// `DEDUCTED`, `RESERVED`, `CONFIRMED`, `EXPIRED`, `ROLLED_BACK` or
    /// `CANCELLED` (rolled back before any deduct).
    pub status: String,
    pub quantity: i64,
    /// Offset of the order's last step on the SKU's partition.
    pub offset: i64,
    /// The buyer the units count against, if the deduct named one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user_id: Option<String>,
    /// A reservation's deadline (ms since the Unix epoch).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<i64>,
    /// Units of a confirmed order refunded so far.
    pub refunded: i64,
    /// The location the order took from, where its units go back.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub location: Option<String>,
}

impl OrderBody {
    pub(super) fn new(sku: &Sku, order_id: &OrderId, e: &OrderEntry) -> Self {
        Self {
            sku: sku.to_string(),
            order_id: order_id.to_string(),
            status: e.status.as_str().to_owned(),
            quantity: e.quantity,
            offset: e.offset,
            user_id: e.user.clone(),
            expires_at: e.expires_at,
            refunded: e.refunded,
            location: e.location.clone(),
        }
    }
}

/// Where a command stands.
#[derive(Debug, Clone, Copy, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum CommandStatus {
    /// In the log; the applier will decide it (`202`, no `wait_ms`).
    Accepted,
    /// Decided within `wait_ms` (`200`).
    Decided,
    /// In the log, not decided within `wait_ms`; it will be (`202`).
    Pending,
    /// The ledger already held this request; nothing was published (`200`).
    Repeat,
}

/// The answer to a command.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct CommandResponse {
    pub status: CommandStatus,
    pub sku: String,
    /// The command's id in the log (absent for a repeat, which is not published).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub command_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub position: Option<Position>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decision: Option<DecisionBody>,
    /// This request repeats one the ledger already holds; it changed nothing.
    pub repeat: bool,
    /// For an order command that repeats: the order as the ledger holds it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub order: Option<OrderBody>,
}

/// A SKU's stock.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct StockBody {
    pub sku: String,
    pub available: i64,
    pub total: i64,
    /// Units taken by orders and not given back: `total - available`
    /// (reserved and sold).
    pub held: i64,
    /// Units held by live reservations (part of `held`).
    pub reserved: i64,
    /// Nothing is left to sell now (`available` is 0); the `sold_out` and
    /// `back_in_stock` stock events mark its changes.
    // The ledger's one definition: `stockledger_core::sold_out`.
    pub sold_out: bool,
    /// Units one user may hold and buy, when limited.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit_per_user: Option<i64>,
    /// The partition of the command topic the SKU lives on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub partition: Option<i32>,
    /// The offset of the last record applied to the SKU.
    pub last_offset: i64,
    /// The stock at each location, in the order they were first stocked
    /// (absent for a SKU that keeps no stock by location); they sum to
    /// `available` and `total`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub locations: Vec<LocationBody>,
    /// When the SKU sells (absent for one that always sells and was never
    /// paused).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sale: Option<SellingBody>,
}

/// When a SKU sells: its window and its pause, as the ledger decided them
/// by the records' times.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct SellingBody {
    /// The first moment on sale (RFC 3339), if the window has an opening.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(format = DateTime)]
    pub opens_at: Option<String>,
    /// The first moment no longer on sale (RFC 3339), if it closes.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(format = DateTime)]
    pub closes_at: Option<String>,
    /// Where the SKU's records reached in the window: `not_open`, `open`
    /// or `closed` (a window is passed by the first record stamped after
    /// its opening or closing).
    pub phase: String,
    /// Whether a pause stopped the sale.
    pub paused: bool,
}

impl SellingBody {
    /// The body of `sale`, `None` for a SKU that always sells, unpaused.
    pub fn of(sale: &stockledger_projection::Sale) -> Option<Self> {
        if stockledger_core::sells_always(&sale.window, sale.phase, sale.paused) {
            return None;
        }
        let at = |t: Option<i64>| t.map(stockledger_runtime::clock::rfc3339_ms);
        Some(Self {
            opens_at: at(sale.window.opens_at()),
            closes_at: at(sale.window.closes_at()),
            phase: sale.phase.as_str().to_owned(),
            paused: sale.paused,
        })
    }
}

impl StockBody {
    pub fn new(
        sku: &Sku,
        s: &stockledger_projection::Stock,
        locations: &[stockledger_core::LocationStock],
    ) -> Self {
        Self {
            sku: sku.to_string(),
            available: s.available,
            total: s.total,
            held: s.total - s.available,
            reserved: s.reserved,
            sold_out: stockledger_core::sold_out(s.available),
            limit_per_user: s.limit,
            partition: s.partition,
            last_offset: s.offset,
            locations: locations.iter().map(LocationBody::from).collect(),
            sale: None,
        }
    }

    /// [`StockBody::new`] with when the SKU sells.
    #[must_use]
    pub fn with_sale(self, sale: &stockledger_projection::Sale) -> Self {
        Self {
            sale: SellingBody::of(sale),
            ..self
        }
    }
}

/// A SKU's stock at one location.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct LocationBody {
    pub location: String,
    pub available: i64,
    pub total: i64,
    /// Units taken from here by orders and not given back.
    pub held: i64,
}

impl From<&stockledger_core::LocationStock> for LocationBody {
    fn from(l: &stockledger_core::LocationStock) -> Self {
        Self {
            location: l.name.clone(),
            available: l.available,
            total: l.total,
            held: l.held(),
        }
    }
}

/// Where a named unit stands.
#[derive(Debug, Clone, Copy, Serialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum UnitState {
    /// Free to take.
    Available,
    /// Held by a live reservation.
    Held,
    /// Sold.
    Sold,
}

impl From<stockledger_core::UnitState> for UnitState {
    fn from(state: stockledger_core::UnitState) -> Self {
        match state {
            stockledger_core::UnitState::Available => Self::Available,
            stockledger_core::UnitState::Held => Self::Held,
            stockledger_core::UnitState::Sold => Self::Sold,
        }
    }
}

/// A seat map: each named unit of a SKU and where it stands, in the order
/// the units were added (a JSON object keyed by unit name).
#[derive(Debug, Clone)]
pub struct SeatMap(pub Vec<(String, UnitState)>);

impl Serialize for SeatMap {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_map(self.0.iter().map(|(name, state)| (name, state)))
    }
}

/// `GET /v1/history` parameters: `sku`, `order_id`, or both.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct HistoryParams {
    /// History of this SKU (with `order_id`: that order's entries on it).
    pub sku: Option<String>,
    /// History of this order, on every SKU.
    pub order_id: Option<String>,
    /// History of this basket (not with `sku` or `order_id`): its lines'
    /// holds and what befell them, by SKU.
    pub basket_id: Option<String>,
    /// With `sku`: history of this named unit of the SKU (the restock that
    /// added it, the deducts that asked for it, and what befell the orders
    /// that took it), in log order.
    pub unit: Option<String>,
    /// Only records that occurred at or after this: RFC 3339
    /// (`2026-11-23T10:00:00Z`), `now`, or a time ago (`-15m`, `-2h`, `-7d`).
    pub since: Option<String>,
    /// Only records that occurred before this (same forms as `since`).
    pub until: Option<String>,
    /// Only these results, comma-separated (e.g. `REJECTED_INSUFFICIENT,DUPLICATE`).
    pub result: Option<String>,
    /// `true`: newest first (log order reversed).
    pub newest_first: Option<bool>,
    /// The `next` cursor of the previous page (`TOPIC:PARTITION:OFFSET:SKU`);
    /// give the same filters with it.
    pub after: Option<String>,
    /// Entries per page, 1 to 1,000 (default 100).
    #[param(minimum = 1, maximum = 1000)]
    pub limit: Option<i64>,
}

/// One archived decision.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct HistoryEntry {
    pub position: Position,
    pub sku: String,
    /// `DEDUCT`, `ROLLBACK`, `RESTOCK`, `CONFIRM`, `REFUND`, `EXPIRE`,
    /// `LIMIT` or `TRANSFER` (absent for an invalid record).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub order_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub adjustment_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub quantity: Option<i64>,
    pub result: String,
    pub delta: i64,
    /// The SKU's stock after the record; absent for a record not decided
    /// on it (`INVALID`, `MISROUTED`), which says nothing of the stock.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub available_after: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub total_after: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The reason a rollback gave (archived from outcome schema v3 on).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rollback_reason: Option<String>,
    /// `ADD` or `SET`, for a restock (archived from outcome schema v3 on).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub restock_mode: Option<String>,
    /// RFC 3339, UTC, milliseconds.
    pub occurred_at: String,
    /// The buyer a deduct named (archived from outcome schema v4 on).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user_id: Option<String>,
    /// A reservation's deadline: RFC 3339, UTC, milliseconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<String>,
    /// The W3C `traceparent` the command was sent with, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub traceparent: Option<String>,
    /// The basket a hold was a line of.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub basket_id: Option<String>,
    /// The named units a deduct took or asked for, or a restock added.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub units: Option<Vec<String>>,
    /// The location the command named or acted on (a transfer: its `from`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub location: Option<String>,
    /// Where a transfer moved stock to.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub to_location: Option<String>,
    /// The stock events the record caused: `SOLD_OUT`, `BACK_IN_STOCK`,
    /// `LOW_STOCK`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub events: Option<Vec<String>>,
    /// The sale window a window command set: its opening (RFC 3339).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub opens_at: Option<String>,
    /// Its closing (RFC 3339).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub closes_at: Option<String>,
}

impl From<stockledger_analysts::query::Entry> for HistoryEntry {
    fn from(e: stockledger_analysts::query::Entry) -> Self {
        Self {
            position: Position {
                topic: e.topic,
                partition: e.partition,
                offset: e.log_offset,
            },
            sku: e.sku,
            command: e.command,
            order_id: e.order_id,
            adjustment_id: e.adjustment_id,
            quantity: e.quantity,
            result: e.result,
            delta: e.delta,
            available_after: e.available_after,
            total_after: e.total_after,
            reason: e.reason,
            rollback_reason: e.rollback_reason,
            restock_mode: e.restock_mode,
            occurred_at: e.occurred_at,
            user_id: e.user_id,
            expires_at: e.expires_at,
            traceparent: e.traceparent,
            basket_id: e.basket_id,
            units: e.units,
            location: e.location,
            to_location: e.to_location,
            events: e.events,
            opens_at: e.opens_at,
            closes_at: e.closes_at,
        }
    }
}

/// A page of history, oldest first (newest first when asked).
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct HistoryPage {
    pub entries: Vec<HistoryEntry>,
    /// Pass as `after` for the next page; absent on the last page.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next: Option<String>,
}

/// A basket line as the answer shows it.
fn line_body(line: &stockledger_client::basket::LineAnswer) -> BasketLineBody {
    BasketLineBody {
        sku: line.sku.to_string(),
        order_id: line.order_id.to_string(),
        quantity: line.quantity,
        state: line.state.as_str().to_owned(),
        result: line.result.map(|r| r.as_str().to_owned()),
        reason: line.reason.clone(),
    }
}
