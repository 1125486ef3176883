//! The reads' routes: a SKU's stock and an order from the Redis
//! projection, and the archived history of a SKU or an order.

use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::Json;
use stockledger_analysts::query::{self, Cursor, HistoryOf, HistoryQuery};
use stockledger_core::{BasketId, OrderId, ResultCode, Sku, UnitId};

use super::bodies::{
    HistoryEntry, HistoryPage, HistoryParams, OrderBody, SeatMap, StockBody, UnitState,
    MAX_HISTORY_LIMIT,
};
use super::commands::sku_and_order;
use super::problem::{archive_problem, path_problem, redis_problem, NoParams, Problem, Query};
use super::{Answer, Shared};

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
    _: Query<NoParams>,
) -> Answer {
    let Path(sku) = path.map_err(path_problem)?;
    let sku = Sku::new(sku)?;
    let stock = gateway
        .projection
        .stock_and_sale(sku.as_str())
        .await
        .map_err(|e| redis_problem(&e))?;
    match stock {
        Some((s, locations, sale)) => {
            Ok(Json(StockBody::new(&sku, &s, &locations).with_sale(&sale)).into_response())
        }
        None => Err(Problem::new(
            StatusCode::NOT_FOUND,
            format!("no state for sku {sku} (never restocked?)"),
        )),
    }
}

/// The seat map of `sku`: each named unit and whether it is available,
/// held or sold, in the order the units were added, from the Redis
/// projection (two fields of one hash, costing the units, not the orders).
#[utoipa::path(get, path = "/v1/skus/{sku}/units", tag = "reads",
    params(("sku" = String, Path, description = "The SKU")),
    responses(
        (status = 200, description = "The seat map, e.g. {\"A1\": \"available\", \"A2\": \"held\", \"A3\": \"sold\"}",
            body = std::collections::BTreeMap<String, UnitState>),
        (status = 404, description = "The SKU has no named units (unknown, or it sells counted stock)", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "The SKU is refused", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "Redis is unreachable", body = Problem, content_type = "application/problem+json")))]
pub(crate) async fn units(
    State(gateway): Shared,
    path: Result<Path<String>, PathRejection>,
    _: Query<NoParams>,
) -> Answer {
    let Path(sku) = path.map_err(path_problem)?;
    let sku = Sku::new(sku)?;
    let units = gateway
        .projection
        .seat_map(sku.as_str())
        .await
        .map_err(|e| redis_problem(&e))?;
    if units.is_empty() {
        return Err(Problem::new(
            StatusCode::NOT_FOUND,
            format!("sku {sku} has no named units (unknown, or it sells counted stock)"),
        ));
    }
    let map = units
        .iter()
        .map(|(name, state)| (name.clone(), UnitState::from(*state)))
        .collect();
    Ok(Json(SeatMap(map)).into_response())
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
    _: Query<NoParams>,
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

/// Archived decisions of a SKU, an order, a basket or a named unit, a page
/// at a time, oldest first.
#[utoipa::path(get, path = "/v1/history", tag = "reads",
    params(HistoryParams),
    responses(
        (status = 200, description = "A page of history", body = HistoryPage),
        (status = 422, description = "A parameter is refused", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "The archive is unreachable", body = Problem, content_type = "application/problem+json")))]
pub(crate) async fn history(State(gateway): Shared, Query(params): Query<HistoryParams>) -> Answer {
    let q = history_query(params)?;
    let page = query::history_page(&gateway.archive, &gateway.topic, &q)
        .await
        .map_err(archive_problem)?;
    Ok(Json(HistoryPage {
        entries: page.entries.into_iter().map(HistoryEntry::from).collect(),
        next: page.next.map(|c| c.to_string()),
    })
    .into_response())
}

/// The archive's question the parameters ask, or a `422` naming the
/// first refused parameter.
fn history_query(params: HistoryParams) -> Result<HistoryQuery, Problem> {
    let sku = params.sku.map(Sku::new).transpose()?;
    let order_id = params.order_id.map(OrderId::new).transpose()?;
    let basket_id = params.basket_id.map(BasketId::new).transpose()?;
    let unit = params.unit.map(UnitId::new).transpose()?;
    let of = match (order_id, sku) {
        (None, Some(sku)) if unit.is_some() && basket_id.is_none() => HistoryOf::Unit {
            sku: sku.into_string(),
            unit: unit.map(UnitId::into_string).unwrap_or_default(),
        },
        _ if unit.is_some() => {
            return Err(Problem::invalid(
                "unit",
                "give unit with sku alone: the SKU whose named unit it is",
            ))
        }
        (None, None) if basket_id.is_some() => {
            HistoryOf::Basket(basket_id.map(BasketId::into_string).unwrap_or_default())
        }
        _ if basket_id.is_some() => {
            return Err(Problem::invalid(
                "basket_id",
                "give basket_id alone, or sku and/or order_id",
            ))
        }
        (Some(order), sku) => HistoryOf::Order {
            order_id: order.into_string(),
            sku: sku.map(Sku::into_string),
        },
        (None, Some(sku)) => HistoryOf::Sku(sku.into_string()),
        (None, None) => {
            return Err(Problem::invalid(
                "sku",
                "give sku, order_id, both, or basket_id",
            ))
        }
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
    let now = stockledger_runtime::clock::now_ms();
    let results = params
        .result
        .iter()
        .flat_map(|r| r.split(','))
        .map(|r| {
            ResultCode::parse(r.trim())
                .ok_or_else(|| Problem::invalid("result", format!("{r:?} is not a result name")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(HistoryQuery {
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
    })
}

/// A time query parameter (`since`, `until`): RFC 3339, `now`, or a time
/// ago; ms since the epoch.
pub(super) fn instant_param(field: &'static str, text: &str, now_ms: i64) -> Result<i64, Problem> {
    query::parse_instant(text, now_ms).map_err(|e| Problem::invalid(field, e))
}
