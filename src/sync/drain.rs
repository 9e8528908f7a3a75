//! Threads that wait for a number of completions (a pushing thread at the
//! soft bound on ops in flight, `engine/throttle.rs`), woken by the
//! completion that gets them there: each completion pays one relaxed load
//! of a flag while nobody waits, and counts down what the waiters need
//! while one does (as a bounded channel's sender is woken by a receive).

use std::time::Duration;

use crate::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use crate::sync::{Condvar, Mutex, lock, wait_timeout};

/// Threads waiting for a count of completions, and the completions that
/// wake them.
#[derive(Default)]
pub(crate) struct Drain {
    /// Whether a thread waits: completions count down only then.
    waiting: AtomicBool,
    /// Completions still to come before the waiting threads are woken
    /// (the least any of them needs).
    left: AtomicUsize,
    /// Waiting threads, and wake-ups so far.
    state: Mutex<Parked>,
    woken: Condvar,
}

#[derive(Default)]
struct Parked {
    threads: usize,
    wakes: u64,
}

impl Drain {
    /// An op completed: counts it down while a thread waits.
    #[inline(always)]
    pub(crate) fn completed_one(&self) {
        if self.waiting.load(Ordering::Relaxed) {
            self.count_down();
        }
    }

    #[cold]
    #[inline(never)]
    fn count_down(&self) {
        let before = self.left.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1));
        if before == Ok(1) {
            let mut parked = lock(&self.state);
            parked.wakes += 1;
            self.waiting.store(false, Ordering::Relaxed);
            self.woken.notify_all();
        }
    }

    /// Parks the calling thread until `completed()` reaches `goal` or
    /// `patience` has passed, or another waiter's need is met.
    pub(crate) fn park(&self, goal: u64, completed: impl Fn() -> u64, patience: Duration) {
        let mut parked = lock(&self.state);
        if !self.waiting.load(Ordering::Relaxed) {
            self.left.store(usize::MAX, Ordering::Release);
            // SeqCst: the completions counted after the read below count
            // down (they read the flag after counting themselves done).
            self.waiting.store(true, Ordering::SeqCst);
        }
        // Read after the flag is up: what is still to come is counted down.
        let done = completed();
        if done >= goal {
            self.leave(&mut parked, None);
            return;
        }
        let more = usize::try_from(goal - done).unwrap_or(usize::MAX);
        self.left.fetch_min(more, Ordering::AcqRel);
        parked.threads += 1;
        let wakes = parked.wakes;
        let (mut parked, _) = wait_timeout(&self.woken, parked, patience);
        parked.threads -= 1;
        self.leave(&mut parked, Some(wakes));
    }

    /// A waiter leaves (`wakes`: the wake-ups as it parked): the last to
    /// leave, unwoken, stops completions from counting down.
    fn leave(&self, parked: &mut Parked, wakes: Option<u64>) {
        if parked.threads == 0 && wakes.is_none_or(|w| w == parked.wakes) {
            self.waiting.store(false, Ordering::Relaxed);
        }
    }

    /// Whether completions count down now.
    #[cfg(all(test, not(depengine_loom)))]
    pub(crate) fn is_waiting(&self) -> bool {
        self.waiting.load(Ordering::Relaxed)
    }

    /// Threads parked here now.
    #[cfg(all(test, not(depengine_loom)))]
    pub(crate) fn parked(&self) -> usize {
        lock(&self.state).threads
    }
}

#[cfg(all(test, not(depengine_loom)))]
mod tests;
