//! What a push costs the pushing thread alone, without the cross-core
//! traffic of a running engine: the steadiest per-op figure this machine
//! gives (the workloads' figures move with the other cores' load).
//!
//! ```sh
//! cargo run --release --example push_cost             # both kinds, 10 rounds
//! cargo run --release --example push_cost -- novars 20
//! ```
//!
//! Each round pushes 100,000 detached ops while nothing can run them: ops
//! without vars while the engine's one worker is held by an op that waits
//! for the round to end (they queue on the pusher's feed), then one-var
//! writes behind a held write guard (they queue on the var). The round then
//! lets them run and waits for all. The summary line gives the median over
//! the rounds of the time per push.
//!
//! With `batched` (or `batched1`, one-var writes) it instead pushes rounds of
//! 1,000 ops and waits for them, so that pushes reuse the records of ops
//! that ran, as in a steady stream: a loop for counting instructions per
//! push under `valgrind --tool=callgrind`, not a timing.
//!
//! With `wide` it times rounds of 8 pushes of an op writing 10,000 vars and
//! a wait for them (run it with `DEPENGINE_BULK_SIZE=16` to see what bulk
//! execution's merging of var lists costs).
//!
//! With `idle N` it first starts N threads that each push one op and then
//! stay alive, idle, and then times rounds of 100,000 ops without vars
//! pushed and waited for, and shows the process's resident memory before
//! and after the threads came: what threads that pushed once cost later.

use std::time::Instant;

use depengine::{Engine, Var};

const N: u64 = 100_000;

fn main() -> Result<(), depengine::Error> {
    let mut args = std::env::args().skip(1);
    let mode = args.next().unwrap_or_else(|| "all".into());
    let rounds: usize = args.next().and_then(|r| r.parse().ok()).unwrap_or(10).max(1);
    // The pushing thread never runs its ops here, however many queue up:
    // what is measured is the push.
    let engine = depengine::EngineBuilder::from_env().cpu_workers(1).pusher_runs_at(0).build()?;
    let v = engine.var(0u64);
    match mode.as_str() {
        "batched" | "batched1" => {
            for _ in 0..rounds * 20 {
                for i in 0..1000 {
                    push(&engine, &v, mode == "batched1", i)?;
                }
                engine.wait_for_all().blocking_wait()?;
            }
            return Ok(());
        }
        "wide" => return wide(&engine, rounds),
        "idle" => return idle(&engine, rounds),
        "all" | "novars" | "onevar" => {}
        other => {
            eprintln!("unknown mode `{other}`: all, novars, onevar, batched, batched1, wide, idle");
            std::process::exit(2);
        }
    }
    let mut novars = Vec::new();
    let mut onevar = Vec::new();
    for _ in 0..rounds {
        if mode != "onevar" {
            // The one worker waits in this op until the round's ops are pushed.
            let (release, held) = std::sync::mpsc::channel::<()>();
            engine.op("hold the worker").run_detached(move |(), ()| {
                let _ = held.recv();
                Ok(())
            })?;
            let start = Instant::now();
            for i in 0..N {
                push(&engine, &v, false, i)?;
            }
            novars.push(start.elapsed().as_nanos() as f64 / N as f64);
            let _ = release.send(());
            engine.wait_for_all().blocking_wait()?;
        }
        if mode != "novars" {
            let held = futures::executor::block_on(v.write())?;
            let start = Instant::now();
            for i in 0..N {
                push(&engine, &v, true, i)?;
            }
            onevar.push(start.elapsed().as_nanos() as f64 / N as f64);
            drop(held);
            engine.wait_for_all().blocking_wait()?;
        }
    }
    let median = |xs: &mut Vec<f64>| {
        xs.sort_by(f64::total_cmp);
        xs.get(xs.len() / 2).copied().unwrap_or(f64::NAN)
    };
    println!(
        "summary workload=push_cost rounds={rounds} novars_ns_per_push={:.1} onevar_ns_per_push={:.1}",
        median(&mut novars),
        median(&mut onevar)
    );
    Ok(())
}

/// A detached op: without vars, or writing `v`.
fn push(engine: &Engine, v: &Var<u64>, write: bool, i: u64) -> Result<(), depengine::Error> {
    if write {
        engine.op("write").write(v).run_detached(move |(), (mut w,)| {
            *w ^= i;
            Ok(())
        })
    } else {
        engine.op("noop").run_detached(|(), ()| Ok(()))
    }
}

/// Rounds of 8 pushes of a 10,000-var write and a wait: the median time
/// per round.
fn wide(engine: &Engine, rounds: usize) -> Result<(), depengine::Error> {
    let vars: Vec<Var<u64>> = (0..10_000).map(|i| engine.var(i)).collect();
    let mut times = Vec::new();
    for _ in 0..rounds {
        let start = Instant::now();
        for _ in 0..8 {
            engine.op("wide").write_all(&vars).run_detached(|(), (mut all,)| {
                all.iter_mut().for_each(|v| **v += 1);
                Ok(())
            })?;
        }
        engine.wait_for_all().blocking_wait()?;
        times.push(start.elapsed());
    }
    times.sort();
    println!(
        "wide: bulk={} median {:.2} ms per 8 pushes of 10,000 vars",
        engine.settings().bulk_size,
        times[times.len() / 2].as_secs_f64() * 1e3
    );
    Ok(())
}

/// The process's resident memory, in MiB (Linux; 0 elsewhere).
fn resident_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let kib = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok());
    kib.unwrap_or(0.0) / 1024.0
}

/// `idle N`: N threads push one op each and stay alive; then rounds of
/// 100,000 ops without vars (the second argument is N).
fn idle(engine: &Engine, threads: usize) -> Result<(), depengine::Error> {
    let before = resident_mib();
    let (stay, stop) = std::sync::mpsc::channel::<()>();
    let stop = std::sync::Arc::new(std::sync::Mutex::new(stop));
    let mut alive = Vec::new();
    for _ in 0..threads {
        let (engine, stop) = (engine.clone(), stop.clone());
        let (pushed, done) = std::sync::mpsc::channel::<()>();
        alive.push(
            std::thread::Builder::new()
                .stack_size(64 << 10)
                .spawn(move || {
                    engine.op("once").run(|(), ()| Ok(())).blocking_wait().unwrap();
                    pushed.send(()).unwrap();
                    let _ = stop.lock().unwrap().recv();
                })
                .expect("thread"),
        );
        done.recv().unwrap();
    }
    // Idle feeds are retired after 50 to 100 ms.
    std::thread::sleep(std::time::Duration::from_millis(300));
    let after = resident_mib();
    let mut times = Vec::new();
    for _ in 0..10 {
        let start = Instant::now();
        for _ in 0..N {
            engine.op("noop").run_detached(|(), ()| Ok(()))?;
        }
        engine.wait_for_all().blocking_wait()?;
        times.push(start.elapsed().as_nanos() as f64 / N as f64);
    }
    times.sort_by(f64::total_cmp);
    println!(
        "idle: threads={threads} resident_before={before:.1}MiB resident_after={after:.1}MiB median_ns_per_op={:.1}",
        times[times.len() / 2]
    );
    drop(stay);
    Ok(())
}
