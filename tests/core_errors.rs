//! Failures: panics, errors and their propagation, dropped completions,
//! refused pushes, blocking waits in a runtime, shutdown.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use common::threads_named;
use depengine::engine::EngineKind;
use depengine::{Engine, Lane, ShutdownMode};

async fn timed<F: std::future::Future>(f: F) -> F::Output {
    tokio::time::timeout(Duration::from_secs(30), f).await.expect("test timed out")
}

fn engines() -> [Engine; 2] {
    [
        depengine::EngineBuilder::from_env().kind(EngineKind::Threaded).cpu_workers(2).build().unwrap(),
        depengine::EngineBuilder::from_env().kind(EngineKind::Naive).build().unwrap(),
    ]
}

#[test]
fn panic_in_op_is_caught_and_worker_survives() {
    for engine in engines() {
        let v = engine.var(0u32);
        let h = engine.op("boom").write(&v).run(|(), (_v,)| -> Result<(), _> { panic!("kaboom") });
        let err = h.blocking_wait().unwrap_err();
        assert!(err.is_panic(), "{err}");
        assert_eq!(err.to_string(), "op `boom` panicked: kaboom");
        // The worker lives on: plenty more ops run.
        let w = engine.var(0u32);
        for _ in 0..100 {
            engine.op("inc").write(&w).run(|(), (mut w,)| {
                *w += 1;
                Ok(())
            });
        }
        assert_eq!(engine.op("get").read(&w).run(|(w,), ()| Ok(*w)).blocking_wait().unwrap(), 100);
    }
}

#[test]
fn failure_propagates_through_written_vars_and_names_the_root() {
    for engine in engines() {
        let (a, b, c) = (engine.var(1u32), engine.var(2u32), engine.var(3u32));
        let ran = Arc::new(AtomicUsize::new(0));
        let fail =
            engine.op("root").read(&a).write(&b).run(|_, _| -> Result<(), _> { Err("disk on fire".into()) });
        let r2 = ran.clone();
        let skip1 = engine.op("mid").read(&b).write(&c).run(move |_, _| {
            r2.fetch_add(1, Ordering::SeqCst);
            Ok(())
        });
        let r3 = ran.clone();
        let skip2 = engine.op("leaf").read(&c).run(move |_, ()| {
            r3.fetch_add(1, Ordering::SeqCst);
            Ok(())
        });
        let r4 = ran.clone();
        let unaffected = engine.op("other").read(&a).run(move |(a,), ()| {
            r4.fetch_add(1, Ordering::SeqCst);
            Ok(*a)
        });
        let root = fail.blocking_wait().unwrap_err();
        assert!(root.is_failed());
        assert_eq!(std::error::Error::source(&root).unwrap().to_string(), "disk on fire");
        for (h, name) in [(skip1, "mid"), (skip2, "leaf")] {
            let err = h.blocking_wait().unwrap_err();
            assert!(err.is_skipped(), "{err}");
            assert_eq!(err.op_name(), Some(name));
            assert!(err.root().same_as(&root), "{err} names the root failure");
            // The cause is the next link of the chain; `{:#}` prints them all.
            assert!(format!("{err:#}").contains("op `root` failed: disk on fire"), "{err:#}");
        }
        assert_eq!(unaffected.blocking_wait().unwrap(), 1);
        assert_eq!(ran.load(Ordering::SeqCst), 1, "skipped bodies never ran");
        // wait_for_all reports the first failure once.
        let first = engine.wait_for_all().blocking_wait().unwrap_err();
        assert!(first.same_as(&root), "{first}");
        engine.wait_for_all().blocking_wait().unwrap();
        // wait_for_var reports the var's error and clears it.
        assert!(engine.blocking_wait_for_var(&c).unwrap_err().same_as(&root));
        engine.blocking_wait_for_var(&c).unwrap();
        let ok = engine.op("after-clear").read(&c).run(|(c,), ()| Ok(*c));
        assert_eq!(ok.blocking_wait().unwrap(), 3);
        // b still carries it.
        assert!(engine.op("b").read(&b).run(|_, ()| Ok(())).blocking_wait().unwrap_err().is_skipped());
    }
}

#[test]
fn wait_for_var_clears_in_push_order() {
    for engine in engines() {
        let v = engine.var(0u32);
        // Hold v until everything below is queued behind the failing write.
        let held = v.write().blocking_wait().unwrap();
        let fail = engine.op("fail").write(&v).run(move |_, _| -> Result<(), _> { Err("bad".into()) });
        let before = engine.op("before").read(&v).run(|_, ()| Ok(()));
        let wait = engine.wait_for_var(&v);
        let after = engine.op("after").read(&v).run(|(v,), ()| Ok(*v));
        drop(held);
        assert!(fail.blocking_wait().is_err());
        assert!(before.blocking_wait().unwrap_err().is_skipped(), "pushed before the wait");
        assert!(wait.blocking_wait().unwrap_err().is_failed());
        assert_eq!(after.blocking_wait().unwrap(), 0, "pushed after the wait: error cleared");
    }
}

#[test]
fn no_skip_op_runs_and_passes_the_error_on() {
    for engine in engines() {
        let (v, w) = (engine.var(0u32), engine.var(0u32));
        let fail = engine.op("fail").write(&v).run(|_, _| -> Result<(), _> { Err("x".into()) });
        let ran = Arc::new(AtomicBool::new(false));
        let r = ran.clone();
        let cleanup = engine.op("cleanup").no_skip(true).read(&v).write(&w).run(move |(v,), (mut w,)| {
            r.store(true, Ordering::SeqCst);
            *w = *v + 1;
            Ok("ran")
        });
        let root = fail.blocking_wait().unwrap_err();
        assert_eq!(cleanup.blocking_wait().unwrap(), "ran");
        assert!(ran.load(Ordering::SeqCst));
        let err = engine.op("later").read(&w).run(|_, ()| Ok(())).blocking_wait().unwrap_err();
        assert!(err.root().same_as(&root), "{err}");
    }
}

#[test]
fn dropped_completion_fails_the_op_instead_of_hanging() {
    for engine in engines() {
        let v = engine.var(0u32);
        let h =
            engine.op("forgot").write(&v).run_async(|(), (_v,), done: depengine::engine::Completion<u8>| {
                drop(done);
            });
        let err = h.blocking_wait().unwrap_err();
        assert!(err.is_completion_dropped(), "{err}");
        // Dropped on another thread, later.
        let h = engine.op("forgot-later").run_async(|(), (), done: depengine::engine::Completion<()>| {
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(5));
                drop(done);
            });
        });
        assert!(h.blocking_wait().unwrap_err().is_completion_dropped());
        // A panicking async body fails with a panic error.
        let h = engine
            .op("async-panic")
            .run_async(|(), (), _done: depengine::engine::Completion<()>| panic!("no"));
        assert!(h.blocking_wait().unwrap_err().is_panic());
        // The var is usable after wait_for_var clears the error.
        assert!(engine.blocking_wait_for_var(&v).is_err());
        engine
            .op("ok")
            .write(&v)
            .run(|(), (mut v,)| {
                *v += 1;
                Ok(())
            })
            .blocking_wait()
            .unwrap();
    }
}

#[test]
fn deleted_var_is_refused_at_push() {
    let engine = Engine::from_env();
    let v = engine.var(5u32);
    let other = engine.var(0u32);
    let data = engine.delete_var(&v).blocking_wait().unwrap();
    assert_eq!(data, 5);
    let err = engine.op("use").read(&v).write(&other).run(|_, _| Ok(())).pushed().unwrap_err();
    assert!(err.is_var_deleted(), "{err}");
    assert!(v.read().blocking_wait().unwrap_err().is_var_deleted());
    assert!(engine.wait_for_var(&v).blocking_wait().unwrap_err().is_var_deleted());
    assert!(engine.delete_var(&v).blocking_wait().unwrap_err().is_var_deleted());
    assert!(other.any().debug_state().queued.is_empty(), "nothing appended to other vars");
    engine
        .op("other")
        .write(&other)
        .run(|(), (mut o,)| {
            *o += 1;
            Ok(())
        })
        .blocking_wait()
        .unwrap();
}

#[test]
fn delete_runs_even_when_var_carries_an_error() {
    let engine = Engine::from_env();
    let v = engine.var(String::from("data"));
    engine.op("fail").write(&v).run(|_, _| -> Result<(), _> { Err("e".into()) });
    assert_eq!(engine.delete_var(&v).blocking_wait().unwrap(), "data");
}

#[test]
fn push_after_close_is_refused() {
    let engine = Engine::from_env();
    let v = engine.var(0u32);
    engine.blocking_shutdown(ShutdownMode::Drain).unwrap();
    assert!(engine.is_closed());
    let err = engine.op("late").write(&v).run(|_, _| Ok(())).pushed().unwrap_err();
    assert!(err.is_shutdown(), "{err}");
    assert!(v.write().blocking_wait().unwrap_err().is_shutdown());
    assert!(engine.wait_for_var(&v).blocking_wait().unwrap_err().is_shutdown());
    engine.wait_for_all().blocking_wait().unwrap();
    engine.blocking_shutdown(ShutdownMode::Drain).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blocking_waits_refuse_inside_runtime() {
    let engine = Engine::from_env();
    let v = engine.var(0u32);
    let err = engine.wait_for_all().blocking_wait().unwrap_err();
    assert!(err.is_blocking_in_runtime(), "{err}");
    assert!(engine.blocking_wait_for_var(&v).unwrap_err().is_blocking_in_runtime());
    let h = engine.op("x").read(&v).run(|_, ()| Ok(()));
    assert!(h.blocking_wait().unwrap_err().is_blocking_in_runtime());
    assert!(v.read().blocking_wait().unwrap_err().is_blocking_in_runtime());
    assert!(engine.blocking_shutdown(ShutdownMode::Drain).unwrap_err().is_blocking_in_runtime());
    // The async forms work.
    timed(engine.wait_for_all()).await.unwrap();
}

#[tokio::test(flavor = "current_thread")]
async fn blocking_wait_refuses_on_current_thread_runtime_too() {
    let engine = Engine::from_env();
    assert!(engine.wait_for_all().blocking_wait().unwrap_err().is_blocking_in_runtime());
}

#[test]
fn drain_shutdown_runs_everything_and_joins_threads() {
    let engine = depengine::EngineBuilder::from_env().cpu_workers(3).thread_name("dt-drain").build().unwrap();
    let v = engine.var(0u64);
    let handles: Vec<_> = (0..200)
        .map(|_| {
            engine.op("inc").write(&v).run(|(), (mut v,)| {
                *v += 1;
                Ok(*v)
            })
        })
        .collect();
    if threads_named("").is_some() {
        assert!(eventually(|| threads_named("dt-drain-cpu0-") == Some(3)), "three workers started");
    }
    engine.blocking_shutdown(ShutdownMode::Drain).unwrap();
    for (i, h) in handles.into_iter().enumerate() {
        assert_eq!(h.blocking_wait().unwrap(), i as u64 + 1);
    }
    if let Some(left) = common::threads_left("dt-drain") {
        assert_eq!(left, 0, "worker threads joined");
    }
}

#[test]
fn cancel_shutdown_resolves_every_handle() {
    let engine = depengine::EngineBuilder::from_env().cpu_workers(1).build().unwrap();
    let v = engine.var(0u64);
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let (started_tx, started) = std::sync::mpsc::channel::<()>();
    let running = engine.op("running").write(&v).run(move |(), (mut v,)| {
        started_tx.send(()).unwrap();
        rx.recv_timeout(Duration::from_secs(10)).unwrap();
        *v += 1;
        Ok(())
    });
    let queued: Vec<_> = (0..50)
        .map(|_| {
            engine.op("queued").write(&v).run(|(), (mut v,)| {
                *v += 1;
                Ok(())
            })
        })
        .collect();
    let other = engine.var(0u8);
    let independent = engine.op("independent").lane(Lane::Prioritized).write(&other).run(|(), (mut o,)| {
        std::thread::sleep(Duration::from_millis(50));
        *o += 1;
        Ok(())
    });
    let delete = engine.delete_var(&v);
    started.recv_timeout(Duration::from_secs(10)).unwrap();
    let closer = {
        let engine = engine.clone();
        std::thread::spawn(move || engine.blocking_shutdown(ShutdownMode::Cancel))
    };
    std::thread::sleep(Duration::from_millis(20));
    tx.send(()).unwrap();
    running.blocking_wait().unwrap();
    for h in queued {
        let err = h.blocking_wait().unwrap_err();
        assert!(err.is_cancelled(), "{err}");
    }
    assert_eq!(delete.blocking_wait().unwrap(), 1, "deletions still run");
    let _ = independent.blocking_wait();
    let _ = closer.join().unwrap();
}

#[test]
fn dropping_the_engine_drains_and_stops_threads() {
    let engine = depengine::EngineBuilder::from_env().cpu_workers(4).thread_name("dt-drop").build().unwrap();
    let v = engine.var(0u64);
    let handles: Vec<_> = (0..100)
        .map(|_| {
            engine.op("inc").write(&v).run(|(), (mut v,)| {
                *v += 1;
                Ok(())
            })
        })
        .collect();
    drop(engine);
    for h in handles {
        h.blocking_wait().unwrap();
    }
    assert!(v.write().blocking_wait().unwrap_err().is_shutdown());
    // Workers exit by themselves once drained.
    assert!(eventually(|| threads_named("dt-drop").is_none_or(|n| n == 0)), "worker threads exited");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn engine_dropped_inside_async_code_does_not_block_or_panic() {
    timed(async {
        let engine = Engine::from_env();
        let v = engine.var(0u32);
        let h = engine.op("inc").write(&v).spawn(|(), (mut v,)| async move {
            tokio::task::yield_now().await;
            *v += 1;
            Ok(*v)
        });
        drop(engine);
        assert_eq!(h.await.unwrap(), 1);
    })
    .await
}

/// Polls `f` for up to ten seconds.
fn eventually(f: impl Fn() -> bool) -> bool {
    let start = std::time::Instant::now();
    while !f() {
        if start.elapsed() > Duration::from_secs(10) {
            return false;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    true
}

/// Panics in its destructor.
struct Grenade;

impl Drop for Grenade {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            panic!("grenade destructor");
        }
    }
}

#[test]
fn panicking_destructors_outside_bodies_hang_nothing() {
    for engine in engines() {
        let v = engine.var(0u32);
        let fail = engine.op("fail").write(&v).run(|_, _| -> Result<(), _> { Err("x".into()) });
        // Skipped: its closure, with the grenade, is dropped by the engine.
        let grenade = Grenade;
        let skipped = engine.op("skipped").write(&v).run(move |_, _| {
            let _g = &grenade;
            Ok(())
        });
        // Detached before it runs: the engine drops its result.
        let w = engine.var(0u8);
        let held = w.write().blocking_wait().unwrap();
        engine.op("detached").write(&w).run(|(), (_w,)| Ok(Grenade));
        drop(held);
        assert!(fail.blocking_wait().is_err());
        assert!(skipped.blocking_wait().unwrap_err().is_skipped());
        engine.wait_for_all().blocking_wait().unwrap_err();
        engine.blocking_wait_for_var(&v).unwrap_err();
        // Workers are alive and nothing is stuck.
        for _ in 0..10 {
            engine.op("after").write(&v).run(|(), (mut v,)| {
                *v += 1;
                Ok(())
            });
        }
        assert_eq!(engine.op("get").read(&v).run(|(v,), ()| Ok(*v)).blocking_wait().unwrap(), 10);
        engine.blocking_shutdown(ShutdownMode::Drain).unwrap();
    }
}

/// A detached op has no handle, but its outcome is not lost: its failure (an
/// error or a panic) is stored on the var it writes, skips the ops after it
/// there, and is what `wait_for_all` reports; a refused push is an error at
/// push time.
#[test]
fn detached_ops_report_failures_through_vars_and_wait_for_all() {
    for engine in engines() {
        let (v, w) = (engine.var(0u32), engine.var(0u32));
        engine.op("fails").write(&v).run_detached(|(), (_v,)| Err("no luck".into())).unwrap();
        let skipped = engine.op("after").read(&v).run(|(v,), ()| Ok(*v)).blocking_wait().unwrap_err();
        assert!(skipped.is_skipped(), "{skipped}");
        assert!(format!("{skipped:#}").contains("no luck"), "{skipped:#}");
        let err = engine.wait_for_all().blocking_wait().unwrap_err();
        assert!(err.is_failed() && format!("{err:#}").contains("no luck"), "{err:#}");
        assert!(engine.blocking_wait_for_var(&v).unwrap_err().is_failed(), "the var carried the failure");

        engine.op("panics").write(&w).run_detached(|(), (_w,)| panic!("kaboom")).unwrap();
        let err = engine.wait_for_all().blocking_wait().unwrap_err();
        assert!(err.is_panic(), "{err}");
        assert!(engine.wait_for_all().blocking_wait().is_ok(), "reported once");

        let gone = engine.var(0u32);
        drop(engine.delete_var(&gone));
        let refused = engine.op("late").write(&gone).run_detached(|(), (_g,)| Ok(()));
        assert!(refused.unwrap_err().is_var_deleted());
        engine.blocking_shutdown(ShutdownMode::Drain).unwrap();
        let refused = engine.op("closed").run_detached(|(), ()| Ok(()));
        assert!(refused.unwrap_err().is_shutdown());
    }
}
