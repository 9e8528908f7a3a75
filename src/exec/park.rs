//! Parking idle workers without a lock on the submit path, and without
//! losing a wake-up.
//!
//! A worker that found nothing to do announces itself in `sleepers`, looks
//! at its queues once more, and only then waits on the condition variable.
//! A submitter queues its op, then reads `sleepers`, and takes the lock to
//! notify only if someone is parked or about to park. The worker holds the
//! lock from its last look until it waits, and the notification is sent
//! under the lock, so it cannot fall between the two.
//!
//! This is a store-buffering handshake: each side writes, then reads what
//! the other wrote, and with a full fence on each side between the two, at
//! least one of them sees the other's write: either the worker finds the
//! op, or the submitter finds the worker. The submitter, on the path of
//! every push, pays only the light half of a pair of asymmetric barriers
//! (`sync::barrier`: a compiler fence). So a worker parks in two steps:
//!
//! 1. a wait of at most [`SECOND_LOOK`], after a look that no fence
//!    guards: it and a submitter may miss each other, and then the op waits
//!    for the timeout (a wake-up delayed, never lost);
//! 2. after a timeout, the heavy half of the pair (the kernel's
//!    process-wide barrier), a last look, and a wait without a timeout:
//!    the full handshake guards the only wait that could last for ever.
//!
//! The heavy barrier interrupts every running thread of the process, the
//! pushing one included, and a worker that keeps up with a pushing thread
//! parks many times a second: so only a worker idle past the first wait
//! pays it (PERFORMANCE.md, *Parking*). Under loom and Miri both halves of the pair are full fences, and
//! under loom the first wait times out at once (loom has no time): the
//! model checks the path every park can take (`README.md` beside this file
//! has the proof sketch).

use std::time::Duration;

use crate::sync::atomic::{AtomicUsize, Ordering};
use crate::sync::barrier::Barriers;
use crate::sync::{Condvar, Mutex, lock, wait_timeout};

/// How long a parked worker waits before it pays for the full handshake.
const SECOND_LOOK: Duration = Duration::from_micros(100);

pub(crate) struct Parking {
    /// Workers parked or about to park.
    sleepers: AtomicUsize,
    lock: Mutex<()>,
    available: Condvar,
    barriers: Barriers,
}

impl Default for Parking {
    fn default() -> Self {
        Self::with(Barriers::new())
    }
}

impl Parking {
    fn with(barriers: Barriers) -> Self {
        Self { sleepers: AtomicUsize::new(0), lock: Mutex::new(()), available: Condvar::new(), barriers }
    }

    /// The barrier pair of this pool's handshakes.
    pub(crate) fn barriers(&self) -> Barriers {
        self.barriers
    }

    /// Wakes up to `n` parked workers; called after `n` ops were queued.
    pub(crate) fn notify(&self, n: usize) {
        self.barriers.light();
        if n == 0 || self.sleepers.load(Ordering::Relaxed) == 0 {
            return;
        }
        let _sync = lock(&self.lock);
        for _ in 0..n {
            self.available.notify_one();
        }
    }

    /// Workers parked or about to park.
    pub(crate) fn sleepers(&self) -> usize {
        self.sleepers.load(Ordering::Relaxed)
    }

    /// Wakes every parked worker; called after the pool was told to stop
    /// (so that `park`'s `stop` check sees it).
    pub(crate) fn notify_all(&self) {
        let _sync = lock(&self.lock);
        self.available.notify_all();
    }

    /// Parks the calling worker until `poll` yields an op (returned) or
    /// `stop` holds (`None`). `poll` must see every op queued before the
    /// matching `notify` once it is visible to this thread. `nap` runs
    /// before each long wait, and says how long it may last at most (none:
    /// until woken).
    pub(crate) fn park<T>(
        &self,
        mut poll: impl FnMut() -> Option<T>,
        stop: impl Fn() -> bool,
        mut nap: impl FnMut() -> Option<Duration>,
    ) -> Option<T> {
        let mut guard = lock(&self.lock);
        loop {
            self.sleepers.fetch_add(1, Ordering::Relaxed);
            let found = poll();
            if found.is_some() || stop() {
                self.sleepers.fetch_sub(1, Ordering::Relaxed);
                return found;
            }
            let (woken, timed_out) = wait_timeout(&self.available, guard, SECOND_LOOK);
            guard = woken;
            if timed_out {
                self.barriers.heavy();
                let found = poll();
                if found.is_some() || stop() {
                    self.sleepers.fetch_sub(1, Ordering::Relaxed);
                    return found;
                }
                guard = match nap() {
                    None => self.available.wait(guard).unwrap_or_else(|e| e.into_inner()),
                    Some(most) => wait_timeout(&self.available, guard, most).0,
                };
            }
            self.sleepers.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

#[cfg(all(test, not(depengine_loom)))]
mod tests;

#[cfg(all(test, depengine_loom))]
mod loom_tests;
