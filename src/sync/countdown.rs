//! A count of outstanding events whose release reports, exactly once, the
//! call that brought it to zero.
//!
//! # Memory ordering
//!
//! `release` is `AcqRel`: each releaser's prior writes (a finished op's data,
//! a var's state) happen-before whatever the zero-reaching caller does next
//! (running the op, completing it); `get` is `Acquire` for the same reason.
//! `add` is `Relaxed`: it is only called by a holder of an outstanding
//! count, so the count cannot reach zero concurrently.

use crate::sync::atomic::{AtomicU32, Ordering};

#[derive(Debug)]
pub(crate) struct Countdown(AtomicU32);

impl Countdown {
    pub(crate) fn new(n: usize) -> Self {
        Self(AtomicU32::new(Self::count(n)))
    }

    fn count(n: usize) -> u32 {
        u32::try_from(n).expect("countdown: more than u32::MAX outstanding events")
    }

    /// Adds `n` outstanding events. The caller must hold one already.
    pub(crate) fn add(&self, n: usize) {
        let prev = self.0.fetch_add(Self::count(n), Ordering::Relaxed);
        debug_assert!(prev > 0, "countdown: add after reaching zero");
    }

    /// Releases `n` events; true exactly for the call that reaches zero.
    pub(crate) fn release(&self, n: usize) -> bool {
        if n == 0 {
            return false;
        }
        let n = Self::count(n);
        let prev = self.0.fetch_sub(n, Ordering::AcqRel);
        assert!(prev >= n, "countdown: released more than outstanding");
        prev == n
    }

    /// The outstanding events. Acquire: when it reads one, the writes of
    /// every releaser so far happen-before what the caller does next.
    #[cfg(test)]
    pub(crate) fn get(&self) -> usize {
        self.0.load(Ordering::Acquire) as usize
    }
}

#[cfg(all(test, not(depengine_loom)))]
mod tests;
