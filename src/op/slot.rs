//! An op's result slot: the body's result, the handle's waker and the op's
//! start claim, kept in step by one state word instead of a lock.
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

use crate::sync::atomic::{AtomicU16, Ordering};
use crate::sync::cell::UnsafeCell;

const STARTED: u16 = 1;
const STORED: u16 = 1 << 1;
const PUBLISHED: u16 = 1 << 2;
const TAKEN: u16 = 1 << 3;
const WAKER: u16 = 1 << 4;
const REGISTERING: u16 = 1 << 5;
/// Set by a cancelling shutdown once it has resolved the op before it ran
/// (it claimed `STARTED`): see `mark_early`.
const EARLY: u16 = 1 << 6;
/// Set by the `execute` that finds `STARTED` taken: the op's vars have let
/// it through.
const THROUGH: u16 = 1 << 7;
/// Set with `STARTED`, in one step, by the claim of an early resolution:
/// from then on anyone can tell the op will not run.
const RESOLVING: u16 = 1 << 8;

pub(crate) struct ResultSlot<T> {
    state: AtomicU16,
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
// threads.
unsafe impl<T: Send> Sync for ResultSlot<T> {}

/// What [`ResultSlot::publish`] found.
pub(crate) enum Published {
    /// This call published; the registered waker, if any, is to be woken.
    First(Option<Waker>),
    /// An earlier call had published.
    Again,
}

impl<T> ResultSlot<T> {
    pub(crate) fn new() -> Self {
        Self { state: AtomicU16::new(0), value: UnsafeCell::new(None), waker: UnsafeCell::new(None) }
    }

    /// Whether the start was claimed (by a runner or a resolution).
    pub(crate) fn is_started(&self) -> bool {
        self.state.load(Ordering::Acquire) & STARTED != 0
    }

    /// Claims the start of the op: true for the first call only.
    pub(crate) fn start(&self) -> bool {
        self.state.fetch_or(STARTED, Ordering::Relaxed) & STARTED == 0
    }

    /// Claims the start of the op for an early resolution, marking it as
    /// such in the same step: true if the op had not started.
    pub(crate) fn start_early(&self) -> bool {
        let claim = |s: u16| (s & STARTED == 0).then_some(s | STARTED | RESOLVING);
        self.state.fetch_update(Ordering::Relaxed, Ordering::Relaxed, claim).is_ok()
    }

    /// Whether an early resolution claimed the op (it will not run).
    #[inline]
    pub(crate) fn is_resolving(&self) -> bool {
        self.state.load(Ordering::Relaxed) & RESOLVING != 0
    }

    /// An op resolved early (its start claimed by the resolver) has two
    /// things left to happen before it completes on its vars: the
    /// resolution ends (`mark_early`) and its vars let it through
    /// (`mark_through`). Each returns whether the other had happened: the
    /// call that comes second completes the op.
    pub(crate) fn mark_early(&self) -> bool {
        self.state.fetch_or(EARLY, Ordering::AcqRel) & THROUGH != 0
    }

    /// Whether the op was resolved early (the resolution has ended).
    pub(crate) fn is_early(&self) -> bool {
        self.state.load(Ordering::Acquire) & EARLY != 0
    }

    /// See [`mark_early`](Self::mark_early).
    pub(crate) fn mark_through(&self) -> bool {
        self.state.fetch_or(THROUGH, Ordering::AcqRel) & EARLY != 0
    }

    /// Stores `value` unless a value was stored already; gives it back then.
    pub(crate) fn store(&self, value: T) -> Result<(), T> {
        if self.state.fetch_or(STORED, Ordering::Relaxed) & STORED != 0 {
            return Err(value);
        }
        // SAFETY: this call claimed `STORED`; the value is read only after
        // `PUBLISHED`, which the caller sets after this call returns.
        self.value.with_mut(|value_ptr| unsafe { *value_ptr = Some(value) });
        Ok(())
    }

    /// Makes the stored value readable. The caller must have stored one,
    /// in a call that happens-before this one.
    pub(crate) fn publish(&self) -> Published {
        let prev = self.state.fetch_or(PUBLISHED, Ordering::AcqRel);
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

    /// Whether the value is published.
    pub(crate) fn is_published(&self) -> bool {
        self.state.load(Ordering::Acquire) & PUBLISHED != 0
    }

    /// The value once published; else registers `cx`'s waker for `publish`.
    ///
    /// # Panics
    ///
    /// If the value was taken already.
    pub(crate) fn poll(&self, cx: &mut Context<'_>) -> Poll<T> {
        if self.is_published() {
            return Poll::Ready(self.take());
        }
        // Cloned (and a displaced waker dropped) outside the claim: a
        // waker's code must not run while `REGISTERING` is held.
        let waker = cx.waker().clone();
        let prev = self.state.fetch_or(REGISTERING, Ordering::Acquire);
        if prev & PUBLISHED != 0 {
            return Poll::Ready(self.take());
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
        let prev = self
            .state
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |s| Some((s & !REGISTERING) | WAKER))
            .unwrap_or_else(|s| s);
        drop(displaced);
        if prev & PUBLISHED != 0 {
            // Published while registering: `publish` left the waker alone.
            return Poll::Ready(self.take());
        }
        Poll::Pending
    }

    /// Takes the value; the caller has seen `PUBLISHED` with `Acquire`.
    fn take(&self) -> T {
        let prev = self.state.fetch_or(TAKEN, Ordering::Acquire);
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
