//! A blocked matrix product C = A·B whose tiles are vars.
//!
//! Every tile product `C[i][j] += A[i][k]·B[k][j]` is one op that reads two
//! tiles and writes one: the writes to a C tile take effect in push order
//! (k = 0, 1, ...), while products of different C tiles, and all reads of A
//! and B tiles, run in parallel. Then a future op "saves" each C row (an
//! async block with simulated I/O), an async op with a completion token
//! checksums the result on a thread of its own, and the program compares
//! everything with a sequential run.
//!
//! Run: `cargo run --release --example quickstart [N] [TILE] [--profile DIR]`
//!
//! With `--profile DIR`, the engine's profiler records the run: DIR gets
//! `quickstart.json` (a Chrome trace: open it in Perfetto or
//! chrome://tracing) and `quickstart.svg` (the schedule, one row per
//! worker), and the aggregate table per op name is printed.

use std::time::{Duration, Instant};

use depengine::{Engine, Var};

type Tile = Vec<f32>;

fn tile_value(seed: usize, n: usize) -> Tile {
    (0..n * n).map(|i| ((i * 31 + seed * 17) % 97) as f32 / 97.0 - 0.5).collect()
}

/// c += a·b for t×t tiles.
fn gemm_tile(c: &mut [f32], a: &[f32], b: &[f32], t: usize) {
    for i in 0..t {
        for k in 0..t {
            let aik = a[i * t + k];
            let (brow, crow) = (&b[k * t..(k + 1) * t], &mut c[i * t..(i + 1) * t]);
            for (cj, bj) in crow.iter_mut().zip(brow) {
                *cj += aik * bj;
            }
        }
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let profile = args.iter().position(|a| a == "--profile").map(|at| {
        let dir = args.get(at + 1).cloned().unwrap_or_else(|| ".".into());
        args.drain(at..(at + 2).min(args.len()));
        std::path::PathBuf::from(dir)
    });
    let mut args = args.into_iter();
    let n: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(512);
    let t: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(64);
    assert!(n.is_multiple_of(t), "N must be a multiple of TILE");
    let tiles = n / t;

    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build()?;
    runtime.block_on(run(n, t, tiles, profile))
}

async fn run(
    n: usize,
    t: usize,
    tiles: usize,
    profile: Option<std::path::PathBuf>,
) -> Result<(), Box<dyn std::error::Error>> {
    let engine = Engine::from_env();
    println!("depengine quickstart: C = A·B, {n}×{n} f32 in {tiles}×{tiles} tiles of {t}×{t}");
    println!("engine: {:?}, {} cpu worker(s)", engine.settings().kind, engine.settings().cpu_workers);

    let a_init: Vec<Tile> = (0..tiles * tiles).map(|s| tile_value(s, t)).collect();
    let b_init: Vec<Tile> = (0..tiles * tiles).map(|s| tile_value(s + 1000, t)).collect();

    // Sequential reference, same tile kernel.
    let start = Instant::now();
    let mut reference = vec![vec![0.0f32; t * t]; tiles * tiles];
    for i in 0..tiles {
        for j in 0..tiles {
            for k in 0..tiles {
                gemm_tile(&mut reference[i * tiles + j], &a_init[i * tiles + k], &b_init[k * tiles + j], t);
            }
        }
    }
    let seq = start.elapsed();

    let name = |m: &str, k: usize| format!("{m}[{}][{}]", k / tiles, k % tiles);
    let a: Vec<Var<Tile>> =
        a_init.into_iter().enumerate().map(|(k, x)| engine.var_named(name("A", k), x)).collect();
    let b: Vec<Var<Tile>> =
        b_init.into_iter().enumerate().map(|(k, x)| engine.var_named(name("B", k), x)).collect();
    let c: Vec<Var<Tile>> =
        (0..tiles * tiles).map(|k| engine.var_named(name("C", k), vec![0.0; t * t])).collect();
    if profile.is_some() {
        engine.profiler().start();
    }

    // Push every tile product; reads of A and B run in parallel, writes to
    // one C tile in push (k) order.
    let start = Instant::now();
    for i in 0..tiles {
        for j in 0..tiles {
            for k in 0..tiles {
                engine
                    .op("gemm-tile")
                    .read(&a[i * tiles + k])
                    .read(&b[k * tiles + j])
                    .write(&c[i * tiles + j])
                    .run(move |(a, b), (mut c,)| {
                        gemm_tile(&mut c, &a, &b, t);
                        Ok(())
                    });
            }
        }
    }
    let pushed = start.elapsed();
    engine.wait_for_all().await?;
    let product = start.elapsed();

    // A future op per C row: reads the row's tiles, then "saves" them
    // with simulated async I/O on the Tokio runtime.
    let saves: Vec<_> = (0..tiles)
        .map(|i| {
            engine.op("save-row").read_all(&c[i * tiles..(i + 1) * tiles]).spawn(
                move |(row,), ()| async move {
                    tokio::time::sleep(Duration::from_millis(2)).await;
                    Ok(row.iter().map(|tile| tile.len()).sum::<usize>() * std::mem::size_of::<f32>())
                },
            )
        })
        .collect();

    // An async op with a completion token: checksums C on a thread of its own.
    let checksum = engine.op("checksum").read_all(&c).run_async(|(c,), (), done| {
        std::thread::spawn(move || {
            let sum: f64 = c.iter().flat_map(|tile| tile.iter()).map(|x| f64::from(*x)).sum();
            drop(c);
            done.succeed(sum);
        });
    });

    let mut saved = 0;
    for h in saves {
        saved += h.await?;
    }
    let checksum = checksum.await?;
    engine.wait_for_all().await?;
    let total = start.elapsed();
    let pushed_ops = engine.metrics().pushed;

    // Check against the sequential result.
    let mut max_err = 0.0f32;
    for (var, want) in c.iter().zip(&reference) {
        let got = var.read().await?;
        for (x, y) in got.iter().zip(want) {
            max_err = max_err.max((x - y).abs());
        }
    }
    let ref_sum: f64 = reference.iter().flatten().map(|x| f64::from(*x)).sum();
    let ops = tiles * tiles * tiles;
    println!("pushed {ops} tile products in {pushed:.2?} ({pushed_ops} ops with the saves and the checksum)");
    println!(
        "product: {product:.2?} on the engine, {seq:.2?} sequentially: speed-up {:.2}×",
        seq.as_secs_f64() / product.as_secs_f64()
    );
    println!("saved {tiles} rows ({saved} bytes) and checksummed: {total:.2?} in all");
    println!("checksum {checksum:.4} (sequential {ref_sum:.4})");
    println!("each C tile written {} times (var version of C[0][0] = {})", tiles, c[0].version());
    println!("max |engine - sequential| = {max_err:e}");
    assert!(max_err < 1e-3, "engine result differs from the sequential one");
    assert_eq!(c[0].version(), tiles as u64);
    engine.shutdown(depengine::ShutdownMode::Drain).await?;
    if let Some(dir) = profile {
        let profile = engine.profiler().stop();
        std::fs::create_dir_all(&dir)?;
        profile.write_chrome_trace(dir.join("quickstart.json"))?;
        std::fs::write(dir.join("quickstart.svg"), profile.svg())?;
        println!(
            "profile of {} ops in {}:\n{}",
            profile.ops().len(),
            dir.display(),
            profile.aggregate_table()
        );
    }
    println!("ok");
    Ok(())
}
