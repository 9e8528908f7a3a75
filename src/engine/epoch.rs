//! Tracking what `wait_for_all` waits for: every op pushed before the call,
//! and nothing pushed after it.
//!
//! Ops are counted in the current *epoch*. `wait_for_all` closes the current
//! epoch and opens a new one; a closed epoch finishes when its last op
//! completes *and* the epoch before it has finished, so waiting for one
//! epoch waits for everything pushed before it. Each epoch's count holds one
//! token while it is current and one while its predecessor is unfinished.

use std::sync::Arc;

use super::latch::Latch;
use crate::error::{Error, Kind};
use crate::loom::lock;
use crate::loom::sync::Mutex;
use crate::op::countdown::Countdown;

pub(crate) struct Epoch {
    count: Countdown,
    next: Mutex<Option<Arc<Epoch>>>,
    pub(crate) done: Arc<Latch>,
}

impl Epoch {
    fn new(tokens: usize) -> Arc<Self> {
        Arc::new(Self { count: Countdown::new(tokens), next: Mutex::new(None), done: Arc::default() })
    }

    /// Releases one count (an op completed, or a token was given up),
    /// finishing this epoch and then its successors as their counts reach zero.
    pub(crate) fn release(self: &Arc<Self>) {
        let mut epoch = self.clone();
        while epoch.count.release(1) {
            epoch.done.set();
            let Some(next) = lock(&epoch.next).take() else { break };
            epoch = next;
        }
    }
}

pub(crate) struct Tracker {
    state: Mutex<State>,
}

struct State {
    current: Arc<Epoch>,
    closed: bool,
}

impl Tracker {
    pub(crate) fn new() -> Self {
        // The first epoch has no predecessor: only its "current" token.
        Self { state: Mutex::new(State { current: Epoch::new(1), closed: false }) }
    }

    /// Counts one more op in the current epoch, unless the engine is closed.
    pub(crate) fn enter(&self) -> Result<Arc<Epoch>, Error> {
        let state = lock(&self.state);
        if state.closed {
            return Err(Error::new(Kind::Shutdown));
        }
        state.current.count.add(1);
        Ok(state.current.clone())
    }

    /// Closes the current epoch (and, with `close`, the engine to new ops);
    /// returns the latch set once everything counted so far has completed.
    pub(crate) fn rotate(&self, close: bool) -> Arc<Latch> {
        let old = {
            let mut state = lock(&self.state);
            let new = Epoch::new(2);
            *lock(&state.current.next) = Some(new.clone());
            state.closed |= close;
            std::mem::replace(&mut state.current, new)
        };
        let done = old.done.clone();
        old.release();
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
        let t = Tracker::new();
        let a = t.enter().unwrap();
        let first = t.rotate(false);
        let b = t.enter().unwrap();
        let second = t.rotate(false);
        let c = t.enter().unwrap();
        assert!(!first.is_set() && !second.is_set());
        b.release();
        assert!(!second.is_set(), "second waits for the first epoch too");
        a.release();
        assert!(first.is_set() && second.is_set(), "c, pushed later, is not waited for");
        c.release();
        assert!(t.rotate(true).is_set());
        assert!(t.enter().err().unwrap().is_shutdown());
    }

    #[test]
    fn empty_epoch_finishes_at_once() {
        let t = Tracker::new();
        assert!(t.rotate(false).is_set());
        assert!(t.rotate(false).is_set());
    }
}
