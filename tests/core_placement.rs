//! Placement and declarations checked at push: devices, lanes, worker names,
//! inline ops, duplicate declarations, bad configuration.

mod common;

use depengine::{Device, Engine, Lane};

#[test]
fn inline_op_runs_on_pushing_thread_when_ready() {
    let engine = Engine::from_env();
    let v = engine.var(0u32);
    let me = std::thread::current().id();
    let h = engine.op("inline").lane(Lane::Inline).write(&v).run(move |(), (mut v,)| {
        *v = 1;
        Ok(std::thread::current().id() == me)
    });
    assert!(h.is_finished(), "ran during push");
    assert!(h.blocking_wait().unwrap());
    let h = engine.op("pooled").write(&v).run(move |(), (_v,)| Ok(std::thread::current().id() == me));
    assert!(!h.blocking_wait().unwrap(), "normal lane runs on a worker");
}

#[test]
fn workers_are_named_per_device_and_lane() {
    let engine = depengine::EngineBuilder::from_env().cpu_devices(2).build().unwrap();
    let name = |h: depengine::OpHandle<Option<String>>| h.blocking_wait().unwrap().unwrap();
    let cur = || Ok(std::thread::current().name().map(str::to_owned));
    assert!(name(engine.op("a").run(move |(), ()| cur())).starts_with("depengine-cpu0-"));
    assert!(
        name(engine.op("b").device(Device::Cpu(1)).run(move |(), ()| cur())).starts_with("depengine-cpu1-")
    );
    assert!(
        name(engine.op("c").lane(Lane::Prioritized).run(move |(), ()| cur())).starts_with("depengine-prio-")
    );
}

#[test]
fn placement_is_checked_at_push() {
    let engine = Engine::from_env();
    // A CPU body on a GPU: GPU ops are pushed with run_gpu.
    let err = engine.op("g").device(Device::Gpu(0)).run(|(), ()| Ok(())).pushed().unwrap_err();
    assert!(err.is_invalid_argument() && err.to_string().contains("run_gpu"), "{err}");
    let err = engine.op("c").device(Device::Cpu(3)).run(|(), ()| Ok(())).pushed().unwrap_err();
    assert!(err.is_invalid_argument() && err.to_string().contains("cpu(3)"), "{err}");
    let err = engine.op("l").lane(Lane::CopyToGpu).run(|(), ()| Ok(())).pushed().unwrap_err();
    assert!(err.is_invalid_argument(), "{err}");
    let other = Engine::from_env();
    let foreign = other.var(0);
    let err = engine.op("x").read(&foreign).run(|_, ()| Ok(())).pushed().unwrap_err();
    assert!(err.is_invalid_argument() && err.to_string().contains("another engine"), "{err}");
}

#[test]
fn duplicate_declarations_are_merged_or_refused() {
    let engine = Engine::from_env();
    let x = engine.var(3u32);
    // Duplicate typed reads: two guards, one read dependency.
    let h = engine.op("rr").read(&x).read(&x).run(|(a, b), ()| Ok(*a + *b));
    assert_eq!(h.blocking_wait().unwrap(), 6);
    // Untyped read of a var written: becomes a write.
    let h = engine.op("rw").read_any(&x.any()).write(&x).run(|(), (mut x,)| {
        *x += 1;
        Ok(())
    });
    h.blocking_wait().unwrap();
    assert_eq!(x.version(), 1);
    // Typed read and write of one var, or two typed writes: refused.
    let err = engine.op("bad").read(&x).write(&x).run(|_, _| Ok(())).pushed().unwrap_err();
    assert!(err.is_invalid_argument(), "{err}");
    assert!(err.to_string().contains("more than once"), "{err}");
    let err = engine.op("bad2").write(&x).write(&x).run(|_, _| Ok(())).blocking_wait().unwrap_err();
    assert!(err.is_invalid_argument(), "{err}");
    assert_eq!(x.version(), 1, "a refused push changes nothing");
}

#[test]
fn bad_configuration_is_an_error() {
    assert!(depengine::EngineBuilder::from_env().cpu_workers(0).build().unwrap_err().is_invalid_argument());
    assert!(depengine::EngineBuilder::from_env().cpu_devices(0).build().unwrap_err().is_invalid_argument());
}

/// An op with `inline_when_idle` runs on the pushing thread, inside its
/// push, while every worker of its pool is parked; with a worker busy, on
/// the pool; never when not ready at push; and the setting is ignored off
/// a CPU device's normal lane.
#[test]
fn inline_when_idle_runs_here_only_while_the_pool_sleeps() {
    let engine =
        depengine::EngineBuilder::from_env().cpu_workers(1).spin(std::time::Duration::ZERO).build().unwrap();
    let v = engine.var(0u32);
    let me = std::thread::current().id();
    let here = move || Ok(std::thread::current().id() == me);
    // Start the pool, let its worker park.
    engine.op("warm").run(|(), ()| Ok(())).blocking_wait().unwrap();
    let idle = |engine: &Engine| {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !engine.metrics().pools.iter().all(|p| p.running == 0) || !parked(engine) {
            assert!(std::time::Instant::now() < deadline, "the worker never parked");
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    };
    idle(&engine);
    let h = engine.op("idle").read(&v).inline_when_idle(true).run(move |(_v,), ()| here());
    assert!(h.is_finished(), "ran inside its push");
    assert!(h.blocking_wait().unwrap());
    // A busy worker: the op goes to the pool.
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let busy = engine.op("busy").run(move |(), ()| {
        rx.recv().unwrap();
        Ok(())
    });
    while engine.metrics().running() == 0 {
        std::thread::yield_now();
    }
    let h = engine.op("queued").inline_when_idle(true).run(move |(), ()| here());
    tx.send(()).unwrap();
    busy.blocking_wait().unwrap();
    assert!(!h.blocking_wait().unwrap(), "a busy pool runs it");
    // Not ready at push: it runs where its vars let it through.
    idle(&engine);
    let guard = v.write().blocking_wait().unwrap();
    let h = engine.op("later").read(&v).inline_when_idle(true).run(move |(_v,), ()| here());
    assert!(!h.is_finished());
    drop(guard);
    assert!(!h.blocking_wait().unwrap(), "run by the thread that let it through, on the pool");
    // Ignored on another lane.
    idle(&engine);
    let h = engine.op("prio").lane(Lane::Prioritized).inline_when_idle(true).run(move |(), ()| here());
    assert!(!h.blocking_wait().unwrap());
}

/// Whether every worker of every pool of `engine` is parked, as far as its
/// metrics tell: nothing queued nor running, and the pool idle a moment.
fn parked(engine: &Engine) -> bool {
    let m = engine.metrics();
    std::thread::sleep(std::time::Duration::from_millis(2));
    m.queued() == 0 && m.running() == 0
}

/// Holds the engine's one worker until the returned sender sends.
fn hold(engine: &Engine) -> (std::sync::mpsc::Sender<()>, depengine::OpHandle<()>) {
    let (release, held) = std::sync::mpsc::channel::<()>();
    let blocker = engine.op("hold").run(move |(), ()| {
        held.recv().unwrap();
        Ok(())
    });
    while engine.metrics().running() == 0 {
        std::thread::yield_now();
    }
    (release, blocker)
}

/// Pushes `n` ops of `op` from this thread (inside `runtime`'s context, if
/// given) while the engine's one worker is held; returns how many ran on
/// this thread, after checking that each ran once.
fn pushed_while_held(
    engine: &Engine,
    n: usize,
    runtime: Option<&tokio::runtime::Runtime>,
    op: impl Fn(&Engine) -> depengine::engine::OpBuilder<'_>,
) -> usize {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    let (release, blocker) = hold(engine);
    let me = std::thread::current().id();
    let (here, ran) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let entered = runtime.map(tokio::runtime::Runtime::enter);
    for _ in 0..n {
        let (here, ran) = (here.clone(), ran.clone());
        op(engine)
            .run_detached(move |(), ()| {
                ran.fetch_add(1, Ordering::SeqCst);
                if std::thread::current().id() == me {
                    here.fetch_add(1, Ordering::SeqCst);
                }
                Ok(())
            })
            .unwrap();
    }
    drop(entered);
    release.send(()).unwrap();
    blocker.blocking_wait().unwrap();
    engine.wait_for_all().blocking_wait().unwrap();
    assert_eq!(ran.load(Ordering::SeqCst), n, "every op ran once");
    here.load(Ordering::SeqCst)
}

/// A pushing thread whose ops queue up past `pusher_runs_at` runs its
/// next ready ops itself; never with the setting at 0, never for ops of
/// another lane or device, never on a Tokio runtime's thread for ops that
/// did not opt in, never inside a body.
#[test]
fn a_crowded_pushing_thread_runs_its_ops_itself_where_it_may() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    // Bulk execution off: ops held in a segment reach their pool as one.
    let engine = |at| {
        depengine::EngineBuilder::from_env()
            .cpu_workers(1)
            .cpu_devices(2)
            .bulk_size(1)
            .pusher_runs_at(at)
            .build()
            .unwrap()
    };
    let crowded = engine(4);
    let ran_here = pushed_while_held(&crowded, 200, None, |e| e.op("op"));
    assert!(ran_here > 100, "{ran_here} of 200 ran on the pushing thread");
    assert_eq!(pushed_while_held(&engine(0), 200, None, |e| e.op("op")), 0, "the setting at 0");
    assert_eq!(pushed_while_held(&crowded, 200, None, |e| e.op("op").lane(Lane::Prioritized)), 0);
    assert_eq!(pushed_while_held(&crowded, 200, None, |e| e.op("op").device(Device::Cpu(1))), 0);
    let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
    let on_runtime = pushed_while_held(&crowded, 200, Some(&runtime), |e| e.op("op"));
    assert_eq!(on_runtime, 0, "on a runtime's thread");
    let opted_in = pushed_while_held(&crowded, 200, Some(&runtime), |e| e.op("op").inline_when_idle(true));
    assert!(opted_in > 100, "{opted_in} of 200 opted-in ops ran on the runtime's thread");
    // Inside a body running on this thread (an inline op's).
    let (release, blocker) = hold(&crowded);
    let here = std::sync::Arc::new(AtomicUsize::new(0));
    let me = std::thread::current().id();
    let (pusher, seen) = (crowded.clone(), here.clone());
    crowded
        .op("outer")
        .lane(Lane::Inline)
        .run(move |(), ()| {
            for _ in 0..200 {
                let seen = seen.clone();
                pusher.op("inner").run_detached(move |(), ()| {
                    if std::thread::current().id() == me {
                        seen.fetch_add(1, Ordering::SeqCst);
                    }
                    Ok(())
                })?;
            }
            Ok(())
        })
        .blocking_wait()
        .unwrap();
    release.send(()).unwrap();
    blocker.blocking_wait().unwrap();
    crowded.wait_for_all().blocking_wait().unwrap();
    assert_eq!(here.load(Ordering::SeqCst), 0, "inside a body");
}

#[test]
fn thread_hooks_run_on_every_worker_of_every_pool() {
    use std::sync::{Arc, Mutex};
    thread_local! {
        static SET_UP: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    }
    let name = || std::thread::current().name().unwrap_or("unnamed").to_owned();
    let (started, stopped) = (Arc::new(Mutex::new(Vec::new())), Arc::new(Mutex::new(Vec::new())));
    let (up, down) = (started.clone(), stopped.clone());
    let engine = depengine::EngineBuilder::from_env()
        .cpu_workers(2)
        .priority_workers(1)
        .simulated_gpus(1)
        .thread_name("hooked")
        .on_thread_start(move |k| {
            SET_UP.with(|s| s.set(true));
            // The index is the worker's in its pool: its name's suffix.
            assert!(name().ends_with(&format!("-{k}")), "worker {k} is {}", name());
            up.lock().unwrap().push(name());
        })
        .on_thread_stop(move |k| {
            assert!(name().ends_with(&format!("-{k}")), "worker {k} is {}", name());
            down.lock().unwrap().push(name());
        })
        .build()
        .unwrap();
    // A body sees what the start hook set up on its thread.
    let seen = engine.op("cpu").run(|(), ()| Ok(SET_UP.with(std::cell::Cell::get)));
    assert!(seen.blocking_wait().unwrap());
    let seen = engine.op("prio").lane(Lane::Prioritized).run(|(), ()| Ok(SET_UP.with(std::cell::Cell::get)));
    assert!(seen.blocking_wait().unwrap());
    // Opening the GPU starts its lanes' workers.
    let _gpu = engine.gpu(0).unwrap();
    let mut names = started.lock().unwrap().clone();
    names.sort();
    for prefix in ["hooked-cpu0-0", "hooked-cpu0-1", "hooked-prio-0", "hooked-gpu0-"] {
        assert!(names.iter().any(|n| n.starts_with(prefix)), "no start hook on {prefix}*: {names:?}");
    }
    assert!(stopped.lock().unwrap().is_empty(), "no worker stopped while the engine runs");
    // A shutdown waits for every worker to end, its stop hook run.
    engine.blocking_shutdown(depengine::ShutdownMode::Drain).unwrap();
    let mut ended = stopped.lock().unwrap().clone();
    ended.sort();
    assert_eq!(ended, names, "every worker that started runs the stop hook as the engine shuts down");
}

#[test]
fn a_panicking_start_hook_fails_the_push_that_needs_its_pool() {
    let engine = depengine::EngineBuilder::from_env()
        .on_thread_start(|_| panic!("no NUMA node for this thread"))
        .build()
        .unwrap();
    let err = engine.op("never").run(|(), ()| Ok(())).blocking_wait().unwrap_err();
    assert!(err.is_pool_unavailable(), "{err}");
    let text = err.to_string();
    assert!(text.contains("start hook panicked") && text.contains("no NUMA node"), "{text}");
    // A pool whose hook panicked runs nothing: the engine still shuts down.
    drop(engine);
}
