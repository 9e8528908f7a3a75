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

use std::time::Instant;

use depengine::{Engine, Var};

const N: u64 = 100_000;

fn main() -> Result<(), depengine::Error> {
    let mut args = std::env::args().skip(1);
    let mode = args.next().unwrap_or_else(|| "all".into());
    let rounds: usize = args.next().and_then(|r| r.parse().ok()).unwrap_or(10).max(1);
    let engine = Engine::builder().cpu_workers(1).build()?;
    let v = engine.var(0u64);
    match mode.as_str() {
        "batched" | "batched1" => {
            for _ in 0..rounds * 20 {
                for i in 0..1000 {
                    push(&engine, &v, mode == "batched1", i)?;
                }
                engine.blocking_wait_for_all()?;
            }
            return Ok(());
        }
        "wide" => return wide(&engine, rounds),
        "all" | "novars" | "onevar" => {}
        other => {
            eprintln!("unknown mode `{other}`: all, novars, onevar, batched, batched1, wide");
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
            engine.blocking_wait_for_all()?;
        }
        if mode != "novars" {
            let held = futures::executor::block_on(v.write())?;
            let start = Instant::now();
            for i in 0..N {
                push(&engine, &v, true, i)?;
            }
            onevar.push(start.elapsed().as_nanos() as f64 / N as f64);
            drop(held);
            engine.blocking_wait_for_all()?;
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
        engine.blocking_wait_for_all()?;
        times.push(start.elapsed());
    }
    times.sort();
    println!(
        "wide: bulk={} median {:.2} ms per 8 pushes of 10,000 vars",
        engine.bulk_size(),
        times[times.len() / 2].as_secs_f64() * 1e3
    );
    Ok(())
}
