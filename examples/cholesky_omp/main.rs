//! The tiled Cholesky of `examples/cholesky.rs` beside OpenMP tasks, every
//! runtime calling the same compiled C tile kernels (`kernels.c`): the
//! sequential tiled run, the engine's (one op per kernel call, over scoped
//! tile views), and OpenMP's (`omp.c`: one task per call, `depend` on the
//! tiles, created in the sequential order). Runs them in turn, round by
//! round, so that each speed-up is measured beside the others.
//!
//! ```sh
//! cargo run --release -p depengine-cholesky-omp -- 2048 32 5   # n, tile, rounds
//! ```
//!
//! Each round prints each run's time and speed-up over the sequential
//! run; the last line, the medians and the engine's speed-up over
//! OpenMP's per round. Every factor is checked bit for bit against the
//! sequential one (the same kernels in the same order per tile) and by its
//! residual; exits non-zero if a check fails. Without OpenMP in the C
//! compiler, the OpenMP runs are left out (and it says so).
//!
//! Why `unsafe`: the calls into the C kernels (`c.rs`).

use std::time::{Duration, Instant};

use depengine::aligned;
use depengine::{Engine, Error};

mod c;
#[path = "../tiled/kernels.rs"]
mod kernels;

use kernels::{Kernels, lower_equal, residual, sequential_with, spd};

/// The C kernels, for `kernels::sequential_with`.
const C_KERNELS: Kernels = Kernels {
    potrf: |a| c::potrf(a.iter_mut().map(|r| &mut **r)),
    trsm: |l, x| c::trsm(l.iter().copied(), x.iter_mut().map(|r| &mut **r)),
    syrk: |a, cc| c::syrk(a.iter().copied(), cc.iter_mut().map(|r| &mut **r)),
    gemm: |a, bt, cc| c::gemm(a.iter().copied(), bt.iter().copied(), cc.iter_mut().map(|r| &mut **r)),
};

/// The engine's run, as `examples/cholesky.rs` pushes it (no priorities:
/// at small tiles they cost more than they gain there), with the C kernels.
fn parallel(engine: &Engine, m: &mut [f64], n: usize, b: usize) -> Result<(), Error> {
    let nt = n / b;
    depengine::scope(engine, |s| -> Result<(), Error> {
        let t = s.tiles(m, n, b, b)?;
        for k in 0..nt {
            let op = engine.op("potrf").write(&t[k][k]);
            op.run_detached(|(), (mut a,)| Ok(c::potrf(a.rows_mut())?))?;
            for i in k + 1..nt {
                let op = engine.op("trsm").read(&t[k][k]).write(&t[i][k]);
                op.run_detached(move |(l,), (mut x,)| {
                    c::trsm(l.rows(), x.rows_mut());
                    Ok(())
                })?;
            }
            for i in k + 1..nt {
                let op = engine.op("syrk").read(&t[i][k]).write(&t[i][i]);
                op.run_detached(move |(a,), (mut c,)| {
                    c::syrk(a.rows(), c.rows_mut());
                    Ok(())
                })?;
                for j in k + 1..i {
                    let op = engine.op("gemm").read(&t[i][k]).read(&t[j][k]).write(&t[i][j]);
                    op.run_detached(move |(a, bt), (mut c,)| {
                        c::gemm(a.rows(), bt.rows(), c.rows_mut());
                        Ok(())
                    })?;
                }
            }
        }
        engine.wait_for_all().blocking_wait()
    })?
}

type BoxResult<T> = Result<T, Box<dyn std::error::Error>>;

/// One run of `f` on a fresh copy of `a`: its time and its factor.
fn timed(a: &[f64], f: impl FnOnce(&mut [f64]) -> Result<(), String>) -> BoxResult<(Duration, Vec<f64>)> {
    let mut m = aligned::from_slice(a);
    let start = Instant::now();
    f(&mut m)?;
    Ok((start.elapsed(), m.to_vec()))
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    let m = xs.len() / 2;
    if xs.len() % 2 == 1 { xs[m] } else { (xs[m - 1] + xs[m]) / 2.0 }
}

fn main() -> BoxResult<()> {
    let nums: Vec<usize> = std::env::args().skip(1).filter_map(|a| a.parse().ok()).collect();
    let (n, b, rounds) = (
        nums.first().copied().unwrap_or(2048),
        nums.get(1).copied().unwrap_or(32),
        nums.get(2).copied().unwrap_or(5),
    );
    if b == 0 || !n.is_multiple_of(b) || rounds == 0 {
        return Err(
            format!("the tile size ({b}) must divide n ({n}), and rounds ({rounds}) be at least 1").into()
        );
    }
    if b > c::MAX_B {
        return Err(format!("tiles of {b}: the C kernels take tiles of at most {} rows", c::MAX_B).into());
    }
    let engine = depengine::EngineBuilder::from_env().build()?;
    let threads = std::thread::available_parallelism().map_or(1, usize::from);
    let a = spd(n);
    let (mut engine_up, mut omp_up, mut ratio) = (Vec::new(), Vec::new(), Vec::new());
    let mut ok = true;
    if !c::HAS_OMP {
        println!("OpenMP: not built (the C compiler takes no -fopenmp); the engine's runs alone");
    }
    for round in 0..rounds {
        let (seq, want) = timed(&a, |m| sequential_with(&C_KERNELS, m, n, b))?;
        // OpenMP first in every other round, so that neither runs always
        // on a machine the other just warmed.
        let omp_first =
            (c::HAS_OMP && round % 2 == 1).then(|| timed(&a, |m| c::omp_cholesky(m, n, b, threads)));
        let (par, got) = timed(&a, |m| parallel(&engine, m, n, b).map_err(|e| e.to_string()))?;
        ok &= lower_equal(&want, &got, n) && residual(&a, &got, n) < 1e-12;
        let up = seq.as_secs_f64() / par.as_secs_f64();
        engine_up.push(up);
        let mut line = format!(
            "round={round} n={n} b={b} seq_ms={:.1} engine_ms={:.1} engine_speedup={up:.2}",
            seq.as_secs_f64() * 1e3,
            par.as_secs_f64() * 1e3
        );
        if c::HAS_OMP {
            let (omp, got) = match omp_first {
                Some(run) => run?,
                None => timed(&a, |m| c::omp_cholesky(m, n, b, threads))?,
            };
            ok &= lower_equal(&want, &got, n);
            let o = seq.as_secs_f64() / omp.as_secs_f64();
            omp_up.push(o);
            ratio.push(up / o);
            line += &format!(
                " omp_ms={:.1} omp_speedup={o:.2} engine_over_omp={:.2}",
                omp.as_secs_f64() * 1e3,
                up / o
            );
        }
        println!("{line} checks_ok={ok}");
    }
    let mut summary =
        format!("summary n={n} b={b} rounds={rounds} engine_speedup_median={:.2}", median(engine_up));
    if c::HAS_OMP {
        summary += &format!(
            " omp_speedup_median={:.2} engine_over_omp_median={:.2} omp_threads={threads}",
            median(omp_up),
            median(ratio.clone())
        );
    }
    println!("{summary}");
    if !ok {
        eprintln!("a check failed");
        std::process::exit(1);
    }
    Ok(())
}
