//! The service of `examples/serve` under real HTTP load, on loopback, with
//! a real client: consistent reads while updates run, clients that hang
//! up, overload past the in-flight bound, and a shutdown under load. Every
//! loop is bounded in count and time.

#[path = "../../../tests/common/mod.rs"]
mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::threads_left;
use serve::{App, Config, Prediction, SHARDS, Shard};
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

type Served = JoinHandle<Result<(), Box<dyn std::error::Error + Send + Sync>>>;

/// A running service: its address, its app, and the way to stop it.
struct Server {
    base: String,
    app: App,
    stop: Option<oneshot::Sender<()>>,
    served: Served,
}

async fn start(config: Config) -> Server {
    let app = App::new(&config).unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let (stop, stopped) = oneshot::channel::<()>();
    let served = tokio::spawn(serve::serve(app.clone(), listener, async {
        let _ = stopped.await;
    }));
    Server { base, app, stop: Some(stop), served }
}

impl Server {
    /// Stops the service and waits for its orderly end (HTTP drained, then
    /// the engine), at most 30 s.
    async fn shut_down(mut self) {
        let _ = self.stop.take().unwrap().send(());
        tokio::time::timeout(Duration::from_secs(30), self.served)
            .await
            .expect("the service did not stop within 30 s")
            .expect("the service task panicked")
            .expect("the service reported an error");
    }
}

fn config(name: &str) -> Config {
    Config { cpu_workers: Some(2), thread_name: name.into(), ..Config::default() }
}

fn client() -> reqwest::Client {
    reqwest::Client::builder().timeout(Duration::from_secs(20)).build().unwrap()
}

/// The answer version `version` gives for `x`.
fn expected(version: u64, x: f32) -> Prediction {
    let shards: Vec<Shard> = (0..SHARDS).map(|i| Shard::new(version, i)).collect();
    serve::compute(shards.iter(), x)
}

async fn predict(client: &reqwest::Client, base: &str, x: f32) -> Result<(u16, String), reqwest::Error> {
    let response = client.get(format!("{base}/predict?x={x}")).send().await?;
    let status = response.status().as_u16();
    Ok((status, response.text().await?))
}

/// Resident memory of this process, in bytes (Linux).
fn resident() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * 4096)
}

/// Waits until `done` holds, at most 10 s.
async fn eventually(what: &str, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < Duration::from_secs(10), "never: {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn reads_are_never_torn_while_updates_run() {
    let server = start(config("svc-reads")).await;
    let base = Arc::new(server.base.clone());
    let updating = Arc::new(AtomicBool::new(true));
    let updates = Arc::new(AtomicUsize::new(0));
    let updater = {
        let (base, updating, updates) = (base.clone(), updating.clone(), updates.clone());
        tokio::spawn(async move {
            let client = client();
            let start = Instant::now();
            while updating.load(Ordering::Relaxed) && start.elapsed() < Duration::from_secs(60) {
                let response = client.post(format!("{base}/update")).send().await.unwrap();
                assert_eq!(response.status(), 200);
                updates.fetch_add(1, Ordering::Relaxed);
            }
        })
    };
    let clients: Vec<_> = (0..64)
        .map(|c| {
            let base = base.clone();
            tokio::spawn(async move {
                let client = client();
                let mut last = 0;
                for r in 0..150 {
                    let x = (c * 1000 + r) as f32 * 0.01;
                    let (status, body) = predict(&client, &base, x).await.unwrap();
                    assert_eq!(status, 200, "{body}");
                    let got: Prediction = serde_json::from_str(&body).unwrap();
                    let version = got.versions[0];
                    assert!(got.versions.iter().all(|&v| v == version), "a torn read: {got:?}");
                    assert_eq!(got, expected(version, x), "not the answer of version {version}");
                    assert!(version >= last, "versions went back for one client: {last} then {version}");
                    last = version;
                }
            })
        })
        .collect();
    for c in clients {
        c.await.unwrap();
    }
    updating.store(false, Ordering::Relaxed);
    updater.await.unwrap();
    assert!(updates.load(Ordering::Relaxed) > 10, "updates ran alongside the reads");
    let m = server.app.engine().metrics();
    assert_eq!((m.failed, m.skipped, m.cancelled), (0, 0, 0), "{m:?}");
    server.shut_down().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn clients_that_hang_up_cost_no_run_and_wedge_nothing() {
    let server = start(config("svc-hangup")).await;
    let engine = server.app.engine().clone();
    // The model is held: requests queue behind the held shard.
    let held = server.app.shards().unwrap()[0].write().await.unwrap();
    let hang_ups: Vec<_> = (0..100)
        .map(|i| {
            let (client, base) = (client(), server.base.clone());
            tokio::spawn(async move { predict(&client, &base, i as f32).await })
        })
        .collect();
    // Every request has reached its handler and pushed its op (each holds
    // a slot of the bound; with bulk execution on, some may wait in a
    // segment rather than on a var)…
    eventually("every request pushed", || engine.metrics().slots_used == 100).await;
    // …when its client hangs up.
    for h in &hang_ups {
        h.abort();
    }
    for h in hang_ups {
        assert!(h.await.unwrap_err().is_cancelled());
    }
    // Each hung-up request's op is cancelled as its handler is dropped,
    // before it starts; it leaves the queue as the var reaches it.
    // (With bulk execution on, a segment of cancelled members may still
    // wait on the shard: it skips them when it runs.)
    eventually("every orphaned op cancelled", || engine.metrics().cancelled == 100).await;
    // Those queued on the shard stay there, cancelled, holding their slots,
    // until the shard reaches them.
    assert_eq!(engine.metrics().slots_used, 100);
    assert_eq!(server.app.computed(), 0, "a hung-up request ran its body");
    drop(held);
    let client = client();
    for i in 0..20 {
        let (status, body) = predict(&client, &server.base, i as f32).await.unwrap();
        assert_eq!(status, 200, "{body}");
    }
    eventually("no op left pending", || {
        let m = engine.metrics();
        m.in_flight == 0 && m.waiting_on_vars == 0 && m.cancelled_on_vars == 0 && m.slots_used == 0
    })
    .await;
    assert_eq!(server.app.computed(), 20, "only the answered requests ran their bodies");
    server.shut_down().await;
}

/// An update that times out is aborted if it has not started (504, and
/// it never happens); one that has started is answered 202 (accepted: it
/// will happen), and it does.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_timed_out_update_is_cancelled_or_accepted_never_both() {
    let timeout = Duration::from_millis(200);
    let server = start(Config {
        request_timeout: timeout,
        update_work: Duration::from_millis(600),
        ..config("svc-late")
    })
    .await;
    let client = client();
    let version_served = |client: reqwest::Client, base: String| async move {
        let (status, body) = predict(&client, &base, 1.0).await.unwrap();
        assert_eq!(status, 200, "{body}");
        serde_json::from_str::<Prediction>(&body).unwrap().versions[0]
    };
    // Held by a reader: the update cannot start before its timeout.
    let held = server.app.shards().unwrap()[0].read().await.unwrap();
    let response = client.post(format!("{}/update", server.base)).send().await.unwrap();
    assert_eq!(response.status(), 504, "{}", response.text().await.unwrap());
    drop(held);
    assert_eq!(version_served(client.clone(), server.base.clone()).await, 0, "a cancelled update happened");
    // Started, but slower than the timeout: accepted, and it happens.
    let response = client.post(format!("{}/update", server.base)).send().await.unwrap();
    assert_eq!(response.status(), 202);
    let accepted: serve::Updated = serde_json::from_str(&response.text().await.unwrap()).unwrap();
    let engine = server.app.engine().clone();
    eventually("the accepted update done", || engine.metrics().in_flight == 0).await;
    let served = version_served(client.clone(), server.base.clone()).await;
    assert_eq!(served, accepted.version, "the accepted update was not applied");
    server.shut_down().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn overload_is_answered_503_and_service_comes_back() {
    let max = 16;
    let server = start(Config { max_in_flight: Some(max), ..config("svc-overload") }).await;
    let engine = server.app.engine().clone();
    let held = server.app.shards().unwrap()[0].write().await.unwrap();
    let client = client();
    // `max` requests take every slot and wait behind the held shard.
    let waiting: Vec<_> = (0..max)
        .map(|i| {
            let (client, base) = (client.clone(), server.base.clone());
            tokio::spawn(async move { predict(&client, &base, i as f32).await.unwrap() })
        })
        .collect();
    eventually("the bound reached", || engine.metrics().slots_used == max).await;
    // A flood past the bound: every answer is a 503 with Retry-After, and
    // memory stays bounded.
    let before = resident();
    for round in 0..10 {
        let flood: Vec<_> = (0..200)
            .map(|i| {
                let (client, base) = (client.clone(), server.base.clone());
                tokio::spawn(async move {
                    let response = client.get(format!("{base}/predict?x={i}")).send().await.unwrap();
                    let retry = response.headers().get("retry-after").map(|v| v.to_str().unwrap().to_owned());
                    (response.status().as_u16(), retry, response.text().await.unwrap())
                })
            })
            .collect();
        for f in flood {
            let (status, retry, body) = f.await.unwrap();
            assert_eq!((status, retry.as_deref()), (503, Some("1")), "round {round}");
            // What the client reads names none of the engine's internals.
            assert_eq!(body, "the service is at capacity; try again shortly\n");
        }
    }
    if let (Some(before), Some(after)) = (before, resident()) {
        let grown = after.saturating_sub(before);
        assert!(grown < 64 << 20, "2,000 refused requests grew resident memory by {grown} bytes");
    }
    assert_eq!(engine.metrics().slots_used, max);
    let m = engine.metrics();
    assert_eq!((m.max_in_flight, m.slots_used, m.refused_full), (Some(max), max, 2_000));
    drop(held);
    for w in waiting {
        assert_eq!(w.await.unwrap().0, 200);
    }
    for i in 0..50 {
        assert_eq!(predict(&client, &server.base, i as f32).await.unwrap().0, 200);
    }
    server.shut_down().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_shutdown_under_load_finishes_cleanly_and_joins_every_thread() {
    let server = start(config("svc-stop")).await;
    let base = Arc::new(server.base.clone());
    let ok = Arc::new(AtomicUsize::new(0));
    let clients: Vec<_> = (0..32)
        .map(|c| {
            let (base, ok) = (base.clone(), ok.clone());
            tokio::spawn(async move {
                let client = client();
                for r in 0..1000 {
                    match predict(&client, &base, (c + r) as f32).await {
                        Ok((200, body)) => {
                            let got: Prediction = serde_json::from_str(&body).unwrap();
                            assert_eq!(got, expected(got.versions[0], (c + r) as f32));
                            ok.fetch_add(1, Ordering::Relaxed);
                        }
                        // The engine closed under a request: a clean 503.
                        Ok((status, body)) => assert_eq!(status, 503, "{body}"),
                        // The server stopped accepting or closed the
                        // connection once idle: the client's clean error.
                        Err(err) => {
                            assert!(err.is_connect() || err.is_request(), "{err:?}");
                            return;
                        }
                    }
                }
            })
        })
        .collect();
    eventually("load running", || ok.load(Ordering::Relaxed) > 200).await;
    server.shut_down().await;
    for c in clients {
        c.await.expect("a client panicked");
    }
    assert_eq!(threads_left("svc-stop"), Some(0), "engine threads left after the shutdown");
}

/// `/metrics`: the service's own families and the engine's (the crate's
/// collector), in the OpenMetrics text a scraper reads, agreeing with what
/// was served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_speak_openmetrics_with_the_engines_families() {
    let server = start(config("svc-metrics")).await;
    let client = client();
    for i in 0..10 {
        let (status, _) = predict(&client, &server.base, i as f32).await.unwrap();
        assert_eq!(status, 200);
    }
    let response = client.get(format!("{}/metrics", server.base)).send().await.unwrap();
    assert_eq!(response.status().as_u16(), 200);
    let content_type = response.headers()["content-type"].to_str().unwrap().to_owned();
    assert!(content_type.starts_with("application/openmetrics-text"), "{content_type}");
    let text = response.text().await.unwrap();
    let sample = |name: &str| -> f64 {
        let line =
            text.lines().find(|l| l.starts_with(name)).unwrap_or_else(|| panic!("no {name} in:\n{text}"));
        line.rsplit_once(' ').unwrap().1.parse().unwrap()
    };
    assert_eq!(sample("serve_predictions_computed_total"), 10.0);
    assert!(sample("serve_engine_ops_completed_total ") >= 10.0);
    assert_eq!(sample("serve_engine_ops_failed_total "), 0.0);
    assert!(text.contains("# TYPE serve_engine_run_seconds histogram"));
    assert!(text.trim_end().ends_with("# EOF"));
    server.shut_down().await;
}

/// Half the clients hang up early while requests of two dependent ops
/// queue on the journal: each request's group cancels what had not
/// started, no cancelled op writes, memory stays flat, and nothing is left
/// in the engine once the load stops (`serve::hangups`).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn half_the_clients_hang_up_and_no_cancelled_op_writes() {
    let server = start(config("svc-groups")).await;
    let addr = server.base.trim_start_matches("http://").parse().unwrap();
    let load = serve::hangups::Load {
        clients: 16,
        duration: Duration::from_secs(2),
        hang_up_within: Duration::from_millis(2),
    };
    let report = tokio::time::timeout(Duration::from_secs(60), serve::hangups::run(&server.app, addr, &load))
        .await
        .expect("the load ended in time");
    assert!(report.answered_ok > 0, "{report:?}");
    assert!(report.hung_up > 0 && report.cancelled_ops > 0, "no hang-up cancelled an op: {report:?}");
    let broken = report.broken(64 << 20);
    assert!(broken.is_empty(), "{broken:?}\n{report:?}");
    server.shut_down().await;
}
