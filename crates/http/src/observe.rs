//! Prometheus metrics, liveness and readiness.
//!
//! Every long-running command installs one [`Recorder`] (the process-wide
//! sink of the `metrics` facade the applier, archiver and gateway record
//! into) and serves [`routes`] on its `--metrics-addr`: `/metrics` in the
//! Prometheus text format, `/healthz` (the process answers) and `/readyz`
//! (the services it needs answer, and a group member holds partitions).

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use serde::Serialize;
use stockledger_kafka::lag::Assignment;
use stockledger_kafka::KafkaConfig;
use stockledger_redis::RedisConn;

/// Histogram buckets for durations in seconds: 100 µs to 10 s.
const SECONDS_BUCKETS: [f64; 16] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0,
];
/// Histogram buckets for sizes (records per batch, rows per page).
const SIZE_BUCKETS: [f64; 12] = [
    1.0, 2.0, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 1000.0, 2500.0, 10000.0,
];

/// The process-wide metrics sink, rendered at `/metrics`. Cheap to clone.
#[derive(Clone)]
pub struct Recorder {
    handle: PrometheusHandle,
}

impl std::fmt::Debug for Recorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Recorder").finish_non_exhaustive()
    }
}

impl Recorder {
    /// Installs the Prometheus recorder as the process's `metrics` sink, or
    /// returns the one installed before (a process has one sink). Call it
    /// inside the runtime: a task drains histogram samples between scrapes.
    pub fn install() -> Result<Self, String> {
        static INSTALLED: OnceLock<Result<PrometheusHandle, String>> = OnceLock::new();
        let installed = INSTALLED.get_or_init(|| {
            let recorder = PrometheusBuilder::new()
                .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), &SECONDS_BUCKETS)
                .and_then(|b| {
                    b.set_buckets_for_metric(Matcher::Suffix("_records".into()), &SIZE_BUCKETS)
                })
                .and_then(|b| {
                    b.set_buckets_for_metric(Matcher::Suffix("_runs".into()), &SIZE_BUCKETS)
                })
                .and_then(|b| {
                    b.set_buckets_for_metric(Matcher::Suffix("_rows".into()), &SIZE_BUCKETS)
                })
                .map_err(|e| format!("building the Prometheus recorder: {e}"))?
                .build_recorder();
            let handle = recorder.handle();
            metrics::set_global_recorder(recorder)
                .map_err(|e| format!("installing the Prometheus recorder: {e}"))?;
            spawn_upkeep(handle.clone());
            Ok(handle)
        });
        installed.clone().map(|handle| Self { handle })
    }

    /// The metrics in the Prometheus text exposition format.
    pub fn render(&self) -> String {
        self.handle.render()
    }
}

/// Histograms keep raw samples until rendered; without a scrape they would
/// grow, so they are drained now and then (as the exporter's own listener
/// does).
fn spawn_upkeep(handle: PrometheusHandle) {
    if let Ok(runtime) = tokio::runtime::Handle::try_current() {
        runtime.spawn(async move {
            let mut every = tokio::time::interval(Duration::from_secs(5));
            loop {
                every.tick().await;
                handle.run_upkeep();
            }
        });
    }
}

type CheckFuture = Pin<Box<dyn Future<Output = Result<String, String>> + Send>>;
type Check = Arc<dyn Fn() -> CheckFuture + Send + Sync>;

/// What `/readyz` asks, each check answering within [`Probes::TIMEOUT`].
#[derive(Clone, Default)]
pub struct Probes {
    checks: Vec<(&'static str, bool, Check)>,
}

impl std::fmt::Debug for Probes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<_> = self.checks.iter().map(|(name, ..)| *name).collect();
        f.debug_struct("Probes").field("checks", &names).finish()
    }
}

/// One check's answer in `/readyz`'s body.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct CheckReport {
    pub name: &'static str,
    pub ok: bool,
    /// Whether a failure makes the process not ready (a failed optional
    /// check is reported and tolerated).
    pub required: bool,
    pub detail: String,
}

/// `/readyz`'s body.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct Readiness {
    pub ready: bool,
    pub checks: Vec<CheckReport>,
}

impl Probes {
    /// How long one check may take before it counts as failed.
    pub const TIMEOUT: Duration = Duration::from_secs(3);

    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a check; a `required` one that fails makes `/readyz` answer 503.
    pub fn check<F, Fut>(mut self, name: &'static str, required: bool, check: F) -> Self
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<String, String>> + Send + 'static,
    {
        self.checks
            .push((name, required, Arc::new(move || Box::pin(check()))));
        self
    }

    /// The brokers answer a metadata request for `topic`.
    pub fn kafka(self, kafka: &KafkaConfig, topic: &str) -> Self {
        let client: Option<Arc<rdkafka::consumer::BaseConsumer>> =
            kafka.client_config(&[]).create().ok().map(Arc::new);
        let topic = topic.to_owned();
        self.check("kafka", true, move || {
            let client = client.clone();
            let topic = topic.clone();
            async move {
                let client = client.ok_or("cannot create a Kafka client")?;
                tokio::task::spawn_blocking(move || {
                    use rdkafka::consumer::Consumer;
                    client
                        .fetch_metadata(Some(&topic), Probes::TIMEOUT)
                        .map(|m| format!("{} broker(s) answer", m.brokers().len()))
                        .map_err(|e| e.to_string())
                })
                .await
                .map_err(|e| e.to_string())?
            }
        })
    }

    /// Redis answers `PING`.
    pub fn redis(self, redis: RedisConn) -> Self {
        self.check("redis", true, move || {
            let mut redis = redis.clone();
            async move {
                redis::cmd("PING")
                    .query_async::<String>(&mut redis)
                    .await
                    .map_err(|e| e.to_string())
            }
        })
    }

    /// Redis at `url` (one URL, or a cluster's seed list) answers `PING`,
    /// on a connection opened for the check.
    pub fn redis_url(self, url: &str) -> Self {
        let url = url.to_owned();
        self.check("redis", true, move || {
            let url = url.clone();
            async move {
                let mut redis = RedisConn::connect(&url).await.map_err(|e| e.to_string())?;
                redis::cmd("PING")
                    .query_async::<String>(&mut redis)
                    .await
                    .map_err(|e| e.to_string())
            }
        })
    }

    /// PostgreSQL at `url` answers `SELECT 1` (a required check).
    pub fn postgres_url(self, url: &str) -> Self {
        match sqlx::postgres::PgPoolOptions::new()
            .max_connections(1)
            .acquire_timeout(Self::TIMEOUT)
            .connect_lazy(url)
        {
            Ok(pool) => self.postgres(pool, true),
            Err(e) => {
                let problem = format!("the database URL is not usable: {e}");
                self.check("postgres", true, move || {
                    let problem = problem.clone();
                    async move { Err(problem) }
                })
            }
        }
    }

    /// PostgreSQL answers `SELECT 1`.
    pub fn postgres(self, pool: sqlx::PgPool, required: bool) -> Self {
        self.check("postgres", required, move || {
            let pool = pool.clone();
            async move {
                sqlx::query_scalar::<_, i32>("SELECT 1")
                    .fetch_one(&pool)
                    .await
                    .map(|_| "answers".to_owned())
                    .map_err(|e| e.to_string())
            }
        })
    }

    /// The group member holds at least one partition.
    pub fn partitions(self, assignment: Assignment) -> Self {
        self.check("partitions", true, move || {
            let held = assignment.count();
            async move {
                if held > 0 {
                    Ok(format!("{held} assigned"))
                } else {
                    Err("no partitions assigned (the group is forming or rebalancing)".into())
                }
            }
        })
    }

    /// Runs every check at once.
    pub async fn run(&self) -> Readiness {
        let reports = futures::future::join_all(self.checks.iter().map(
            |(name, required, check)| async move {
                let answer = tokio::time::timeout(Self::TIMEOUT, check()).await;
                let (ok, detail) = match answer {
                    Ok(Ok(detail)) => (true, detail),
                    Ok(Err(problem)) => (false, problem),
                    Err(_) => (false, format!("no answer within {:?}", Self::TIMEOUT)),
                };
                CheckReport {
                    name,
                    ok,
                    required: *required,
                    detail,
                }
            },
        ))
        .await;
        Readiness {
            ready: reports.iter().all(|r| r.ok || !r.required),
            checks: reports,
        }
    }
}

#[derive(Clone)]
struct Observed {
    recorder: Recorder,
    probes: Probes,
}

/// `/metrics`, `/healthz` and `/readyz`.
pub fn routes(recorder: Recorder, probes: Probes) -> Router {
    Router::new()
        .route("/metrics", get(metrics_text))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .with_state(Observed { recorder, probes })
}

async fn metrics_text(State(o): State<Observed>) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        o.recorder.render(),
    )
        .into_response()
}

/// Liveness: the process answers.
#[utoipa::path(get, path = "/healthz", tag = "operations",
    responses((status = 200, description = "The process is alive", body = String)))]
pub async fn healthz() -> &'static str {
    "ok\n"
}

/// Readiness: each service this process needs answers (and, for the
/// applier and archiver, the member holds partitions).
#[utoipa::path(get, path = "/readyz", tag = "operations", operation_id = "readyz",
    responses(
        (status = 200, description = "Ready", body = Readiness),
        (status = 503, description = "Not ready; the failed checks say why", body = Readiness)))]
pub async fn readyz_doc() {}

async fn readyz(State(o): State<Observed>) -> Response {
    let readiness = o.probes.run().await;
    let status = if readiness.ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, axum::Json(readiness)).into_response()
}

/// Serves [`routes`] on `listener` until `shutdown`.
pub async fn serve(
    listener: tokio::net::TcpListener,
    recorder: Recorder,
    probes: Probes,
    shutdown: impl Future<Output = ()>,
) {
    crate::server::serve(
        listener,
        routes(recorder, probes),
        crate::Limits {
            max_connections: 256,
            ..crate::Limits::default()
        },
        None,
        shutdown,
    )
    .await;
}
