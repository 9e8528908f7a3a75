//! What one request at a time costs in CPU, and how long it waits, under
//! each spin budget (how long idle workers watch their queues before they
//! park): the idle cost a service pays at low load.
//!
//! A Tokio task plays a handler: it pushes an op (a read of a var and a
//! few µs of work on a CPU worker), awaits its handle, then sleeps a
//! gap (1 ms by default) before the next request. The same requests with
//! the work done in `spawn_blocking` give a baseline, and done right in the
//! task (on a runtime thread, which a service must not do) the floor. CPU time is the
//! whole process's (all threads, from `/proc/self/task/*/schedstat`, Linux).
//!
//! ```sh
//! cargo run --release --example low_load -- [REQUESTS] [GAP_US] [SPIN_US,...]
//! ```

use std::time::{Duration, Instant};

/// CPU time of every thread of this process so far.
fn process_cpu() -> Option<Duration> {
    let mut total = 0u64;
    for task in std::fs::read_dir("/proc/self/task").ok()? {
        let stat = std::fs::read_to_string(task.ok()?.path().join("schedstat")).ok()?;
        total += stat.split_whitespace().next()?.parse::<u64>().ok()?;
    }
    Some(Duration::from_nanos(total))
}

/// A few µs of arithmetic on `seed`.
fn work(seed: u64) -> u64 {
    let mut x = seed;
    for _ in 0..20_000 {
        x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    }
    x
}

fn report(what: &str, requests: usize, cpu: Duration, mut latencies: Vec<Duration>) {
    latencies.sort_unstable();
    let at = |q: f64| latencies[((latencies.len() - 1) as f64 * q) as usize];
    println!(
        "{what:<24} cpu/request {:>6.1} µs   latency p50 {:>6.1} µs  p99 {:>7.1} µs",
        cpu.as_secs_f64() * 1e6 / requests as f64,
        at(0.5).as_secs_f64() * 1e6,
        at(0.99).as_secs_f64() * 1e6
    );
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let requests: usize = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(2000);
    let gap = Duration::from_micros(args.get(2).and_then(|s| s.parse().ok()).unwrap_or(1000));
    let spins: Vec<u64> = args
        .get(3)
        .map_or_else(|| vec![0, 10, 50, 200], |s| s.split(',').filter_map(|x| x.parse().ok()).collect());
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    println!("{requests} requests one at a time, {gap:?} apart, a few µs of work each");
    runtime.block_on(async {
        // The floor: the sleeps alone, and the work done in the task.
        let before = process_cpu().unwrap_or_default();
        let mut latencies = Vec::with_capacity(requests);
        for i in 0..requests {
            let start = Instant::now();
            std::hint::black_box(work(i as u64));
            latencies.push(start.elapsed());
            tokio::time::sleep(gap).await;
        }
        let cpu = process_cpu().unwrap_or_default().saturating_sub(before);
        report("in the task (floor)", requests, cpu, latencies);
        // The baseline: the work in spawn_blocking, no engine.
        let before = process_cpu().unwrap_or_default();
        let mut latencies = Vec::with_capacity(requests);
        for i in 0..requests {
            let start = Instant::now();
            let x = tokio::task::spawn_blocking(move || work(i as u64)).await.unwrap();
            latencies.push(start.elapsed());
            std::hint::black_box(x);
            tokio::time::sleep(gap).await;
        }
        let cpu = process_cpu().unwrap_or_default().saturating_sub(before);
        report("spawn_blocking", requests, cpu, latencies);
        for &spin in &spins {
            let engine = depengine::EngineBuilder::from_env()
                .spin(Duration::from_micros(spin))
                .cpu_workers(2)
                .build()
                .unwrap();
            let model = engine.var(7u64);
            engine.op("warm").read(&model).run(|(m,), ()| Ok(*m)).await.unwrap();
            let before = process_cpu().unwrap_or_default();
            let mut latencies = Vec::with_capacity(requests);
            for i in 0..requests {
                let start = Instant::now();
                let x = engine
                    .op("request")
                    .read(&model)
                    .run(move |(m,), ()| Ok(work(*m + i as u64)))
                    .await
                    .unwrap();
                latencies.push(start.elapsed());
                std::hint::black_box(x);
                tokio::time::sleep(gap).await;
            }
            let cpu = process_cpu().unwrap_or_default().saturating_sub(before);
            report(&format!("engine, spin {spin} µs"), requests, cpu, latencies);
            engine.shutdown(depengine::ShutdownMode::Drain).await.unwrap();
        }
    });
}
