//! The HTTP gateway: the ledger's commands and reads as a JSON API.
//!
//! A command is validated as the Rust library validates it, published with
//! the same idempotent producer, and answered `202` with its log position
//! or, with `?wait_ms=N`, `200` with the applier's decision (`202` with
//! `"status": "pending"` if the wait ends first: the command is in the log
//! and will be decided). `commands` and `reads` have the routes,
//! `publish` the way from a command to the log and back, [`bodies`] the
//! JSON they take and answer, [`analysts`] the archive's reads, `console`
//! the console page and its two reads, [`auth`] the API
//! keys, their roles and rate limits, [`problem`] the error bodies,
//! `harden` the checks of every request's origin and the headers of every
//! answer, [`ApiDoc`] the OpenAPI document served at `/openapi.json` and checked in
//! as `docs/openapi.json`.

pub mod analysts;
pub mod auth;
mod baskets;
pub mod bodies;
mod commands;
mod console;
mod contract;
mod doc;
pub mod events;
mod harden;
pub mod problem;
mod publish;
mod reads;
mod sale;

pub use contract::DEFAULT_MAX_WAIT_MS;
pub use doc::{openapi_json, ApiDoc};

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::{DefaultBodyLimit, MatchedPath, Request};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use axum::Router;
use stockledger_client::outcome::OutcomeError;
use stockledger_client::{BuildError, Ledger, LedgerProducer, ProducerError, SoldOutGuard};
use stockledger_core::report::Chain;
use stockledger_kafka::KafkaConfig;
use stockledger_projection::{redis_is_transient, Projection};
use stockledger_redis::RedisConn;
use stockledger_runtime::{redact_url, retry};
use tokio::net::TcpListener;
use tower_http::timeout::{RequestBodyTimeoutLayer, TimeoutLayer};
use tracing::{info, warn};

use crate::observe::{self, Probes, Recorder};
use crate::server::{self, Limits};
use problem::Problem;

type Shared = axum::extract::State<Arc<Gateway>>;
type Answer = Result<Response, Problem>;

/// Largest request body taken; a larger one is refused with 413.
pub const MAX_BODY_BYTES: usize = 16 * 1024;

/// Counter: HTTP requests answered, by `route`, `method`, `status` and API
/// `key` (its name; `none` without one).
pub const REQUESTS_METRIC: &str = "stockledger_http_requests_total";
/// Histogram: seconds from request to response, by `route` and `method`.
pub const REQUEST_SECONDS_METRIC: &str = "stockledger_http_request_duration_seconds";
/// Counter: commands the brokers took, by `command`.
pub const PUBLISHED_METRIC: &str = "stockledger_gateway_published_total";
/// Counter: commands the gateway could not publish, by `command` and
/// `reason` (one of [`FAILURE_REASONS`]): the server's side only; what
/// the caller sent wrong is a 4xx of [`REQUESTS_METRIC`].
pub const PUBLISH_FAILURES_METRIC: &str = "stockledger_gateway_publish_failures_total";
/// The `reason`s of [`PUBLISH_FAILURES_METRIC`].
pub const FAILURE_REASONS: [&str; 3] = ["brokers_down", "queue_full", "unconfirmed"];

/// How often the gateway asks the brokers whether they answer.
const BROKER_CHECK_EVERY: Duration = Duration::from_secs(1);
/// A delivery not confirmed within this is answered 503 (unless the user
/// set `message.timeout.ms`): an HTTP caller should not wait the library's 30 s.
const GATEWAY_MESSAGE_TIMEOUT_MS: &str = "10000";

#[derive(Clone)]
pub struct GatewayConfig {
    pub kafka: KafkaConfig,
    pub redis_url: String,
    /// The archive, for history; the gateway only reads it, and runs (and
    /// is ready) without it.
    pub database_url: String,
    pub prefix: String,
    pub topic: String,
    /// The stock events topic the event streams follow (`None`: the
    /// command topic's, `<topic>.events`).
    pub events_topic: Option<String>,
    /// Longest `wait_ms` a request may ask for.
    pub max_wait: Duration,
    /// Time a client has to send a request body.
    pub body_timeout: Duration,
    pub limits: Limits,
    /// Refuse deducts of a sold-out SKU before they reach the log
    /// (`409 sold_out`, not logged; see `stockledger_client::soldout`).
    pub sold_out_fast_path: bool,
    /// The keys callers must present; `None` lets anyone in (the CLI allows
    /// that on loopback only).
    pub api_keys: Option<auth::ApiKeys>,
    /// Serve HTTPS (HTTP/1.1 and HTTP/2 by ALPN) instead of cleartext.
    pub tls: Option<crate::Tls>,
    /// The outcomes and dead-letter topics and the two groups, whose
    /// progress the console's status reports.
    pub outcomes_topic: String,
    pub dlq_topic: String,
    pub applier_group: String,
    pub archiver_group: String,
    /// What the console's status counts as behind (each service's time to
    /// answer is the console's own).
    pub status_limits: stockledger_status::Limits,
    /// Origins a browser may call the API from (CORS); none by default.
    /// Each is `http(s)://host[:port]`; one that is not a header value is
    /// left out (the CLI refuses it first).
    pub cors_origins: Vec<String>,
}

impl std::fmt::Debug for GatewayConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GatewayConfig")
            .field("kafka", &self.kafka)
            .field("redis_url", &redact_url(&self.redis_url))
            .field("database_url", &redact_url(&self.database_url))
            .field("prefix", &self.prefix)
            .field("topic", &self.topic)
            .field("events_topic", &self.events_topic)
            .field("max_wait", &self.max_wait)
            .field("body_timeout", &self.body_timeout)
            .field("limits", &self.limits)
            .field("sold_out_fast_path", &self.sold_out_fast_path)
            .field("api_keys", &self.api_keys)
            .field("tls", &self.tls.is_some())
            .field("outcomes_topic", &self.outcomes_topic)
            .field("dlq_topic", &self.dlq_topic)
            .field("applier_group", &self.applier_group)
            .field("archiver_group", &self.archiver_group)
            .field("status_limits", &self.status_limits)
            .field("cors_origins", &self.cors_origins)
            .finish()
    }
}

impl GatewayConfig {
    /// The documented defaults for everything but the connections.
    pub fn new(
        kafka: KafkaConfig,
        redis_url: impl Into<String>,
        database_url: impl Into<String>,
    ) -> Self {
        Self {
            kafka,
            redis_url: redis_url.into(),
            database_url: database_url.into(),
            prefix: "stockledger".into(),
            topic: "stock.ledger".into(),
            events_topic: None,
            max_wait: Duration::from_millis(DEFAULT_MAX_WAIT_MS),
            body_timeout: Duration::from_secs(10),
            limits: Limits::default(),
            sold_out_fast_path: false,
            api_keys: None,
            tls: None,
            outcomes_topic: "stock.ledger.outcomes".into(),
            dlq_topic: "stock.ledger.dlq".into(),
            applier_group: stockledger_kafka::names::APPLIER_GROUP.into(),
            archiver_group: stockledger_kafka::names::ARCHIVER_GROUP.into(),
            status_limits: stockledger_status::Limits::default(),
            cors_origins: Vec::new(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    #[error(transparent)]
    Producer(#[from] ProducerError),
    #[error("the ledger's client could not be made")]
    Client(#[source] BuildError),
    #[error("connecting to Redis at {url}")]
    Redis {
        url: String,
        #[source]
        source: redis::RedisError,
    },
    #[error("the archive's URL {url} is not usable")]
    Archive {
        url: String,
        #[source]
        source: sqlx::Error,
    },
    #[error("metrics: {0}")]
    Metrics(String),
}

impl GatewayError {
    /// Whether Redis does not answer yet (refused, unreachable, loading):
    /// a start waits for it, as the other services do.
    fn is_redis_away(&self) -> bool {
        matches!(self, Self::Redis { source, .. } if redis_is_transient(source))
    }
}

/// What every request handler shares.
pub(crate) struct Gateway {
    /// The ledger's client: sends commands and reads their decisions from
    /// Redis.
    ledger: Ledger,
    projection: Projection,
    archive: sqlx::PgPool,
    /// The brokers, for reading a record back (a repeated restock's first).
    kafka: KafkaConfig,
    topic: String,
    max_wait: Duration,
    /// Whether the brokers answered the last metadata request.
    broker_up: Arc<AtomicBool>,
    /// The stock events' reader, for the event streams.
    events: Arc<events::Hub>,
    /// The event streams open, and how many may be.
    streams: Arc<events::StreamSlots>,
    /// The console's status report and what it needs.
    console: console::Console,
}

/// Gives each of the gateway's metrics its help text, and each counter
/// whose labels are known in advance its zero.
fn describe_metrics() {
    use metrics::{counter, describe_counter, describe_histogram};
    use stockledger_core::CommandKind;
    describe_counter!(
        REQUESTS_METRIC,
        "HTTP requests answered, by route template, method, status and API key name."
    );
    describe_histogram!(
        REQUEST_SECONDS_METRIC,
        metrics::Unit::Seconds,
        "Seconds from request to response, by route template and method."
    );
    describe_counter!(PUBLISHED_METRIC, "Commands the brokers took, by command.");
    describe_counter!(
        PUBLISH_FAILURES_METRIC,
        "Commands the gateway could not publish (brokers down, queue full, not confirmed), by command and reason."
    );
    describe_counter!(
        stockledger_client::soldout::SOLD_OUT_METRIC,
        "Deducts refused by the sold-out fast path (never logged)."
    );
    counter!(stockledger_client::soldout::SOLD_OUT_METRIC).absolute(0);
    let published = CommandKind::ALL
        .into_iter()
        .filter(|kind| *kind != CommandKind::Expire);
    for kind in published {
        let command = kind.as_str();
        counter!(PUBLISHED_METRIC, "command" => command).absolute(0);
        for reason in FAILURE_REASONS {
            counter!(PUBLISH_FAILURES_METRIC, "command" => command, "reason" => reason).absolute(0);
        }
    }
}

/// Runs the gateway on `listener` until `shutdown` completes, with
/// `/metrics`, `/healthz` and `/readyz` on the same port.
pub async fn run(
    config: GatewayConfig,
    listener: TcpListener,
    shutdown: impl Future<Output = ()>,
) -> Result<(), GatewayError> {
    info!(config = ?config, "starting the gateway");
    let recorder = Recorder::install().map_err(GatewayError::Metrics)?;
    describe_metrics();
    events::describe_metrics();
    // Event streams end when the gateway begins to stop, so that they do
    // not hold its shutdown for the whole grace.
    let (stopping, stop) = tokio::sync::watch::channel(false);
    let shutdown = async move {
        shutdown.await;
        let _ = stopping.send(true);
    };
    tokio::pin!(shutdown);
    // Redis away at start is waited for, as while running; a stop meanwhile
    // ends the gateway before it serves anything.
    let connected = tokio::select! {
        services = Services::connect_when_possible(&config, stop.clone()) => services?,
        () = &mut shutdown => None,
    };
    let Some(Services {
        ledger,
        redis,
        archive,
    }) = connected
    else {
        info!("stopped before Redis answered");
        return Ok(());
    };
    let broker_up = Arc::new(AtomicBool::new(true));
    let watch = tokio::spawn(watch_brokers(ledger.producer().clone(), broker_up.clone()));
    let probes = probes(broker_up.clone(), redis.clone(), archive.clone());
    let events_topic = config
        .events_topic
        .clone()
        .unwrap_or_else(|| stockledger_kafka::admin::default_events_topic(&config.topic));
    let events = events::Hub::start(
        config.kafka.clone(),
        events_topic,
        Projection::new(redis.clone(), config.prefix.clone()),
        stop,
    );
    let gateway = Arc::new(Gateway {
        ledger,
        projection: Projection::new(redis, config.prefix.clone()),
        archive,
        kafka: config.kafka.clone(),
        topic: config.topic.clone(),
        max_wait: config.max_wait,
        broker_up,
        events,
        streams: events::StreamSlots::new(
            config.limits.max_streams,
            config.limits.max_streams_per_key,
        ),
        console: console::Console::new(
            stockledger_status::Names {
                topic: config.topic.clone(),
                outcomes_topic: config.outcomes_topic.clone(),
                dlq_topic: config.dlq_topic.clone(),
                prefix: config.prefix.clone(),
                applier_group: config.applier_group.clone(),
                archiver_group: config.archiver_group.clone(),
            },
            config.status_limits,
        ),
    });
    let mut observed = observe::routes(recorder, probes);
    if let Some(keys) = &config.api_keys {
        auth::describe(keys);
        observed = observed.route_layer(axum::middleware::from_fn_with_state(
            keys.clone(),
            auth::authorize,
        ));
    }
    let app = router(gateway, &config).merge(observed);
    info!(address = ?listener.local_addr().ok(), "gateway listening");
    server::serve(listener, app, config.limits, config.tls.clone(), shutdown).await;
    watch.abort();
    info!("gateway stopped");
    Ok(())
}

/// What the gateway talks to, connected: the ledger's client (reading
/// decisions from Redis, with the sold-out fast path if asked), Redis and
/// the archive (read only, as the analysts' role: the gateway cannot write
/// it).
struct Services {
    ledger: Ledger,
    redis: RedisConn,
    archive: sqlx::PgPool,
}

impl Services {
    /// [`Services::connect`], tried again with the retries' backoff while
    /// Redis does not answer; `None`: stopped meanwhile.
    async fn connect_when_possible(
        config: &GatewayConfig,
        mut stop: tokio::sync::watch::Receiver<bool>,
    ) -> Result<Option<Self>, GatewayError> {
        retry::until_stopped(
            || Self::connect(config),
            GatewayError::is_redis_away,
            |e, wait| warn!(error = %Chain(e), retry_in = ?wait, "Redis does not answer yet; waiting for it before serving"),
            &mut stop,
        )
        .await
    }

    async fn connect(config: &GatewayConfig) -> Result<Self, GatewayError> {
        let mut kafka = config.kafka.clone();
        if kafka.property("message.timeout.ms").is_none() {
            kafka.properties.push((
                "message.timeout.ms".into(),
                GATEWAY_MESSAGE_TIMEOUT_MS.into(),
            ));
        }
        let redis_error = |source| GatewayError::Redis {
            url: redact_url(&config.redis_url).to_string(),
            source,
        };
        let redis = RedisConn::connect(&config.redis_url)
            .await
            .map_err(redis_error)?;
        let mut ledger = Ledger::builder()
            .kafka(kafka)
            .topic(config.topic.clone())
            .decisions_from_redis(&config.redis_url, &config.prefix);
        if config.sold_out_fast_path {
            let projection = Projection::new(redis.clone(), config.prefix.clone());
            ledger = ledger.sold_out_guard_from(SoldOutGuard::new(projection));
        }
        let ledger = ledger.build().await.map_err(|e| match e {
            BuildError::Producer(e) => GatewayError::Producer(e),
            BuildError::DecisionsFromRedis(OutcomeError::Redis(source)) => redis_error(source),
            other => GatewayError::Client(other),
        })?;
        let archive = stockledger_archiver::connect_as(
            &config.database_url,
            4,
            Duration::from_secs(3),
            stockledger_archiver::DbRole::Analyst,
        )
        .map_err(|source| GatewayError::Archive {
            url: redact_url(&config.database_url).to_string(),
            source,
        })?;
        Ok(Self {
            ledger,
            redis,
            archive,
        })
    }
}

/// `/readyz`'s checks: the brokers (as the watch last saw them), Redis,
/// and the archive (history only: commands go on without it).
fn probes(broker_up: Arc<AtomicBool>, redis: RedisConn, archive: sqlx::PgPool) -> Probes {
    Probes::new()
        .check("kafka", true, move || {
            let up = broker_up.load(Ordering::Relaxed);
            async move {
                if up {
                    Ok("the brokers answer".to_owned())
                } else {
                    Err("the brokers do not answer".to_owned())
                }
            }
        })
        .redis(redis)
        .postgres(archive, false)
}

/// Every route of the API and its handler.
fn routes() -> Router<Arc<Gateway>> {
    Router::new()
        .route(
            "/v1/skus/{sku}/orders/{order_id}/deduct",
            post(commands::deduct),
        )
        .route(
            "/v1/skus/{sku}/orders/{order_id}/rollback",
            post(commands::rollback),
        )
        .route(
            "/v1/skus/{sku}/orders/{order_id}/confirm",
            post(commands::confirm),
        )
        .route(
            "/v1/skus/{sku}/orders/{order_id}/refund",
            post(commands::refund),
        )
        .route("/v1/skus/{sku}/limit", put(commands::limit))
        .route("/v1/skus/{sku}/alerts", put(commands::alerts))
        .route("/v1/skus/{sku}/windows/{change_id}", post(sale::window))
        .route("/v1/skus/{sku}/pauses/{change_id}", post(sale::pause))
        .route("/v1/skus/{sku}/resumes/{change_id}", post(sale::resume))
        .route(
            "/v1/skus/{sku}/transfers/{transfer_id}",
            post(commands::transfer),
        )
        .route(
            "/v1/skus/{sku}/restocks/{adjustment_id}",
            post(commands::restock),
        )
        .route("/v1/baskets/{basket_id}/hold", post(baskets::hold))
        .route("/v1/baskets/{basket_id}/confirm", post(baskets::confirm))
        .route("/v1/baskets/{basket_id}/release", post(baskets::release))
        .route("/v1/baskets/{basket_id}", get(baskets::show))
        .route("/v1/skus/{sku}", get(reads::stock))
        .route("/v1/skus/{sku}/units", get(reads::units))
        .route("/v1/skus/{sku}/orders/{order_id}", get(reads::order))
        .route("/v1/skus/{sku}/as-of", get(analysts::as_of))
        .route("/v1/history", get(reads::history))
        .route("/v1/skus/{sku}/events", get(events::sku_events))
        .route("/v1/events", get(events::events))
        .route("/v1/report", get(analysts::report))
        .route("/v1/report/locations", get(analysts::report_by_location))
        .route("/v1/status", get(console::status))
        .route("/v1/sale", get(console::sale))
        .route("/console", get(console::page))
        .route("/openapi.json", get(openapi))
}

fn router(gateway: Arc<Gateway>, config: &GatewayConfig) -> Router {
    let routes = routes();
    // Inside `track`, which then sees each answer's key; on the routes only,
    // so an unknown path is a 404 with or without a key.
    let routes = match &config.api_keys {
        Some(keys) => routes.route_layer(axum::middleware::from_fn_with_state(
            keys.clone(),
            auth::authorize,
        )),
        None => routes,
    };
    let routes = routes
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .with_state(gateway)
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .layer(RequestBodyTimeoutLayer::new(config.body_timeout))
        .layer(axum::Extension(problem::BodyDeadline(config.body_timeout)))
        // A request never outlives its longest wait by much: the publish is
        // bounded by the producer's message timeout.
        .layer(TimeoutLayer::with_status_code(
            StatusCode::SERVICE_UNAVAILABLE,
            config.max_wait + Duration::from_secs(15),
        ))
        .layer(axum::middleware::from_fn_with_state(
            Arc::from(config.cors_origins.clone()),
            harden::harden,
        ))
        .layer(axum::middleware::from_fn(track));
    if config.cors_origins.is_empty() {
        return routes;
    }
    // Outermost: a browser's preflight is answered before the key is asked
    // for (it carries none), and every answer gets the CORS headers.
    routes.layer(cors(&config.cors_origins))
}

/// The CORS answers for `origins`: the methods, headers and exposed
/// headers a browser front end needs.
fn cors(origins: &[String]) -> tower_http::cors::CorsLayer {
    use axum::http::{header, Method};
    tower_http::cors::CorsLayer::new()
        .allow_origin(
            origins
                .iter()
                .filter_map(|origin| header::HeaderValue::from_str(origin).ok())
                .collect::<Vec<_>>(),
        )
        .allow_methods([Method::GET, Method::POST, Method::PUT])
        // Last-Event-ID: for clients that resume an event stream with
        // fetch (EventSource itself needs no preflight for it).
        .allow_headers([
            header::AUTHORIZATION,
            header::CONTENT_TYPE,
            header::HeaderName::from_static("last-event-id"),
        ])
        .expose_headers([header::RETRY_AFTER, header::WWW_AUTHENTICATE])
        .max_age(Duration::from_secs(600))
}

async fn openapi() -> Response {
    (
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        openapi_json(),
    )
        .into_response()
}

async fn not_found(request: Request) -> Problem {
    Problem::new(
        StatusCode::NOT_FOUND,
        format!("no route {} (see /openapi.json)", request.uri().path()),
    )
}

async fn method_not_allowed(request: Request) -> Problem {
    Problem::new(
        StatusCode::METHOD_NOT_ALLOWED,
        format!(
            "{} is not allowed on {}",
            request.method(),
            request.uri().path()
        ),
    )
}

/// Counts every request by route, status and key, times it, and writes the
/// access log (target `stockledger_http::access`, level info).
async fn track(request: Request, next: Next) -> Response {
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".to_owned(), |p| p.as_str().to_owned());
    let method = method_label(request.method());
    let started = Instant::now();
    let response = next.run(request).await;
    let elapsed = started.elapsed();
    let key = response
        .extensions()
        .get::<auth::KeyName>()
        .map_or("none", |name| &name.0)
        .to_owned();
    let status = response.status().as_u16();
    info!(target: "stockledger_http::access", method, route, status, key,
        ms = elapsed.as_secs_f64() * 1e3);
    metrics::counter!(REQUESTS_METRIC, "route" => route.clone(), "method" => method,
        "status" => status.to_string(), "key" => key)
    .increment(1);
    metrics::histogram!(REQUEST_SECONDS_METRIC, "route" => route, "method" => method)
        .record(elapsed.as_secs_f64());
    response
}

/// A request's method as a metric label: the ones HTTP defines, else
/// `other` (a label a client could choose would grow without bound).
fn method_label(method: &axum::http::Method) -> &'static str {
    const KNOWN: [&str; 9] = [
        "GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "CONNECT", "TRACE",
    ];
    KNOWN
        .into_iter()
        .find(|known| *known == method.as_str())
        .unwrap_or("other")
}

/// Keeps `up` true while the brokers answer a metadata request.
async fn watch_brokers(producer: LedgerProducer, up: Arc<AtomicBool>) {
    let mut every = tokio::time::interval(BROKER_CHECK_EVERY);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        every.tick().await;
        let probe = producer.clone();
        let answer =
            tokio::task::spawn_blocking(move || probe.reachable(Duration::from_secs(2))).await;
        let problem = match answer {
            Ok(Ok(())) => None,
            Ok(Err(e)) => Some(e.to_string()),
            Err(e) => Some(e.to_string()),
        };
        let was_up = up.swap(problem.is_none(), Ordering::Relaxed);
        match problem {
            Some(error) if was_up => {
                warn!(%error, "the brokers do not answer; commands are refused with 503")
            }
            None if !was_up => info!("the brokers answer again"),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_checked_in_openapi_document_is_the_one_the_code_generates() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/openapi.json");
        let generated = openapi_json();
        let checked_in = std::fs::read_to_string(path).unwrap_or_default();
        if checked_in == generated {
            return;
        }
        // Compared before writing, so a run that rewrites the file fails
        // too: the new document is reviewed and committed, never assumed.
        if std::env::var_os("STOCKLEDGER_WRITE_OPENAPI").is_some() {
            std::fs::write(path, &generated).expect("write docs/openapi.json");
            panic!("docs/openapi.json was out of date and is rewritten: review and commit it");
        }
        panic!(
            "docs/openapi.json differs from the code's document; regenerate it with \
             STOCKLEDGER_WRITE_OPENAPI=1 cargo test -p stockledger-http openapi"
        );
    }
}
