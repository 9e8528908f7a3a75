//! Tracking what `wait_for_all` waits for: every op pushed before the call,
//! and nothing pushed after it.
//!
//! Ops are counted in the current *epoch*. `wait_for_all` closes the current
//! epoch and opens a new one; a closed epoch finishes when its last op
//! completes *and* the epoch before it has finished, so waiting for one
//! epoch waits for everything pushed before it.
//!
//! An epoch's count is its `Arc`'s reference count: every op holds one
//! reference, the tracker holds one while the epoch is current, and the
//! epoch before it holds one until it finishes. The epoch finishes when it
//! is dropped. So that a push does not touch the reference count (a cache
//! line that completing workers write), the tracker clones references in
//! batches and hands one to each push.

use std::sync::Arc;

use super::latch::Latch;
use crate::error::{Error, Kind};
use crate::loom::lock;
use crate::loom::sync::Mutex;

/// References the tracker clones at once for the pushes to come.
const BATCH: usize = 32;

pub(crate) struct Epoch {
    next: Mutex<Option<Arc<Epoch>>>,
    pub(crate) done: Arc<Latch>,
}

impl Epoch {
    fn new() -> Arc<Self> {
        Arc::new(Self { next: Mutex::new(None), done: Arc::default() })
    }
}

impl Drop for Epoch {
    /// The epoch has finished: sets its latch, then gives up its reference
    /// to the next epoch, finishing the successors that only waited for it
    /// (in a loop, not by recursion: a long-lived op can hold back any
    /// number of epochs).
    fn drop(&mut self) {
        self.done.set();
        let mut next = self.next.get_mut().unwrap_or_else(|e| e.into_inner()).take();
        while let Some(mut epoch) = next.and_then(Arc::into_inner) {
            next = epoch.next.get_mut().unwrap_or_else(|e| e.into_inner()).take();
            drop(epoch); // finished; it has no successor left to drop
        }
    }
}

pub(crate) struct Tracker<O> {
    state: Mutex<State<O>>,
}

struct State<O> {
    current: Arc<Epoch>,
    /// References to `current` and to the owner, cloned ahead for pushes.
    stash: Vec<(Arc<Epoch>, Arc<O>)>,
    closed: bool,
}

impl<O> Tracker<O> {
    pub(crate) fn new() -> Self {
        let state = State { current: Epoch::new(), stash: Vec::with_capacity(BATCH), closed: false };
        Self { state: Mutex::new(state) }
    }

    /// Counts one more op in the current epoch, unless the engine is closed.
    /// The op holds the returned epoch reference until it completes, and
    /// the reference to `owner` as long as it needs it.
    ///
    /// While the engine is open the stash may hold references to `owner`:
    /// if the tracker lives inside its owner, closing it breaks that cycle.
    pub(crate) fn enter(&self, owner: &Arc<O>) -> Result<(Arc<Epoch>, Arc<O>), Error> {
        let mut state = lock(&self.state);
        if state.closed {
            return Err(Error::new(Kind::Shutdown));
        }
        if let Some(refs) = state.stash.pop() {
            return Ok(refs);
        }
        let state = &mut *state;
        state.stash.extend((1..BATCH).map(|_| (state.current.clone(), owner.clone())));
        Ok((state.current.clone(), owner.clone()))
    }

    /// Closes the current epoch (and, with `close`, the engine to new ops);
    /// returns the latch set once everything counted so far has completed.
    pub(crate) fn rotate(&self, close: bool) -> Arc<Latch> {
        let (old, stash) = {
            let mut state = lock(&self.state);
            let new = Epoch::new();
            *lock(&state.current.next) = Some(new.clone());
            state.closed |= close;
            let stash = std::mem::replace(&mut state.stash, Vec::with_capacity(BATCH));
            (std::mem::replace(&mut state.current, new), stash)
        };
        let done = old.done.clone();
        // Outside the lock: dropping the last references finishes the epoch
        // and sets latches, which runs their callbacks.
        drop(stash);
        drop(old);
        done
    }

    pub(crate) fn is_closed(&self) -> bool {
        lock(&self.state).closed
    }
}

#[cfg(all(test, not(depengine_loom)))]
mod tests {
    use super::*;

    #[test]
    fn wait_covers_earlier_epochs_and_not_later_ops() {
        let t: Tracker<()> = Tracker::new();
        let owner = Arc::new(());
        let a = t.enter(&owner).unwrap().0;
        let first = t.rotate(false);
        let b = t.enter(&owner).unwrap().0;
        let second = t.rotate(false);
        let c = t.enter(&owner).unwrap().0;
        assert!(!first.is_set() && !second.is_set());
        drop(b);
        assert!(!second.is_set(), "second waits for the first epoch too");
        drop(a);
        assert!(first.is_set() && second.is_set(), "c, pushed later, is not waited for");
        drop(c);
        assert!(t.rotate(true).is_set());
        assert!(t.enter(&owner).err().unwrap().is_shutdown());
        assert_eq!(Arc::strong_count(&owner), 1, "closing gave back the stashed owner references");
    }

    #[test]
    fn empty_epoch_finishes_at_once() {
        let t: Tracker<()> = Tracker::new();
        assert!(t.rotate(false).is_set());
        assert!(t.rotate(false).is_set());
    }

    #[test]
    fn one_op_holding_back_many_epochs_finishes_them_without_recursion() {
        let t: Tracker<()> = Tracker::new();
        let owner = Arc::new(());
        let op = t.enter(&owner).unwrap().0;
        let latches: Vec<_> = (0..200_000).map(|_| t.rotate(false)).collect();
        assert!(latches.iter().all(|l| !l.is_set()));
        drop(op);
        assert!(latches.iter().all(|l| l.is_set()));
    }
}
