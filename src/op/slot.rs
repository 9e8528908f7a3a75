//! An op's result slot: the body's result, the handle's waker and the op's
//! start claim, kept in step by the low bits of the op's state word
//! (`record/state.rs`) instead of a lock.
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
//! Why `unsafe`: the result and the waker sit in `UnsafeCell`s whose owner
//! the state word decides, instead of a mutex locked three times per op.
//! Measured: PERFORMANCE.md, *One state word per op*; modelled:
//! `slot/loom_tests.rs`.

#![allow(unsafe_code)]

use std::task::{Context, Poll, Waker};

use super::record::state::{
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
