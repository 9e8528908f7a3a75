//! Failure paths: what happens when things go wrong around the engine (a
//! thread unwinding, a setting the OS refuses, a wait that could never end,
//! a destructor that panics, deep recursion). Nothing may hang and nothing
//! may be lost.

mod common;

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use depengine::{Engine, EngineKind, Lane};

/// A guard dropped while its thread unwinds completes its acquire; the op
/// behind it (an inline op, or any op on the naive engine) does not run
/// inside that unwinding, and its dropped token is reported as dropped.
#[test]
fn an_op_made_ready_by_unwinding_runs_elsewhere_and_its_dropped_token_is_not_a_panic() {
    for kind in [EngineKind::Threaded, EngineKind::Naive] {
        let engine = Engine::builder().kind(kind).cpu_workers(1).build().unwrap();
        let v = engine.var(0u32);
        let guard = v.write().blocking_wait().unwrap();
        let saw_unwinding = Arc::new(AtomicBool::new(true));
        let saw = saw_unwinding.clone();
        let op = engine.op("drops").write(&v).lane(Lane::Inline).run_async(
            move |(), (_v,), done: depengine::Completion<()>| {
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
    let engine = Engine::builder().cpu_workers(1).build().unwrap();
    let op = engine.op("p").run_async(|(), (), done: depengine::Completion<()>| {
        drop(done);
        panic!("after the token");
    });
    let err = op.blocking_wait().unwrap_err();
    assert!(err.is_panic(), "{err}");
    assert!(err.to_string().contains("after the token"), "{err}");
    let op = engine.op("q").run_async(|(), (), done: depengine::Completion<()>| {
        let _keep = done;
        panic!("with the token");
    });
    let err = op.blocking_wait().unwrap_err();
    assert!(err.is_panic() && err.to_string().contains("with the token"), "{err}");
}

#[test]
fn settings_the_os_would_refuse_are_refused_at_build() {
    let err = Engine::builder().thread_name("bad\0name").build().unwrap_err();
    assert!(err.is_invalid_argument(), "{err}");
    let err = Engine::builder().cpu_workers(depengine::MAX_WORKERS + 1).build().unwrap_err();
    assert!(err.is_invalid_argument() && err.to_string().contains("cpu_workers"), "{err}");
    let err = Engine::builder().priority_workers(100_000).build().unwrap_err();
    assert!(err.is_invalid_argument(), "{err}");
    let err = Engine::builder().cpu_devices(depengine::MAX_CPU_DEVICES + 1).build().unwrap_err();
    assert!(err.is_invalid_argument(), "{err}");
    assert!(
        Engine::builder().cpu_workers(depengine::MAX_WORKERS).build().is_ok(),
        "the bound itself is allowed"
    );
}
