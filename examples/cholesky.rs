//! A tiled Cholesky factorisation (A = L·Lᵀ, lower L, in place) on scoped
//! tile views of one row-major matrix: one var per tile, borrowed for the
//! scope, no copy in or out. The same four tile kernels run in order on
//! one thread for the sequential reference, on the same matrix layout.
//!
//! ```sh
//! cargo run --release --example cholesky                 # n = 2048, tiles of 32, 64, 128, 256
//! cargo run --release --example cholesky -- 2048 32      # one size
//! cargo run --release --example cholesky -- 1024 128 --profile DIR   # also a trace and an SVG timeline
//! ```
//!
//! Environment: `REPS` (repetitions, default 3; the best counts),
//! `WORKERS` (CPU workers, default the engine's), `PRIO=1` or `PRIO=0`
//! (priorities for the diagonal and panel ops; by default on for tiles of
//! 128 and more).
//!
//! Each line: the engine's best time over the repetitions against the
//! sequential run's, GFLOP/s (n³/3 flops), the speed-up, and the checks:
//! ‖A − L·Lᵀ‖/‖A‖ (Frobenius, over the lower triangle's products), and the
//! engine's L equal, bit for bit, to the sequential run's (each tile sees
//! the same updates in the same order). Exits non-zero if a check fails.

use std::time::{Duration, Instant};

use depengine::aligned;
use depengine::{Engine, Error};

#[path = "tiled/kernels.rs"]
mod kernels;

use kernels::{gemm, lower_equal, potrf, residual, sequential, spd, syrk, trsm};

/// A tile's rows, shared.
fn rows(t: &depengine::scope::Tile<f64>) -> Vec<&[f64]> {
    t.rows().collect()
}

/// The engine's run: one op per kernel call, over scoped tile views of
/// `m`, pushed in the sequential order; the engine runs what the tiles'
/// dependencies allow at once.
fn parallel(engine: &Engine, m: &mut [f64], n: usize, b: usize) -> Result<(), Error> {
    let nt = n / b;
    // The diagonal and panel ops first, where they pay: with large tiles
    // the last steps' critical path sets the end; with small ones the
    // pools' heap, which ops of another priority than 0 go through, costs
    // more than it gains. PRIO=1 or PRIO=0 forces either.
    let on = match std::env::var("PRIO").as_deref() {
        Ok("1") => true,
        Ok("0") => false,
        _ => b >= 128,
    };
    let prio = |p: i32| if on { p } else { 0 };
    depengine::scope(engine, |s| -> Result<(), Error> {
        let t = s.tiles(m, n, b, b)?;
        for k in 0..nt {
            let op = engine.op("potrf").write(&t[k][k]).priority(prio(2));
            op.run_detached(|(), (mut a,)| Ok(potrf(&mut a.rows_mut().collect::<Vec<_>>())?))?;
            for i in k + 1..nt {
                let op = engine.op("trsm").read(&t[k][k]).write(&t[i][k]).priority(prio(1));
                op.run_detached(move |(l,), (mut x,)| {
                    trsm(&rows(&l), &mut x.rows_mut().collect::<Vec<_>>());
                    Ok(())
                })?;
            }
            for i in k + 1..nt {
                let op = engine.op("syrk").read(&t[i][k]).write(&t[i][i]);
                op.run_detached(move |(a,), (mut c,)| {
                    syrk(&rows(&a), &mut c.rows_mut().collect::<Vec<_>>());
                    Ok(())
                })?;
                for j in k + 1..i {
                    let op = engine.op("gemm").read(&t[i][k]).read(&t[j][k]).write(&t[i][j]);
                    op.run_detached(move |(a, bt), (mut c,)| {
                        gemm(&rows(&a), &rows(&bt), &mut c.rows_mut().collect::<Vec<_>>());
                        Ok(())
                    })?;
                }
            }
        }
        engine.wait_for_all().blocking_wait()
    })?
}

// ---- checks and the driver ----

fn best(reps: usize, mut run: impl FnMut() -> Duration) -> Duration {
    (0..reps).map(|_| run()).min().expect("at least one repetition")
}

type BoxResult<T> = Result<T, Box<dyn std::error::Error>>;

fn run_size(engine: &Engine, n: usize, b: usize, reps: usize, profile: Option<&str>) -> BoxResult<bool> {
    assert!(b > 0 && n.is_multiple_of(b), "the tile size must divide n");
    let a = spd(n);
    let mut seq_l = aligned::from_slice(&a);
    let seq = best(reps, || {
        seq_l = aligned::from_slice(&a);
        let start = Instant::now();
        sequential(&mut seq_l, n, b).expect("the matrix is positive definite");
        start.elapsed()
    });
    let mut par_l = aligned::from_slice(&a);
    let par = best(reps, || {
        par_l = aligned::from_slice(&a);
        let start = Instant::now();
        parallel(engine, &mut par_l, n, b).expect("the engine's run");
        start.elapsed()
    });
    if let Some(dir) = profile {
        let mut m = aligned::from_slice(&a);
        engine.profiler().start();
        let start = Instant::now();
        parallel(engine, &mut m, n, b)?;
        let profiled = start.elapsed();
        let profile = engine.profiler().stop();
        let taken = start.elapsed() - profiled;
        std::fs::create_dir_all(dir)?;
        let path = |ext: &str| format!("{dir}/cholesky-n{n}-b{b}.{ext}");
        profile.write_chrome_trace(path("json"))?;
        let written = Instant::now();
        std::fs::write(path("svg"), profile.svg())?;
        let trace = std::fs::metadata(path("json"))?.len();
        println!(
            "profile: {} and .svg; the profiled run {:.1} ms (unprofiled best {:.1} ms), taking the profile {:.1} ms, \
             the trace {:.1} MB, the SVG written in {:.1} ms",
            path("json"),
            profiled.as_secs_f64() * 1e3,
            par.as_secs_f64() * 1e3,
            taken.as_secs_f64() * 1e3,
            trace as f64 / 1e6,
            written.elapsed().as_secs_f64() * 1e3
        );
        let gaps = profile.idle_while_ready();
        let idle: u64 = gaps.iter().map(|g| g.end - g.start).sum();
        let long = gaps.iter().filter(|g| g.end - g.start >= 20_000).count();
        println!(
            "ready while a worker idled: {:.1} ms in {} stretches, {long} of 20 µs or more",
            idle as f64 / 1e6,
            gaps.len()
        );
        println!("{}", profile.aggregate_table());
    }
    let flops = (n as f64).powi(3) / 3.0;
    let gflops = |d: Duration| flops / d.as_secs_f64() / 1e9;
    let res = residual(&a, &par_l, n);
    let same = lower_equal(&seq_l, &par_l, n);
    let ops = (n / b) * (n / b + 1) * (n / b + 2) / 6;
    println!(
        "n={n} b={b} ops={ops} seq_ms={:.1} engine_ms={:.1} seq_gflops={:.2} engine_gflops={:.2} speedup={:.2} residual={res:.1e} same_as_seq={same}",
        seq.as_secs_f64() * 1e3,
        par.as_secs_f64() * 1e3,
        gflops(seq),
        gflops(par),
        seq.as_secs_f64() / par.as_secs_f64()
    );
    Ok(res < 1e-12 && same)
}

fn main() -> BoxResult<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let profile = args.iter().position(|a| a == "--profile").map(|i| args[i + 1].clone());
    let nums: Vec<usize> = args.iter().filter_map(|a| a.parse().ok()).collect();
    let n = nums.first().copied().unwrap_or(2048);
    let sizes = nums.get(1).map_or_else(|| vec![32, 64, 128, 256], |b| vec![*b]);
    let reps = std::env::var("REPS").ok().and_then(|r| r.parse().ok()).unwrap_or(3);
    let mut builder = depengine::EngineBuilder::from_env();
    if let Some(w) = std::env::var("WORKERS").ok().and_then(|w| w.parse().ok()) {
        builder = builder.cpu_workers(w);
    }
    let engine = builder.build()?;
    let mut ok = true;
    for b in sizes {
        ok &= run_size(&engine, n, b, reps, profile.as_deref())?;
    }
    if !ok {
        eprintln!("a check failed");
        std::process::exit(1);
    }
    Ok(())
}
