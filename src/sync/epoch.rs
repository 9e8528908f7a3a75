//! Tracking what `wait_for_all` waits for: every op pushed before the call,
//! and nothing pushed after it.
//!
//! Ops are counted in the current *epoch*. `wait_for_all` closes the current
//! epoch and opens a new one; a closed epoch finishes when its last op
//! completes *and* the epoch before it has finished, so waiting for one
//! epoch waits for everything pushed before it.
//!
//! An epoch is counted by references ([`EpochRef`]): every op holds one,
//! the tracker holds one while the epoch is current, and the epoch before
//! it holds one until it finishes. The epoch finishes when its last
//! reference is dropped. Its count is a line that completing workers write,
//! so a push does not touch it: the tracker adds [`BATCH`] references with
//! one atomic add and hands them out one per push; at rotation it gives the
//! ones it did not hand out back with one atomic subtract.
//!
//! Why `unsafe`: an epoch is a node with a count of its own, so that the
//! tracker can add a batch of references with one atomic add, where an `Arc`
//! takes one atomic increment per push on a line the completing workers
//! write. Measured: PERFORMANCE.md, *Epochs counted in batches* (alternated
//! against `Arc` nodes: `w1_novars` slower with `Arc` in 17 of 20 pairs);
//! modelled: `epoch/loom_tests.rs`.

#![allow(unsafe_code)]

use std::ptr::NonNull;
use std::sync::Arc;

use super::latch::Latch;
use crate::error::{Error, Kind};
use crate::sync::Mutex;
use crate::sync::atomic::{AtomicUsize, Ordering, fence};
use crate::sync::lock;
use crate::sync::spin::SpinLock;

/// References the tracker takes at once for the pushes to come.
const BATCH: usize = 32;

struct Node {
    /// Live references (see the module docs).
    refs: AtomicUsize,
    /// The epoch opened after this one, linked at rotation: the reference
    /// this epoch holds until it finishes.
    next: Mutex<Option<EpochRef>>,
    done: Arc<Latch>,
}

/// One counted reference to an epoch: the epoch cannot finish while it lives.
pub(crate) struct EpochRef(NonNull<Node>);

// SAFETY: an `EpochRef` gives shared access to a `Node`, whose fields are
// all `Sync` (atomics, a mutex, an `Arc`), and its release is an atomic
// count: it may move to and be used from any thread.
unsafe impl Send for EpochRef {}
// SAFETY: as above; `&EpochRef` only reads through to the `Sync` node.
unsafe impl Sync for EpochRef {}

impl EpochRef {
    /// A new epoch, with this one reference to it.
    fn new() -> Self {
        let node = Node { refs: AtomicUsize::new(1), next: Mutex::new(None), done: Arc::default() };
        Self(NonNull::from(Box::leak(Box::new(node))))
    }

    fn node(&self) -> &Node {
        // SAFETY: the node is freed only when its count reaches zero, and
        // `self` is one of the references counted, so it is still alive.
        unsafe { self.0.as_ref() }
    }

    /// The latch set when this epoch finishes.
    pub(crate) fn done(&self) -> &Arc<Latch> {
        &self.node().done
    }

    /// Counts `n` more references, to be made with [`Self::counted`].
    fn add(&self, n: usize) {
        // Relaxed, as for `Arc::clone`: the new references are made from
        // this one, which keeps the epoch alive meanwhile.
        self.node().refs.fetch_add(n, Ordering::Relaxed);
    }

    /// One more reference to this epoch.
    ///
    /// # Safety
    ///
    /// It must have been counted by an [`add`](Self::add) and not handed
    /// out or released since: each counted reference is made at most once.
    unsafe fn counted(&self) -> Self {
        Self(self.0)
    }

    /// Drops this reference and `extra` more that were counted for it and
    /// never made (see [`Self::counted`]).
    fn release(self, extra: usize) {
        let node = self.0;
        std::mem::forget(self);
        // SAFETY: `self` was one reference to `node`, and the `extra` ones
        // were counted and never made; all of them are given up here.
        unsafe { release(node, extra + 1) };
    }
}

/// Gives up `n` references to `node`. The call that drops the last
/// finishes the epoch, and then every later epoch that was waiting only
/// for it (in a loop: one op can hold back any number of epochs).
///
/// # Safety
///
/// The caller owns `n` counted references to `node` and uses none of them
/// after this call.
unsafe fn release(mut node: NonNull<Node>, mut n: usize) {
    loop {
        // SAFETY: `n` references to `node` are owned here, so it is alive.
        let refs = unsafe { &node.as_ref().refs };
        // Release: every use of these references happens before the epoch
        // is seen finished; the acquire fence pairs with all such releases.
        if refs.fetch_sub(n, Ordering::Release) != n {
            return;
        }
        fence(Ordering::Acquire);
        // SAFETY: the count reached zero: nobody else holds the node, and
        // it was allocated by `Box` in `EpochRef::new`.
        let finished = unsafe { Box::from_raw(node.as_ptr()) };
        finished.done.set();
        let Some(next) = finished.next.into_inner().unwrap_or_else(|e| e.into_inner()) else {
            return;
        };
        node = next.0;
        n = 1;
        std::mem::forget(next);
    }
}

impl Drop for EpochRef {
    fn drop(&mut self) {
        // SAFETY: `self` is one counted reference, not used after its drop.
        unsafe { release(self.0, 1) };
    }
}

/// The epochs, and `S`: what pushes keep beside them under the same lock
/// (one lock per push for everything a push counts or takes; a spin lock,
/// whose release is a plain store, see `spin.rs`).
pub(crate) struct Tracker<S = ()> {
    state: SpinLock<State<S>>,
}

struct State<S> {
    current: EpochRef,
    /// References to `current` counted ahead and not handed out yet.
    reserved: usize,
    closed: bool,
    side: S,
}

impl<S> Drop for State<S> {
    fn drop(&mut self) {
        if self.reserved > 0 {
            // SAFETY: the reserved references were counted and never made;
            // `current`'s own reference is dropped after this, on its own.
            unsafe { release(self.current.0, self.reserved) };
        }
    }
}

impl<S: Default> Tracker<S> {
    pub(crate) fn new() -> Self {
        let state = State { current: EpochRef::new(), reserved: 0, closed: false, side: S::default() };
        Self { state: SpinLock::new(state) }
    }
}

impl<S> Tracker<S> {
    /// Counts one more op in the current epoch, unless the engine is
    /// closed, and runs `f` on the side state under the same lock. The op
    /// holds the returned reference until it completes.
    pub(crate) fn enter<R>(&self, f: impl FnOnce(&mut S) -> R) -> Result<(EpochRef, R), Error> {
        let mut state = self.state.lock();
        if state.closed {
            return Err(Error::new(Kind::Shutdown));
        }
        if state.reserved == 0 {
            state.current.add(BATCH);
            state.reserved = BATCH;
        }
        state.reserved -= 1;
        // SAFETY: one of the references counted ahead, handed out once:
        // `reserved` went down by one for it.
        let epoch = unsafe { state.current.counted() };
        Ok((epoch, f(&mut state.side)))
    }

    /// Runs `f` on the side state.
    pub(crate) fn with_side<R>(&self, f: impl FnOnce(&mut S) -> R) -> R {
        f(&mut self.state.lock().side)
    }

    /// Closes the current epoch (and, with `close`, the engine to new ops);
    /// returns the latch set once everything counted so far has completed.
    pub(crate) fn rotate(&self, close: bool) -> Arc<Latch> {
        // Allocated before taking the lock, which pushes spin on.
        let new = EpochRef::new();
        new.add(1);
        let (old, reserved) = {
            let mut state = self.state.lock();
            // SAFETY: counted just above, made once: the old epoch's
            // reference to the new one, held until the old one finishes.
            *lock(&state.current.node().next) = Some(unsafe { new.counted() });
            state.closed |= close;
            let reserved = std::mem::take(&mut state.reserved);
            (std::mem::replace(&mut state.current, new), reserved)
        };
        let done = old.done().clone();
        // Outside the lock: dropping the last references finishes the epoch
        // and sets latches, which runs their callbacks.
        old.release(reserved);
        done
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.state.lock().closed
    }
}

#[cfg(all(test, not(depengine_loom)))]
mod tests;

#[cfg(all(test, depengine_loom))]
mod loom_tests;
