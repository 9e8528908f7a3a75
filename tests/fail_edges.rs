//! Failure paths: what happens when things go wrong around the engine (a
//! thread unwinding, a setting the OS refuses, a wait that could never end,
//! a destructor that panics, deep recursion). Nothing may hang and nothing
//! may be lost.

mod common;

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use depengine::engine::EngineKind;
use depengine::{Engine, Lane};

/// A guard dropped while its thread unwinds completes its acquire; the op
/// behind it (an inline op, or any op on the naive engine) does not run
/// inside that unwinding, and its dropped token is reported as dropped.
#[test]
fn an_op_made_ready_by_unwinding_runs_elsewhere_and_its_dropped_token_is_not_a_panic() {
    for kind in [EngineKind::Threaded, EngineKind::Naive] {
        let engine = depengine::EngineBuilder::from_env().kind(kind).cpu_workers(1).build().unwrap();
        let v = engine.var(0u32);
        // A read guard: a write guard dropped in a panic would poison `v`.
        let guard = v.read().blocking_wait().unwrap();
        let saw_unwinding = Arc::new(AtomicBool::new(true));
        let saw = saw_unwinding.clone();
        let op = engine.op("drops").write(&v).lane(Lane::Inline).run_async(
            move |(), (_v,), done: depengine::engine::Completion<()>| {
                saw.store(std::thread::panicking(), Ordering::SeqCst);
                drop(done);
            },
        );
        let unwound = std::thread::spawn(move || {
            catch_unwind(AssertUnwindSafe(move || {
                let _guard = guard;
                panic!("unrelated");
            }))
            .is_err()
        });
        assert!(unwound.join().unwrap());
        let err = op.blocking_wait().unwrap_err();
        assert!(err.is_completion_dropped(), "{kind:?}: {err}");
        assert!(
            !saw_unwinding.load(Ordering::SeqCst),
            "{kind:?}: the body ran inside someone else's unwinding"
        );
    }
}

/// A body that drops its token and then panics is a panic, with its message.
#[test]
fn a_body_that_panics_after_dropping_its_token_is_a_panic() {
    let engine = depengine::EngineBuilder::from_env().cpu_workers(1).build().unwrap();
    let op = engine.op("p").run_async(|(), (), done: depengine::engine::Completion<()>| {
        drop(done);
        panic!("after the token");
    });
    let err = op.blocking_wait().unwrap_err();
    assert!(err.is_panic(), "{err}");
    assert!(err.to_string().contains("after the token"), "{err}");
    let op = engine.op("q").run_async(|(), (), done: depengine::engine::Completion<()>| {
        let _keep = done;
        panic!("with the token");
    });
    let err = op.blocking_wait().unwrap_err();
    assert!(err.is_panic() && err.to_string().contains("with the token"), "{err}");
}

#[test]
fn settings_the_os_would_refuse_are_refused_at_build() {
    let err = depengine::EngineBuilder::from_env().thread_name("bad\0name").build().unwrap_err();
    assert!(err.is_invalid_argument(), "{err}");
    let err = depengine::EngineBuilder::from_env()
        .cpu_workers(depengine::EngineBuilder::MAX_WORKERS + 1)
        .build()
        .unwrap_err();
    assert!(err.is_invalid_argument() && err.to_string().contains("cpu_workers"), "{err}");
    let err = depengine::EngineBuilder::from_env().priority_workers(100_000).build().unwrap_err();
    assert!(err.is_invalid_argument(), "{err}");
    let err = depengine::EngineBuilder::from_env()
        .cpu_devices(depengine::EngineBuilder::MAX_CPU_DEVICES + 1)
        .build()
        .unwrap_err();
    assert!(err.is_invalid_argument(), "{err}");
    assert!(
        depengine::EngineBuilder::from_env()
            .cpu_workers(depengine::EngineBuilder::MAX_WORKERS)
            .build()
            .is_ok(),
        "the bound itself is allowed"
    );
}

/// Runs `f` on another thread; fails the test if it does not return in 30 s.
fn within_30s<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || tx.send(f()).unwrap());
    rx.recv_timeout(std::time::Duration::from_secs(30)).expect("hung")
}

/// Waits inside a body that would wait for the body's own op are refused
/// with a clear error, on the threaded and the naive engine.
#[test]
fn waits_that_would_wait_for_their_own_op_are_refused() {
    for kind in [EngineKind::Threaded, EngineKind::Naive] {
        within_30s(move || {
            let engine = depengine::EngineBuilder::from_env().kind(kind).cpu_workers(1).build().unwrap();
            let v = engine.var(0u32);
            let w = engine.var(0u32);
            let e = engine.clone();
            let (vv, ww) = (v.clone(), w.clone());
            let errors = engine
                .op("waits")
                .write(&v)
                .read(&w)
                .run(move |(_w,), (_v,)| {
                    let all = e.wait_for_all().blocking_wait().unwrap_err();
                    let on_var = e.blocking_wait_for_var(&vv).unwrap_err();
                    let on_read_var = e.blocking_wait_for_var(&ww).unwrap_err();
                    let behind = e.op("needs v").read(&vv).run(|(v,), ()| Ok(*v));
                    let behind = behind.blocking_wait().unwrap_err();
                    let shutdown = e.blocking_shutdown(depengine::ShutdownMode::Cancel).unwrap_err();
                    Ok([all, on_var, on_read_var, behind, shutdown])
                })
                .blocking_wait()
                .unwrap();
            for err in &errors {
                assert!(err.is_would_deadlock(), "{kind:?}: {err}");
            }
            assert!(errors[0].to_string().contains("wait_for_all"), "{}", errors[0]);
            assert!(!engine.is_closed(), "{kind:?}: a refused shutdown closed the engine");
            engine.wait_for_all().blocking_wait().unwrap();
            assert_eq!(engine.op("after").read(&v).run(|(v,), ()| Ok(*v)).blocking_wait().unwrap(), 0);
        });
    }
}

/// A body on a pool of one worker may wait for an op it pushed to that
/// pool: the worker runs it while it waits.
#[test]
fn a_body_on_a_one_worker_pool_can_wait_for_an_op_it_pushed_there() {
    let value = within_30s(|| {
        let engine = depengine::EngineBuilder::from_env().cpu_workers(1).build().unwrap();
        let v = engine.var(5u32);
        let e = engine.clone();
        let outer = engine.op("outer").run(move |(), ()| {
            let inner = e.op("inner").write(&v).run(|(), (mut v,)| {
                *v += 1;
                Ok(*v)
            });
            inner.blocking_wait().map_err(Into::into)
        });
        outer.blocking_wait().unwrap()
    });
    assert_eq!(value, 6);
}

/// `wait_for_all().await` and `shutdown().await` inside a future op of the
/// same engine would wait for that op: they fail at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn engine_wide_waits_inside_a_future_op_fail_clearly() {
    let engine = depengine::EngineBuilder::from_env().cpu_workers(1).build().unwrap();
    let e = engine.clone();
    let errors = common::timed(engine.op("future").spawn(move |(), ()| async move {
        let all = e.wait_for_all().await.unwrap_err();
        let shutdown = e.shutdown(depengine::ShutdownMode::Drain).await.unwrap_err();
        // Another engine's waits are not refused.
        let other = depengine::EngineBuilder::from_env().cpu_workers(1).build().unwrap();
        other.op("x").run(|(), ()| Ok(())).await?;
        other.wait_for_all().await?;
        Ok([all, shutdown])
    }))
    .await
    .unwrap();
    for err in &errors {
        assert!(err.is_would_deadlock(), "{err}");
    }
    assert!(!engine.is_closed());
    common::timed(engine.wait_for_all()).await.unwrap();
}

/// A value whose destructor panics.
struct PanicsOnDrop;

impl Drop for PanicsOnDrop {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            panic!("destructor of the var's data");
        }
    }
}

/// When the record behind a handle holds the last reference to a var, the
/// var's data goes with it: a panic of its destructor is contained, and
/// the op's result is not lost.
#[test]
fn a_panicking_destructor_of_var_data_does_not_escape_through_a_handle() {
    for kind in [EngineKind::Threaded, EngineKind::Naive] {
        let engine = depengine::EngineBuilder::from_env().kind(kind).cpu_workers(1).build().unwrap();
        for _ in 0..50 {
            let v = engine.var(PanicsOnDrop);
            let op = engine.op("reads").read(&v).run(|(_v,), ()| Ok(7u32));
            drop(v);
            let result = catch_unwind(AssertUnwindSafe(move || op.blocking_wait()));
            assert_eq!(result.expect("a panic escaped blocking_wait").unwrap(), 7, "{kind:?}");
            // The same, with a handle dropped unpolled after the op completed.
            let v = engine.var(PanicsOnDrop);
            let op = engine.op("reads").read(&v).run(|(_v,), ()| Ok(7u32));
            drop(v);
            engine.wait_for_all().blocking_wait().unwrap();
            catch_unwind(AssertUnwindSafe(move || drop(op))).expect("a panic escaped the handle's drop");
        }
    }
}

/// Pushes a chain of `left` ops, each pushed by the body of the one before
/// (its continuation) and ready at once (it reads `v`, which nothing
/// writes), each counting itself in `count`.
fn continue_from(engine: Engine, v: depengine::Var<u64>, count: Arc<AtomicU64>, lane: Lane, left: u64) {
    if left == 0 {
        return;
    }
    let (e, next) = (engine.clone(), v.clone());
    engine
        .op("step")
        .read(&v)
        .lane(lane)
        .run_detached(move |(_v,), ()| {
            count.fetch_add(1, Ordering::SeqCst);
            continue_from(e, next, count, lane, left - 1);
            Ok(())
        })
        .unwrap();
}

/// A body that pushes its continuation, 100,000 deep, on the naive engine
/// and on the inline lane: the stack does not grow with the chain.
#[test]
fn a_body_that_pushes_its_continuation_does_not_overflow_the_stack() {
    const DEPTH: u64 = 100_000;
    for (kind, lane) in [(EngineKind::Naive, Lane::Normal), (EngineKind::Threaded, Lane::Inline)] {
        let count = within_30s(move || {
            let engine = depengine::EngineBuilder::from_env().kind(kind).cpu_workers(1).build().unwrap();
            let count = Arc::new(AtomicU64::new(0));
            continue_from(engine.clone(), engine.var(0u64), count.clone(), lane, DEPTH);
            engine.wait_for_all().blocking_wait().unwrap();
            count.load(Ordering::SeqCst)
        });
        assert_eq!(count, DEPTH, "{kind:?} {lane:?}");
    }
}

/// A write guard dropped while its thread unwinds poisons its var, as a
/// panicking op body does: the next op is skipped, `wait_for_var` reports
/// and clears the error, `wait_for_all` reports it. A read guard does not.
#[test]
fn a_write_guard_dropped_in_a_panic_poisons_its_var() {
    for kind in [EngineKind::Threaded, EngineKind::Naive] {
        let engine = depengine::EngineBuilder::from_env().kind(kind).cpu_workers(1).build().unwrap();
        let (v, r) = (engine.var(1u32), engine.var(2u32));
        let (write, read) = (v.write().blocking_wait().unwrap(), r.read().blocking_wait().unwrap());
        let panicked = std::thread::spawn(move || {
            let (mut write, _read) = (write, read);
            *write = 99; // half-written
            panic!("while writing");
        })
        .join();
        assert!(panicked.is_err());
        let next = engine.op("next").read(&v).run(|(v,), ()| Ok(*v)).blocking_wait().unwrap_err();
        assert!(next.is_skipped(), "{kind:?}: {next}");
        assert!(next.root().is_panic() && next.root().to_string().contains("write guard"), "{}", next.root());
        assert!(engine.wait_for_all().blocking_wait().unwrap_err().is_panic(), "{kind:?}");
        assert!(engine.blocking_wait_for_var(&v).unwrap_err().is_panic(), "{kind:?}");
        assert_eq!(engine.op("again").read(&v).run(|(v,), ()| Ok(*v)).blocking_wait().unwrap(), 99);
        assert_eq!(engine.op("r").read(&r).run(|(r,), ()| Ok(*r)).blocking_wait().unwrap(), 2, "{kind:?}");
    }
}

/// Pushes an op writing `v` (adding one) that runs until the returned
/// sender sends, and returns once it runs, alone (not in a bulk segment:
/// ops behind it in its own segment would wait for it).
fn hold_in_a_write(
    engine: &Engine,
    v: &depengine::Var<u32>,
) -> (std::sync::mpsc::Sender<()>, depengine::OpHandle<u32>) {
    let (release, held) = std::sync::mpsc::channel::<()>();
    let (started, running_now) = std::sync::mpsc::channel::<()>();
    let running = engine.op("long").write(v).run(move |(), (mut v,)| {
        started.send(()).unwrap();
        held.recv().unwrap();
        *v += 1;
        Ok(*v)
    });
    engine.flush();
    running_now.recv().unwrap();
    (release, running)
}

/// `ShutdownMode::Cancel` resolves ops that have not started at once:
/// those queued on a var behind a running op, those queued on a pool
/// behind a busy worker, members of a bulk segment; the running op
/// finishes, a deletion behind it still runs, and the shutdown returns
/// once the running op is done.
#[test]
fn cancel_resolves_queued_ops_without_waiting_for_the_running_ones() {
    for bulk in [1, 16] {
        within_30s(move || {
            let engine = depengine::EngineBuilder::from_env().cpu_workers(1).bulk_size(bulk).build().unwrap();
            let v = engine.var(0u32);
            let (release, running) = hold_in_a_write(&engine, &v);
            let behind_var: Vec<_> = (0..3)
                .map(|_| {
                    engine.op("behind var").write(&v).run(|(), (mut v,)| {
                        *v += 100;
                        Ok(*v)
                    })
                })
                .collect();
            let behind_worker = engine.op("behind worker").run(|(), ()| Ok(7u32));
            let deleted = engine.delete_var(&v);
            let shutdown = {
                let engine = engine.clone();
                std::thread::spawn(move || engine.blocking_shutdown(depengine::ShutdownMode::Cancel))
            };
            for op in behind_var {
                let err = op.blocking_wait().unwrap_err();
                assert!(err.is_cancelled(), "bulk={bulk}: {err}");
            }
            assert!(behind_worker.blocking_wait().unwrap_err().is_cancelled(), "bulk={bulk}");
            assert!(!shutdown.is_finished(), "bulk={bulk}: shutdown did not wait for the running op");
            release.send(()).unwrap();
            assert_eq!(running.blocking_wait().unwrap(), 1);
            assert_eq!(
                deleted.blocking_wait().unwrap(),
                1,
                "bulk={bulk}: the deletion ran after the running op"
            );
            let _ = shutdown.join().unwrap();
        });
    }
}

/// An op queued behind an async op whose token is kept unsignalled is
/// cancelled at once; the shutdown waits for the token.
#[test]
fn cancel_does_not_wait_behind_an_unsignalled_token_for_queued_ops() {
    within_30s(|| {
        let engine = depengine::EngineBuilder::from_env().cpu_workers(1).build().unwrap();
        let v = engine.var(0u32);
        let (tx, rx) = std::sync::mpsc::channel();
        let holder = engine.op("holds").write(&v).run_async(
            move |(), (_v,), done: depengine::engine::Completion<()>| {
                tx.send(done).unwrap();
            },
        );
        let token = rx.recv().unwrap();
        let queued = engine.op("queued").read(&v).run(|(v,), ()| Ok(*v));
        let shutdown = {
            let engine = engine.clone();
            std::thread::spawn(move || engine.blocking_shutdown(depengine::ShutdownMode::Cancel))
        };
        assert!(queued.blocking_wait().unwrap_err().is_cancelled());
        token.succeed(());
        holder.blocking_wait().unwrap();
        let _ = shutdown.join().unwrap();
    });
}

/// What `debug_state()` and `version()` say, as README says it: the
/// queued ops by name (not the running ones), and a version that counts a
/// cancelled write too.
#[test]
fn debug_state_and_version_say_what_the_readme_says() {
    let engine = depengine::EngineBuilder::from_env().cpu_workers(1).bulk_size(1).build().unwrap();
    let v = engine.var(0u32);
    let guard = v.write().blocking_wait().unwrap();
    let queued = engine.op("queued write").write(&v).run(|(), (mut v,)| {
        *v += 1;
        Ok(*v)
    });
    let state = v.any().debug_state();
    assert!(state.write_running && state.running_reads == 0, "{state:?}");
    assert_eq!(state.queued, [(true, "queued write".to_string())]);
    let shutdown = {
        let engine = engine.clone();
        std::thread::spawn(move || engine.blocking_shutdown(depengine::ShutdownMode::Cancel))
    };
    assert!(queued.blocking_wait().unwrap_err().is_cancelled());
    drop(guard);
    let _ = shutdown.join().unwrap();
    // The acquire's write and the cancelled one.
    assert_eq!(v.version(), 2);
}

/// `OpHandle::abort` cancels an op that has not started, wherever it
/// waits, and leaves no error on its vars nor for `wait_for_all`; an op
/// that has started runs on. `cancel_on_drop` does the same when the
/// handle is dropped. With bulk execution on, a member of a segment is
/// aborted too.
#[test]
fn abort_and_cancel_on_drop_cancel_ops_that_have_not_started() {
    for bulk in [1, 16] {
        within_30s(move || {
            let engine = depengine::EngineBuilder::from_env().cpu_workers(1).bulk_size(bulk).build().unwrap();
            let v = engine.var(0u32);
            let (release, running) = hold_in_a_write(&engine, &v);
            let ran = Arc::new(AtomicU64::new(0));
            let body = |ran: &Arc<AtomicU64>| {
                let ran = ran.clone();
                move |(): (), (mut v,): (depengine::WriteGuard<u32>,)| {
                    ran.fetch_add(1, Ordering::SeqCst);
                    *v += 10;
                    Ok(*v)
                }
            };
            let aborted = engine.op("aborted").write(&v).run(body(&ran));
            let dropped = engine.op("dropped").write(&v).cancel_on_drop(true).run(body(&ran));
            let kept = engine.op("kept").write(&v).run(body(&ran));
            assert!(!running.abort(), "bulk={bulk}: a running op was aborted");
            assert!(aborted.abort(), "bulk={bulk}");
            assert!(!aborted.abort(), "bulk={bulk}: aborted twice");
            drop(dropped);
            release.send(()).unwrap();
            assert_eq!(running.blocking_wait().unwrap(), 1);
            assert!(aborted.blocking_wait().unwrap_err().is_cancelled(), "bulk={bulk}");
            assert_eq!(kept.blocking_wait().unwrap(), 11, "bulk={bulk}: no error was left on the var");
            engine.wait_for_all().blocking_wait().unwrap();
            assert_eq!(ran.load(Ordering::SeqCst), 1, "bulk={bulk}: a cancelled body ran");
        });
    }
}

/// An op's counts have 16 bits each: an op may declare a var up to
/// `MAX_DECLARATIONS` times (one guard each), and a push of more is refused,
/// by an op and by an acquire alike.
#[test]
fn declarations_past_the_bound_are_refused() {
    let engine = Engine::new();
    let v = engine.var(1u64);
    let at_bound = vec![&v; Engine::MAX_DECLARATIONS];
    let sum = engine
        .op("at the bound")
        .read_all(at_bound)
        .run(|(all,), ()| Ok(all.iter().map(|g| **g).sum::<u64>()));
    assert_eq!(sum.blocking_wait().unwrap(), Engine::MAX_DECLARATIONS as u64);
    let past = vec![&v; Engine::MAX_DECLARATIONS + 1];
    let err = engine.op("past it").read_all(past).run(|_, ()| Ok(())).blocking_wait().unwrap_err();
    assert!(err.is_invalid_argument() && err.to_string().contains("at most"), "{err}");
    let past = vec![&v; Engine::MAX_DECLARATIONS + 1];
    let err = engine.acquire().read_all(past).push().blocking_wait().unwrap_err();
    assert!(err.is_invalid_argument(), "{err}");
    engine.wait_for_all().blocking_wait().unwrap();
}
