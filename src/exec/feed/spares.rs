//! Rings of freed feeds, kept for new feeds (see `Spares`).

use super::Slots;
use crate::sync::{Mutex, lock};

/// Rings of freed feeds, for new feeds to take: a ring mapped from the
/// system costs a mapping and a page fault per page it touches, and its
/// unmapping stops every core of the process a moment (the system's TLB
/// shoot-down). Threads that push now and then, each getting a new feed
/// after its last one was retired, thus reuse a few rings instead. At
/// most [`KEEP_SPARE`] are kept; the rest are given back to the system by
/// idle workers, [`UNMAP_PER_SWEEP`] per sweep, so that a thousand feeds
/// retired at once neither stall the worker that frees them nor disturb
/// the others for long.
pub(crate) struct Spares<T> {
    rings: Mutex<Vec<(Slots<T>, usize)>>,
}

/// Rings a pool keeps for new feeds.
pub(super) const KEEP_SPARE: usize = 16;
/// Rings given back to the system per sweep, past those kept.
pub(super) const UNMAP_PER_SWEEP: usize = 256;

impl<T> Default for Spares<T> {
    fn default() -> Self {
        Self { rings: Mutex::new(Vec::new()) }
    }
}

impl<T> Spares<T> {
    /// Keeps the slots of an empty ring, at position `at`.
    pub(super) fn put(&self, slots: Slots<T>, at: usize) {
        lock(&self.rings).push((slots, at));
    }

    /// A ring kept, with its position.
    pub(super) fn take(&self) -> Option<(Slots<T>, usize)> {
        lock(&self.rings).pop()
    }

    /// Gives rings past those kept back to the system, at most
    /// [`UNMAP_PER_SWEEP`] (outside the lock).
    pub(crate) fn trim(&self) {
        let excess: Vec<_> = {
            let mut rings = lock(&self.rings);
            let n = rings.len().saturating_sub(KEEP_SPARE).min(UNMAP_PER_SWEEP);
            rings.drain(..n).collect()
        };
        drop(excess);
    }

    /// Whether more rings are kept than [`KEEP_SPARE`]: sweeps are due.
    pub(crate) fn has_excess(&self) -> bool {
        lock(&self.rings).len() > KEEP_SPARE
    }

    /// Rings kept now.
    #[cfg(all(test, not(depengine_loom)))]
    pub(crate) fn len(&self) -> usize {
        lock(&self.rings).len()
    }
}
