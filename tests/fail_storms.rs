//! Storms that a demanding user threw at the engine and that found
//! nothing, kept in a short form so that they go on finding nothing:
//! reservations, aborts and every kind of op under a bound; aborts racing
//! the start of the op they abort; the explainer looking while threads
//! push; and extreme settings.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::time::Duration;

use common::Rng;
use depengine::EngineBuilder;
use depengine::engine::Completion;
use depengine::engine::EngineKind;
use depengine::{Engine, Lane, ShutdownMode};

/// Threads push every kind of op under a bound of 8, reserve, abort and
/// drop handles at random; once everything is done, every slot is back.
#[test]
fn storms_of_reservations_aborts_and_every_op_kind_lose_no_slot() {
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    for storm in 0..30u64 {
        let engine = depengine::EngineBuilder::from_env()
            .max_in_flight(8)
            .cpu_workers(2)
            .runtime(runtime.handle().clone())
            .build()
            .unwrap();
        let vars: Arc<Vec<_>> = Arc::new((0..4).map(|_| engine.var(0u64)).collect());
        let pushers: Vec<_> = (0..3u64)
            .map(|t| {
                let (engine, vars, handle) = (engine.clone(), vars.clone(), runtime.handle().clone());
                std::thread::spawn(move || {
                    let mut rng = Rng(storm * 31 + t);
                    for _ in 0..150 {
                        storm_step(&engine, &vars, &handle, &mut rng);
                    }
                })
            })
            .collect();
        pushers.into_iter().for_each(|p| p.join().unwrap());
        let _ = engine.wait_for_all().blocking_wait();
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while engine.metrics().slots_used > 0 && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(engine.metrics().slots_used, 0, "storm {storm}: a slot was lost");
        let m = engine.metrics();
        assert_eq!((m.waiting_on_vars, m.cancelled_on_vars, m.slots_used), (0, 0, 0), "storm {storm}: {m:?}");
        let mode = if storm % 2 == 0 { ShutdownMode::Drain } else { ShutdownMode::Cancel };
        let _ = engine.blocking_shutdown(mode);
    }
}

/// One random step of a storm: an op of some kind on some vars, its
/// handle kept, dropped, aborted or awaited.
fn storm_step(engine: &Engine, vars: &[depengine::Var<u64>], rt: &tokio::runtime::Handle, rng: &mut Rng) {
    let v = &vars[rng.below(vars.len())];
    let w = &vars[rng.below(vars.len())];
    let handle = match rng.below(7) {
        0 => engine.op("sync").read(v).run(|(v,), ()| Ok(*v)),
        1 => engine.op("write").write(v).cancel_on_drop(rng.chance(50)).run(|(), (mut v,)| {
            *v += 1;
            Ok(*v)
        }),
        2 => {
            let signal = rng.chance(70);
            engine.op("async").read(w).run_async(move |(w,), (), done: Completion<u64>| {
                let value = *w;
                drop(w);
                if signal {
                    std::thread::spawn(move || done.succeed(value));
                }
            })
        }
        3 => engine.op("future").read(v).spawn(|(v,), ()| {
            let value = *v;
            async move {
                tokio::task::yield_now().await;
                Ok(value)
            }
        }),
        4 => {
            let mut room = rt.block_on(engine.reserve());
            room.op("reserved").write(w).run(|(), (mut w,)| {
                *w += 1;
                Ok(*w)
            })
        }
        5 => engine.op("inline").read(v).lane(Lane::Inline).run(|(v,), ()| Ok(*v)),
        _ => {
            let guard = rt.block_on(v.write());
            drop(guard);
            return;
        }
    };
    match rng.below(4) {
        0 => drop(handle),
        1 => {
            handle.abort();
        }
        2 => {
            let _ = handle.blocking_wait();
        }
        _ => {
            handle.abort();
            let _ = handle.blocking_wait();
        }
    }
}

/// Aborts racing the start of the ops they abort: a body runs at most
/// once, never after an abort that returned true, and exactly once when
/// the abort came too late.
#[test]
fn an_abort_racing_the_start_never_runs_a_body_twice_or_after_it_won() {
    for workers in [1, 2] {
        let engine = depengine::EngineBuilder::from_env().cpu_workers(workers).build().unwrap();
        let v = engine.var(0u64);
        const OPS: usize = 20_000;
        let runs: Arc<Vec<AtomicU32>> = Arc::new((0..OPS).map(|_| AtomicU32::new(0)).collect());
        let (send, recv) = std::sync::mpsc::channel();
        let aborter = std::thread::spawn(move || {
            recv.into_iter()
                .map(|(i, h): (usize, depengine::OpHandle<()>)| (i, h.abort()))
                .collect::<Vec<_>>()
        });
        for i in 0..OPS {
            let runs = runs.clone();
            let op = engine.op("racing");
            let op = if i % 2 == 0 { op.read_any(&v.any()) } else { op.write_any(&v.any()) };
            let handle = op.run(move |(), ()| {
                runs[i].fetch_add(1, Ordering::Relaxed);
                Ok(())
            });
            send.send((i, handle)).unwrap();
        }
        drop(send);
        let aborted = aborter.join().unwrap();
        engine.wait_for_all().blocking_wait().unwrap();
        for (i, won) in aborted {
            let ran = runs[i].load(Ordering::Relaxed);
            assert_eq!(ran, u32::from(!won), "op {i}: aborted {won}, ran {ran} times");
        }
    }
}

/// The explainer and the metrics look again and again while threads push
/// ops over shared vars and hold guards: every look is consistent, and
/// every op completes.
#[test]
fn the_explainer_looks_while_threads_push() {
    let engine = depengine::EngineBuilder::from_env().cpu_workers(2).build().unwrap();
    let vars: Arc<Vec<_>> = Arc::new((0..6).map(|i| engine.var_named(format!("v{i}"), 0u64)).collect());
    let stop = Arc::new(AtomicBool::new(false));
    let looks = {
        let (engine, stop) = (engine.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut looks = 0;
            while !stop.load(Ordering::Relaxed) {
                let pending = engine.debug_pending();
                for op in pending.waiting() {
                    assert!(!pending.chain(op).is_empty());
                }
                let _ = (pending.to_string(), pending.dot(), engine.metrics());
                looks += 1;
            }
            looks
        })
    };
    let done = Arc::new(AtomicUsize::new(0));
    let pushers: Vec<_> = (0..3u64)
        .map(|t| {
            let (engine, vars, done) = (engine.clone(), vars.clone(), done.clone());
            std::thread::spawn(move || {
                let mut rng = Rng(t + 100);
                let mut handles = Vec::new();
                for _ in 0..3_000 {
                    let (a, b) = (&vars[rng.below(6)], &vars[rng.below(6)]);
                    let done = done.clone();
                    let op = engine.op("mix").read(a);
                    let op = if a.id() == b.id() { op } else { op.read_any(&b.any()) };
                    handles.push(op.write_any(&vars[rng.below(6)].any()).run(move |(_a,), ()| {
                        done.fetch_add(1, Ordering::Relaxed);
                        Ok(())
                    }));
                    if rng.chance(1) {
                        let guard = vars[rng.below(6)].write().blocking_wait().unwrap();
                        std::thread::sleep(Duration::from_micros(200));
                        drop(guard);
                    }
                }
                handles.into_iter().for_each(|h| h.blocking_wait().unwrap());
            })
        })
        .collect();
    pushers.into_iter().for_each(|p| p.join().unwrap());
    stop.store(true, Ordering::Relaxed);
    assert!(looks.join().unwrap() > 0);
    assert_eq!(done.load(Ordering::Relaxed), 9_000);
    assert!(engine.debug_pending().is_empty());
}

/// Settings at and past their bounds: a clear error, or an engine that
/// works.
#[test]
fn extreme_settings_give_a_clear_error_or_a_working_engine() {
    let refused = [
        ("cpu_workers(0)", depengine::EngineBuilder::from_env().cpu_workers(0).build()),
        (
            "cpu_workers(MAX + 1)",
            depengine::EngineBuilder::from_env().cpu_workers(EngineBuilder::MAX_WORKERS + 1).build(),
        ),
        ("priority_workers(0)", depengine::EngineBuilder::from_env().priority_workers(0).build()),
        ("cpu_devices(0)", depengine::EngineBuilder::from_env().cpu_devices(0).build()),
        ("bulk_size(0)", depengine::EngineBuilder::from_env().bulk_size(0).build()),
        ("max_in_flight(0)", depengine::EngineBuilder::from_env().max_in_flight(0).build()),
        (
            "max_in_flight(MAX + 1)",
            depengine::EngineBuilder::from_env().max_in_flight(EngineBuilder::MAX_IN_FLIGHT + 1).build(),
        ),
        (
            "spin(MAX + 1 µs)",
            depengine::EngineBuilder::from_env()
                .spin(EngineBuilder::MAX_SPIN + Duration::from_micros(1))
                .build(),
        ),
        ("watchdog(0)", depengine::EngineBuilder::from_env().watchdog(Duration::ZERO).build()),
        (
            "watchdog(a year)",
            depengine::EngineBuilder::from_env().watchdog(Duration::from_secs(365 * 86_400)).build(),
        ),
        ("thread_name with NUL", depengine::EngineBuilder::from_env().thread_name("a\0b").build()),
    ];
    for (what, built) in refused {
        let err = built.expect_err(what);
        assert!(err.is_invalid_argument(), "{what}: {err}");
    }
    let working = [
        ("cpu_workers(1)", depengine::EngineBuilder::from_env().cpu_workers(1).build()),
        ("bulk_size(usize::MAX)", depengine::EngineBuilder::from_env().bulk_size(usize::MAX).build()),
        ("max_in_flight(1)", depengine::EngineBuilder::from_env().max_in_flight(1).build()),
        (
            "max_in_flight(MAX)",
            depengine::EngineBuilder::from_env().max_in_flight(EngineBuilder::MAX_IN_FLIGHT).build(),
        ),
        ("spin(0)", depengine::EngineBuilder::from_env().spin(Duration::ZERO).build()),
        ("spin(MAX)", depengine::EngineBuilder::from_env().spin(EngineBuilder::MAX_SPIN).build()),
        ("watchdog(1 ns)", depengine::EngineBuilder::from_env().watchdog(Duration::from_nanos(1)).build()),
        ("cpu_devices(64)", depengine::EngineBuilder::from_env().cpu_devices(64).build()),
        ("naive", depengine::EngineBuilder::from_env().kind(EngineKind::Naive).build()),
        ("empty thread name", depengine::EngineBuilder::from_env().thread_name("").build()),
    ];
    for (what, built) in working {
        let engine = built.unwrap_or_else(|e| panic!("{what}: {e}"));
        let v = engine.var(1u64);
        let op = engine.op("op").write(&v).priority(i32::MAX).run(|(), (mut v,)| {
            *v += 1;
            Ok(*v)
        });
        assert_eq!(op.blocking_wait().unwrap(), 2, "{what}");
        let low = engine.op("low").read(&v).priority(i32::MIN).run(|(v,), ()| Ok(*v));
        assert_eq!(low.blocking_wait().unwrap(), 2, "{what}");
        engine.profiler().keep_last(0);
        assert_eq!(engine.profiler().keeps(), 1, "{what}");
        engine.blocking_shutdown(ShutdownMode::Drain).unwrap();
    }
}
