//! A model-serving service on depengine and axum: predictions read every
//! shard of the model and compute on an engine worker, updates rewrite all
//! shards as one op, `/metrics` speaks Prometheus, `/debug/pending` shows
//! what waits on what, and SIGINT/SIGTERM shut it down in order.
//!
//! ```text
//! cargo run --release -p depengine-serve -- [--addr 127.0.0.1:3000]
//!     [--variant engine|engine-pool|rwlock|rwlock-blocking] [--max-in-flight N] [--workers N]
//! curl '127.0.0.1:3000/predict?x=0.5'
//! curl -X POST 127.0.0.1:3000/update
//! curl 127.0.0.1:3000/metrics
//! curl 127.0.0.1:3000/debug/pending
//! ```

use serve::{App, Config};

/// Resolves on SIGINT (Ctrl-C) or SIGTERM.
async fn stop_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut term) => {
                term.recv().await;
            }
            Err(_) => std::future::pending().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {}
        () = term => {}
    }
    eprintln!("shutting down: no new connections; finishing requests in flight, then the engine's ops");
}

fn usage(problem: &str) -> ! {
    eprintln!(
        "{problem}\nusage: serve [--addr HOST:PORT] [--variant engine|engine-pool|rwlock|rwlock-blocking] \
         [--max-in-flight N] [--workers N]"
    );
    std::process::exit(2);
}

fn parse() -> (String, Config) {
    let mut addr = "127.0.0.1:3000".to_owned();
    let mut config = Config::default();
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let mut value = || args.next().unwrap_or_else(|| usage(&format!("{flag} needs a value")));
        match flag.as_str() {
            "--addr" => addr = value(),
            "--variant" => config.variant = value().parse().unwrap_or_else(|e: String| usage(&e)),
            "--max-in-flight" => {
                config.max_in_flight =
                    Some(value().parse().unwrap_or_else(|_| usage("--max-in-flight: a count")))
            }
            "--workers" => {
                config.cpu_workers = Some(value().parse().unwrap_or_else(|_| usage("--workers: a count")))
            }
            "-h" | "--help" => usage("a model-serving service on depengine"),
            other => usage(&format!("unknown argument {other:?}")),
        }
    }
    (addr, config)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let (addr, config) = parse();
    let app = App::new(&config)?;
    let listener = tokio::net::TcpListener::bind(&addr).await?;
    eprintln!(
        "serving {:?} on http://{} (engine workers: {}, max in flight: {:?})",
        config.variant,
        listener.local_addr()?,
        app.engine().settings().cpu_workers,
        app.engine().settings().max_in_flight
    );
    serve::serve(app.clone(), listener, stop_signal()).await?;
    eprintln!("stopped cleanly after {} predictions", app.computed());
    Ok(())
}
