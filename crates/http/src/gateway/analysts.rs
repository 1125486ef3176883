//! The archive's answers for analysts over HTTP: a SKU's stock as of a time
//! or a log offset, and per-SKU totals per interval (`stockledger stock
//! --as-of` and `stockledger report`). History is in `api`.

use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::Json;
use serde::{Deserialize, Serialize};
use std::time::Duration;
use stockledger_analysts::query::{self, StockAsOf};
use stockledger_core::Sku;
use utoipa::{IntoParams, ToSchema};

use super::bodies::Position;
use super::problem::{archive_problem, path_problem};
use super::problem::{Problem, Query};
use super::reads::instant_param;
use super::{Answer, Shared};

/// Most rows one report answers; a larger one asks for a SKU or a shorter range.
pub const MAX_REPORT_ROWS: i64 = 100_000;

/// `GET /v1/skus/{sku}/as-of` parameters.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct AsOfParams {
    /// A log offset of the SKU's partition (a whole number), or a time: RFC
    /// 3339, `now`, or a time ago like `-15m`.
    pub at: String,
}

/// A SKU's stock at a past moment, from the archive.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct AsOfBody {
    pub sku: String,
    pub available: i64,
    pub total: i64,
    pub held: i64,
    /// The record the stock is the state after.
    pub after: Position,
    /// That record's `occurred_at`, RFC 3339 UTC.
    pub occurred_at: String,
    /// The newest archived record of the SKU's partition: how far the
    /// archive reaches.
    pub archive_reach: Position,
}

/// The stock of a SKU as it was just after its newest record at or before a
/// time (by `occurred_at`, then log position) or a log offset, from the
/// archive.
#[utoipa::path(get, path = "/v1/skus/{sku}/as-of", tag = "reads",
    params(("sku" = String, Path, description = "The SKU"), AsOfParams),
    responses(
        (status = 200, description = "The stock at that moment", body = AsOfBody),
        (status = 404, description = "No archived record of the SKU, or none yet at that moment", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "A parameter is refused", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "The offset is past the end of the log (`field` `at`): asking again will not help until the log grows", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "The offset is in the log but the archiver is behind, or the archive is unreachable; retry after Retry-After", body = Problem, content_type = "application/problem+json")))]
pub(crate) async fn as_of(
    State(gateway): Shared,
    path: Result<Path<String>, PathRejection>,
    Query(params): Query<AsOfParams>,
) -> Answer {
    let Path(sku) = path.map_err(path_problem)?;
    let sku = Sku::new(sku)?;
    let at = query::parse_as_of(&params.at, stockledger_runtime::clock::now_ms())
        .map_err(|e| Problem::invalid("at", e))?;
    let topic = &gateway.topic;
    let answer = query::stock_as_of(&gateway.archive, topic, sku.as_str(), at)
        .await
        .map_err(archive_problem)?;
    let position = |partition, offset| Position {
        topic: topic.clone(),
        partition,
        offset,
    };
    match answer {
        StockAsOf::Known {
            entry,
            stock,
            reach,
        } => Ok(Json(AsOfBody {
            sku: sku.to_string(),
            available: stock.available,
            total: stock.total,
            held: stock.total - stock.available,
            after: position(entry.partition, entry.log_offset),
            occurred_at: entry.occurred_at,
            archive_reach: position(reach.partition, reach.log_offset),
        })
        .into_response()),
        StockAsOf::BeforeFirst { first } => Err(Problem::new(
            StatusCode::NOT_FOUND,
            format!(
                "sku {sku} had no record yet; its first archived record is {}@{}, occurred {}",
                first.partition, first.log_offset, first.occurred_at
            ),
        )),
        StockAsOf::NotArchivedYet { asked, reach } => {
            let producer = gateway.ledger.producer().clone();
            let partition = reach.partition;
            let end = tokio::task::spawn_blocking(move || {
                producer.log_end(partition, Duration::from_secs(2))
            })
            .await;
            Err(match end {
                // Waiting would not help: the log itself ends before it.
                Ok(Ok(end)) if asked >= end => Problem {
                    field: Some("at".into()),
                    ..Problem::new(
                        StatusCode::CONFLICT,
                        format!(
                            "offset {asked} is past the end of the log: partition {partition} \
                             holds offsets below {end}"
                        ),
                    )
                },
                Ok(Ok(_)) => Problem::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    format!(
                        "offset {asked} is in the log but not archived yet: the archive holds \
                         partition {partition} up to offset {} (the archiver is behind)",
                        reach.log_offset
                    ),
                )
                .retry_after(1),
                _ => Problem::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    format!(
                        "offset {asked} is not archived yet, and the brokers did not say where \
                         the log ends"
                    ),
                )
                .retry_after(5),
            })
        }
        StockAsOf::Unknown => Err(Problem::new(
            StatusCode::NOT_FOUND,
            format!("no archived record of sku {sku}"),
        )),
    }
}

/// `GET /v1/report` parameters.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ReportParams {
    /// Interval length: `1m`, `15m`, `1h`, `1d`, … (default `1h`; aligned on
    /// the Unix epoch, UTC).
    pub every: Option<String>,
    /// Start of the range, inclusive (default `-1d`): RFC 3339, `now`, or a
    /// time ago.
    pub since: Option<String>,
    /// End of the range, exclusive (default `now`).
    pub until: Option<String>,
    /// One SKU only.
    pub sku: Option<String>,
}

/// What a report's parameters ask for, checked.
struct ReportAsked {
    every_ms: i64,
    since: i64,
    until: i64,
    sku: Option<Sku>,
}

impl ReportAsked {
    /// The defaults: hourly over the last day, every SKU.
    fn of(params: ReportParams) -> Result<Self, Problem> {
        let now = stockledger_runtime::clock::now_ms();
        Ok(Self {
            since: instant_param("since", params.since.as_deref().unwrap_or("-1d"), now)?,
            until: instant_param("until", params.until.as_deref().unwrap_or("now"), now)?,
            every_ms: query::parse_span_ms(params.every.as_deref().unwrap_or("1h"))
                .map_err(|e| Problem::invalid("every", e))?,
            sku: params.sku.map(Sku::new).transpose()?,
        })
    }

    /// What the report covers on command topic `topic`.
    fn range<'a>(&'a self, topic: &'a str) -> query::ReportRange<'a> {
        query::ReportRange {
            topic,
            every_secs: self.every_ms / 1000,
            since_ms: self.since,
            until_ms: self.until,
            sku: self.sku.as_ref().map(Sku::as_str),
            max_rows: MAX_REPORT_ROWS,
        }
    }
}

/// Per-SKU totals per interval, `sku` then interval.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ReportBody {
    pub rows: Vec<query::ReportRow>,
}

/// Per-SKU (or one SKU's) totals per interval, from the archive.
#[utoipa::path(get, path = "/v1/report", tag = "reads",
    params(ReportParams),
    responses(
        (status = 200, description = "The report", body = ReportBody),
        (status = 422, description = "A parameter is refused, or the report would exceed 100,000 rows", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "The archive is unreachable", body = Problem, content_type = "application/problem+json")))]
pub(crate) async fn report(State(gateway): Shared, Query(params): Query<ReportParams>) -> Answer {
    let asked = ReportAsked::of(params)?;
    let rows = query::report(&gateway.archive, &asked.range(&gateway.topic))
        .await
        .map_err(archive_problem)?;
    Ok(Json(ReportBody { rows }).into_response())
}

/// Per SKU and location, totals per interval.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct LocationReportBody {
    pub rows: Vec<query::LocationReportRow>,
}

/// Per SKU and location (SKUs that keep stock by location), totals per
/// interval, from the archive.
#[utoipa::path(get, path = "/v1/report/locations", tag = "reads",
    params(ReportParams),
    responses(
        (status = 200, description = "The report", body = LocationReportBody),
        (status = 422, description = "A parameter is refused, or the report would exceed 100,000 rows", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "The archive is unreachable", body = Problem, content_type = "application/problem+json")))]
pub(crate) async fn report_by_location(
    State(gateway): Shared,
    Query(params): Query<ReportParams>,
) -> Answer {
    let asked = ReportAsked::of(params)?;
    let rows = query::report_by_location(&gateway.archive, &asked.range(&gateway.topic))
        .await
        .map_err(archive_problem)?;
    Ok(Json(LocationReportBody { rows }).into_response())
}
