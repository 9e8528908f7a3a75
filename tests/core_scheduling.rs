//! The workers' fast paths keep the engine's guarantees: an op made ready
//! inside a running body never waits for that body to return.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, mpsc};
use std::time::Duration;

/// A body signals an async op's completion, which makes a successor ready
/// on the same pool, then blocks until that successor has run. The
/// successor must go to another worker, not wait in this worker's next slot.
#[test]
fn successor_made_ready_inside_a_body_runs_elsewhere() {
    // Bulk execution off: ops that wait on each other must not share a segment.
    let engine = depengine::EngineBuilder::from_env().cpu_workers(2).bulk_size(1).build().unwrap();
    let v = engine.var(0u32);
    let (token_tx, token_rx) = mpsc::channel();
    let first = engine.op("async").write(&v).run_async(move |(), (mut v,), done| {
        *v = 1;
        token_tx.send(done).unwrap();
    });
    let second = engine.op("successor").write(&v).run(|(), (mut v,)| {
        *v += 1;
        Ok(*v)
    });
    let (result_tx, result_rx) = mpsc::channel();
    let signaller = engine.op("signaller").run(move |(), ()| {
        let done = token_rx.recv().unwrap();
        done.succeed(());
        // Blocks this worker until the successor has run.
        result_tx.send(second.blocking_wait()).unwrap();
        Ok(())
    });
    let got = result_rx.recv_timeout(Duration::from_secs(10)).expect("the successor never ran: deadlock");
    assert_eq!(got.unwrap(), 2);
    signaller.blocking_wait().unwrap();
    first.blocking_wait().unwrap();
}

/// A long chain on one var runs from the worker's next slot; an op queued
/// meanwhile still gets its turn long before the chain ends.
#[test]
fn a_long_chain_does_not_starve_queued_ops() {
    const LINKS: u64 = 100_000;
    let engine = depengine::EngineBuilder::from_env().cpu_workers(1).build().unwrap();
    let chain = engine.var(0u64);
    let progress = Arc::new(AtomicU64::new(0));
    let gate = engine.var(());
    // Hold the chain back until all of it is pushed.
    let held = futures::executor::block_on(gate.write()).unwrap();
    drop(engine.op("start").read(&gate).write(&chain).run(|_, _| Ok(())));
    for _ in 0..LINKS {
        let progress = progress.clone();
        drop(engine.op("link").write(&chain).run(move |(), (mut c,)| {
            *c += 1;
            progress.fetch_add(1, Ordering::Relaxed);
            Ok(())
        }));
    }
    drop(held);
    while progress.load(Ordering::Relaxed) == 0 {
        std::thread::yield_now();
    }
    // Ready at once: queued while the worker runs the chain.
    let seen = progress.clone();
    let other = engine.op("other").run(move |(), ()| Ok(seen.load(Ordering::Relaxed)));
    let at = other.blocking_wait().unwrap();
    assert!(at < LINKS, "the queued op ran only after the whole chain");
    engine.wait_for_all().blocking_wait().unwrap();
    assert_eq!(*futures::executor::block_on(chain.read()).unwrap(), LINKS);
}

/// Ops pushed just as idle workers go to sleep are never left in the queue:
/// two threads push one op at a time with pauses around the workers' spin
/// time, so that pushes race with workers parking, and wait for each op.
#[test]
fn ops_pushed_while_workers_park_all_run() {
    let engine = depengine::EngineBuilder::from_env().cpu_workers(2).build().unwrap();
    let ran = Arc::new(AtomicU64::new(0));
    let pushers: Vec<_> = (0..2u64)
        .map(|t| {
            let (engine, ran) = (engine.clone(), ran.clone());
            std::thread::spawn(move || {
                for i in 0..300u64 {
                    let ran = ran.clone();
                    let op = engine.op("tick").run(move |(), ()| {
                        ran.fetch_add(1, Ordering::Relaxed);
                        Ok(())
                    });
                    // A lost wake-up leaves the op queued with every worker asleep.
                    let deadline = std::time::Instant::now() + Duration::from_secs(10);
                    while !op.is_finished() {
                        assert!(std::time::Instant::now() < deadline, "op {i} of pusher {t} never ran");
                        std::thread::yield_now();
                    }
                    std::thread::sleep(Duration::from_micros((i * 7 + t * 13) % 90));
                }
            })
        })
        .collect();
    pushers.into_iter().for_each(|p| p.join().unwrap());
    assert_eq!(ran.load(Ordering::Relaxed), 600);
}
