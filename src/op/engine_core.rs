//! What an op reaches of its engine: one concrete struct at the start of
//! the engine's allocation, no trait object. What every op's completion
//! touches is a field here (its counts, the bound's slots, the throttle's
//! waiters, the failures `wait_for_all` reports); the few calls up to the
//! layers above (dispatching what a completion made ready, a wait's help,
//! a profiled op's record, and the engine's own reference count) go through one static table of functions the engine
//! gives as it starts, so that the layers still point one way.
//!
//! Why `unsafe`: a record holds its engine as an [`EngineRef`], a pointer
//! to this struct counted in the engine's `Arc` through the table (what
//! an `Arc<dyn …>` would be, without a fat pointer or a call through a trait
//! object on every completion). The engine keeps the struct as the first
//! field of its `repr(C)` allocation, so the pointer is the engine's.

//!
//! Nested ops, the one hook of bulk execution in the op layer, are here
//! too: a nested op is run by a parent op instead of by the engine (a bulk
//! segment runs its members), appended to no var, completed without
//! releasing any and published by its parent; a guard that outlives its
//! body holds the parent back through the handoff below. The argument:
//! `README.md`, *Nested ops*.

#![allow(unsafe_code)]

use std::ptr::NonNull;

use super::{Header, Help, ReadyList, Wait};

pub(crate) mod deferred;
use crate::error::Error;
use crate::profile::{OpRecord, Outcome};
use crate::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use crate::sync::drain::Drain;
use crate::sync::latch::CountLatch;
use crate::sync::limit::Limit;
use crate::sync::tally::Tally;
use crate::sync::{Mutex, lock};

/// Failures kept for `wait_for_all` between two of them: the first few are
/// enough to report one.
const KEPT_FAILURES: usize = 16;

/// The engine's calls that an op makes up the layers. Each is given the
/// core (the start of the engine's allocation).
pub(crate) struct Hooks {
    /// One more count on the engine's allocation.
    pub(crate) retain: unsafe fn(NonNull<EngineCore>),
    /// One count fewer (the last frees the engine).
    pub(crate) release: unsafe fn(NonNull<EngineCore>),
    /// Runs the ops a completion made ready where their placement says
    /// (the exec layer's dispatcher), leaving `ready` empty.
    pub(crate) dispatch_ready: unsafe fn(NonNull<EngineCore>, &mut ReadyList),
    /// A nested op's handle is waited on: the engine pushes what it holds
    /// back (the open bulk segment).
    pub(crate) flush_nested: unsafe fn(NonNull<EngineCore>),
    /// A thread blocks on a handle: runs one op it may run meanwhile.
    pub(crate) help: fn() -> Help,
    /// A profiled op completed: its record, for the profiler.
    pub(crate) profiled: unsafe fn(NonNull<EngineCore>, OpRecord),
}

/// What the engine counts of its ops' outcomes, for `Engine::metrics`:
/// completions on every op (on stripes, for they come from every worker at
/// once), failures by kind (rare: one shared counter each).
#[derive(Default)]
pub(crate) struct Counts {
    pub(crate) completed: Tally,
    failed: AtomicUsize,
    skipped: AtomicUsize,
    cancelled: AtomicUsize,
}

/// Failures by kind: (failed, skipped, cancelled).
pub(crate) type Failures = (u64, u64, u64);

impl Counts {
    /// Counts an op's failure by its kind.
    #[cold]
    fn failed(&self, err: &Error) {
        let counter = match Outcome::of(err) {
            Outcome::Skipped => &self.skipped,
            Outcome::Cancelled => &self.cancelled,
            _ => &self.failed,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn failures(&self) -> Failures {
        let get = |c: &AtomicUsize| c.load(Ordering::Relaxed) as u64;
        (get(&self.failed), get(&self.skipped), get(&self.cancelled))
    }
}

/// What an op reaches of its engine.
pub(crate) struct EngineCore {
    hooks: &'static Hooks,
    /// A cancelling shutdown has begun: ops not started are cancelled.
    cancelling: AtomicBool,
    pub(crate) counts: Counts,
    /// Pushing threads waiting at the soft bound on ops in flight.
    pub(crate) drain: Drain,
    /// The bound on user ops in flight, if there is one.
    limit: Option<Limit>,
    /// Ops resolved early and still queued on their vars: the pools run
    /// until they are gone.
    lingering: CountLatch,
    /// The first failures since the last `wait_for_all` (at most
    /// `KEPT_FAILURES`).
    failures: Mutex<Vec<Error>>,
}

impl EngineCore {
    pub(crate) fn new(hooks: &'static Hooks, limit: Option<Limit>) -> Self {
        Self {
            hooks,
            cancelling: AtomicBool::new(false),
            counts: Counts::default(),
            drain: Drain::default(),
            limit,
            lingering: CountLatch::default(),
            failures: Mutex::new(Vec::new()),
        }
    }

    pub(crate) fn is_cancelling(&self) -> bool {
        self.cancelling.load(Ordering::Acquire)
    }

    /// A cancelling shutdown begins.
    pub(crate) fn cancel(&self) {
        self.cancelling.store(true, Ordering::Release);
    }

    /// The bound on user ops in flight, if there is one.
    pub(crate) fn limit(&self) -> Option<&Limit> {
        self.limit.as_ref()
    }

    /// The count of ops resolved early and not yet gone from their vars.
    pub(crate) fn lingering(&self) -> &CountLatch {
        &self.lingering
    }

    /// A slot among the ops in flight is free again.
    #[inline]
    pub(crate) fn slot_freed(&self) {
        if let Some(limit) = &self.limit {
            limit.give();
        }
    }

    /// An op was published (completed, or resolved early): counted; if
    /// `counted` against the bound, its slot is free (an op resolved early
    /// keeps its slot until [`gone`](Self::gone)).
    #[inline]
    pub(crate) fn done(&self, counted: bool) {
        self.counts.completed.add_one();
        self.drain.completed_one();
        if counted {
            self.slot_freed();
        }
    }

    /// An op counted against the bound will not be published (its push
    /// was refused after its record was built).
    pub(crate) fn left(&self) {
        self.slot_freed();
    }

    /// An op is resolved early: it stays queued on its vars until they let
    /// it through, and counts until then.
    pub(crate) fn lingers(&self) {
        self.lingering.add();
    }

    /// An op resolved early has left its vars.
    pub(crate) fn gone(&self, counted: bool) {
        if counted {
            self.slot_freed();
        }
        self.lingering.release();
    }

    /// An op failed, was skipped or was cancelled with `err` (once per op,
    /// before it is published); `for_wait_all`: `wait_for_all` reports it.
    #[cold]
    pub(crate) fn failed(&self, err: &Error, for_wait_all: bool) {
        self.counts.failed(err);
        if for_wait_all {
            self.keep_failure(err);
        }
    }

    /// A failure that only `wait_for_all` reports (an error an op passes
    /// on to its vars, already counted).
    #[cold]
    pub(crate) fn keep_failure(&self, err: &Error) {
        let mut failures = lock(&self.failures);
        if failures.len() < KEPT_FAILURES {
            failures.push(err.clone());
        }
    }

    /// Forgets the failures kept, returning the first that `keep` accepts.
    pub(crate) fn take_failure(&self, keep: impl Fn(&Error) -> bool) -> Result<(), Error> {
        let failures = std::mem::take(&mut *lock(&self.failures));
        failures.into_iter().find(keep).map_or(Ok(()), Err)
    }
}

/// The count hooks of an engine kept in an `Arc<T>` whose value starts
/// with its core (`repr(C)`, the core first), for [`Hooks`]. Each is given
/// a core made from the `Arc`'s own pointer, and the caller owns the count
/// it gives up, or holds one while it asks for another.
pub(crate) mod arc_counts {
    use std::ptr::NonNull;
    use std::sync::Arc;

    use super::EngineCore;

    pub(crate) unsafe fn retain<T>(core: NonNull<EngineCore>) {
        // SAFETY: the module's contract: a live `Arc<T>`'s value.
        unsafe { Arc::increment_strong_count(core.cast::<T>().as_ptr()) }
    }

    pub(crate) unsafe fn release<T>(core: NonNull<EngineCore>) {
        // SAFETY: as above; the caller's count, given up.
        unsafe { Arc::decrement_strong_count(core.cast::<T>().as_ptr()) }
    }
}

/// A counted reference to an engine, through its core: what a record
/// holds of the engine that pushed it.
pub(crate) struct EngineRef(NonNull<EngineCore>);

// SAFETY: the core is `Sync` (atomics, locks) and its engine is shared by
// every thread; the count is the engine's `Arc`'s, moved through the hooks.
unsafe impl Send for EngineRef {}
// SAFETY: as above.
unsafe impl Sync for EngineRef {}

impl EngineRef {
    /// Takes over one count of the engine whose core is `core`.
    ///
    /// # Safety
    ///
    /// `core` is the core of a live engine (the first field of its
    /// allocation, whose count its hooks keep), and the caller owns one of
    /// its counts, which the value now holds. The pointer carries the whole
    /// allocation (made from the engine's own pointer, not from a borrow of
    /// the core): the hooks reach the rest of the engine through it.
    pub(crate) unsafe fn from_raw(core: NonNull<EngineCore>) -> Self {
        Self(core)
    }

    /// The engine's address: the same for every reference to it.
    pub(crate) fn as_ptr(&self) -> *const () {
        self.0.as_ptr().cast_const().cast()
    }
}

/// The calls up through the hooks take the reference, not the core it
/// derefs to: a hook reaches the whole engine from the pointer, which must
/// carry the engine's allocation, not a borrow of its first field.
impl EngineRef {
    /// Runs the ops in `ready` where their placement says.
    #[inline]
    pub(crate) fn dispatch_ready(&self, ready: &mut ReadyList) {
        // SAFETY: a counted reference to an engine's core, with the
        // provenance of the engine's whole allocation, as every hook expects.
        unsafe { (self.hooks.dispatch_ready)(self.0, ready) }
    }

    /// A thread waits on an op's handle that has not completed.
    pub(crate) fn wait(&self, wait: Wait) -> Help {
        match wait {
            Wait::OnNested => {
                // SAFETY: as above.
                unsafe { (self.hooks.flush_nested)(self.0) };
                Help::Nothing
            }
            Wait::Blocked => (self.hooks.help)(),
        }
    }

    /// A profiled op completed.
    #[cold]
    pub(crate) fn profiled(&self, op: OpRecord) {
        // SAFETY: as above.
        unsafe { (self.hooks.profiled)(self.0, op) }
    }
}

impl std::ops::Deref for EngineRef {
    type Target = EngineCore;

    #[inline]
    fn deref(&self) -> &EngineCore {
        // SAFETY: a counted reference: the engine lives.
        unsafe { self.0.as_ref() }
    }
}

impl Clone for EngineRef {
    fn clone(&self) -> Self {
        // SAFETY: the engine lives (this reference counts), and `retain` is
        // its own hook.
        unsafe { (self.hooks.retain)(self.0) };
        Self(self.0)
    }
}

impl Drop for EngineRef {
    fn drop(&mut self) {
        if deferred::owe(self.0) {
            return;
        }
        let hooks = self.hooks;
        // SAFETY: this reference's count, given up once; the engine may go
        // with it, and nothing reads it after.
        unsafe { (hooks.release)(self.0) };
    }
}

impl std::fmt::Debug for EngineRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("EngineRef").field(&self.0).finish()
    }
}

/// An engine of nothing but its core, for the op layer's own tests (loom
/// models among them): its ops' completions make nothing ready, and it
/// asks nothing of the layers above.
#[cfg(test)]
pub(crate) fn test_engine() -> EngineRef {
    use std::sync::Arc;

    #[repr(C)]
    struct TestEngine {
        core: EngineCore,
    }

    unsafe fn dispatch_ready(_: NonNull<EngineCore>, ready: &mut ReadyList) {
        assert!(ready.is_empty(), "a test engine's ops make nothing ready");
    }
    unsafe fn flush_nested(_: NonNull<EngineCore>) {}
    unsafe fn profiled(_: NonNull<EngineCore>, _: OpRecord) {}
    static HOOKS: Hooks = Hooks {
        retain: arc_counts::retain::<TestEngine>,
        release: arc_counts::release::<TestEngine>,
        dispatch_ready,
        flush_nested,
        help: || Help::Nothing,
        profiled,
    };
    let engine = Arc::new(TestEngine { core: EngineCore::new(&HOOKS, None) });
    // SAFETY: `repr(C)`, the core first; the count `Arc::into_raw` left
    // is the reference's, and its pointer carries the whole allocation.
    unsafe { EngineRef::from_raw(NonNull::new_unchecked(Arc::into_raw(engine).cast_mut()).cast()) }
}

/// A parent's continuation, run once its nested op completes.
pub(crate) type Resume = Box<dyn FnOnce() + Send>;

/// Kept under the nested op's error lock.
#[derive(Default)]
pub(crate) struct Handoff {
    finished: bool,
    then: Option<Resume>,
}

impl Handoff {
    /// Leaves `then` to run when the op finishes; hands it back if it has
    /// finished already (the caller runs it, once the lock is released).
    pub(crate) fn then(&mut self, then: Resume) -> Option<Resume> {
        if self.finished {
            return Some(then);
        }
        self.then = Some(then);
        None
    }

    /// Marks the op finished; takes the continuation left meanwhile, for
    /// the caller to run once the lock is released.
    pub(crate) fn finish(&mut self) -> Option<Resume> {
        self.finished = true;
        self.then.take()
    }
}

impl Header {
    /// Of a nested op whose body has stored its result: whether it has
    /// completed (no guard outlived the body, or the last one is gone).
    pub(crate) fn nested_done(&self) -> bool {
        self.state.live() == 0
    }

    /// Of a nested op that had not completed when its body returned: runs
    /// `then` once it has, on the thread that completes it (here if it has
    /// meanwhile).
    pub(crate) fn nested_then(&self, then: Resume) {
        let back = lock(&self.cold().errors).handoff.then(then);
        if let Some(then) = back {
            then();
        }
    }

    /// Of a nested op completing after its guards: marks it completed and
    /// takes what its parent does next, if it waits for it.
    pub(in crate::op) fn nested_finished(&self) -> Option<Resume> {
        lock(&self.cold().errors).handoff.finish()
    }
}

#[cfg(test)]
mod tests;

#[cfg(all(test, depengine_loom))]
mod loom_tests;
