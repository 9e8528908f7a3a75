//! A counter that many threads add to at once without sharing a cache
//! line: each thread adds to one of several stripes (picked once per
//! thread), and a read sums them. For counts that every op's completion
//! bumps, on whatever thread it completes.

use std::cell::Cell;
// std's atomics even under loom: a count orders nothing, and a static
// cannot hold loom's.
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use crossbeam_utils::CachePadded;

/// Stripes per counter: enough that a pool's workers rarely share one.
const STRIPES: usize = 16;

static NEXT_STRIPE: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// This thread's stripe (`usize::MAX`: not picked yet).
    static STRIPE: Cell<usize> = const { Cell::new(usize::MAX) };
}

/// This thread's stripe, picked round-robin on first use.
#[inline]
fn stripe() -> usize {
    STRIPE.with(|s| {
        let k = s.get();
        if k != usize::MAX {
            return k;
        }
        let k = NEXT_STRIPE.fetch_add(1, Ordering::Relaxed) % STRIPES;
        s.set(k);
        k
    })
}

pub(crate) struct Tally {
    stripes: Box<[CachePadded<AtomicU64>]>,
}

impl Default for Tally {
    fn default() -> Self {
        Self { stripes: (0..STRIPES).map(|_| CachePadded::new(AtomicU64::new(0))).collect() }
    }
}

impl Tally {
    /// Adds one. Relaxed: a count orders nothing.
    #[inline]
    pub(crate) fn add_one(&self) {
        self.stripes[stripe()].fetch_add(1, Ordering::Relaxed);
    }

    /// The sum of the stripes: every add that happened-before this call,
    /// and perhaps some concurrent ones.
    pub(crate) fn get(&self) -> u64 {
        self.stripes.iter().map(|s| s.load(Ordering::Relaxed)).sum()
    }
}

#[cfg(all(test, not(depengine_loom)))]
mod tests;
