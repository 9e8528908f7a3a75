//! The core's counts and failures, through the test engine's hooks (Miri
//! too).

use super::{KEPT_FAILURES, lock, test_engine};
use crate::error::Error;

#[test]
fn the_core_keeps_the_first_failures_and_forgets_them_when_taken() {
    let engine = test_engine();
    for _ in 0..2 * KEPT_FAILURES {
        engine.failed(&Error::invalid("a test's failure"), true);
    }
    assert_eq!(engine.counts.failures(), (2 * KEPT_FAILURES as u64, 0, 0));
    assert_eq!(lock(&engine.failures).len(), KEPT_FAILURES);
    assert!(engine.take_failure(|_| true).is_err());
    assert!(engine.take_failure(|_| true).is_ok(), "taken once");
}

/// An engine whose release hook counts its calls in `released`.
macro_rules! counted_engine {
    ($released:ident) => {{
        use std::ptr::NonNull;
        use std::sync::Arc;
        use std::sync::atomic::Ordering;

        use crate::op::engine_core::{EngineCore, EngineRef, Hooks, arc_counts};

        #[repr(C)]
        struct Counted {
            core: EngineCore,
        }
        unsafe fn release(core: NonNull<EngineCore>) {
            $released.fetch_add(1, Ordering::SeqCst);
            // SAFETY: the hook's own contract, passed on.
            unsafe { arc_counts::release::<Counted>(core) }
        }
        unsafe fn dispatch_ready(_: NonNull<EngineCore>, _: &mut crate::op::ReadyList) {}
        unsafe fn flush_nested(_: NonNull<EngineCore>) {}
        unsafe fn profiled(_: NonNull<EngineCore>, _: crate::profile::OpRecord) {}
        static HOOKS: Hooks = Hooks {
            retain: arc_counts::retain::<Counted>,
            release,
            dispatch_ready,
            flush_nested,
            help: || crate::op::Help::Nothing,
            profiled,
        };
        let engine = Arc::new(Counted { core: EngineCore::new(&HOOKS, None) });
        // SAFETY: `repr(C)`, the core first; the count `Arc::into_raw` left
        // is the reference's.
        unsafe { EngineRef::from_raw(NonNull::new_unchecked(Arc::into_raw(engine).cast_mut()).cast()) }
    }};
}

#[test]
fn a_deferring_thread_gives_its_engine_counts_back_when_it_settles_and_no_sooner() {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::deferred;

    static FIRST: AtomicUsize = AtomicUsize::new(0);
    static SECOND: AtomicUsize = AtomicUsize::new(0);
    let first = counted_engine!(FIRST);
    let second = counted_engine!(SECOND);
    let (a, b, other) = (first.clone(), first.clone(), second.clone());
    std::thread::spawn(move || {
        drop(first.clone());
        assert_eq!(FIRST.load(Ordering::SeqCst), 1, "a thread that does not defer releases at once");
        deferred::defer_here();
        drop(a);
        drop(b);
        assert_eq!(FIRST.load(Ordering::SeqCst), 1, "owed, not given back");
        drop(other);
        assert_eq!(SECOND.load(Ordering::SeqCst), 1, "another engine's count goes back at once");
        deferred::settle();
        assert_eq!(FIRST.load(Ordering::SeqCst), 3, "both owed counts given back");
        deferred::settle();
        assert_eq!(FIRST.load(Ordering::SeqCst), 3, "and only once");
        drop(first);
        assert_eq!(FIRST.load(Ordering::SeqCst), 3, "the last count owed: the engine lives until it settles");
        deferred::settle();
        assert_eq!(FIRST.load(Ordering::SeqCst), 4);
    })
    .join()
    .expect("the thread's checks pass");
    drop(second);
    assert_eq!(SECOND.load(Ordering::SeqCst), 2);
}
