//! The typed op record: one allocation holding the header, the body until it
//! runs, and the result until the handle takes it; its run, its store, the
//! release of the body's live count that completes it (the completion's
//! var side is `life.rs`'s), and its early resolution.
//!
//! Early resolution: an op that has not started is resolved at once (a
//! cancelling shutdown, a GPU's sticky fault, its group's cancel) though
//! its vars let it through only later. The protocol and why each op leaves
//! its vars exactly once, in push order: `README.md`, *Resolved early*. The
//! word's bits it relies on (`EARLY`, `THROUGH`) are claimed in `slot.rs`;
//! the engine's core counts such ops (`EngineCore::lingers` / `gone`),
//! which keeps a shutdown waiting until every one has left its vars.
//!
//! Why `unsafe`: the body and the epoch sit in `UnsafeCell`s claimed once
//! through the state word (`slot.rs`), which the record shares rather than
//! adding a lock (PERFORMANCE.md, *One state word per op*; modelled:
//! `slot/loom_tests.rs`); and the body's reference passes to the live count
//! by `TaskRef::into_raw`, so that a guard holds no reference of its own
//! (PERFORMANCE.md, *Guards hold no reference to their op*).

#![allow(unsafe_code)]

use std::marker::PhantomData;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::task::{Context, Poll};

use super::job::{Job, Running};
use super::life::{complete_nested, release_vars, release_vars_with_errors};
use super::slot::{self, Published, ResultSlot, SlotBorrow, SlotRef, SlotVtable};
use super::{DepList, EngineRef, GROUP_REASON, Header, Meta, TaskRef, TaskVtable, dealloc};
use crate::error::{Error, Kind};
use crate::sync::cell::UnsafeCell;
use crate::sync::epoch::EpochRef;

/// The header first (`repr(C)`): its hot prefix must follow the record's
/// reference counts (see [`Header`]).
#[repr(C)]
pub(crate) struct OpCell<J: Job> {
    header: Header,
    /// The result, the handle's waker, and the claims on `job` and `epoch`.
    slot: ResultSlot<Result<J::Output, Error>>,
    /// The body, until the op starts.
    job: UnsafeCell<Option<J>>,
    /// The op's count in its `wait_for_all` epoch, held until it completes.
    epoch: UnsafeCell<Option<EpochRef>>,
}

// SAFETY: besides the header and the slot (both `Sync`), an op shared
// between threads gives access to `job` only to the `execute` that claimed
// the slot's start, and to `epoch` only to the `publish` that published
// first; `strip` has `&mut self`. So only `Send` values move across.
unsafe impl<J: Job> Sync for OpCell<J> {}

impl<J: Job> OpCell<J> {
    /// A new op record of `engine`, placed in a slab slot.
    #[inline(always)]
    pub(crate) fn place(engine: EngineRef, meta: Meta, deps: DepList, job: J, epoch: EpochRef) -> Typed<J> {
        let make = || Self {
            header: Header::new(meta, deps, engine),
            slot: ResultSlot::new(),
            job: UnsafeCell::new(Some(job)),
            epoch: UnsafeCell::new(Some(epoch)),
        };
        // SAFETY: `task_vtable::<J>()` holds an `OpCell<J>`'s functions.
        let record = unsafe { TaskRef::new(make, |cell| &cell.header, task_vtable::<J>()) };
        Typed(record, PhantomData)
    }
}

/// A reference to a record known to be an `OpCell<J>`, as its push built
/// it: what the push makes the handle's [`SlotRef`] from.
pub(crate) struct Typed<J: Job>(TaskRef, PhantomData<fn() -> J>);

impl<J: Job> Typed<J> {
    #[inline]
    pub(crate) fn header(&self) -> &Header {
        self.0.header()
    }

    /// A reference for the op's handle.
    #[inline]
    pub(crate) fn slot(&self) -> SlotRef<J::Output> {
        // SAFETY: the record is an `OpCell<J>` (the type's invariant), whose
        // slot functions these are.
        unsafe { SlotRef::new(self.0.clone(), slot_vtable::<J>()) }
    }

    #[inline]
    pub(crate) fn into_task(self) -> TaskRef {
        self.0
    }

    /// The erased reference.
    #[cfg(all(test, depengine_loom))]
    pub(crate) fn task(&self) -> &TaskRef {
        &self.0
    }

    /// The record itself.
    #[cfg(all(test, depengine_loom))]
    pub(crate) fn cell(&self) -> &OpCell<J> {
        // SAFETY: the record is an `OpCell<J>` (the type's invariant).
        unsafe { cell_of::<J>(&self.0) }
    }
}

/// An `OpCell<J>`'s functions: a static, promoted from the constant.
fn task_vtable<J: Job>() -> &'static TaskVtable {
    // SAFETY (of each function's block): the vtable is reached only through
    // the header of an `OpCell<J>` (`place`), with a reference to it.
    &TaskVtable {
        execute: |task| {
            // SAFETY: see above.
            unsafe { cell_of::<J>(task) }.execute(task);
        },
        // SAFETY: see above.
        try_execute: |task| unsafe { cell_of::<J>(task) }.try_execute(task),
        // SAFETY: see above.
        is_started: |task| slot::is_started(&task.header().state),
        // SAFETY: see above.
        publish: |task| unsafe { cell_of::<J>(task) }.publish_now(),
        // SAFETY: see above.
        complete: |task| unsafe { cell_of::<J>(task) }.complete(task, true),
        // SAFETY: see above.
        abandon: |task, err| unsafe { cell_of::<J>(task) }.abandon(task, err),
        // SAFETY: see above.
        resolve_early: |task, err, pass_on| unsafe { cell_of::<J>(task) }.resolve_now(task, err, pass_on),
        is_resolved_early: |task| slot::is_early(&task.header().state),
        dealloc: dealloc::<OpCell<J>>,
    }
}

/// The handle's functions for an `OpCell<J>`: a static, promoted from the
/// constant.
fn slot_vtable<J: Job>() -> &'static SlotVtable<J::Output> {
    &SlotVtable { store: slot_store::<J>, poll_result: slot_poll::<J>, is_complete: slot_is_complete::<J> }
}

/// The `OpCell<J>` behind `task`.
///
/// # Safety
///
/// `task`'s record is an `OpCell<J>` (its vtable, or a [`SlotRef`], made
/// for it).
unsafe fn cell_of<J: Job>(task: &TaskRef) -> &OpCell<J> {
    // SAFETY: the header is the cell's first field (`repr(C)`), and the
    // record is an `OpCell<J>` (the contract), alive while `task` is.
    unsafe { task.as_ptr().cast::<OpCell<J>>().as_ref() }
}

// The slot functions. Safety (of each): `task`'s record is an `OpCell<J>`.

unsafe fn slot_store<J: Job>(task: &TaskRef, result: Result<J::Output, Error>) {
    // SAFETY: the functions' contract, above.
    unsafe { cell_of::<J>(task) }.store(task, result);
}

unsafe fn slot_poll<J: Job>(task: &TaskRef, cx: &mut Context<'_>) -> Poll<Result<J::Output, Error>> {
    // SAFETY: as above.
    let cell = unsafe { cell_of::<J>(task) };
    cell.slot.poll(&cell.header.state, cx)
}

unsafe fn slot_is_complete<J: Job>(task: &TaskRef) -> bool {
    slot::is_published(&task.header().state)
}

/// A record dropped unpublished (its push was refused after it was built)
/// gives back its slot among the ops in flight and leaves its group, as its
/// publication would have: every path that drops such a record is covered
/// at once.
impl<J: Job> Drop for OpCell<J> {
    fn drop(&mut self) {
        // SAFETY: `&mut self`: no other access to the epoch.
        let unpublished = self.epoch.with_mut(|epoch| unsafe { (*epoch).is_some() });
        if unpublished && self.header.meta.counted() {
            self.header.engine.left();
        }
        if unpublished && self.header.meta.watched() {
            self.header.group_left();
        }
    }
}

impl<J: Job> OpCell<J> {
    /// Makes the stored result visible to the handle and wakes it, then
    /// releases the op's count in its epoch: the last step of
    /// [`complete`](Self::complete), and a nested op's, by its parent.
    fn publish_now(&self) {
        if slot::is_resolving(&self.header.state) {
            // Its resolution publishes it (`resolve_now`), once it has
            // stored the result and noted that the op lingers: a completion
            // on its vars or a bulk segment reaching it first must not. The
            // result may not be stored yet, and the epoch count it would
            // drop is what keeps a shutdown from closing its count of
            // lingering ops before the resolution adds to it.
            return;
        }
        // Not resolved early: this is the op's one publication, by the
        // `complete` whose release of the live count reached zero (a
        // state word reports a count's zero exactly once).
        // SAFETY: so only this call reads `epoch`.
        let epoch = self.epoch.with_mut(|epoch| unsafe { (*epoch).take() });
        if self.header.meta.watched() {
            self.header.watch_finished();
        }
        // Its slot among the ops in flight goes back before anyone waiting
        // for the op (its handle, `wait_for_all`) can be told: a caller
        // that saw it complete can push again at the bound.
        self.header.engine.done(self.header.meta.counted());
        // Nobody reads a detached op's result: the slot is left alone.
        if !self.header.meta.detached()
            && let Published::First(Some(waker)) = self.slot.publish(&self.header.state)
        {
            waker.wake();
        }
        drop(epoch);
    }
}

impl<J: Job> OpCell<J> {
    /// See `TaskVtable::execute`.
    fn execute(&self, this: &TaskRef) {
        debug_assert!(std::ptr::addr_eq(this.as_ptr().as_ptr(), self), "`this` is this record");
        // Read once, before the start's claim (an acquire) would make the
        // later uses read it again.
        let watched = self.header.meta.watched();
        if watched && self.cancelled_by_group(this) {
            return;
        }
        // SAFETY: the start is claimed once; only its claimer reads `job`.
        let job = slot::start(&self.header.state).then(|| self.job.with_mut(|job| unsafe { (*job).take() }));
        let Some(Some(job)) = job else {
            // Resolved early: it leaves its vars now. Else it was run out
            // of turn by its group's wait (`try_execute`): nothing is left.
            if slot::is_resolving(&self.header.state) {
                self.through_early(this);
            }
            return;
        };
        self.run_claimed(this, job, watched);
    }

    /// See `TaskVtable::try_execute`.
    fn try_execute(&self, this: &TaskRef) -> bool {
        let watched = self.header.meta.watched();
        // A cancelled group's op is left to its queue, which resolves it.
        if slot::is_started(&self.header.state)
            || self.header.group().is_some_and(|link| link.core.is_cancelled())
        {
            return false;
        }
        // SAFETY: the start is claimed once; only its claimer reads `job`.
        let job = slot::start(&self.header.state).then(|| self.job.with_mut(|job| unsafe { (*job).take() }));
        let Some(Some(job)) = job else { return false };
        self.run_claimed(this, job, watched);
        true
    }

    /// See `TaskVtable::abandon`.
    fn abandon(&self, this: &TaskRef, err: Error) {
        // SAFETY: the start is claimed once; only its claimer reads `job`.
        let job = slot::start(&self.header.state).then(|| self.job.with_mut(|job| unsafe { (*job).take() }));
        let Some(Some(job)) = job else {
            // Resolved early: it will not run, as asked.
            self.through_early(this);
            return;
        };
        let _ = catch_unwind(AssertUnwindSafe(|| job.vetoed(&err)));
        self.store(this, Err(err));
    }
}

impl<J: Job> OpCell<J> {
    /// Runs the body of an op whose start this thread claimed.
    fn run_claimed(&self, this: &TaskRef, job: J, watched: bool) {
        // Borrowed from the header: the record lives while `this` does.
        let _entered = self.header.span().map(tracing::Span::enter);
        tracing::trace!(target: "depengine::op", "started");
        if watched {
            self.header.watch_started();
        }
        match self.header.veto() {
            Some(err) => {
                // Dropping the body runs user destructors: a panic there must
                // not keep the op from completing.
                let _ = catch_unwind(AssertUnwindSafe(|| job.vetoed(&err)));
                self.store(this, Err(err));
            }
            None => {
                debug_assert!(std::ptr::addr_eq(this.as_ptr().as_ptr(), self), "`this` is this record");
                // SAFETY: `this` is this record, an `OpCell<J>`, whose slot
                // functions these are.
                let slot = unsafe { SlotBorrow::new(this, slot_vtable::<J>()) };
                job.start(Running { task: this, slot });
            }
        }
        if watched {
            self.header.watch_ended(None);
        }
    }

    /// An op of a cancelled group about to start is resolved as the cancel
    /// would have resolved it, and leaves its vars now (it was let
    /// through): true then. So no op starts once its group's cancel has
    /// set its flag, and in particular none whose dependency the cancel
    /// resolved, which its vars let through as the resolution ends, possibly
    /// before the cancel reaches it (`group.rs`). False for any
    /// other op, or one the cancel itself resolved (the start then finds it
    /// resolved, as any op resolved early).
    #[cold]
    #[inline(never)]
    fn cancelled_by_group(&self, this: &TaskRef) -> bool {
        let Some(link) = self.header.group() else { return false };
        if !link.core.is_cancelled() {
            return false;
        }
        // Cancelled through its token: the rest of the group goes now too.
        link.core.cancel_if_tied();
        let op = self.header.meta.name.clone();
        if !self.resolve_now(this, Error::new(Kind::Cancelled { op, reason: GROUP_REASON }), false) {
            return false;
        }
        self.through_early(this);
        true
    }

    /// The op failed with `err`: the error it leaves on its vars, and the
    /// engine told. Out of the error-free path.
    #[cold]
    fn failed(&self, err: &Error) {
        self.header.record_outcome(Err(err));
        if !self.header.meta.clears_error() {
            self.header.engine.failed(err, true);
        }
    }
}

impl<J: Job> OpCell<J> {
    /// Stores the body's result; the first call wins. Releases the body's
    /// live count, so the op may complete inside this call. `this` is a
    /// reference to this very record, held until the call returns.
    pub(crate) fn store(&self, this: &TaskRef, result: Result<J::Output, Error>) {
        if self.header.meta.watched() {
            self.header.watch_ended(result.as_ref().err());
        }
        let outcome = result.as_ref().map(|_| ()).map_err(Clone::clone);
        // A detached op is a sync op (one store, made by its body) whose
        // result nobody reads: only its outcome is kept, and an error (a
        // user's type, whose drop may panic) is stored all the same, so that
        // it is dropped with the record, where such a panic is contained.
        if !(self.header.meta.detached() && result.is_ok())
            && let Err(ignored) = self.slot.store(&self.header.state, result)
        {
            drop(ignored);
            return;
        }
        if let Err(err) = outcome {
            self.failed(&err);
        } else if self.header.has_errors() {
            self.header.record_outcome(Ok(()));
        }
        self.release_body(this, false);
    }
}

impl<J: Job> OpCell<J> {
    /// Resolves the op now, unstarted: see `TaskVtable::resolve_early`.
    pub(super) fn resolve_now(&self, this: &TaskRef, err: Error, pass_on: bool) -> bool {
        debug_assert!(std::ptr::addr_eq(this.as_ptr().as_ptr(), self), "`this` is this record");
        if !slot::start_early(&self.header.state) {
            return false;
        }
        // SAFETY: this call claimed the start (`ResultSlot::start`), which
        // makes it the only one to touch the job.
        let job = self.job.with_mut(|job| unsafe { (*job).take() });
        if let Some(job) = job {
            // Drops the body: a panic of its destructor is contained.
            let _ = catch_unwind(AssertUnwindSafe(|| job.vetoed(&err)));
        }
        // What `store` does, but the op does not complete: its vars have
        // not let it through.
        if !self.header.meta.clears_error() {
            self.header.engine.failed(&err, pass_on);
        } else if pass_on {
            self.header.engine.keep_failure(&err);
        }
        if self.header.meta.watched() {
            self.header.watch_ended(Some(&err));
        }
        if pass_on {
            self.header.record_outcome(Err(&err));
        }
        let _ = self.slot.store(&self.header.state, Err(err));
        self.header.engine.lingers();
        self.publish_resolved();
        if slot::mark_early(&self.header.state) {
            self.release_body(this, true);
            self.gone();
        }
        true
    }

    /// An op resolved early (`TaskVtable::resolve_early`) is let through by its
    /// vars (or its segment): it completes on them now if the resolution
    /// has ended, else the resolution's end completes it.
    pub(super) fn through_early(&self, this: &TaskRef) {
        if slot::mark_through(&self.header.state) {
            self.release_body(this, false);
            self.gone();
        }
    }

    /// Publishes an op that an early resolution claimed, by the resolution
    /// itself (every other publication of such an op returns at once: see
    /// `publish_now`): it counts the op as done, but neither gives its slot
    /// among the ops in flight back nor releases its epoch: [`gone`](Self::gone)
    /// does both, once it has left its vars, so that a `wait_for_all`
    /// resolves only once nothing it waited for is still queued anywhere.
    #[cold]
    fn publish_resolved(&self) {
        // Nobody reads a detached op's result: the slot is left alone.
        let waker = if self.header.meta.detached() {
            None
        } else {
            let Published::First(waker) = self.slot.publish(&self.header.state) else {
                unreachable!("an op resolved early is published by its resolution alone");
            };
            waker
        };
        // SAFETY: only the resolution, which claimed the start, publishes
        // an op resolved early, once; the epoch is taken only by `gone`,
        // which comes after this call (see there).
        let in_epoch = self.epoch.with_mut(|epoch| unsafe { (*epoch).is_some() });
        if in_epoch {
            if self.header.meta.watched() {
                self.header.watch_finished();
            }
            self.header.engine.done(false);
        }
        if let Some(waker) = waker {
            waker.wake();
        }
    }

    /// The op resolved early has left its vars: its slot among the ops in
    /// flight goes back, then its epoch, so that a `wait_for_all` that
    /// waited for it finds the slot free.
    fn gone(&self) {
        self.header.engine.gone(self.header.meta.counted());
        // SAFETY: `gone` runs once, in the second of the resolution's end
        // (`mark_early`) and the vars' let-through (`mark_through`), each
        // of which follows `publish_resolved` (the resolution calls it
        // before `mark_early`; a let-through that comes second follows
        // `mark_early` through the state word's read-modify-write). So no
        // other access to the epoch runs meanwhile.
        let epoch = self.epoch.with_mut(|epoch| unsafe { (*epoch).take() });
        drop(epoch);
    }
}

impl<J: Job> OpCell<J> {
    /// Releases the body's live count, once its result is stored: the call
    /// that reaches zero completes the op. `this` is a reference to this
    /// very record, held by the caller until this returns. `late`: the op
    /// was resolved early and its resolution ended after its vars let it
    /// through (for a nested op, as if a guard had outlived its body, since
    /// its parent saw it unfinished and waits to be told).
    ///
    /// If guards are still alive, one of them completes the op: the live
    /// count then owns a reference to the record, which the [`LiveRef`]
    /// whose drop reaches zero takes back (so a guard holds no reference of
    /// its own). It is taken here before the release, so that the guard
    /// cannot take back one not yet given. Without guards, nothing but this
    /// call can reach the count (no guard can be made once the body has
    /// returned), so its release is sure to reach zero.
    #[inline]
    pub(super) fn release_body(&self, this: &TaskRef, late: bool) {
        let state = &self.header.state;
        // Acquire: the writes made through guards already dropped happen
        // before the completion below.
        if state.live() > 1 {
            let passed = this.clone().into_raw();
            if !state.release_live() {
                return;
            }
            // SAFETY: the guards were dropped meanwhile, and this call
            // reached zero, so no `LiveRef` took back `passed` (the
            // reference made just above by `into_raw`): it is still this
            // call's to drop.
            drop(unsafe { TaskRef::from_raw(passed) });
            self.complete(this, true);
        } else {
            let last = state.release_live();
            debug_assert!(last, "no guard can be made once the body has returned");
            self.complete(this, late);
        }
    }

    /// Completes the op, whose body has finished and whose guards are gone:
    /// each var completed in turn (one lock at a time), the ops that became
    /// ready dispatched, the result published. `after_guards`: a guard
    /// outlived the body. A nested op's parent holds its vars and publishes
    /// it (`engine_core.rs`).
    pub(super) fn complete(&self, this: &TaskRef, after_guards: bool) {
        let header = &self.header;
        if header.meta.nested() {
            complete_nested(header, after_guards);
            return;
        }
        // An error-free op reads one bit of the error path.
        let ok = if header.has_errors() {
            release_vars_with_errors(this)
        } else {
            // A GPU op whose vars went early (`release_vars_early`) has
            // them no more.
            if !header.deps.is_empty() && !header.vars_gone() {
                release_vars(this, None);
            }
            true
        };
        // Most ops have no span: the event is logged without a closure then.
        match header.span() {
            Some(span) => span.in_scope(|| tracing::trace!(target: "depengine::op", ok, "finished")),
            None => tracing::trace!(target: "depengine::op", ok, "finished"),
        }
        self.publish_now();
    }
}

#[cfg(all(test, depengine_loom))]
mod loom_tests;
#[cfg(all(test, not(depengine_loom), target_pointer_width = "64"))]
mod tests;
