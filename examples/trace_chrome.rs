//! The engine's `tracing` spans written as a Chrome trace by the
//! `tracing-chrome` crate, next to the engine's own profiler, for the same
//! small pipeline: a producer writes tiles, two consumers read them, a
//! future op awaits between its steps.
//!
//! ```text
//! cargo run --release --example trace_chrome -- [DIR]
//! ```
//!
//! DIR (default: the current directory) gets `spans.json` (tracing-chrome:
//! one slice per op span, with the events the bodies log inside it) and
//! `profile.json` (the profiler: ops on their workers, flow arrows,
//! queue depth). Open either in Perfetto or chrome://tracing.

use std::path::PathBuf;

use depengine::{Engine, ShutdownMode};
use tracing_subscriber::prelude::*;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = PathBuf::from(std::env::args().nth(1).unwrap_or_else(|| ".".into()));
    std::fs::create_dir_all(&dir)?;
    let (chrome, guard) =
        tracing_chrome::ChromeLayerBuilder::new().file(dir.join("spans.json")).include_args(true).build();
    tracing_subscriber::registry().with(chrome).init();

    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    let profile = runtime.block_on(async {
        let engine = Engine::from_env();
        engine.profiler().start();
        let tiles: Vec<_> =
            (0..8).map(|i| engine.var_named(format!("tile{i}"), vec![0u64; 1 << 14])).collect();
        let sums: Vec<_> = (0..8).map(|i| engine.var_named(format!("sum{i}"), 0u64)).collect();
        for round in 0..4u64 {
            for (tile, sum) in tiles.iter().zip(&sums) {
                engine.op("produce").write(tile).run(move |(), (mut t,)| {
                    t.iter_mut().enumerate().for_each(|(k, x)| *x = k as u64 * round);
                    tracing::debug!(round, "tile filled");
                    Ok(())
                });
                engine.op("reduce").read(tile).write(sum).run(|(t,), (mut s,)| {
                    *s += t.iter().sum::<u64>();
                    Ok(())
                });
                engine.op("inspect").read(tile).spawn(|(t,), ()| async move {
                    tokio::task::yield_now().await;
                    tracing::debug!(first = t[1], "inspected after an await");
                    Ok(())
                });
            }
        }
        engine.wait_for_all().await?;
        let profile = engine.profiler().stop();
        engine.shutdown(ShutdownMode::Drain).await?;
        Ok::<_, depengine::Error>(profile)
    })?;
    drop(guard); // flushes spans.json
    profile.write_chrome_trace(dir.join("profile.json"))?;
    println!("{}", profile.aggregate_table());
    println!("wrote {} and {}", dir.join("spans.json").display(), dir.join("profile.json").display());
    Ok(())
}
