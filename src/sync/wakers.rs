//! A set of wakers, each under the key of the future that registered it,
//! so that a future dropped before it is woken takes its waker out (as
//! Tokio's `Notified` does) and a set polled by many short-lived waits
//! never grows past the waits alive. A plain struct: the owner keeps it
//! under its own lock.

use std::collections::HashMap;
use std::task::Waker;

#[derive(Default)]
pub(crate) struct WakerSet {
    wakers: HashMap<u64, Waker>,
    next: u64,
}

impl WakerSet {
    /// Keeps `waker` under `key` (given one now, if it has none yet),
    /// replacing the one kept there unless it wakes the same task.
    pub(crate) fn register(&mut self, key: &mut Option<u64>, waker: &Waker) {
        let k = *key.get_or_insert_with(|| {
            self.next += 1;
            self.next
        });
        match self.wakers.get_mut(&k) {
            Some(kept) if kept.will_wake(waker) => {}
            Some(kept) => kept.clone_from(waker),
            None => drop(self.wakers.insert(k, waker.clone())),
        }
    }

    /// Takes out the waker kept under `key`, if any (to drop outside the
    /// owner's lock: a waker's drop may run anything).
    pub(crate) fn remove(&mut self, key: Option<u64>) -> Option<Waker> {
        self.wakers.remove(&key?)
    }

    /// Takes every waker out, to wake outside the owner's lock.
    pub(crate) fn take(&mut self) -> Vec<Waker> {
        self.wakers.drain().map(|(_, w)| w).collect()
    }

    pub(crate) fn len(&self) -> usize {
        self.wakers.len()
    }
}

#[cfg(all(test, not(depengine_loom)))]
mod tests;
