//! An op's result slot: the body's result, the handle's waker and the op's
//! start claim, kept in step by the low bits of the op's state word
//! (`task_ref.rs`) instead of a lock.
//!
//! Each bit of the word is set once (only a registration sets and clears
//! `REGISTERING`), and each owns a part of the slot:
//!
//! * `STARTED` — claimed by the one `start` that may run the op's body
//!   (with `RESOLVING`, by the one `start_early` that resolves it early);
//! * `STORED` — claimed by the one `store` that writes the value;
//! * `PUBLISHED` — set by `publish`, which the caller orders after the
//!   store: from then on the value may be read;
//! * `TAKEN` — claimed by the one reader that takes the value;
//! * `REGISTERING` — a poll is writing the waker; `publish` stays away from
//!   it, and the poll sees `PUBLISHED` when it is done if it came meanwhile;
//! * `WAKER` — a waker is registered; the `publish` that finds it (and no
//!   registration in progress) takes and returns it.
//!
//! A completing op thus pays one atomic read-modify-write to store, one to
//! publish, and none for a waker nobody registered.
//!
//! The handle (`engine/op_handle.rs`) and an async op's completion token
//! ([`Completion`]) reach the slot through a [`SlotRef`]: the record's
//! reference and the static functions of its result's type.
//!
//! Why `unsafe`: the result and the waker sit in `UnsafeCell`s whose owner
//! the state word decides, instead of a mutex locked three times per op;
//! and a `SlotRef` calls functions of the record's own type through its
//! reference (a typed `Arc<dyn …>` before the records moved to the slab:
//! PERFORMANCE.md, *The lean record*), made only where the record's type
//! is known (`op_cell.rs`).
//! Measured: PERFORMANCE.md, *One state word per op*; modelled:
//! `slot/loom_tests.rs`.

#![allow(unsafe_code)]

use std::cell::Cell;
use std::fmt;
use std::task::{Context, Poll, Waker};

use super::{Header, TaskRef};
use crate::error::{BoxError, Error, Kind};

use super::task_ref::{
    EARLY, PUBLISHED, REGISTERING, RESOLVING, STARTED, STORED, State, TAKEN, THROUGH, WAKER,
};
use crate::sync::atomic::Ordering;
use crate::sync::cell::UnsafeCell;

/// The result and the waker; their bits are in the op's state word, which
/// every call is given (the header's: one word per op).
pub(crate) struct ResultSlot<T> {
    value: UnsafeCell<Option<T>>,
    waker: UnsafeCell<Option<Waker>>,
}

// SAFETY: the cells are reached only by the holder of the state bit that
// owns them (module docs): `value` by the claimer of `STORED` before
// `PUBLISHED` and by the claimer of `TAKEN` after it, whose `Acquire` of
// `PUBLISHED` pairs with `publish`'s `Release`; `waker` by a poll holding
// `REGISTERING` while `PUBLISHED` is unset, and by the one `publish` that
// saw `WAKER` without `REGISTERING` (after which no poll touches it). So
// sharing a slot only moves a `T` (and wakers, which are `Send`) between
// threads. Every call on one slot is given the same word (its record's).
unsafe impl<T: Send> Sync for ResultSlot<T> {}

/// What [`ResultSlot::publish`] found.
pub(crate) enum Published {
    /// This call published; the registered waker, if any, is to be woken.
    First(Option<Waker>),
    /// An earlier call had published.
    Again,
}

/// Whether the start was claimed (by a runner or a resolution).
#[inline]
pub(crate) fn is_started(state: &State) -> bool {
    state.has(STARTED)
}

/// Claims the start of the op: true for the first call only.
#[inline]
pub(crate) fn start(state: &State) -> bool {
    state.set(STARTED, Ordering::Relaxed) & STARTED == 0
}

/// Claims the start of the op for an early resolution, marking it as such
/// in the same step: true if the op had not started.
pub(crate) fn start_early(state: &State) -> bool {
    state.update(Ordering::Relaxed, |s| (s & STARTED == 0).then_some(s | STARTED | RESOLVING)).is_ok()
}

/// Whether an early resolution claimed the op (it will not run).
#[inline]
pub(crate) fn is_resolving(state: &State) -> bool {
    state.load(Ordering::Relaxed) & RESOLVING != 0
}

/// An op resolved early (its start claimed by the resolver) has two things
/// left to happen before it completes on its vars: the resolution ends
/// (`mark_early`) and its vars let it through (`mark_through`). Each
/// returns whether the other had happened: the call that comes second
/// completes the op.
pub(crate) fn mark_early(state: &State) -> bool {
    state.set(EARLY, Ordering::AcqRel) & THROUGH != 0
}

/// Whether the op was resolved early (the resolution has ended).
pub(crate) fn is_early(state: &State) -> bool {
    state.has(EARLY)
}

/// See [`mark_early`].
pub(crate) fn mark_through(state: &State) -> bool {
    state.set(THROUGH, Ordering::AcqRel) & EARLY != 0
}

/// Whether the value is published.
#[inline]
pub(crate) fn is_published(state: &State) -> bool {
    state.has(PUBLISHED)
}

impl<T> ResultSlot<T> {
    pub(crate) fn new() -> Self {
        Self { value: UnsafeCell::new(None), waker: UnsafeCell::new(None) }
    }

    /// Stores `value` unless a value was stored already; gives it back then.
    #[inline]
    pub(crate) fn store(&self, state: &State, value: T) -> Result<(), T> {
        if state.set(STORED, Ordering::Relaxed) & STORED != 0 {
            return Err(value);
        }
        // SAFETY: this call claimed `STORED`; the value is read only after
        // `PUBLISHED`, which the caller sets after this call returns.
        self.value.with_mut(|value_ptr| unsafe { *value_ptr = Some(value) });
        Ok(())
    }

    /// Makes the stored value readable. The caller must have stored one,
    /// in a call that happens-before this one.
    #[inline]
    pub(crate) fn publish(&self, state: &State) -> Published {
        let prev = state.set(PUBLISHED, Ordering::AcqRel);
        if prev & PUBLISHED != 0 {
            return Published::Again;
        }
        if prev & (WAKER | REGISTERING) != WAKER {
            return Published::First(None);
        }
        // SAFETY: a waker was registered and no poll is writing it; with
        // `PUBLISHED` set, none will again. The `Acquire` above pairs with
        // the registering poll's `Release`.
        Published::First(self.waker.with_mut(|waker| unsafe { (*waker).take() }))
    }

    /// The value once published; else registers `cx`'s waker for `publish`.
    ///
    /// # Panics
    ///
    /// If the value was taken already.
    pub(crate) fn poll(&self, state: &State, cx: &mut Context<'_>) -> Poll<T> {
        if is_published(state) {
            return Poll::Ready(self.take(state));
        }
        // Cloned (and a displaced waker dropped) outside the claim: a
        // waker's code must not run while `REGISTERING` is held.
        let waker = cx.waker().clone();
        let prev = state.set(REGISTERING, Ordering::Acquire);
        if prev & PUBLISHED != 0 {
            return Poll::Ready(self.take(state));
        }
        if prev & REGISTERING != 0 {
            // Another poll is registering (the engine never polls one op
            // from two places): ask to be polled again rather than wait.
            waker.wake();
            return Poll::Pending;
        }
        // SAFETY: this poll set `REGISTERING` before `PUBLISHED` was set,
        // so `publish` will not touch the waker until the bit is cleared.
        let displaced = self.waker.with_mut(|slot| unsafe {
            match &*slot {
                Some(current) if current.will_wake(&waker) => Some(waker),
                _ => (*slot).replace(waker),
            }
        });
        let prev = state.update(Ordering::AcqRel, |s| Some((s & !REGISTERING) | WAKER)).unwrap_or_else(|s| s);
        drop(displaced);
        if prev & PUBLISHED != 0 {
            // Published while registering: `publish` left the waker alone.
            return Poll::Ready(self.take(state));
        }
        Poll::Pending
    }

    /// Takes the value; the caller has seen `PUBLISHED` with `Acquire`.
    fn take(&self, state: &State) -> T {
        let prev = state.set(TAKEN, Ordering::Acquire);
        assert!(prev & TAKEN == 0, "op handle polled after it returned its result");
        // SAFETY: published, so the store's write happens-before this read
        // and no one writes the value again; this call claimed `TAKEN`.
        let value = self.value.with_mut(|value| unsafe { (*value).take() });
        value.expect("a published op has a stored result")
    }
}

/// The functions of a record whose result is an `R`, for its handle and
/// its completion token. Each takes a reference to a record of the type
/// they were made for.
pub(crate) struct SlotVtable<R> {
    /// Stores the body's result; the first call wins. Releases the body's
    /// live count, so the op may complete inside this call (the reference
    /// is held until it returns).
    pub(crate) store: unsafe fn(&TaskRef, Result<R, Error>),
    /// Takes the result once the op has completed, else keeps the waker.
    pub(crate) poll_result: unsafe fn(&TaskRef, &mut Context<'_>) -> Poll<Result<R, Error>>,
    /// Whether the op has completed.
    pub(crate) is_complete: unsafe fn(&TaskRef) -> bool,
}

/// A reference to a record whose result is an `R`, with its functions.
pub(crate) struct SlotRef<R: 'static> {
    task: TaskRef,
    vtable: &'static SlotVtable<R>,
}

impl<R: 'static> SlotRef<R> {
    /// # Safety
    ///
    /// `vtable`'s functions are those of `task`'s record type.
    pub(crate) unsafe fn new(task: TaskRef, vtable: &'static SlotVtable<R>) -> Self {
        Self { task, vtable }
    }

    #[inline]
    pub(crate) fn header(&self) -> &Header {
        self.task.header()
    }

    /// The erased reference.
    pub(crate) fn task(&self) -> &TaskRef {
        &self.task
    }

    /// Stores the op's result (see [`SlotVtable::store`]) and lets go of
    /// the reference.
    pub(crate) fn store(self, result: Result<R, Error>) {
        // SAFETY: the vtable is the record's own (`new`'s contract).
        unsafe { (self.vtable.store)(&self.task, result) }
    }

    /// Takes the result once the op has completed.
    pub(crate) fn poll_result(&self, cx: &mut Context<'_>) -> Poll<Result<R, Error>> {
        // SAFETY: as above.
        unsafe { (self.vtable.poll_result)(&self.task, cx) }
    }

    /// Whether the op has completed.
    pub(crate) fn is_complete(&self) -> bool {
        // SAFETY: as above.
        unsafe { (self.vtable.is_complete)(&self.task) }
    }
}

impl<R: 'static> Clone for SlotRef<R> {
    fn clone(&self) -> Self {
        Self { task: self.task.clone(), vtable: self.vtable }
    }
}

/// A [`SlotRef`] borrowed from the thread that runs the op: what its body
/// stores through, taking no count of its own.
pub(crate) struct SlotBorrow<'a, R: 'static> {
    task: &'a TaskRef,
    vtable: &'static SlotVtable<R>,
}

impl<'a, R: 'static> SlotBorrow<'a, R> {
    /// # Safety
    ///
    /// `vtable`'s functions are those of `task`'s record type.
    #[inline]
    pub(crate) unsafe fn new(task: &'a TaskRef, vtable: &'static SlotVtable<R>) -> Self {
        Self { task, vtable }
    }

    /// Stores the body's result (see [`SlotVtable::store`]).
    #[inline]
    pub(crate) fn store(&self, result: Result<R, Error>) {
        // SAFETY: the vtable is the record's own (`new`'s contract).
        unsafe { (self.vtable.store)(self.task, result) }
    }

    /// An owned reference, for a body that stores its result later.
    pub(crate) fn to_owned(&self) -> SlotRef<R> {
        // SAFETY: as above.
        unsafe { SlotRef::new(self.task.clone(), self.vtable) }
    }
}

/// The completion token of an async op (MXNet's `on_complete`).
///
/// Signal it once, from any thread, at any time: the op completes when the
/// token is signalled and every guard it received is dropped. A token
/// dropped without being signalled completes the op with
/// [`Error::is_completion_dropped`]; the engine never hangs on it.
#[must_use = "an async op completes only when its Completion is signalled or dropped"]
pub struct Completion<R: Send + 'static> {
    slot: Option<SlotRef<R>>,
}

impl<R: Send + 'static> Completion<R> {
    pub(crate) fn new(slot: SlotRef<R>) -> Self {
        Self { slot: Some(slot) }
    }

    /// Completes the op with `result`.
    ///
    /// # Examples
    ///
    /// ```
    /// let engine = depengine::Engine::new();
    /// let h = engine.op("parse").run_async(|(), (), done: depengine::engine::Completion<u32>| {
    ///     done.complete("42".parse::<u32>().map_err(Into::into));
    /// });
    /// assert_eq!(h.blocking_wait()?, 42);
    /// # Ok::<(), depengine::Error>(())
    /// ```
    pub fn complete(mut self, result: Result<R, BoxError>) {
        let slot = self.slot.take().expect("completion present until signalled");
        let op = slot.header().meta.name.clone();
        slot.store(result.map_err(|source| Error::new(Kind::Failed { op, source })));
    }

    /// Completes the op successfully with `value`.
    ///
    /// # Examples
    ///
    /// ```
    /// let engine = depengine::Engine::new();
    /// let h = engine.op("async").run_async(|(), (), done| {
    ///     std::thread::spawn(move || done.succeed("finished elsewhere"));
    /// });
    /// assert_eq!(h.blocking_wait()?, "finished elsewhere");
    /// # Ok::<(), depengine::Error>(())
    /// ```
    pub fn succeed(self, value: R) {
        self.complete(Ok(value));
    }

    /// Completes the op with an error.
    ///
    /// # Examples
    ///
    /// ```
    /// let engine = depengine::Engine::new();
    /// let h = engine.op("async").run_async(|(), (), done: depengine::engine::Completion<()>| done.fail("device lost"));
    /// let err = h.blocking_wait().unwrap_err();
    /// assert!(err.is_failed());
    /// assert_eq!(std::error::Error::source(&err).unwrap().to_string(), "device lost");
    /// ```
    pub fn fail(self, err: impl Into<BoxError>) {
        self.complete(Err(err.into()));
    }
}

impl<R: Send + 'static> Drop for Completion<R> {
    /// Completes the op with [`Error::is_completion_dropped`], or as
    /// panicked if the token is dropped by a panic of the code holding it.
    /// Dropped by its own body on the thread running that body, it stores
    /// nothing: whether that body then panics or returns decides
    /// (`job::AsyncJob`), with the panic's own message. No body runs inside
    /// someone else's unwinding (`exec::place`), so a token dropped while
    /// this thread unwinds was dropped by that unwinding.
    fn drop(&mut self) {
        if let Some(slot) = self.slot.take() {
            if token_left_by_own_body(slot.header()) {
                return;
            }
            let op = slot.header().meta.name.clone();
            let err = if std::thread::panicking() {
                Error::panicked_without_payload(op, "panicked before signalling its completion".into())
            } else {
                Error::new(Kind::CompletionDropped { op })
            };
            slot.store(Err(err));
        }
    }
}

impl<R: Send + 'static> fmt::Debug for Completion<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = self.slot.as_ref().map(|s| s.header().meta.name.clone());
        f.debug_tuple("Completion").field(&name).finish()
    }
}

thread_local! {
    /// Whether the body running on this thread dropped its own
    /// [`Completion`] unsignalled.
    static TOKEN_LEFT: Cell<bool> = const { Cell::new(false) };
}

/// Called by a [`Completion`] dropped unsignalled: if it is dropped by its
/// own op's body, on the thread running it, the body's end decides what
/// the op's result is (a panic, or a dropped token), and this returns true.
pub(super) fn token_left_by_own_body(header: &Header) -> bool {
    let own = std::ptr::eq(crate::may_block::BODY.with(Cell::get).cast::<Header>(), header);
    if own {
        TOKEN_LEFT.with(|left| left.set(true));
    }
    own
}

/// Runs `body`, an op's body given its own token, and returns whether it
/// dropped that token unsignalled (`token_left_by_own_body`).
pub(super) fn watching_token(body: impl FnOnce()) -> bool {
    struct Leave(bool);
    impl Drop for Leave {
        fn drop(&mut self) {
            TOKEN_LEFT.with(|left| left.set(self.0));
        }
    }
    let _leave = Leave(TOKEN_LEFT.with(|left| left.replace(false)));
    body();
    TOKEN_LEFT.with(Cell::get)
}

/// A waker that counts its wake-ups, on the atomics of the current build
/// (loom's under `--cfg depengine_loom`).
#[cfg(test)]
mod counting {
    use crate::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::task::{Wake, Waker};

    pub(super) struct Count(AtomicUsize);

    impl Count {
        pub(super) fn get(&self) -> usize {
            self.0.load(Ordering::SeqCst)
        }
    }

    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    pub(super) fn waker() -> (Arc<Count>, Waker) {
        let count = Arc::new(Count(AtomicUsize::new(0)));
        (count.clone(), Waker::from(count))
    }
}

#[cfg(all(test, not(depengine_loom)))]
mod tests;

#[cfg(all(test, depengine_loom))]
mod loom_tests;
