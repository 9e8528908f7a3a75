//! The service of `examples/serve`, shaped like online model serving: the
//! model is a few shards, each a var; a prediction reads them all and
//! computes on an engine worker; an update rewrites them all as one op, so
//! that every prediction sees all of an update or none of it.
//!
//! The same routes are built on `tokio::sync::RwLock` (`Variant::RwLock*`),
//! as such a service is usually written without the engine, for the load
//! figures in PERFORMANCE.md. `tests/http.rs` drives this module through
//! a real HTTP client.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use axum::extract::{Query, Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use depengine::prometheus::EngineCollector;
use depengine::{Engine, Error, ShutdownMode, Var};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use serde::{Deserialize, Serialize};
use tokio::net::TcpListener;

#[path = "hangups.rs"]
pub mod hangups;
#[path = "journal.rs"]
mod journal;

pub use journal::{Appended, Entry, Journal, JournalCounts};

/// Shards of the model.
pub const SHARDS: usize = 4;
/// Weights per shard.
pub const SHARD_LEN: usize = 4096;
/// How long a request waits for its op by default before it answers 504
/// (a prediction's op, if it has not started, is cancelled with the
/// dropped handle; an update is aborted if it has not started, and else
/// answered 202: see `update`).
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// One shard of the model.
pub struct Shard {
    /// The model version that wrote it.
    pub version: u64,
    pub weights: Vec<f32>,
}

impl Shard {
    /// Shard `index` of model version `version`: every weight follows from
    /// the two, so a client can check what it was served.
    pub fn new(version: u64, index: usize) -> Self {
        let base = (version % 1000) as f32 * 0.001 + index as f32;
        let weights = (0..SHARD_LEN).map(|i| base + (i % 97) as f32 * 1e-4).collect();
        Self { version, weights }
    }
}

/// What a prediction computes over the shards for input `x`: a dot product
/// per shard, summed (about 16 thousand multiply-adds).
pub fn compute<'a>(shards: impl IntoIterator<Item = &'a Shard>, x: f32) -> Prediction {
    let mut y = 0.0f64;
    let mut versions = Vec::with_capacity(SHARDS);
    for shard in shards {
        let dot: f32 = shard.weights.iter().enumerate().map(|(i, w)| w * (x + (i % 13) as f32)).sum();
        y += f64::from(dot);
        versions.push(shard.version);
    }
    Prediction { y, versions }
}

/// The answer to a prediction: its value and the version of each shard it
/// read (all equal unless a read was torn).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Prediction {
    pub y: f64,
    pub versions: Vec<u64>,
}

/// The answer to an update: the new model version.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Updated {
    pub version: u64,
}

/// How the model's state is guarded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Variant {
    /// Shards in vars; a prediction runs on the handler's thread while the
    /// engine's workers sleep (`inline_when_idle`), else on a worker.
    Engine,
    /// Shards in vars; every prediction on an engine worker.
    EnginePool,
    /// One `tokio::sync::RwLock` over the shards, predictions computed on
    /// the runtime's threads while holding the read guard.
    RwLock,
    /// As `RwLock`, computing in `spawn_blocking`.
    RwLockBlocking,
}

impl std::str::FromStr for Variant {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "engine" => Ok(Variant::Engine),
            "engine-pool" => Ok(Variant::EnginePool),
            "rwlock" => Ok(Variant::RwLock),
            "rwlock-blocking" => Ok(Variant::RwLockBlocking),
            _ => Err(format!("unknown variant {s:?}: engine, engine-pool, rwlock or rwlock-blocking")),
        }
    }
}

/// The service's settings.
#[derive(Clone, Debug)]
pub struct Config {
    pub variant: Variant,
    /// The engine's bound on ops in flight (`None`: the environment's, or
    /// no bound).
    pub max_in_flight: Option<usize>,
    /// Engine workers (`None`: the environment's, or one per core).
    pub cpu_workers: Option<usize>,
    /// Engine thread names' prefix.
    pub thread_name: String,
    /// How long a request waits for its op (see [`REQUEST_TIMEOUT`]).
    pub request_timeout: Duration,
    /// How long an update's body takes besides building the shards: a
    /// stand-in for a slow model rebuild (zero by default; tests set it).
    pub update_work: Duration,
    /// How long a journal append takes besides appending (`journal.rs`).
    pub journal_work: Duration,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            variant: Variant::Engine,
            max_in_flight: Some(1024),
            cpu_workers: None,
            thread_name: "serve".into(),
            request_timeout: REQUEST_TIMEOUT,
            update_work: Duration::ZERO,
            journal_work: Duration::from_micros(200),
        }
    }
}

/// The model, as each variant holds it.
enum Model {
    Vars(Vec<Var<Shard>>),
    Locked(Arc<tokio::sync::RwLock<Vec<Shard>>>),
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RouteLabels {
    route: &'static str,
    status: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RouteLabel {
    route: &'static str,
}

struct Inner {
    variant: Variant,
    request_timeout: Duration,
    update_work: Duration,
    engine: Engine,
    model: Model,
    /// The journal (the engine variants only).
    journal: Option<Journal>,
    /// The latest model version (updates are serialized by the model's
    /// vars or lock; this only numbers them).
    version: AtomicU64,
    /// Predictions computed (bodies run).
    computed: Counter,
    registry: Registry,
    requests: Family<RouteLabels, Counter>,
    latency: Family<RouteLabel, Histogram>,
}

/// The service's state: cheap to clone, one per handler call.
#[derive(Clone)]
pub struct App(Arc<Inner>);

impl App {
    /// A service with model version 0.
    ///
    /// # Errors
    ///
    /// The engine's settings are refused.
    pub fn new(config: &Config) -> depengine::Result<Self> {
        let mut builder =
            depengine::EngineBuilder::from_env().thread_name(config.thread_name.clone()).metrics_timing(true);
        if let Some(n) = config.max_in_flight {
            builder = builder.max_in_flight(n);
        }
        if let Some(n) = config.cpu_workers {
            builder = builder.cpu_workers(n);
        }
        let engine = builder.build()?;
        let shards = (0..SHARDS).map(|i| Shard::new(0, i));
        let model = match config.variant {
            Variant::Engine | Variant::EnginePool => Model::Vars(shards.map(|s| engine.var(s)).collect()),
            Variant::RwLock | Variant::RwLockBlocking => {
                Model::Locked(Arc::new(tokio::sync::RwLock::new(shards.collect())))
            }
        };
        let mut registry = Registry::with_prefix("serve");
        let requests = Family::<RouteLabels, Counter>::default();
        registry.register("http_requests", "HTTP requests by route and status", requests.clone());
        let latency = Family::<RouteLabel, Histogram>::new_with_constructor(|| {
            Histogram::new(exponential_buckets(0.000_01, 2.0, 20))
        });
        registry.register("http_request_seconds", "HTTP request latency by route", latency.clone());
        let computed = Counter::default();
        registry.register("predictions_computed", "Predictions computed", computed.clone());
        registry.register_collector(Box::new(EngineCollector::new(&engine)));
        let variant = config.variant;
        let journal = matches!(variant, Variant::Engine | Variant::EnginePool)
            .then(|| Journal::new(&engine, config.journal_work));
        let inner = Inner {
            variant,
            request_timeout: config.request_timeout,
            update_work: config.update_work,
            engine,
            model,
            journal,
            version: AtomicU64::new(0),
            computed,
            registry,
            requests,
            latency,
        };
        let app = App(Arc::new(inner));
        tracing::info!(?variant, "service ready");
        Ok(app)
    }

    /// The engine (for tests: its metrics, its shutdown).
    pub fn engine(&self) -> &Engine {
        &self.0.engine
    }

    /// Predictions computed so far.
    pub fn computed(&self) -> u64 {
        self.0.computed.get()
    }

    /// The journal (the engine variants only).
    pub fn journal(&self) -> Option<&Journal> {
        self.0.journal.as_ref()
    }

    /// How long a request waits for its op.
    pub fn request_timeout(&self) -> Duration {
        self.0.request_timeout
    }

    /// The model's vars (the engine variant only): for a test to hold
    /// them.
    pub fn shards(&self) -> Option<&[Var<Shard>]> {
        match &self.0.model {
            Model::Vars(shards) => Some(shards),
            Model::Locked(_) => None,
        }
    }

    /// The service's routes.
    pub fn router(&self) -> Router {
        Router::new()
            .route("/predict", get(predict))
            .route("/update", post(update))
            .route("/journal", post(journal::journal))
            .route("/health", get(|| async { "ok\n" }))
            .route("/metrics", get(metrics))
            .route("/debug/pending", get(debug_pending))
            .layer(middleware::from_fn_with_state(self.clone(), count))
            .with_state(self.clone())
    }
}

/// Serves `app` on `listener` until `stop` resolves, then shuts down in
/// order: stop accepting, let in-flight requests finish (axum's graceful
/// shutdown), then drain the engine and join its threads.
///
/// # Errors
///
/// The server's I/O error, or the first engine failure no request saw.
pub async fn serve(
    app: App,
    listener: TcpListener,
    stop: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let addr: SocketAddr = listener.local_addr()?;
    tracing::info!(%addr, "listening");
    axum::serve(listener, app.router()).with_graceful_shutdown(stop).await?;
    tracing::info!("HTTP drained; draining the engine");
    app.engine().shutdown(ShutdownMode::Drain).await?;
    Ok(())
}

/// Counts every request by route and status, and times it.
async fn count(State(app): State<App>, request: Request, next: Next) -> Response {
    let route = match request.uri().path() {
        "/predict" => "/predict",
        "/update" => "/update",
        "/journal" => "/journal",
        "/health" => "/health",
        "/metrics" => "/metrics",
        "/debug/pending" => "/debug/pending",
        _ => "other",
    };
    let start = Instant::now();
    let response = next.run(request).await;
    let status = response.status().as_u16();
    app.0.requests.get_or_create(&RouteLabels { route, status }).inc();
    app.0.latency.get_or_create(&RouteLabel { route }).observe(start.elapsed().as_secs_f64());
    response
}

#[derive(Deserialize)]
struct PredictQuery {
    x: f32,
}

async fn predict(State(app): State<App>, Query(q): Query<PredictQuery>) -> Response {
    if !q.x.is_finite() {
        return (StatusCode::BAD_REQUEST, "x must be a finite number\n").into_response();
    }
    let x = q.x;
    let computed = app.0.computed.clone();
    let compute = move |shards: &mut dyn Iterator<Item = &Shard>| {
        computed.inc();
        compute(shards, x)
    };
    match &app.0.model {
        Model::Vars(shards) => {
            // The request's group: dropped with this handler if the client
            // goes away, it cancels the op if no worker has started it, so
            // an orphaned request costs no run; a timeout cancels it too.
            // While the workers sleep, it runs here instead: no hand-off.
            let request = app.0.engine.group("predict");
            let op = app.0.engine.op("predict").group(&request).read_all(shards);
            let op = op.inline_when_idle(app.0.variant == Variant::Engine);
            let handle =
                match op.run(move |(shards,), ()| Ok(compute(&mut shards.iter().map(|g| &**g)))).pushed() {
                    Ok(handle) => handle,
                    Err(err) => return error_response(&err),
                };
            match tokio::time::timeout(app.0.request_timeout, handle).await {
                Ok(Ok(prediction)) => Json(prediction).into_response(),
                Ok(Err(err)) => error_response(&err),
                Err(_) => {
                    request.cancel();
                    (StatusCode::GATEWAY_TIMEOUT, "the prediction timed out\n").into_response()
                }
            }
        }
        Model::Locked(lock) if app.0.variant == Variant::RwLockBlocking => {
            let shards = lock.clone().read_owned().await;
            match tokio::task::spawn_blocking(move || compute(&mut shards.iter())).await {
                Ok(prediction) => Json(prediction).into_response(),
                Err(err) => (StatusCode::INTERNAL_SERVER_ERROR, format!("{err}\n")).into_response(),
            }
        }
        Model::Locked(lock) => Json(compute(&mut lock.read().await.iter())).into_response(),
    }
}

async fn update(State(app): State<App>) -> Response {
    match &app.0.model {
        Model::Vars(shards) => {
            // All shards in one op: no prediction sees part of an update.
            // The body builds the new shards before it touches any, so a
            // failure leaves them as they were: it need not poison them.
            let version = app.0.version.fetch_add(1, Ordering::Relaxed) + 1;
            let work = app.0.update_work;
            let op = app.0.engine.op("update").write_all(shards).poison(false);
            let handle = match op
                .run(move |(), (mut shards,)| {
                    std::thread::sleep(work);
                    let fresh: Vec<Shard> = (0..shards.len()).map(|i| Shard::new(version, i)).collect();
                    for (guard, shard) in shards.iter_mut().zip(fresh) {
                        **guard = shard;
                    }
                    Ok(version)
                })
                .pushed()
            {
                Ok(handle) => handle,
                Err(err) => return error_response(&err),
            };
            let mut handle = std::pin::pin!(handle);
            match tokio::time::timeout(app.0.request_timeout, &mut handle).await {
                Ok(Ok(version)) => Json(Updated { version }).into_response(),
                Ok(Err(err)) => error_response(&err),
                // A write that timed out is not a write that failed: abort
                // it if it has not started (then it never happens); if it
                // has, it will complete, and the client is told so.
                Err(_) if handle.abort() => (
                    StatusCode::GATEWAY_TIMEOUT,
                    "the update timed out before it started; it was cancelled\n",
                )
                    .into_response(),
                Err(_) => (StatusCode::ACCEPTED, Json(Updated { version })).into_response(),
            }
        }
        Model::Locked(lock) => {
            let mut shards = lock.write().await;
            let version = app.0.version.fetch_add(1, Ordering::Relaxed) + 1;
            *shards = (0..SHARDS).map(|i| Shard::new(version, i)).collect();
            Json(Updated { version }).into_response()
        }
    }
}

async fn metrics(State(app): State<App>) -> Response {
    let mut body = String::new();
    if let Err(err) = prometheus_client::encoding::text::encode(&mut body, &app.0.registry) {
        return (StatusCode::INTERNAL_SERVER_ERROR, format!("{err}\n")).into_response();
    }
    let mut response = body.into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/openmetrics-text; version=1.0.0; charset=utf-8"),
    );
    response
}

/// What is pending and on what: the engine's counts and pools, each
/// shard's state, then the engine's explanation (ops waiting on vars,
/// grouped, and who holds each var, for how long).
async fn debug_pending(State(app): State<App>) -> Response {
    let m = app.0.engine.metrics();
    let mut out = format!(
        "ops: pushed {} completed {} in flight {} waiting on vars {} cancelled on vars {} queued {} running {}\n",
        m.pushed,
        m.completed,
        m.in_flight,
        m.waiting_on_vars,
        m.cancelled_on_vars,
        m.queued(),
        m.running()
    );
    if let Some(max) = m.max_in_flight {
        out += &format!(
            "bound: {} of {max} slots used, {} pushes refused as full\n",
            m.slots_used, m.refused_full
        );
    }
    for p in &m.pools {
        out += &format!(
            "pool {} ({} {:?}): {} workers, {} queued, {} running, {} run, busy {:?}\n",
            p.name, p.device, p.lane, p.workers, p.queued, p.running, p.ops_run, p.busy
        );
    }
    if let Some(shards) = app.shards() {
        for (i, shard) in shards.iter().enumerate() {
            let d = shard.any().debug_state();
            out += &format!(
                "shard {i} (var #{}): version {}, {} reads running, write running: {}, {} queued, error: {:?}\n",
                d.id,
                d.version,
                d.running_reads,
                d.write_running,
                d.queued.len(),
                d.error
            );
        }
    }
    out += &app.0.engine.debug_pending().to_string();
    out.into_response()
}

/// An engine error as an HTTP answer: the status the error suggests (503
/// where the engine cannot serve now but may later: it is full, shutting
/// down, the op was cancelled, a var it needs carries an error until it is
/// repaired, a pool cannot start; 500 where the op failed or the server
/// misused the engine), a message for the client without the engine's
/// internals (op and var names, settings), and `Retry-After` where trying
/// again soon may help. The error itself, with its causes, goes to the log.
pub fn error_response(err: &Error) -> Response {
    use depengine::ErrorKind as K;
    let (status, message, retry) = match err.kind() {
        K::Full => (503, "the service is at capacity; try again shortly", true),
        K::PoolUnavailable => (503, "the service cannot take work now; try again shortly", true),
        K::Shutdown => (503, "the service is shutting down", false),
        K::Cancelled => (503, "the request was cancelled", false),
        K::Skipped => (503, "the data this request needs is unavailable after an earlier failure", false),
        K::Failed | K::Panicked | K::CompletionDropped | K::Gpu => (500, "the request failed", false),
        _ => (500, "internal error", false),
    };
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    tracing::warn!(status = status.as_u16(), "{err:#}");
    let mut response = (status, format!("{message}\n")).into_response();
    if retry {
        response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(1u64));
    }
    response
}
