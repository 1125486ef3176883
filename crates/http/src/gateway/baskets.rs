//! The baskets' routes: several SKUs held, confirmed or released together
//! by the protocol of [`stockledger_client::basket`], run here over the
//! gateway's ledger client, reading the decisions from the projection.
//!
//! Each route waits for every decision it needs (a basket's answer is
//! meaningless half-way); a line that cannot be settled in time is a `503`
//! naming it, and the same request again settles the basket.

use std::sync::atomic::Ordering;
use std::time::Duration;

use axum::extract::rejection::PathRejection;
use axum::extract::{Path, Request, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::Json;
use stockledger_client::basket::{
    self, BasketAnswer, BasketHold, BasketStatus, Decide, InputError, Line, Unsettled,
};
use stockledger_client::outcome::OutcomeError;
use stockledger_client::{ProducerError, Receipt};
use stockledger_core::{BasketId, CommandBody, Decision, Reason, Sku, UserId};

use super::bodies::{BasketHoldRequest, BasketResponse, RollbackRequest};
use super::problem::{no_body, path_problem, redis_problem, Body, NoParams, Problem, Query};
use super::{Answer, Gateway, Shared};

/// The longest one line's decision is awaited before it is awaited again
/// (three times at most), within the gateway's `--max-wait-ms`.
const LINE_WAIT: Duration = Duration::from_secs(5);

impl Decide for Gateway {
    async fn send(&self, sku: &Sku, body: CommandBody) -> Result<Receipt, ProducerError> {
        let kind = body.kind().as_str();
        let sent = self.ledger.send(sku, body).await;
        if sent.is_ok() {
            metrics::counter!(super::PUBLISHED_METRIC, "command" => kind).increment(1);
        }
        sent
    }

    async fn wait(&self, receipt: &Receipt) -> Result<Decision, OutcomeError> {
        (self.ledger)
            .decision_within(receipt, self.max_wait.min(LINE_WAIT))
            .await
    }
}

fn input_problem(e: InputError) -> Problem {
    let detail = e.to_string();
    Problem::invalid(e.field, detail)
}

fn unsettled_problem(e: Unsettled) -> Problem {
    Problem::new(StatusCode::SERVICE_UNAVAILABLE, e.to_string()).retry_after(5)
}

fn basket_path(path: Result<Path<String>, PathRejection>) -> Result<BasketId, Problem> {
    let Path(id) = path.map_err(path_problem)?;
    basket::basket_id(&id).map_err(input_problem)
}

fn answer(basket: &BasketAnswer, repeat: bool) -> axum::response::Response {
    Json(BasketResponse::new(basket, repeat)).into_response()
}

impl Gateway {
    fn brokers_up(&self) -> Result<(), Problem> {
        if self.broker_up.load(Ordering::Relaxed) {
            return Ok(());
        }
        Err(Problem::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "the Kafka brokers do not answer; nothing was published",
        )
        .retry_after(5))
    }

    /// The basket as the projection holds it, `None` if no line of it was
    /// ever folded.
    async fn basket(&self, id: &BasketId) -> Result<Option<BasketAnswer>, Problem> {
        basket::read(&self.projection, id)
            .await
            .map_err(|e| redis_problem(&e))
    }

    async fn known_basket(&self, id: &BasketId) -> Result<BasketAnswer, Problem> {
        self.basket(id).await?.ok_or_else(|| Problem {
            field: Some("basket_id".into()),
            ..Problem::new(
                StatusCode::NOT_FOUND,
                format!("no line of basket {id} was applied (held through /v1/baskets/{id}/hold?)"),
            )
        })
    }
}

/// Refuses (409) a hold repeated with other lines than the basket has.
fn same_lines(known: &BasketAnswer, asked: &BasketHold) -> Result<(), Problem> {
    let conflict = |field: String, detail: String| Problem {
        field: Some(field),
        ..Problem::new(StatusCode::CONFLICT, detail)
    };
    for (i, line) in asked.lines().iter().enumerate() {
        match known.lines.iter().find(|l| l.sku == line.sku) {
            None => {
                return Err(conflict(
                    format!("lines[{i}].sku"),
                    format!(
                        "basket {} has no line of {}: a basket id is used once, and only an \
                         identical repeat is a repeat",
                        known.basket_id, line.sku
                    ),
                ))
            }
            Some(l) if l.quantity.is_some_and(|q| q != line.quantity.get()) => {
                return Err(conflict(
                    format!("lines[{i}].quantity"),
                    format!(
                        "basket {} holds {} units of {}, not {}",
                        known.basket_id,
                        l.quantity.unwrap_or_default(),
                        line.sku,
                        line.quantity
                    ),
                ))
            }
            Some(_) => {}
        }
    }
    if known.lines.len() != asked.lines().len() {
        return Err(conflict(
            "lines".into(),
            format!(
                "basket {} has {} lines, not {}",
                known.basket_id,
                known.lines.len(),
                asked.lines().len()
            ),
        ));
    }
    Ok(())
}

/// Hold every line, or none.
#[utoipa::path(post, path = "/v1/baskets/{basket_id}/hold", tag = "baskets", operation_id = "basket_hold",
    params(("basket_id" = String, Path, description = "The basket: the idempotency key, and each line's order id")),
    request_body = BasketHoldRequest,
    responses(
        (status = 200, description = "`held`: every line is held; `refused`: a line was refused and none is held (the others were rolled back first). A repeat answers the basket as it stands, with `repeat`", body = BasketResponse),
        (status = 409, description = "The basket was already held with other lines", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "A field is refused; `field` names it (`lines[1].quantity`)", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "A line could not be settled in time, or the brokers are unreachable; the same request again settles it", body = Problem, content_type = "application/problem+json")))]
pub(crate) async fn hold(
    State(gateway): Shared,
    path: Result<Path<String>, PathRejection>,
    _: Query<NoParams>,
    Body(request): Body<BasketHoldRequest>,
) -> Answer {
    let id = basket_path(path)?;
    let user_id = request.user_id.map(UserId::new).transpose()?;
    let expires_at = match (request.hold_ms, request.expires_at) {
        (None, None) => {
            return Err(Problem::invalid(
                "hold_ms",
                "a basket is a hold: give hold_ms (or expires_at)",
            ))
        }
        (hold_ms, expires_at) => super::commands::hold_deadline(hold_ms, expires_at)?
            .unwrap_or_else(|| unreachable!("one of the two is given")),
    };
    stockledger_core::command::check_deadline(expires_at, stockledger_runtime::clock::now_ms())?;
    let lines = request
        .lines
        .iter()
        .enumerate()
        .map(|(i, l)| Line::parse(i, &l.sku, l.quantity))
        .collect::<Result<Vec<_>, _>>()
        .map_err(input_problem)?;
    let asked = BasketHold::new(id.clone(), user_id, expires_at, lines).map_err(input_problem)?;
    // A repeat is answered from the projection; with Redis away the lines
    // are sent, and decided DUPLICATE if they are repeats.
    if let Ok(Some(known)) = gateway.basket(&id).await {
        if known.status != BasketStatus::Pending {
            same_lines(&known, &asked)?;
            return Ok(answer(&known, true));
        }
    }
    gateway.brokers_up()?;
    let held = basket::hold(gateway.as_ref(), &asked)
        .await
        .map_err(unsettled_problem)?;
    Ok(answer(&held, false))
}

/// Sell every line, or none. No body, or `{}`.
#[utoipa::path(post, path = "/v1/baskets/{basket_id}/confirm", tag = "baskets", operation_id = "basket_confirm",
    params(("basket_id" = String, Path, description = "The basket")),
    responses(
        (status = 200, description = "`confirmed`: every line is sold; `failed`: a line could not be confirmed (its `reason` says why) and the lines confirmed were refunded. A basket already confirmed answers with `repeat`", body = BasketResponse),
        (status = 404, description = "No line of this basket was applied", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "A line is not held (released, expired, refused), or the holds end too soon to confirm every line; nothing was sent", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "The basket id is refused", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "A line could not be settled in time, or the brokers are unreachable; the same request again settles it", body = Problem, content_type = "application/problem+json")))]
pub(crate) async fn confirm(
    State(gateway): Shared,
    path: Result<Path<String>, PathRejection>,
    _: Query<NoParams>,
    request: Request,
) -> Answer {
    let id = basket_path(path)?;
    no_body(request).await?;
    let known = gateway.known_basket(&id).await?;
    if known.status == BasketStatus::Confirmed {
        return Ok(answer(&known, true));
    }
    basket::check_confirmable(&known, stockledger_runtime::clock::now_ms())
        .map_err(|why| Problem::new(StatusCode::CONFLICT, why))?;
    gateway.brokers_up()?;
    let skus: Vec<Sku> = known.lines.iter().map(|l| l.sku.clone()).collect();
    let confirmed = basket::confirm(gateway.as_ref(), &id, &skus)
        .await
        .map_err(unsettled_problem)?;
    Ok(answer(&confirmed.filled_from(&known), false))
}

/// Give back every line.
#[utoipa::path(post, path = "/v1/baskets/{basket_id}/release", tag = "baskets", operation_id = "basket_release",
    params(("basket_id" = String, Path, description = "The basket")),
    request_body(content = Option<RollbackRequest>, description = "Optional: why (each line's rollback carries it)"),
    responses(
        (status = 200, description = "`released`: no line is held; a line already confirmed stays sold (`partial`). A basket released, refused or failed already answers with `repeat`", body = BasketResponse),
        (status = 404, description = "No line of this basket was applied", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "Every line is sold: refund them instead; nothing was sent", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "A field is refused", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "A line could not be settled in time, or the brokers are unreachable; the same request again settles it", body = Problem, content_type = "application/problem+json")))]
pub(crate) async fn release(
    State(gateway): Shared,
    path: Result<Path<String>, PathRejection>,
    _: Query<NoParams>,
    request: Request,
) -> Answer {
    let id = basket_path(path)?;
    let body: RollbackRequest = Body::optional(request, &()).await?;
    let reason = body.reason.map(Reason::new).transpose()?;
    let known = gateway.known_basket(&id).await?;
    match known.status {
        BasketStatus::Confirmed => {
            return Err(Problem::new(
                StatusCode::CONFLICT,
                format!("basket {id} is sold: refund its lines instead"),
            ))
        }
        BasketStatus::Released | BasketStatus::Refused | BasketStatus::Failed => {
            return Ok(answer(&known, true))
        }
        _ => {}
    }
    gateway.brokers_up()?;
    let skus: Vec<Sku> = known.lines.iter().map(|l| l.sku.clone()).collect();
    let released = basket::release(gateway.as_ref(), &id, &skus, reason.as_ref())
        .await
        .map_err(unsettled_problem)?;
    Ok(answer(&released.filled_from(&known), false))
}

/// A basket and its lines, from the Redis projection.
#[utoipa::path(get, path = "/v1/baskets/{basket_id}", tag = "baskets", operation_id = "basket_show",
    params(("basket_id" = String, Path, description = "The basket")),
    responses(
        (status = 200, description = "The basket", body = BasketResponse),
        (status = 404, description = "No line of this basket was applied", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "The basket id is refused", body = Problem, content_type = "application/problem+json")))]
pub(crate) async fn show(
    State(gateway): Shared,
    path: Result<Path<String>, PathRejection>,
    _: Query<NoParams>,
) -> Answer {
    let id = basket_path(path)?;
    let known = gateway.known_basket(&id).await?;
    Ok(answer(&known, false))
}
