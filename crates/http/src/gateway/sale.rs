//! The routes that say when a SKU sells: a sale window, a pause and a
//! resume, each named by its change id in the path (the idempotency key,
//! in one namespace with restocks' and transfers' ids).

use axum::extract::rejection::PathRejection;
use axum::extract::{Path, Request, State};
use serde::Deserialize;
use stockledger_core::{ChangeId, CommandBody, Pause, Resume, SaleWindow, Sku, Window};
use stockledger_runtime::clock::{now_ms, parse_rfc3339_ms};
use utoipa::ToSchema;

use super::bodies::{CommandResponse, TraceHeader, WaitParams};
use super::commands::publish_adjustment;
use super::problem::{no_body, path_problem, Body, Problem, Query};
use super::{Answer, Shared};

/// When a SKU sells, by the records' times in the log.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct WindowRequest {
    /// The first moment on sale (RFC 3339, e.g. `2026-12-01T10:00:00Z`,
    /// from 1970 on, at most a year ahead): deducts, holds and basket lines
    /// stamped before it are refused `REJECTED_NOT_OPEN`. Absent or
    /// `null`: open until it closes.
    #[schema(value_type = Option<String>, format = DateTime)]
    pub opens_at: Option<String>,
    /// The first moment no longer on sale (RFC 3339, after `opens_at`, at
    /// most a year ahead): from it they are refused `REJECTED_CLOSED`.
    /// Absent or `null`: never closes. Neither end: the window is lifted.
    #[schema(value_type = Option<String>, format = DateTime)]
    pub closes_at: Option<String>,
}

/// Set when `sku` sells: deducts, holds and basket lines stamped before
/// `opens_at` are refused `REJECTED_NOT_OPEN`, from `closes_at` on
/// `REJECTED_CLOSED`; confirms, rollbacks, refunds, expiries and restocks
/// never. `change_id` makes a resend harmless.
#[utoipa::path(post, path = "/v1/skus/{sku}/windows/{change_id}", tag = "commands",
    params(("sku" = String, Path, description = "The SKU"),
           ("change_id" = String, Path, description = "The change: the idempotency key, in one namespace with restocks' and transfers' ids"),
           WaitParams, TraceHeader),
    request_body = WindowRequest,
    responses(
        (status = 200, description = "Decided within wait_ms, or an identical repeat", body = CommandResponse),
        (status = 202, description = "In the log; decided later", body = CommandResponse),
        (status = 400, description = "Malformed JSON, or no body", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "The change id was already used by another change, restock or transfer; `field` names what differs", body = Problem, content_type = "application/problem+json"),
        (status = 413, description = "Body over the limit", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "A field is refused (not RFC 3339, `closes_at` not after `opens_at`, more than a year ahead)", body = Problem, content_type = "application/problem+json"),
        (status = 429, description = "The producer queue is full", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "The brokers are unreachable, or a repeat's first record could not be read back to compare", body = Problem, content_type = "application/problem+json")))]
pub(crate) async fn window(
    State(gateway): Shared,
    path: Result<Path<(String, String)>, PathRejection>,
    Query(wait): Query<WaitParams>,
    trace: TraceHeader,
    Body(request): Body<WindowRequest>,
) -> Answer {
    let (sku, change_id) = sku_and_change(path)?;
    let at = |field: &'static str, text: Option<String>| {
        text.map(|text| {
            parse_rfc3339_ms(&text).map_err(|e| {
                stockledger_core::ValidationError::new(
                    field,
                    format!("{text:?} is not an RFC 3339 time ({e})"),
                )
            })
        })
        .transpose()
    };
    let window = SaleWindow::new(
        at("opens_at", request.opens_at)?,
        at("closes_at", request.closes_at)?,
    )?;
    window.check_ahead(now_ms())?;
    let body = CommandBody::Window(Window {
        change_id: change_id.clone(),
        window,
    });
    let wait = gateway.wait(&wait)?;
    publish_adjustment(&gateway, sku, change_id.as_str(), body, wait, trace).await
}

/// Stop selling `sku` at once: deducts, holds and basket lines are refused
/// `REJECTED_PAUSED` until a resume; every settling command is still
/// taken. `change_id` makes a resend harmless. No body.
#[utoipa::path(post, path = "/v1/skus/{sku}/pauses/{change_id}", tag = "commands",
    params(("sku" = String, Path, description = "The SKU"),
           ("change_id" = String, Path, description = "The change: the idempotency key, in one namespace with restocks' and transfers' ids"),
           WaitParams, TraceHeader),
    responses(
        (status = 200, description = "Decided within wait_ms, or a repeat", body = CommandResponse),
        (status = 202, description = "In the log; decided later", body = CommandResponse),
        (status = 409, description = "The change id was already used by another change, restock or transfer", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "A field is refused", body = Problem, content_type = "application/problem+json"),
        (status = 429, description = "The producer queue is full", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "The brokers are unreachable, or a repeat's first record could not be read back to compare", body = Problem, content_type = "application/problem+json")))]
pub(crate) async fn pause(
    State(gateway): Shared,
    path: Result<Path<(String, String)>, PathRejection>,
    Query(wait): Query<WaitParams>,
    trace: TraceHeader,
    request: Request,
) -> Answer {
    let (sku, change_id) = sku_and_change(path)?;
    no_body(request).await?;
    let body = CommandBody::Pause(Pause {
        change_id: change_id.clone(),
    });
    let wait = gateway.wait(&wait)?;
    publish_adjustment(&gateway, sku, change_id.as_str(), body, wait, trace).await
}

/// End a pause of `sku`. `change_id` makes a resend harmless. No body.
#[utoipa::path(post, path = "/v1/skus/{sku}/resumes/{change_id}", tag = "commands",
    params(("sku" = String, Path, description = "The SKU"),
           ("change_id" = String, Path, description = "The change: the idempotency key, in one namespace with restocks' and transfers' ids"),
           WaitParams, TraceHeader),
    responses(
        (status = 200, description = "Decided within wait_ms, or a repeat", body = CommandResponse),
        (status = 202, description = "In the log; decided later", body = CommandResponse),
        (status = 409, description = "The change id was already used by another change, restock or transfer", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "A field is refused", body = Problem, content_type = "application/problem+json"),
        (status = 429, description = "The producer queue is full", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "The brokers are unreachable, or a repeat's first record could not be read back to compare", body = Problem, content_type = "application/problem+json")))]
pub(crate) async fn resume(
    State(gateway): Shared,
    path: Result<Path<(String, String)>, PathRejection>,
    Query(wait): Query<WaitParams>,
    trace: TraceHeader,
    request: Request,
) -> Answer {
    let (sku, change_id) = sku_and_change(path)?;
    no_body(request).await?;
    let body = CommandBody::Resume(Resume {
        change_id: change_id.clone(),
    });
    let wait = gateway.wait(&wait)?;
    publish_adjustment(&gateway, sku, change_id.as_str(), body, wait, trace).await
}

fn sku_and_change(
    path: Result<Path<(String, String)>, PathRejection>,
) -> Result<(Sku, ChangeId), Problem> {
    let Path((sku, change_id)) = path.map_err(path_problem)?;
    Ok((Sku::new(sku)?, ChangeId::new(change_id)?))
}
