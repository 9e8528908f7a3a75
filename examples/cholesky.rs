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

use depengine::aligned::{self, AlignedVec};
use depengine::{Engine, Error};

// ---- the tile kernels: rows of tiles as slices, read and written ----

/// Σ x·y, in eight lanes (so that it vectorises without reassociating a
/// single sum).
fn dot(x: &[f64], y: &[f64]) -> f64 {
    let mut lanes = [0.0f64; 8];
    let (xc, yc) = (x.chunks_exact(8), y.chunks_exact(8));
    let (xr, yr) = (xc.remainder(), yc.remainder());
    for (a, b) in xc.zip(yc) {
        for l in 0..8 {
            lanes[l] += a[l] * b[l];
        }
    }
    let tail: f64 = xr.iter().zip(yr).map(|(a, b)| a * b).sum();
    lanes.iter().sum::<f64>() + tail
}

/// `a = L·Lᵀ` in place, lower part (the upper part is left as it was).
fn potrf(a: &mut [&mut [f64]]) -> Result<(), String> {
    for i in 0..a.len() {
        let (above, rest) = a.split_at_mut(i);
        let row = &mut *rest[0];
        for (j, lj) in above.iter().enumerate() {
            row[j] = (row[j] - dot(&row[..j], &lj[..j])) / lj[j];
        }
        let d = row[i] - dot(&row[..i], &row[..i]);
        if d <= 0.0 {
            return Err(format!("not positive definite at row {i} of a diagonal tile"));
        }
        row[i] = d.sqrt();
    }
    Ok(())
}

/// `x = x · L⁻ᵀ` (L lower, from `potrf`).
fn trsm(l: &[&[f64]], x: &mut [&mut [f64]]) {
    for row in x.iter_mut() {
        for (j, lj) in l.iter().enumerate() {
            row[j] = (row[j] - dot(&row[..j], &lj[..j])) / lj[j];
        }
    }
}

/// `c = c − a·aᵀ`, lower part.
fn syrk(a: &[&[f64]], c: &mut [&mut [f64]]) {
    for (r, row) in c.iter_mut().enumerate() {
        for col in 0..=r {
            row[col] -= dot(a[r], a[col]);
        }
    }
}

/// `c = c − a·bᵀ`.
fn gemm(a: &[&[f64]], b: &[&[f64]], c: &mut [&mut [f64]]) {
    for (r, row) in c.iter_mut().enumerate() {
        for (col, x) in row.iter_mut().enumerate() {
            *x -= dot(a[r], b[col]);
        }
    }
}

/// A tile's rows, shared.
fn rows(t: &depengine::scope::Tile<f64>) -> Vec<&[f64]> {
    t.rows_iter().collect()
}

// ---- the matrix ----

/// A symmetric, diagonally dominant (so positive definite) matrix.
fn spd(n: usize) -> AlignedVec<f64> {
    let mut a = aligned::filled(n * n, 0.0);
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    for i in 0..n {
        for j in 0..i {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let x = (state >> 11) as f64 / (1u64 << 53) as f64;
            a[i * n + j] = x;
            a[j * n + i] = x;
        }
        a[i * n + i] = n as f64;
    }
    a
}

/// Tile (i, j)'s rows, moved out of the grid of tile rows while a kernel
/// has them.
fn take<'m>(pieces: &mut [Vec<&'m mut [f64]>], (i, j): (usize, usize), b: usize) -> Vec<&'m mut [f64]> {
    (0..b).map(|r| std::mem::take(&mut pieces[i * b + r][j])).collect()
}

fn put<'m>(pieces: &mut [Vec<&'m mut [f64]>], (i, j): (usize, usize), b: usize, rows: Vec<&'m mut [f64]>) {
    for (r, row) in rows.into_iter().enumerate() {
        pieces[i * b + r][j] = row;
    }
}

fn shared<'a>(rows: &'a [&mut [f64]]) -> Vec<&'a [f64]> {
    rows.iter().map(|r| &**r).collect()
}

/// The sequential run: the same kernels in the same order, on the
/// matrix's rows cut into tile rows (disjoint slices of the one matrix, so
/// the same layout as the engine's tiles).
fn sequential(m: &mut [f64], n: usize, b: usize) -> Result<(), String> {
    let nt = n / b;
    let mut pieces: Vec<Vec<&mut [f64]>> = m.chunks_mut(n).map(|row| row.chunks_mut(b).collect()).collect();
    for k in 0..nt {
        let mut kk = take(&mut pieces, (k, k), b);
        potrf(&mut kk)?;
        for i in k + 1..nt {
            let mut x = take(&mut pieces, (i, k), b);
            trsm(&shared(&kk), &mut x);
            put(&mut pieces, (i, k), b, x);
        }
        put(&mut pieces, (k, k), b, kk);
        for i in k + 1..nt {
            let a = take(&mut pieces, (i, k), b);
            let mut ii = take(&mut pieces, (i, i), b);
            syrk(&shared(&a), &mut ii);
            put(&mut pieces, (i, i), b, ii);
            for j in k + 1..i {
                let bt = take(&mut pieces, (j, k), b);
                let mut ij = take(&mut pieces, (i, j), b);
                gemm(&shared(&a), &shared(&bt), &mut ij);
                put(&mut pieces, (i, j), b, ij);
                put(&mut pieces, (j, k), b, bt);
            }
            put(&mut pieces, (i, k), b, a);
        }
    }
    Ok(())
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

/// ‖A − L·Lᵀ‖/‖A‖ over the lower triangle (L in the lower triangle of `l`).
fn residual(a: &[f64], l: &[f64], n: usize) -> f64 {
    let (mut err, mut norm) = (0.0f64, 0.0f64);
    for i in 0..n {
        for j in 0..=i {
            let llt = dot(&l[i * n..i * n + j + 1], &l[j * n..j * n + j + 1]);
            let d = a[i * n + j] - llt;
            err += d * d;
            norm += a[i * n + j] * a[i * n + j];
        }
    }
    (err / norm).sqrt()
}

fn lower_equal(x: &[f64], y: &[f64], n: usize) -> bool {
    (0..n).all(|i| {
        x[i * n..i * n + i + 1].iter().zip(&y[i * n..i * n + i + 1]).all(|(p, q)| p.to_bits() == q.to_bits())
    })
}

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
    let mut builder = Engine::builder();
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
