//! The tiled Cholesky of `cholesky.rs` across MPI ranks: the tiles of the
//! lower triangle spread 2D block-cyclically over a grid of ranks, every
//! rank submitting the same program (`depengine::mpi::distributed`), each kernel
//! running on the rank that owns the tile it writes, and the tiles it
//! reads sent there by the engine. The same kernels as `cholesky.rs`.
//!
//! ```sh
//! cargo build --release --features mpi --example cholesky_mpi
//! mpirun -np 4 target/release/examples/cholesky_mpi            # n = 512, tiles of 64
//! mpirun -np 4 target/release/examples/cholesky_mpi 1024 128 --profile DIR   # a trace per rank
//! ```
//!
//! Every rank prints the ops it ran, the transfers and bytes it sent and
//! received, the share of its transfers' time during which a kernel ran
//! (from the engine's profile of the run), and its time. Rank 0 gathers the factor (through the engine:
//! one more op per tile, on rank 0) and exits non-zero unless it equals
//! the sequential run's bit for bit and ‖A − L·Lᵀ‖/‖A‖ is small.

#[path = "shared/overlap.rs"]
mod overlap;

use std::time::Instant;

use depengine::Engine;
use depengine::mpi::Collectives;
use depengine::mpi::distributed::{DistVar, Distribution, block_cyclic, grid};

#[path = "tiled/kernels.rs"]
mod kernels;

use kernels::{gemm, lower_equal, potrf, residual, sequential, spd, syrk, trsm};

type BoxResult<T> = Result<T, Box<dyn std::error::Error>>;

/// A packed tile's rows.
fn rows(t: &[f64], b: usize) -> Vec<&[f64]> {
    t.chunks(b).collect()
}

fn rows_mut(t: &mut [f64], b: usize) -> Vec<&mut [f64]> {
    t.chunks_mut(b).collect()
}

/// Tile (i, j) of the row-major `a` (n × n), packed row by row.
fn tile_of(a: &[f64], n: usize, b: usize, (i, j): (usize, usize)) -> Vec<f64> {
    (0..b).flat_map(|r| a[(i * b + r) * n + j * b..(i * b + r) * n + (j + 1) * b].iter().copied()).collect()
}

/// The program: the sequential run's kernel calls, in its order, as ops on
/// the tiles of the lower triangle (`t[i][j]`, j ≤ i).
fn factor(dist: &Distribution<'_>, t: &[Vec<DistVar<f64>>], b: usize) -> depengine::Result<()> {
    let nt = t.len();
    // The diagonal and panel ops first where they pay, as in `cholesky.rs`
    // (PRIO=1 or PRIO=0 forces either).
    let on = match std::env::var("PRIO").as_deref() {
        Ok("1") => true,
        Ok("0") => false,
        _ => b >= 128,
    };
    let prio = |p: i32| if on { p } else { 0 };
    for k in 0..nt {
        dist.op("potrf")
            .write(&t[k][k])
            .priority(prio(2))
            .run(move |(), (mut w,)| Ok(potrf(&mut rows_mut(&mut w, b))?))?;
        for i in k + 1..nt {
            dist.op("trsm").read(&t[k][k]).write(&t[i][k]).priority(prio(1)).run(move |(r,), (mut w,)| {
                trsm(&rows(&r, b), &mut rows_mut(&mut w, b));
                Ok(())
            })?;
        }
        for i in k + 1..nt {
            dist.op("syrk").read(&t[i][k]).write(&t[i][i]).run(move |(r,), (mut w,)| {
                syrk(&rows(&r, b), &mut rows_mut(&mut w, b));
                Ok(())
            })?;
            for j in k + 1..i {
                dist.op("gemm").read(&t[i][k]).read(&t[j][k]).write(&t[i][j]).run(
                    move |(r0, r1), (mut w,)| {
                        gemm(&rows(&r0, b), &rows(&r1, b), &mut rows_mut(&mut w, b));
                        Ok(())
                    },
                )?;
            }
        }
    }
    Ok(())
}

const KERNELS: [&str; 4] = ["potrf", "trsm", "syrk", "gemm"];

/// The share of the communication's time during which a compute op ran.
fn overlap(profile: &depengine::profile::Profile) -> f64 {
    overlap::overlapped(
        profile,
        |name| name.starts_with("send ") || name.starts_with("receive "),
        |name| KERNELS.contains(&name),
    )
}

fn main() -> BoxResult<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let profile = args.iter().position(|a| a == "--profile").map(|i| args[i + 1].clone());
    let nums: Vec<usize> = args.iter().filter_map(|a| a.parse().ok()).collect();
    let (n, b) = (nums.first().copied().unwrap_or(512), nums.get(1).copied().unwrap_or(64));
    if b == 0 || !n.is_multiple_of(b) {
        return Err(format!("the tile size {b} must divide n = {n}").into());
    }
    let nt = n / b;
    let engine = Engine::from_env();
    let world = Collectives::new(&engine)?;
    let (rank, size) = (world.rank(), world.size());
    let (p, q) = grid(size);
    let dist = Distribution::new(&world)?;
    let a = spd(n);
    let t: Vec<Vec<DistVar<f64>>> = (0..nt)
        .map(|i| {
            (0..=i)
                .map(|j| {
                    dist.var(&format!("A[{i}][{j}]"), block_cyclic(i, j, p, q), b * b, || {
                        tile_of(&a, n, b, (i, j))
                    })
                })
                .collect::<Result<_, _>>()
        })
        .collect::<Result<_, _>>()?;
    // The profiler records the run, for the share of the transfers'
    // time during which a kernel ran (and, with --profile, the trace).
    engine.profiler().start();
    world.barrier().blocking_wait()?;
    let start = Instant::now();
    factor(&dist, &t, b)?;
    dist.wait().blocking_wait()?;
    let took = start.elapsed();
    let recorded = engine.profiler().stop();
    if let Some(dir) = &profile {
        std::fs::create_dir_all(dir)?;
        let path = format!("{dir}/cholesky_mpi-n{n}-b{b}.rank{rank}.json");
        recorded.write_chrome_trace(&path)?;
        println!("rank {rank}: profile {path}");
    }
    let s = dist.stats();
    println!(
        "rank {rank} of {size} (grid {p}x{q}): n={n} b={b} ops_run={} sent={} ({} B) received={} ({} B) \
         transfers_overlapped={:.0}% ms={:.1}",
        s.ops_run,
        s.sent,
        s.bytes_sent,
        s.received,
        s.bytes_received,
        overlap(&recorded) * 100.0,
        took.as_secs_f64() * 1e3
    );
    // The factor, gathered on rank 0 through the engine.
    let gathered: Vec<Vec<DistVar<f64>>> = (0..nt)
        .map(|i| {
            (0..=i)
                .map(|j| dist.var(&format!("L[{i}][{j}]"), 0, b * b, || vec![0.0; b * b]))
                .collect::<Result<_, _>>()
        })
        .collect::<Result<_, _>>()?;
    for i in 0..nt {
        for j in 0..=i {
            dist.op("gather").read(&t[i][j]).write(&gathered[i][j]).run(|(r,), (mut w,)| {
                w.copy_from_slice(&r);
                Ok(())
            })?;
        }
    }
    dist.wait().blocking_wait()?;
    if rank != 0 {
        return Ok(());
    }
    let mut l = vec![0.0f64; n * n];
    for (i, row) in gathered.iter().enumerate() {
        for (j, tile) in row.iter().enumerate() {
            let data = tile.read().blocking_wait()?;
            for r in 0..b {
                l[(i * b + r) * n + j * b..(i * b + r) * n + (j + 1) * b]
                    .copy_from_slice(&data[r * b..(r + 1) * b]);
            }
        }
    }
    let mut seq = a.to_vec();
    sequential(&mut seq, n, b)?;
    let res = residual(&a, &l, n);
    let same = lower_equal(&seq, &l, n);
    println!("ranks={size} n={n} b={b} residual={res:.1e} same_as_seq={same}");
    if !(res < 1e-12 && same) {
        eprintln!("a check failed");
        std::process::exit(1);
    }
    Ok(())
}
