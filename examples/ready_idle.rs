//! How long ops wait, ready, while every worker is idle: the time a ready
//! op should never spend waiting for a sleeping worker longer than a
//! wake-up takes.
//!
//! ```text
//! cargo run --release --example ready_idle -- [TILES] [SPIN] [RUNS]
//! ```
//!
//! Each run pushes the task graph of a tiled Cholesky factorisation of
//! `TILES` × `TILES` tiles (default 16: the graph of n = 512 at b = 32,
//! 816 tasks) whose bodies hash for `SPIN` rounds (default 500, about
//! 2 µs), with the profiler on, from one thread, then waits for all. From
//! the profile it adds up the time during which some op was ready (from
//! its last dependency released to its start) while no worker ran an op,
//! and counts the gaps of that kind longer than 20 µs. One line per run:
//!
//! ```text
//! run=0 tasks=816 secs=0.004 ready_idle_us=12.3 gaps_over_20us=0 longest_gap_us=8.1
//! ```

use std::time::Instant;

use depengine::{Engine, Var};

fn mix(a: u64, b: u64) -> u64 {
    let mut z = a ^ b.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A tile's body: hashes its inputs into the tile, `spin` rounds.
fn work(out: &mut u64, inputs: &[u64], spin: u32) {
    let mut x = *out;
    for v in inputs {
        x = mix(x, *v);
    }
    for k in 0..spin {
        x = mix(x, u64::from(k));
    }
    *out = x;
}

/// Pushes the tiled Cholesky graph (right-looking, StarPU's example
/// order): per step k, the diagonal tile, the column below it, then the
/// trailing update.
fn push_cholesky(engine: &Engine, tiles: &[Vec<Var<u64>>], spin: u32) -> usize {
    let n = tiles.len();
    let mut pushed = 0;
    for k in 0..n {
        let diag = &tiles[k][k];
        engine
            .op("potrf")
            .write(diag)
            .run_detached(move |(), (mut d,)| {
                work(&mut d, &[], spin);
                Ok(())
            })
            .expect("push");
        pushed += 1;
        for row in tiles.iter().skip(k + 1) {
            engine
                .op("trsm")
                .read(diag)
                .write(&row[k])
                .run_detached(move |(d,), (mut t,)| {
                    work(&mut t, &[*d], spin);
                    Ok(())
                })
                .expect("push");
            pushed += 1;
        }
        for i in k + 1..n {
            let a = &tiles[i][k];
            engine
                .op("syrk")
                .read(a)
                .write(&tiles[i][i])
                .run_detached(move |(a,), (mut t,)| {
                    work(&mut t, &[*a], spin);
                    Ok(())
                })
                .expect("push");
            pushed += 1;
            for (j, row) in tiles.iter().enumerate().take(i).skip(k + 1) {
                let b = &row[k];
                engine
                    .op("gemm")
                    .read(a)
                    .read(b)
                    .write(&tiles[i][j])
                    .run_detached(move |(a, b), (mut t,)| {
                        work(&mut t, &[*a, *b], spin);
                        Ok(())
                    })
                    .expect("push");
                pushed += 1;
            }
        }
    }
    pushed
}

/// Time (ns) during which some op was ready while no worker ran one, and
/// the gaps of that kind, from a profile.
fn ready_while_idle(profile: &depengine::profile::Profile, workers: &str) -> (u64, Vec<u64>) {
    // +1/−1 events: busy workers, ready ops.
    let mut events: Vec<(u64, i32, i32)> = Vec::new();
    for op in profile.ops() {
        if let (Some(start), Some(end)) = (op.start, op.end) {
            if op.thread.as_deref().is_some_and(|t| t.starts_with(workers)) {
                events.push((start, 1, 0));
                events.push((end, -1, 0));
            }
            if let Some(ready) = op.ready.filter(|r| *r < start) {
                events.push((ready, 0, 1));
                events.push((start, 0, -1));
            }
        }
    }
    events.sort_unstable();
    let (mut busy, mut ready, mut total) = (0i32, 0i32, 0u64);
    let mut gaps = Vec::new();
    let mut since: Option<u64> = None;
    for (t, db, dr) in events {
        let idle_ready = busy == 0 && ready > 0;
        busy += db;
        ready += dr;
        let now_idle_ready = busy == 0 && ready > 0;
        match (idle_ready, now_idle_ready, since) {
            (false, true, _) => since = Some(t),
            (true, false, Some(s)) => {
                total += t - s;
                gaps.push(t - s);
                since = None;
            }
            _ => {}
        }
    }
    (total, gaps)
}

fn main() {
    let mut args = std::env::args().skip(1);
    let mut arg = |default: u64| args.next().and_then(|a| a.parse().ok()).unwrap_or(default);
    let (tiles, spin, runs) = (arg(16) as usize, arg(500) as u32, arg(10));
    let engine = depengine::EngineBuilder::from_env().thread_name("ri").build().expect("engine");
    let grid: Vec<Vec<Var<u64>>> =
        (0..tiles).map(|i| (0..tiles).map(|j| engine.var((i * tiles + j) as u64)).collect()).collect();
    for run in 0..runs {
        engine.profiler().start();
        let start = Instant::now();
        let tasks = push_cholesky(&engine, &grid, spin);
        engine.wait_for_all().blocking_wait().expect("the graph runs");
        let secs = start.elapsed().as_secs_f64();
        let profile = engine.profiler().stop();
        let (total, gaps) = ready_while_idle(&profile, "ri-cpu");
        let long = gaps.iter().filter(|g| **g > 20_000).count();
        let longest = gaps.iter().max().copied().unwrap_or(0);
        println!(
            "run={run} tasks={tasks} secs={secs:.4} ready_idle_us={:.1} gaps_over_20us={long} longest_gap_us={:.1}",
            total as f64 / 1e3,
            longest as f64 / 1e3
        );
    }
}
