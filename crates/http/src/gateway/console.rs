//! The console: a page for whoever watches a sale (`GET /console`), and
//! the two reads it polls. `GET /v1/status` is how the pipeline stands:
//! what `stockledger status` reports, gathered by the same code
//! (`stockledger_status`). `GET /v1/sale` is how the watched SKUs sell:
//! their stock now (Redis), the units their deducts took per interval and
//! the moments they sold out or came back (the archive).
//!
//! A service that does not answer is said so in the answer, beside what
//! the others told: the page shows an outage as such, never as zeros.

use std::collections::BTreeMap;
use std::sync::{Arc, LazyLock};
use std::time::{Duration, Instant};

use axum::extract::{RawQuery, State};
use axum::http::header;
use axum::response::IntoResponse;
use axum::Json;
use serde::Serialize;
use stockledger_analysts::live;
use stockledger_core::Sku;
use stockledger_runtime::clock::{now_ms, rfc3339_ms};
use stockledger_status::{reach, Failure, Limits, Names, Reach, Report};
use tokio::sync::Mutex;
use utoipa::ToSchema;

use super::bodies::{StockBody, UnitState};
use super::problem::{NoParams, Problem, Query};
use super::{Answer, Gateway, Shared};

/// The page, with everything it needs: no build step, no CDN.
const PAGE: &str = include_str!("console.html");

/// The page's Content-Security-Policy: its one script runs (named by its
/// hash, so a script that found its way into the page would not), its
/// style applies, it reads only the gateway that served it, nothing is
/// fetched from elsewhere, and no other site may frame it.
static POLICY: LazyLock<String> = LazyLock::new(|| {
    use base64::Engine;
    use sha2::Digest;
    let script = PAGE
        .split_once("<script>")
        .and_then(|(_, rest)| rest.split_once("</script>"))
        .map_or("", |(script, _)| script);
    let hash = base64::engine::general_purpose::STANDARD.encode(sha2::Sha256::digest(script));
    format!(
        "default-src 'none'; script-src 'sha256-{hash}'; style-src 'unsafe-inline'; \
         connect-src 'self'; img-src 'self' data:; frame-ancestors 'none'; form-action 'self'"
    )
});

/// A report this young is answered again rather than gathered anew, so
/// many open consoles cost the services one gathering a second.
const FRESH_FOR: Duration = Duration::from_secs(1);
/// How long each service is given to answer a console's read.
const ASK_WITHIN: Duration = Duration::from_secs(3);
/// Most SKUs one sale read watches.
pub const MAX_WATCHED: usize = 10;
/// SKUs watched when none is named: the busiest.
const BUSIEST: i64 = 5;
/// Most minutes a sale read looks back.
pub const MAX_MINUTES: u32 = 180;
const DEFAULT_MINUTES: u32 = 15;
/// The intervals a sale read's window is cut into.
const INTERVALS: i64 = 30;

/// What the console's reads share: the names and limits of the status
/// report, and its last gathering.
pub(crate) struct Console {
    names: Names,
    limits: Limits,
    last: Mutex<Option<(Instant, Arc<Report>)>>,
}

impl Console {
    pub(crate) fn new(names: Names, limits: Limits) -> Self {
        Self {
            names,
            limits: Limits {
                ask_within: ASK_WITHIN,
                ..limits
            },
            last: Mutex::new(None),
        }
    }

    /// The status report, gathered at most once per [`FRESH_FOR`]: a
    /// request that finds a gathering under way waits for it.
    async fn report(&self, gateway: &Gateway) -> Arc<Report> {
        let mut last = self.last.lock().await;
        if let Some((at, report)) = last.as_ref() {
            if at.elapsed() < FRESH_FOR {
                return report.clone();
            }
        }
        let report = Arc::new(
            stockledger_status::gather(
                &gateway.kafka,
                Ok(&gateway.projection),
                &gateway.archive,
                &self.names,
                &self.limits,
            )
            .await,
        );
        *last = Some((Instant::now(), report.clone()));
        report
    }
}

/// How the pipeline stands: `stockledger status --format json`, from the
/// same code. Each partition's lag and wait for the applier and the
/// archiver, the projection's marker, holds past due, dead letters and
/// the newest, the last minute's decisions by result, and which service
/// does not answer (named with why, its figures absent, never zeros). The
/// answer is at most a second old.
#[utoipa::path(get, path = "/v1/status", tag = "reads",
    responses(
        (status = 200, description = "The report; `state` is healthy, lagging, stalled, unreachable or topics missing, and `problems` says why", body = Report),
        (status = 422, description = "A query parameter (this route takes none)", body = Problem, content_type = "application/problem+json")))]
pub(crate) async fn status(State(gateway): Shared, _: Query<NoParams>) -> Answer {
    let report = gateway.console.report(&gateway).await;
    Ok(Json(&*report).into_response())
}

/// The units a SKU's applied deducts took in one interval.
#[derive(Debug, Serialize, ToSchema)]
pub struct Taken {
    /// The interval's start, RFC 3339 UTC.
    pub at: String,
    pub units: i64,
}

/// A moment a SKU sold out or came back in stock.
#[derive(Debug, Serialize, ToSchema)]
pub struct Moment {
    /// The record's time, RFC 3339 UTC.
    pub at: String,
    /// `sold_out` or `back_in_stock`.
    pub kind: String,
    /// The location the event is about, for stock kept by location.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub location: Option<String>,
    pub available: i64,
}

/// How one SKU sells.
#[derive(Debug, Serialize, ToSchema)]
pub struct SkuSale {
    pub sku: String,
    /// Its stock now (absent: nothing applied to it, or Redis did not
    /// answer, which `redis` says).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stock: Option<StockBody>,
    /// Its seat map, for a SKU of named units.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seats: Option<BTreeMap<String, UnitState>>,
    /// Units taken per interval of the window, oldest first, intervals
    /// with none left out (absent: the archive did not answer).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub taken: Option<Vec<Taken>>,
    /// When it sold out and came back in the window, in log order.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub moments: Option<Vec<Moment>>,
}

/// How the watched SKUs sell.
#[derive(Debug, Serialize, ToSchema)]
pub struct SaleBody {
    /// The window's start, RFC 3339 UTC, and its length.
    pub since: String,
    pub minutes: u32,
    /// The length of one interval of `taken`.
    pub every_seconds: i64,
    /// Whether Redis (the stock now) answered.
    pub redis: Reach,
    /// Whether the archive (taken, moments, the busiest SKUs) answered.
    pub postgres: Reach,
    pub skus: Vec<SkuSale>,
}

/// The query of `/v1/sale` and `/console`, as the API document states it
/// ([`Watch::parse`] reads it).
#[derive(Debug, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[allow(dead_code)] // Its fields are the document's only.
pub(crate) struct WatchParams {
    /// A SKU to watch; repeat it for each (at most 10). Default: the 5
    /// busiest of the window (the most deducts).
    #[param(max_items = 10, explode, style = Form)]
    sku: Option<Vec<String>>,
    /// How many minutes back the window reaches. Default 15.
    #[param(minimum = 1, maximum = 180)]
    minutes: Option<u32>,
}

/// What the sale read and the page take: SKUs to watch and a window.
#[derive(Debug)]
pub(crate) struct Watch {
    skus: Vec<Sku>,
    minutes: u32,
}

impl Watch {
    fn parse(query: Option<&str>) -> Result<Self, Problem> {
        let mut watch = Self {
            skus: Vec::new(),
            minutes: DEFAULT_MINUTES,
        };
        let mut minutes_given = false;
        for (name, value) in form_urlencoded::parse(query.unwrap_or_default().as_bytes()) {
            match name.as_ref() {
                "sku" if watch.skus.len() == MAX_WATCHED => {
                    return Err(Problem::invalid(
                        "sku",
                        format!("watch at most {MAX_WATCHED} SKUs"),
                    ));
                }
                "sku" => watch.skus.push(Sku::new(value.into_owned())?),
                "minutes" if minutes_given => {
                    return Err(Problem::invalid("minutes", "given more than once"));
                }
                "minutes" => {
                    minutes_given = true;
                    watch.minutes = value
                        .parse()
                        .ok()
                        .filter(|m| (1..=MAX_MINUTES).contains(m))
                        .ok_or_else(|| {
                            Problem::invalid(
                                "minutes",
                                format!("{value:?} is not a whole number from 1 to {MAX_MINUTES}"),
                            )
                        })?;
                }
                other => {
                    return Err(Problem::invalid(
                        other,
                        format!(
                            "unknown query parameter {other:?}; this route takes sku (repeated) \
                             and minutes"
                        ),
                    ));
                }
            }
        }
        Ok(watch)
    }
}

/// How the watched SKUs sell: each one's stock now (per location, and its
/// seat map for named units) from Redis, and from the archive the units
/// its deducts took per interval of the window and when it sold out or
/// came back. Without `sku`, the busiest SKUs of the window (the most
/// deducts). A service that does not answer is named in `redis` or
/// `postgres`, and what it would have told is absent.
#[utoipa::path(get, path = "/v1/sale", tag = "reads",
    params(
        WatchParams),
    responses(
        (status = 200, description = "The watched SKUs", body = SaleBody),
        (status = 422, description = "A SKU refused, more than 10, `minutes` refused, or another query parameter", body = Problem, content_type = "application/problem+json")))]
pub(crate) async fn sale(State(gateway): Shared, RawQuery(query): RawQuery) -> Answer {
    let watch = Watch::parse(query.as_deref())?;
    let window_ms = i64::from(watch.minutes) * 60_000;
    let every_ms = window_ms / INTERVALS;
    let since = now_ms() - window_ms;
    let (skus, postgres) = archive_part(&gateway, &watch, since, every_ms).await;
    let (stocks, redis) = redis_part(&gateway, skus.iter().map(|s| &s.0)).await;
    let skus = skus
        .into_iter()
        .zip(stocks)
        .map(|((sku, archived), (stock, seats))| {
            let (taken, moments) = archived.unzip();
            SkuSale {
                sku: sku.to_string(),
                stock,
                seats,
                taken,
                moments,
            }
        })
        .collect();
    Ok(Json(SaleBody {
        since: rfc3339_ms(since),
        minutes: watch.minutes,
        every_seconds: every_ms / 1000,
        redis,
        postgres,
        skus,
    })
    .into_response())
}

type Archived = Option<(Vec<Taken>, Vec<Moment>)>;

/// The SKUs to watch and what the archive holds of each in the window.
async fn archive_part(
    gateway: &Gateway,
    watch: &Watch,
    since: i64,
    every_ms: i64,
) -> (Vec<(Sku, Archived)>, Reach) {
    let mut skus: Vec<(Sku, Archived)> = watch.skus.iter().map(|s| (s.clone(), None)).collect();
    let read = async {
        let (pool, topic) = (&gateway.archive, &gateway.topic);
        if skus.is_empty() {
            for sku in live::busiest_skus(pool, topic, since, BUSIEST).await? {
                // A key the archive kept for an invalid record may not be a SKU.
                if let Ok(sku) = Sku::new(sku) {
                    skus.push((sku, None));
                }
            }
        }
        for (sku, archived) in &mut skus {
            let taken =
                live::taken_per_interval(pool, topic, sku.as_str(), since, every_ms).await?;
            let moments = live::stock_moments(pool, topic, sku.as_str(), since).await?;
            *archived = Some((
                taken
                    .into_iter()
                    .map(|(at, units)| Taken {
                        at: rfc3339_ms(at),
                        units,
                    })
                    .collect(),
                moments
                    .into_iter()
                    .map(|m| Moment {
                        at: rfc3339_ms(m.at_ms),
                        kind: m.kind.to_lowercase(),
                        location: m.location,
                        available: m.available,
                    })
                    .collect(),
            ));
        }
        Ok::<_, Failure>(())
    };
    let answered = reach(ASK_WITHIN, read).await;
    if !answered.reachable {
        for (_, archived) in &mut skus {
            *archived = None;
        }
    }
    (skus, answered)
}

type Now = (Option<StockBody>, Option<BTreeMap<String, UnitState>>);

/// Each SKU's stock and seat map now, from Redis.
async fn redis_part<'a>(
    gateway: &Gateway,
    skus: impl Iterator<Item = &'a Sku>,
) -> (Vec<Now>, Reach) {
    let skus: Vec<&Sku> = skus.collect();
    let mut now: Vec<Now> = skus.iter().map(|_| (None, None)).collect();
    let read = async {
        for (sku, (stock, seats)) in skus.iter().zip(now.iter_mut()) {
            let found = gateway.projection.stock_and_sale(sku.as_str()).await?;
            *stock = found
                .map(|(s, locations, sale)| StockBody::new(sku, &s, &locations).with_sale(&sale));
            let units = gateway.projection.seat_map(sku.as_str()).await?;
            *seats = (!units.is_empty()).then(|| {
                units
                    .into_iter()
                    .map(|(name, state)| (name, UnitState::from(state)))
                    .collect()
            });
        }
        Ok::<_, Failure>(())
    };
    let answered = reach(ASK_WITHIN, read).await;
    if !answered.reachable {
        now.iter_mut().for_each(|n| *n = (None, None));
    }
    (now, answered)
}

/// The console: the pipeline and the sale at a glance, updated every two
/// seconds from `/v1/status` and `/v1/sale`. `?sku=A&sku=B` picks the
/// SKUs to watch (default: the busiest), `?minutes=N` the window. In a
/// browser, with keys on, log in with any user name and the key as the
/// password.
#[utoipa::path(get, path = "/console", tag = "reads",
    params(
        WatchParams),
    responses(
        (status = 200, description = "The console page", content_type = "text/html", body = String),
        (status = 422, description = "As /v1/sale", body = Problem, content_type = "application/problem+json")))]
pub(crate) async fn page(RawQuery(query): RawQuery) -> Answer {
    Watch::parse(query.as_deref())?;
    Ok((
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CONTENT_SECURITY_POLICY, POLICY.as_str()),
            (header::CACHE_CONTROL, "no-store"),
        ],
        PAGE,
    )
        .into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_runs_its_one_script_and_no_other() {
        assert_eq!(PAGE.matches("<script").count(), 1, "one script");
        assert!(POLICY.contains("script-src 'sha256-"), "{}", *POLICY);
        assert!(
            !POLICY.contains("script-src 'unsafe-inline'"),
            "{}",
            *POLICY
        );
        // Nothing the page loads comes from elsewhere.
        for outside in ["http://", "https://", "//cdn"] {
            let uses = PAGE.matches(outside).count();
            let namespaced = PAGE.matches("http://www.w3.org/2000/svg").count();
            assert_eq!(
                uses,
                namespaced * usize::from(outside == "http://"),
                "{outside}"
            );
        }
    }

    #[test]
    fn the_watch_is_read_or_refused_naming_the_parameter() {
        let watch = Watch::parse(Some("sku=A&sku=B&minutes=30")).map_err(|p| p.detail);
        let watch = watch.unwrap_or_else(|e| panic!("{e}"));
        let skus: Vec<&str> = watch.skus.iter().map(Sku::as_str).collect();
        assert_eq!((skus, watch.minutes), (vec!["A", "B"], 30));
        assert_eq!(Watch::parse(None).map(|w| w.minutes).ok(), Some(15));
        let eleven: Vec<String> = (0..11).map(|i| format!("sku=S{i}")).collect();
        for (query, field) in [
            ("sku=", "sku"),
            ("minutes=0", "minutes"),
            ("minutes=181", "minutes"),
            ("minutes=x", "minutes"),
            ("minutes=5&minutes=6", "minutes"),
            ("colour=red", "colour"),
            (eleven.join("&").as_str(), "sku"),
        ] {
            let refused = Watch::parse(Some(query)).err();
            assert_eq!(
                refused.and_then(|p| p.field).as_deref(),
                Some(field),
                "{query}"
            );
        }
    }
}
