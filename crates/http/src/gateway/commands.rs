//! The commands' routes: each validates its path and body as the Rust
//! library does, answers a repeat the ledger already holds without
//! publishing, and otherwise publishes through [`Gateway::command`].
//!
//! Commands name their idempotency key in the path (the order id, the
//! restock's adjustment id, or the transfer's id): a request the ledger already holds is answered
//! `200` with `"repeat": true` and publishes nothing; a deduct that races
//! its twin into the log is decided `DUPLICATE` by the applier and compared
//! then: a repeat if identical, 409 if not.

use axum::extract::rejection::PathRejection;
use axum::extract::{Path, Request, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use stockledger_core::report::Chain;
use stockledger_core::{
    AdjustmentId, Alerts, CommandBody, Confirm, Deduct, Limit, LocationId, OrderEntry, OrderId,
    OrderStatus, Quantity, Refund, Restock, RestockMode, Rollback, Sku, Transfer, TransferId,
    UnitId, UserId, ValidationError,
};
use tracing::warn;

use super::bodies::{
    AlertsRequest, CommandResponse, CommandStatus, DeductRequest, LimitRequest, Mode, OrderBody,
    RefundRequest, RestockRequest, RollbackRequest, TraceHeader, TransferRequest, WaitParams,
};
use super::problem::{no_body, path_problem, Body, Problem, Query};
use super::publish::SameOrder;
use super::{Answer, Shared};

pub(super) fn sku_and_order(
    path: Result<Path<(String, String)>, PathRejection>,
) -> Result<(Sku, OrderId), Problem> {
    let Path((sku, order_id)) = path.map_err(path_problem)?;
    Ok((Sku::new(sku)?, OrderId::new(order_id)?))
}

/// Take `quantity` units of `sku` for `order_id`.
#[utoipa::path(post, path = "/v1/skus/{sku}/orders/{order_id}/deduct", tag = "commands",
    params(("sku" = String, Path, description = "The SKU"),
           ("order_id" = String, Path, description = "The order: the idempotency key"),
           WaitParams, TraceHeader),
    request_body = DeductRequest,
    responses(
        (status = 200, description = "Decided within wait_ms, or a repeat of a request the ledger holds", body = CommandResponse),
        (status = 202, description = "In the log; decided later (no wait_ms, or not within it)", body = CommandResponse),
        (status = 400, description = "Malformed JSON", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "The order was already deducted with another quantity", body = Problem, content_type = "application/problem+json"),
        (status = 413, description = "Body over the limit", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "A field is refused; `field` names it", body = Problem, content_type = "application/problem+json"),
        (status = 429, description = "The producer queue is full; retry after Retry-After", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "The brokers (or Redis) are unreachable; retry after Retry-After", body = Problem, content_type = "application/problem+json")))]
pub(crate) async fn deduct(
    State(gateway): Shared,
    path: Result<Path<(String, String)>, PathRejection>,
    Query(wait): Query<WaitParams>,
    trace: TraceHeader,
    Body(request): Body<DeductRequest>,
) -> Answer {
    let (sku, order_id) = sku_and_order(path)?;
    let mut deduct = Deduct::taking(order_id.clone(), request.quantity, request.units.as_deref())?;
    if let Some(location) = request.location {
        deduct = deduct.at(LocationId::new(location)?)?;
    }
    let user_id = request.user_id.map(UserId::new).transpose()?;
    let expires_at = hold_deadline(request.hold_ms, request.expires_at)?;
    let wait = gateway.wait(&wait)?;
    let hold_field = if request.hold_ms.is_some() {
        "hold_ms"
    } else {
        "expires_at"
    };
    let asked = AskedDeduct {
        quantity: deduct.quantity,
        units: deduct.units.clone(),
        location: deduct.location.clone(),
        user_id: user_id.clone(),
        expires_at,
        hold_field,
    };
    if let Some(entry) = gateway.held_order(&sku, &order_id).await {
        let deducted = matches!(
            entry.status,
            OrderStatus::Deducted
                | OrderStatus::RolledBack
                | OrderStatus::Reserved
                | OrderStatus::Confirmed
                | OrderStatus::Expired
        );
        if deducted {
            asked.same_as(&entry, &sku, &order_id)?;
            return Ok(repeat(&sku, Some(OrderBody::new(&sku, &order_id, &entry))));
        }
    }
    let body = CommandBody::Deduct(Deduct {
        user_id,
        expires_at,
        ..deduct
    });
    // Raced into the log by another request for this order, it is decided
    // DUPLICATE: compared again then, with what the first one left.
    let (held_sku, held_order) = (sku.clone(), order_id.clone());
    let same: SameOrder = Box::new(move |entry| asked.same_as(entry, &held_sku, &held_order));
    gateway
        .command_checked(
            sku,
            Some(order_id),
            body,
            wait,
            trace.traceparent,
            Some(same),
        )
        .await
}

/// The deadline of the hold a deduct asks for: `hold_ms` from now (at
/// least a second, at most [`MAX_HOLD_MS`](stockledger_core::ids::MAX_HOLD_MS)), or
/// `expires_at`, never both; none for a plain deduct.
pub(super) fn hold_deadline(
    hold_ms: Option<i64>,
    expires_at: Option<i64>,
) -> Result<Option<i64>, Problem> {
    match (hold_ms, expires_at) {
        (Some(_), Some(_)) => {
            Err(ValidationError::new("hold_ms", "give hold_ms or expires_at, not both").into())
        }
        (Some(hold), None) if hold < super::contract::MIN_HOLD_MS => Err(ValidationError::new(
            "hold_ms",
            format!(
                "must be at least {} (a hold shorter than a second could end before it is \
                 logged), got {hold}",
                super::contract::MIN_HOLD_MS
            ),
        )
        .into()),
        (Some(hold), None) if hold > stockledger_core::ids::MAX_HOLD_MS => {
            Err(ValidationError::new(
                "hold_ms",
                format!(
                    "must be at most {} (7 days), got {hold}",
                    stockledger_core::ids::MAX_HOLD_MS
                ),
            )
            .into())
        }
        (Some(hold), None) => Ok(Some(
            stockledger_runtime::clock::now_ms().saturating_add(hold),
        )),
        (None, deadline) => Ok(deadline),
    }
}

/// What a deduct asks for, to compare with the order the ledger holds:
/// before publishing, and again once decided if it raced another request
/// for the same order into the log.
struct AskedDeduct {
    quantity: Quantity,
    units: Vec<UnitId>,
    /// The location asked for, if any (the ledger chooses when none is).
    location: Option<LocationId>,
    user_id: Option<UserId>,
    expires_at: Option<i64>,
    /// The field that asked for a hold (`hold_ms` or `expires_at`).
    hold_field: &'static str,
}

impl AskedDeduct {
    /// Refuses (409, naming the first field that differs) a deduct of an
    /// order the ledger holds unless it is an identical repeat. A hold's
    /// deadline is compared as "a hold or not": `hold_ms` gives a new one
    /// each time.
    fn same_as(&self, entry: &OrderEntry, sku: &Sku, order_id: &OrderId) -> Result<(), Problem> {
        let differs: Vec<(&str, String)> = [
            (entry.quantity != self.quantity.get())
                .then(|| ("quantity", format!("{} units", entry.quantity))),
            (!entry
                .units
                .iter()
                .map(String::as_str)
                .eq(self.units.iter().map(UnitId::as_str)))
            .then(|| ("units", format!("units {:?}", entry.units))),
            (self
                .location
                .as_ref()
                .is_some_and(|l| entry.location.as_deref() != Some(l.as_str())))
            .then(|| {
                let at = entry.location.as_deref().unwrap_or("no location");
                ("location", format!("location {at}"))
            }),
            (entry.user.as_deref() != self.user_id.as_ref().map(UserId::as_str)).then(|| {
                let user = entry
                    .user
                    .as_deref()
                    .map_or("no user".into(), |u| format!("user {u:?}"));
                ("user_id", user)
            }),
            (entry.expires_at.is_some() != self.expires_at.is_some()).then(|| {
                let what = if entry.expires_at.is_some() {
                    "a hold"
                } else {
                    "a plain deduct"
                };
                (self.hold_field, what.to_owned())
            }),
        ]
        .into_iter()
        .flatten()
        .collect();
        let Some((field, _)) = differs.first() else {
            return Ok(());
        };
        let was: Vec<String> = differs
            .iter()
            .map(|(field, first)| format!("{field} (the first: {first})"))
            .collect();
        Err(Problem {
            field: Some((*field).to_owned()),
            ..Problem::new(
                StatusCode::CONFLICT,
                format!(
                    "order {order_id} of {sku} was already taken by a request that differs in {}: \
                     an order id is used once, and only an identical repeat is a repeat",
                    was.join(", ")
                ),
            )
        })
    }
}

/// Sell what the reservation `order_id` of `sku` holds, up to its deadline; no body, or `{}`.
#[utoipa::path(post, path = "/v1/skus/{sku}/orders/{order_id}/confirm", tag = "commands",
    params(("sku" = String, Path, description = "The SKU"),
           ("order_id" = String, Path, description = "The reserved order"),
           WaitParams, TraceHeader),
    responses(
        (status = 200, description = "Decided within wait_ms (CONFIRMED, REJECTED_EXPIRED, …), or a repeat", body = CommandResponse),
        (status = 202, description = "In the log; decided later", body = CommandResponse),
        (status = 422, description = "A field is refused", body = Problem, content_type = "application/problem+json"),
        (status = 429, description = "The producer queue is full", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "The brokers are unreachable", body = Problem, content_type = "application/problem+json")))]
pub(crate) async fn confirm(
    State(gateway): Shared,
    path: Result<Path<(String, String)>, PathRejection>,
    Query(wait): Query<WaitParams>,
    trace: TraceHeader,
    request: Request,
) -> Answer {
    let (sku, order_id) = sku_and_order(path)?;
    no_body(request).await?;
    let wait = gateway.wait(&wait)?;
    if let Some(entry) = gateway.held_order(&sku, &order_id).await {
        if entry.status == OrderStatus::Confirmed {
            return Ok(repeat(&sku, Some(OrderBody::new(&sku, &order_id, &entry))));
        }
    }
    let body = CommandBody::Confirm(Confirm {
        order_id: order_id.clone(),
    });
    gateway
        .command(sku, Some(order_id), body, wait, trace.traceparent)
        .await
}

/// Give back (part of) what the confirmed order `order_id` of `sku` bought.
#[utoipa::path(post, path = "/v1/skus/{sku}/orders/{order_id}/refund", tag = "commands",
    params(("sku" = String, Path, description = "The SKU"),
           ("order_id" = String, Path, description = "The confirmed order"),
           WaitParams, TraceHeader),
    request_body(content = Option<RefundRequest>, description = "Optional: the refunded total after this refund"),
    responses(
        (status = 200, description = "Decided within wait_ms (REFUNDED, REJECTED_REFUND, …)", body = CommandResponse),
        (status = 202, description = "In the log; decided later", body = CommandResponse),
        (status = 422, description = "A field is refused", body = Problem, content_type = "application/problem+json"),
        (status = 429, description = "The producer queue is full", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "The brokers are unreachable", body = Problem, content_type = "application/problem+json")))]
pub(crate) async fn refund(
    State(gateway): Shared,
    path: Result<Path<(String, String)>, PathRejection>,
    Query(wait): Query<WaitParams>,
    trace: TraceHeader,
    request: Request,
) -> Answer {
    let (sku, order_id) = sku_and_order(path)?;
    let body: RefundRequest = Body::optional(request, &()).await?;
    let quantity = body
        .total
        .map(|n| Quantity::of_field("total", n))
        .transpose()?;
    let wait = gateway.wait(&wait)?;
    let body = CommandBody::Refund(Refund {
        order_id: order_id.clone(),
        quantity,
    });
    gateway
        .command(sku, Some(order_id), body, wait, trace.traceparent)
        .await
}

/// Cap (or, with `null`, uncap) the units one user may hold and buy of `sku`.
#[utoipa::path(put, path = "/v1/skus/{sku}/limit", tag = "commands",
    params(("sku" = String, Path, description = "The SKU"), WaitParams, TraceHeader),
    request_body = LimitRequest,
    responses(
        (status = 200, description = "Decided within wait_ms", body = CommandResponse),
        (status = 202, description = "In the log; decided later", body = CommandResponse),
        (status = 422, description = "A field is refused", body = Problem, content_type = "application/problem+json"),
        (status = 429, description = "The producer queue is full", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "The brokers are unreachable", body = Problem, content_type = "application/problem+json")))]
pub(crate) async fn limit(
    State(gateway): Shared,
    path: Result<Path<String>, PathRejection>,
    Query(wait): Query<WaitParams>,
    trace: TraceHeader,
    Body(request): Body<LimitRequest>,
) -> Answer {
    let Path(sku) = path.map_err(path_problem)?;
    let sku = Sku::new(sku)?;
    let per_user = request
        .per_user
        .map(|n| Quantity::of_field("per_user", n))
        .transpose()?;
    let wait = gateway.wait(&wait)?;
    gateway
        .command(
            sku,
            None,
            CommandBody::Limit(Limit { per_user }),
            wait,
            trace.traceparent,
        )
        .await
}

/// Set (or, with `null`, lift) the low-stock threshold of `sku`: stock
/// events say `LOW_STOCK` when available goes from at or above it to below.
#[utoipa::path(put, path = "/v1/skus/{sku}/alerts", tag = "commands",
    params(("sku" = String, Path, description = "The SKU"), WaitParams, TraceHeader),
    request_body = AlertsRequest,
    responses(
        (status = 200, description = "Decided within wait_ms", body = CommandResponse),
        (status = 202, description = "In the log; decided later", body = CommandResponse),
        (status = 400, description = "Malformed JSON, or no body", body = Problem, content_type = "application/problem+json"),
        (status = 413, description = "Body over the limit", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "A field is refused (`low_stock_below` below 1, or missing)", body = Problem, content_type = "application/problem+json"),
        (status = 429, description = "The producer queue is full", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "The brokers are unreachable", body = Problem, content_type = "application/problem+json")))]
pub(crate) async fn alerts(
    State(gateway): Shared,
    path: Result<Path<String>, PathRejection>,
    Query(wait): Query<WaitParams>,
    trace: TraceHeader,
    Body(request): Body<AlertsRequest>,
) -> Answer {
    let Path(sku) = path.map_err(path_problem)?;
    let sku = Sku::new(sku)?;
    let low_stock_below = request
        .low_stock_below
        .map(|n| Quantity::of_field("low_stock_below", n))
        .transpose()?;
    let wait = gateway.wait(&wait)?;
    let body = CommandBody::Alerts(Alerts { low_stock_below });
    gateway
        .command(sku, None, body, wait, trace.traceparent)
        .await
}

/// Give back what `order_id` took of `sku` (before its deduction: refuse that deduction).
#[utoipa::path(post, path = "/v1/skus/{sku}/orders/{order_id}/rollback", tag = "commands",
    params(("sku" = String, Path, description = "The SKU"),
           ("order_id" = String, Path, description = "The order: the idempotency key"),
           WaitParams, TraceHeader),
    request_body(content = Option<RollbackRequest>, description = "Optional: the reason"),
    responses(
        (status = 200, description = "Decided within wait_ms, or a repeat", body = CommandResponse),
        (status = 202, description = "In the log; decided later", body = CommandResponse),
        (status = 422, description = "A field is refused", body = Problem, content_type = "application/problem+json"),
        (status = 429, description = "The producer queue is full", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "The brokers are unreachable", body = Problem, content_type = "application/problem+json")))]
pub(crate) async fn rollback(
    State(gateway): Shared,
    path: Result<Path<(String, String)>, PathRejection>,
    Query(wait): Query<WaitParams>,
    trace: TraceHeader,
    request: Request,
) -> Answer {
    let (sku, order_id) = sku_and_order(path)?;
    let body: RollbackRequest = Body::optional(request, &()).await?;
    let rollback = Rollback::new(order_id.clone(), body.reason)?;
    let wait = gateway.wait(&wait)?;
    if let Some(entry) = gateway.held_order(&sku, &order_id).await {
        if matches!(
            entry.status,
            OrderStatus::RolledBack | OrderStatus::Cancelled
        ) {
            return Ok(repeat(&sku, Some(OrderBody::new(&sku, &order_id, &entry))));
        }
    }
    let body = CommandBody::Rollback(rollback);
    gateway
        .command(sku, Some(order_id), body, wait, trace.traceparent)
        .await
}

/// Add to, or set, the stock of `sku`; `adjustment_id` makes a resend harmless.
#[utoipa::path(post, path = "/v1/skus/{sku}/restocks/{adjustment_id}", tag = "commands",
    params(("sku" = String, Path, description = "The SKU"),
           ("adjustment_id" = String, Path, description = "The adjustment: the idempotency key"),
           WaitParams, TraceHeader),
    request_body = RestockRequest,
    responses(
        (status = 200, description = "Decided within wait_ms, or an identical repeat", body = CommandResponse),
        (status = 202, description = "In the log; decided later", body = CommandResponse),
        (status = 400, description = "Malformed JSON, or no body", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "The adjustment id was already used with another mode or quantity; `field` names which", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "A field is refused", body = Problem, content_type = "application/problem+json"),
        (status = 429, description = "The producer queue is full", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "The brokers are unreachable, or a repeat's first record could not be read back to compare", body = Problem, content_type = "application/problem+json")))]
pub(crate) async fn restock(
    State(gateway): Shared,
    path: Result<Path<(String, String)>, PathRejection>,
    Query(wait): Query<WaitParams>,
    trace: TraceHeader,
    Body(request): Body<RestockRequest>,
) -> Answer {
    let Path((sku, adjustment_id)) = path.map_err(path_problem)?;
    let sku = Sku::new(sku)?;
    let adjustment_id = AdjustmentId::new(adjustment_id)?;
    let restock = restock_of(adjustment_id.clone(), request)?;
    let wait = gateway.wait(&wait)?;
    let body = CommandBody::Restock(restock);
    publish_adjustment(&gateway, sku, adjustment_id.as_str(), body, wait, trace).await
}

/// Move available stock of `sku` between two of its locations, all or
/// nothing; `transfer_id` makes a resend harmless.
#[utoipa::path(post, path = "/v1/skus/{sku}/transfers/{transfer_id}", tag = "commands",
    params(("sku" = String, Path, description = "The SKU"),
           ("transfer_id" = String, Path, description = "The transfer: the idempotency key, in one namespace with restocks' adjustment ids"),
           WaitParams, TraceHeader),
    request_body = TransferRequest,
    responses(
        (status = 200, description = "Decided within wait_ms (APPLIED, or REJECTED_INSUFFICIENT naming the location), or an identical repeat", body = CommandResponse),
        (status = 202, description = "In the log; decided later", body = CommandResponse),
        (status = 400, description = "Malformed JSON, or no body", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "The id was already used by another transfer or by a restock; `field` names what differs", body = Problem, content_type = "application/problem+json"),
        (status = 413, description = "Body over the limit", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "A field is refused (`from` equal to `to`, a bad location name, a quantity below 1)", body = Problem, content_type = "application/problem+json"),
        (status = 429, description = "The producer queue is full", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "The brokers are unreachable, or a repeat's first record could not be read back to compare", body = Problem, content_type = "application/problem+json")))]
pub(crate) async fn transfer(
    State(gateway): Shared,
    path: Result<Path<(String, String)>, PathRejection>,
    Query(wait): Query<WaitParams>,
    trace: TraceHeader,
    Body(request): Body<TransferRequest>,
) -> Answer {
    let Path((sku, transfer_id)) = path.map_err(path_problem)?;
    let sku = Sku::new(sku)?;
    let transfer_id = TransferId::new(transfer_id)?;
    let moved = Transfer::new(
        transfer_id.clone(),
        LocationId::named("from", request.from)?,
        LocationId::named("to", request.to)?,
        Quantity::new(request.quantity)?,
    )?;
    let wait = gateway.wait(&wait)?;
    let body = CommandBody::Transfer(moved);
    publish_adjustment(&gateway, sku, transfer_id.as_str(), body, wait, trace).await
}

/// Publishes `body`, an adjustment of `sku` named `id` (a restock, a
/// transfer or a change of the sale: one namespace of ids), unless the
/// ledger holds that id already: then an identical repeat is answered
/// `200` `repeat` and another use of the id `409`
/// ([`super::Gateway::same_adjustment`]).
pub(super) async fn publish_adjustment(
    gateway: &super::Gateway,
    sku: Sku,
    id: &str,
    body: CommandBody,
    wait: Option<std::time::Duration>,
    trace: TraceHeader,
) -> Answer {
    let known = gateway
        .projection
        .adjustment(sku.as_str(), id)
        .await
        .unwrap_or_else(|e| {
            // The log decides duplicates anyway: publish without the check.
            let kind = body.kind().as_str();
            warn!(error = %Chain(&e), kind, "cannot check Redis for a repeated adjustment; publishing");
            None
        });
    if let Some(offset) = known {
        gateway.same_adjustment(&sku, offset, &body).await?;
        return Ok(repeat(&sku, None));
    }
    gateway
        .command(sku, None, body, wait, trace.traceparent)
        .await
}

/// The restock a request asks for: counted (`mode` and `quantity`) or of
/// named units (`units`, with `ADD` and their number if those are given).
fn restock_of(adjustment_id: AdjustmentId, request: RestockRequest) -> Result<Restock, Problem> {
    let mode = request.mode.map(|mode| match mode {
        Mode::Add => RestockMode::Add,
        Mode::Set => RestockMode::Set,
    });
    if mode.is_none() && request.units.is_none() {
        return Err(ValidationError::new("mode", "give mode and quantity, or units").into());
    }
    let restock = Restock::with_units(
        adjustment_id,
        mode.unwrap_or(RestockMode::Add),
        request.quantity,
        request.units.as_deref(),
    )?;
    Ok(match request.location {
        Some(location) => restock.at(LocationId::new(location)?)?,
        None => restock,
    })
}

pub(super) fn repeat(sku: &Sku, order: Option<OrderBody>) -> Response {
    Json(CommandResponse {
        status: CommandStatus::Repeat,
        sku: sku.to_string(),
        command_id: None,
        position: None,
        decision: None,
        repeat: true,
        order,
    })
    .into_response()
}
