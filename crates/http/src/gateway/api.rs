//! The gateway's routes: what each takes, what it answers.
//!
//! Commands name their idempotency key in the path (the order id, or the
//! restock's adjustment id): a request the ledger already holds is answered
//! `200` with `"repeat": true` and publishes nothing; one that races its
//! twin into the log is decided `DUPLICATE` by the applier and said to be a
//! repeat too.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use stockledger_core::report::Chain;

use axum::extract::rejection::PathRejection;
use axum::extract::{Path, Request, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use stockledger_analysts::query::{self, Cursor, HistoryOf, HistoryQuery, QueryError};
use stockledger_client::outcome::OutcomeError;
use stockledger_client::{ProducerError, Receipt};
use stockledger_core::codec;
use stockledger_core::{
    AdjustmentId, CommandBody, Confirm, Deduct, Limit, OrderEntry, OrderId, OrderStatus, Quantity,
    Refund, Restock, RestockMode, ResultCode, Rollback, Sku, UserId, ValidationError,
};
use stockledger_kafka::topic::read_at;
use tracing::warn;

use super::problem::{Body, Problem, Query};
use super::Gateway;

/// How long a repeated restock waits to read its first record back. A
/// fresh reader takes about 0.1 s on a local Apache Kafka, but the API
/// fuzzer once got a 503 here (cause not kept) from a broker busy with
/// thousands of partitions just after the test suite, where the wait was
/// 3 s. Repeats with another body are rare, so a longer wait costs the
/// common path nothing.
const LOOKUP_TIMEOUT: Duration = Duration::from_secs(8);

pub use super::bodies::*;

pub(super) type Shared = State<Arc<Gateway>>;
pub(super) type Answer = Result<Response, Problem>;

fn sku_and_order(
    path: Result<Path<(String, String)>, PathRejection>,
) -> Result<(Sku, OrderId), Problem> {
    let Path((sku, order_id)) = path.map_err(path_problem)?;
    Ok((Sku::new(sku)?, OrderId::new(order_id)?))
}

pub(super) fn path_problem(rejection: PathRejection) -> Problem {
    Problem::new(StatusCode::BAD_REQUEST, rejection.body_text())
}

/// Take `quantity` units of `sku` for `order_id`.
#[utoipa::path(post, path = "/v1/skus/{sku}/orders/{order_id}/deduct", tag = "commands",
    params(("sku" = String, Path, description = "The SKU (1-128 bytes, no control characters, no braces)"),
           ("order_id" = String, Path, description = "The order: the idempotency key"),
           WaitParams),
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
    Body(request): Body<DeductRequest>,
) -> Answer {
    let (sku, order_id) = sku_and_order(path)?;
    let quantity = Quantity::new(request.quantity)?;
    let user_id = request.user_id.map(UserId::new).transpose()?;
    let expires_at = match (request.hold_ms, request.expires_at) {
        (Some(_), Some(_)) => {
            return Err(
                ValidationError::new("hold_ms", "give hold_ms or expires_at, not both").into(),
            )
        }
        (Some(hold), None) if hold <= 0 => {
            return Err(
                ValidationError::new("hold_ms", format!("must be at least 1, got {hold}")).into(),
            )
        }
        (Some(hold), None) if hold > stockledger_core::ids::MAX_HOLD_MS => {
            return Err(ValidationError::new(
                "hold_ms",
                format!(
                    "must be at most {} (7 days), got {hold}",
                    stockledger_core::ids::MAX_HOLD_MS
                ),
            )
            .into())
        }
        (Some(hold), None) => Some(query::now_ms().saturating_add(hold)),
        (None, deadline) => deadline,
    };
    let wait = gateway.wait(&wait)?;
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
            // Only an identical repeat is a repeat (a hold's deadline is
            // compared as "a hold or not": hold_ms gives a new one each time).
            let hold_field = if request.hold_ms.is_some() {
                "hold_ms"
            } else {
                "expires_at"
            };
            let differs: Vec<(&str, String)> = [
                (entry.quantity != quantity.get())
                    .then(|| ("quantity", format!("{} units", entry.quantity))),
                (entry.user.as_deref() != user_id.as_ref().map(UserId::as_str)).then(|| {
                    let user = entry
                        .user
                        .as_deref()
                        .map_or("no user".into(), |u| format!("user {u:?}"));
                    ("user_id", user)
                }),
                (entry.expires_at.is_some() != expires_at.is_some()).then(|| {
                    let what = if entry.expires_at.is_some() {
                        "a hold"
                    } else {
                        "a plain deduct"
                    };
                    (hold_field, what.to_owned())
                }),
            ]
            .into_iter()
            .flatten()
            .collect();
            if let Some((field, _)) = differs.first() {
                let was: Vec<String> = differs
                    .iter()
                    .map(|(field, first)| format!("{field} (the first: {first})"))
                    .collect();
                return Err(Problem {
                    field: Some((*field).to_owned()),
                    ..Problem::new(
                        StatusCode::CONFLICT,
                        format!(
                            "order {order_id} of {sku} was already taken by a request that differs in {}: \
                             an order id is used once, and only an identical repeat is a repeat",
                            was.join(", ")
                        ),
                    )
                });
            }
        }
        if deducted {
            return Ok(repeat(&sku, Some(OrderBody::new(&sku, &order_id, &entry))));
        }
    }
    let body = CommandBody::Deduct(Deduct {
        user_id,
        expires_at,
        ..Deduct::new(order_id.clone(), quantity)
    });
    gateway.command(sku, Some(order_id), body, wait).await
}

/// Sell what the reservation `order_id` of `sku` holds (on time up to its deadline).
#[utoipa::path(post, path = "/v1/skus/{sku}/orders/{order_id}/confirm", tag = "commands",
    params(("sku" = String, Path, description = "The SKU"),
           ("order_id" = String, Path, description = "The reserved order"),
           WaitParams),
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
) -> Answer {
    let (sku, order_id) = sku_and_order(path)?;
    let wait = gateway.wait(&wait)?;
    if let Some(entry) = gateway.held_order(&sku, &order_id).await {
        if entry.status == OrderStatus::Confirmed {
            return Ok(repeat(&sku, Some(OrderBody::new(&sku, &order_id, &entry))));
        }
    }
    let body = CommandBody::Confirm(Confirm {
        order_id: order_id.clone(),
    });
    gateway.command(sku, Some(order_id), body, wait).await
}

/// Give back (part of) what the confirmed order `order_id` of `sku` bought.
#[utoipa::path(post, path = "/v1/skus/{sku}/orders/{order_id}/refund", tag = "commands",
    params(("sku" = String, Path, description = "The SKU"),
           ("order_id" = String, Path, description = "The confirmed order"),
           WaitParams),
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
    gateway.command(sku, Some(order_id), body, wait).await
}

/// Cap (or, with `null`, uncap) the units one user may hold and buy of `sku`.
#[utoipa::path(put, path = "/v1/skus/{sku}/limit", tag = "commands",
    params(("sku" = String, Path, description = "The SKU"), WaitParams),
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
        .command(sku, None, CommandBody::Limit(Limit { per_user }), wait)
        .await
}

/// Give back what `order_id` took of `sku` (before its deduction: refuse that deduction).
#[utoipa::path(post, path = "/v1/skus/{sku}/orders/{order_id}/rollback", tag = "commands",
    params(("sku" = String, Path, description = "The SKU"),
           ("order_id" = String, Path, description = "The order: the idempotency key"),
           WaitParams),
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
    gateway.command(sku, Some(order_id), body, wait).await
}

/// Add to, or set, the stock of `sku`; `adjustment_id` makes a resend harmless.
#[utoipa::path(post, path = "/v1/skus/{sku}/restocks/{adjustment_id}", tag = "commands",
    params(("sku" = String, Path, description = "The SKU"),
           ("adjustment_id" = String, Path, description = "The adjustment: the idempotency key"),
           WaitParams),
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
    Body(request): Body<RestockRequest>,
) -> Answer {
    let Path((sku, adjustment_id)) = path.map_err(path_problem)?;
    let sku = Sku::new(sku)?;
    let adjustment_id = AdjustmentId::new(adjustment_id)?;
    let mode = match request.mode {
        Mode::Add => RestockMode::Add,
        Mode::Set => RestockMode::Set,
    };
    let restock = Restock::new(adjustment_id.clone(), mode, request.quantity)?;
    let wait = gateway.wait(&wait)?;
    let known = gateway
        .projection
        .adjustment(sku.as_str(), adjustment_id.as_str())
        .await
        .unwrap_or_else(|e| {
            // The log decides duplicates anyway: publish without the check.
            warn!(error = %Chain(&e), "cannot check Redis for a repeated restock; publishing");
            None
        });
    if let Some(offset) = known {
        gateway.same_restock(&sku, offset, &restock).await?;
        return Ok(repeat(&sku, None));
    }
    gateway
        .command(sku, None, CommandBody::Restock(restock), wait)
        .await
}

/// The stock of `sku`, from the Redis projection.
#[utoipa::path(get, path = "/v1/skus/{sku}", tag = "reads",
    params(("sku" = String, Path, description = "The SKU")),
    responses(
        (status = 200, description = "The SKU's stock", body = StockBody),
        (status = 404, description = "No state for this SKU (never restocked?)", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "The SKU is refused", body = Problem, content_type = "application/problem+json")))]
pub(crate) async fn stock(
    State(gateway): Shared,
    path: Result<Path<String>, PathRejection>,
) -> Answer {
    let Path(sku) = path.map_err(path_problem)?;
    let sku = Sku::new(sku)?;
    let stock = gateway
        .projection
        .stock(&[sku.as_str()])
        .await
        .map_err(|e| redis_problem(&e))?;
    match stock.into_iter().next().flatten() {
        Some(s) => Ok(Json(StockBody {
            sku: sku.to_string(),
            available: s.available,
            total: s.total,
            held: s.total - s.available,
            reserved: s.reserved,
            limit_per_user: s.limit,
            partition: s.partition,
            last_offset: s.offset,
        })
        .into_response()),
        None => Err(Problem::new(
            StatusCode::NOT_FOUND,
            format!("no state for sku {sku} (never restocked?)"),
        )),
    }
}

/// One order of `sku`, from the Redis projection (one hash field read).
#[utoipa::path(get, path = "/v1/skus/{sku}/orders/{order_id}", tag = "reads",
    params(("sku" = String, Path, description = "The SKU"),
           ("order_id" = String, Path, description = "The order")),
    responses(
        (status = 200, description = "The order", body = OrderBody),
        (status = 404, description = "No deduct or rollback of this order was applied", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "A path parameter is refused", body = Problem, content_type = "application/problem+json")))]
pub(crate) async fn order(
    State(gateway): Shared,
    path: Result<Path<(String, String)>, PathRejection>,
) -> Answer {
    let (sku, order_id) = sku_and_order(path)?;
    match gateway.known_order(&sku, &order_id).await? {
        Some(entry) => Ok(Json(OrderBody::new(&sku, &order_id, &entry)).into_response()),
        None => Err(Problem::new(
            StatusCode::NOT_FOUND,
            format!("no deduct or rollback of order {order_id} on sku {sku} was applied"),
        )),
    }
}

/// Archived decisions of a SKU or an order, a page at a time, oldest first.
#[utoipa::path(get, path = "/v1/history", tag = "reads",
    params(HistoryParams),
    responses(
        (status = 200, description = "A page of history", body = HistoryPage),
        (status = 422, description = "A parameter is refused", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "The archive is unreachable", body = Problem, content_type = "application/problem+json")))]
pub(crate) async fn history(State(gateway): Shared, Query(params): Query<HistoryParams>) -> Answer {
    let sku = params.sku.map(Sku::new).transpose()?;
    let order_id = params.order_id.map(OrderId::new).transpose()?;
    let of = match (order_id, sku) {
        (Some(order), sku) => HistoryOf::Order {
            order_id: order.into_string(),
            sku: sku.map(Sku::into_string),
        },
        (None, Some(sku)) => HistoryOf::Sku(sku.into_string()),
        (None, None) => return Err(Problem::invalid("sku", "give sku, order_id, or both")),
    };
    let limit = params.limit.unwrap_or(100);
    if !(1..=MAX_HISTORY_LIMIT).contains(&limit) {
        return Err(Problem::invalid(
            "limit",
            format!("limit must be between 1 and {MAX_HISTORY_LIMIT}, got {limit}"),
        ));
    }
    let after: Option<Cursor> = params
        .after
        .map(|a| a.parse())
        .transpose()
        .map_err(|e: String| Problem::invalid("after", e))?;
    let now = query::now_ms();
    let results = params
        .result
        .iter()
        .flat_map(|r| r.split(','))
        .map(|r| {
            ResultCode::parse(r.trim())
                .ok_or_else(|| Problem::invalid("result", format!("{r:?} is not a result name")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let q = HistoryQuery {
        of,
        since_ms: params
            .since
            .as_deref()
            .map(|t| instant_param("since", t, now))
            .transpose()?,
        until_ms: params
            .until
            .as_deref()
            .map(|t| instant_param("until", t, now))
            .transpose()?,
        results,
        newest_first: params.newest_first.unwrap_or(false),
        after,
        limit,
    };
    let page = query::history_page(&gateway.archive, &gateway.topic, &q)
        .await
        .map_err(archive_problem)?;
    let entries = page
        .entries
        .into_iter()
        .map(|e| HistoryEntry {
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
        })
        .collect();
    Ok(Json(HistoryPage {
        entries,
        next: page.next.map(|c| c.to_string()),
    })
    .into_response())
}

fn repeat(sku: &Sku, order: Option<OrderBody>) -> Response {
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

/// A time query parameter (`since`, `until`): RFC 3339, `now`, or a time
/// ago; ms since the epoch.
pub(super) fn instant_param(field: &'static str, text: &str, now_ms: i64) -> Result<i64, Problem> {
    query::parse_instant(text, now_ms).map_err(|e| Problem::invalid(field, e))
}

/// A refused question (`422` naming the parameter), or an unreachable
/// archive (`503`).
pub(super) fn archive_problem(e: QueryError) -> Problem {
    match e {
        QueryError::Invalid { field, problem } => Problem::invalid(field, problem),
        QueryError::Database(e) => {
            warn!(error = %Chain(&e), "reading the archive failed");
            Problem::new(
                StatusCode::SERVICE_UNAVAILABLE,
                format!("the archive could not be read: {}", Chain(&e)),
            )
            .retry_after(1)
        }
    }
}

pub(super) fn redis_problem(e: &dyn std::error::Error) -> Problem {
    warn!(error = %Chain(e), "reading the Redis projection failed");
    Problem::new(
        StatusCode::SERVICE_UNAVAILABLE,
        format!(
            "the stock projection (Redis) could not be read: {}",
            Chain(e)
        ),
    )
    .retry_after(1)
}

impl Gateway {
    /// The wait a request asks for, bounded by the gateway's maximum.
    fn wait(&self, params: &WaitParams) -> Result<Option<Duration>, Problem> {
        match params.wait_ms {
            None => Ok(None),
            Some(ms) if Duration::from_millis(ms) <= self.max_wait => {
                Ok(Some(Duration::from_millis(ms)))
            }
            Some(ms) => Err(Problem::invalid(
                "wait_ms",
                format!(
                    "wait_ms must be at most {}, got {ms}",
                    self.max_wait.as_millis()
                ),
            )),
        }
    }

    async fn known_order(
        &self,
        sku: &Sku,
        order_id: &OrderId,
    ) -> Result<Option<OrderEntry>, Problem> {
        self.projection
            .order(sku.as_str(), order_id.as_str())
            .await
            .map_err(|e| redis_problem(&e))
    }

    /// The order as Redis holds it, for the repeat check before publishing.
    /// With Redis away the command is published unchecked: the applier
    /// decides a repeat `DUPLICATE` all the same, and the log takes
    /// commands while the projection is down.
    async fn held_order(&self, sku: &Sku, order_id: &OrderId) -> Option<OrderEntry> {
        self.projection
            .order(sku.as_str(), order_id.as_str())
            .await
            .unwrap_or_else(|e| {
                warn!(error = %Chain(&e), "cannot check Redis for a repeated order; publishing");
                None
            })
    }

    /// Refuses (409, naming the field) a restock repeated under an
    /// adjustment id the ledger holds at `offset` with another mode or
    /// quantity: the first one is read back from the log, the only place
    /// its body is kept.
    async fn same_restock(&self, sku: &Sku, offset: i64, asked: &Restock) -> Result<(), Problem> {
        let unreadable = |why: String| {
            warn!(%sku, offset, why, "cannot read a repeated restock's first record");
            Problem::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "the adjustment id is known, but its first record could not be read back to \
                 compare; nothing was published",
            )
            .retry_after(5)
        };
        let partition = match self.projection.stock(&[sku.as_str()]).await {
            Ok(stock) => stock.into_iter().next().flatten().and_then(|s| s.partition),
            Err(e) => return Err(unreadable(e.to_string())),
        };
        let Some(partition) = partition else {
            return Err(unreadable("the SKU's partition is not recorded".into()));
        };
        let record = read_at(&self.kafka, &self.topic, partition, offset, LOOKUP_TIMEOUT)
            .await
            .map_err(|e| unreadable(e.to_string()))?;
        let first = record
            .and_then(|r| r.payload)
            .and_then(|payload| codec::decode_command(&payload).ok());
        let Some(CommandBody::Restock(first)) = first.map(|c| c.body) else {
            return Err(unreadable("the record there is not this restock".into()));
        };
        let (field, was) = if first.mode() != asked.mode() {
            ("mode", first.mode().as_str().to_owned())
        } else if first.quantity() != asked.quantity() {
            ("quantity", first.quantity().to_string())
        } else {
            return Ok(());
        };
        Err(Problem {
            field: Some(field.into()),
            ..Problem::new(
                StatusCode::CONFLICT,
                format!(
                    "adjustment {} of {sku} was already made with {field} {was}: an adjustment id \
                     is used once, and only an identical repeat is a repeat",
                    first.adjustment_id
                ),
            )
        })
    }

    /// Publishes `body` and answers with its position, or with its decision
    /// when asked to wait.
    async fn command(
        &self,
        sku: Sku,
        order_id: Option<OrderId>,
        body: CommandBody,
        wait: Option<Duration>,
    ) -> Answer {
        let kind = body.kind().as_str();
        if !self.broker_up.load(Ordering::Relaxed) {
            metrics::counter!(super::PUBLISH_FAILURES_METRIC, "command" => kind, "reason" => "brokers_down")
                .increment(1);
            return Err(Problem::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "the Kafka brokers do not answer; nothing was published",
            )
            .retry_after(5));
        }
        let receipt = self
            .producer
            .try_send(sku.clone(), body)
            .await
            .map_err(|e| {
                let reason = match &e {
                    // The caller's doing: a 4xx, not a failure to publish.
                    ProducerError::Invalid(_) | ProducerError::SoldOut(_) => None,
                    ProducerError::QueueFull { .. } => Some("queue_full"),
                    _ => Some("unconfirmed"),
                };
                if let Some(reason) = reason {
                    metrics::counter!(super::PUBLISH_FAILURES_METRIC, "command" => kind, "reason" => reason)
                        .increment(1);
                }
                publish_problem(e)
            })?;
        metrics::counter!(super::PUBLISHED_METRIC, "command" => kind).increment(1);
        let mut response = CommandResponse {
            status: CommandStatus::Accepted,
            sku: sku.to_string(),
            command_id: Some(receipt.command_id.to_string()),
            position: Some(position(&receipt)),
            decision: None,
            repeat: false,
            order: None,
        };
        let Some(wait) = wait else {
            return Ok((StatusCode::ACCEPTED, Json(response)).into_response());
        };
        match self.reader.wait(&receipt, wait).await {
            Ok(decision) => {
                response.status = CommandStatus::Decided;
                if decision.result == ResultCode::Duplicate {
                    response.repeat = true;
                    if let Some(order_id) = &order_id {
                        if let Ok(Some(entry)) = self.known_order(&sku, order_id).await {
                            response.order = Some(OrderBody::new(&sku, order_id, &entry));
                        }
                    }
                }
                response.decision = Some(decision.into());
                Ok(Json(response).into_response())
            }
            Err(OutcomeError::Timeout { .. }) => {
                response.status = CommandStatus::Pending;
                Ok((StatusCode::ACCEPTED, Json(response)).into_response())
            }
            Err(e) => {
                // In the log all the same: it will be decided.
                warn!(error = %Chain(&e), "waiting for a decision failed");
                response.status = CommandStatus::Pending;
                Ok((StatusCode::ACCEPTED, Json(response)).into_response())
            }
        }
    }
}

fn position(receipt: &Receipt) -> Position {
    Position {
        topic: receipt.position.topic.clone(),
        partition: receipt.position.partition,
        offset: receipt.position.offset,
    }
}

fn publish_problem(e: ProducerError) -> Problem {
    match e {
        ProducerError::Invalid(v) => v.into(),
        ProducerError::SoldOut(sold_out) => Problem {
            field: Some("sold_out".into()),
            ..Problem::new(
                StatusCode::CONFLICT,
                format!(
                    "sku {} is sold out (nothing available, nothing held, as of offset {}); \
                     refused by the gateway and not logged",
                    sold_out.sku, sold_out.offset
                ),
            )
        },
        ProducerError::QueueFull { .. } => Problem::new(
            StatusCode::TOO_MANY_REQUESTS,
            "the gateway's queue to the brokers is full; nothing was published",
        )
        .retry_after(1),
        other => {
            warn!(error = %Chain(&other), "publishing a command failed");
            Problem::new(
                StatusCode::SERVICE_UNAVAILABLE,
                format!(
                    "the brokers did not confirm the command ({}); it may or may not be \
                     in the log: repeating the request with the same id is safe",
                    Chain(&other)
                ),
            )
            .retry_after(5)
        }
    }
}
