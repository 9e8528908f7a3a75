//! Giving op records back to the threads that push them.
//!
//! Allocators serve a thread fastest from memory it freed itself. An op
//! record is allocated by the pushing thread, but when its handle is
//! detached, the last reference to it is the worker's that ran it: freed
//! there, every record crossed threads through the allocator's shared arena,
//! whose lock the pusher (allocating) and the workers (freeing) then took
//! in turn for every op.
//!
//! Instead, a worker holding the last reference to an op it ran strips the
//! record of everything anyone could observe (var references, result, span,
//! errors), exactly when it would have dropped it, and buries the empty
//! shell here, in batches. Each push takes one: it rebuilds its own op in
//! the shell if the shell's op type is its own (no allocator call at all:
//! the common case of a loop pushing one kind of op), else frees it just
//! before it allocates, so records cycle through the pusher's own allocator
//! cache. Pushes take from a list of their own, refilled with every buried
//! shell at once, and prefetch the shell they rebuild (and the next one):
//! its lines were written last by a worker. Shells still hold a reference
//! to their engine: closing the engine frees them all and turns later
//! burials into plain drops.

use crate::loom::lock;
use crate::loom::sync::Mutex;
use crate::loom::sync::atomic::{AtomicUsize, Ordering};
use crate::op::TaskRef;
use crate::small::Padded;

/// Shells a worker collects before burying them at once.
pub(crate) const BATCH: usize = 32;

/// Shells kept at most; beyond, workers free their batches themselves.
const MAX_SHELLS: usize = 1024;

pub(crate) struct Graveyard {
    /// Where workers bury their batches.
    buried: Mutex<Shells>,
    /// `buried.list.len()`, readable without the lock.
    len: AtomicUsize,
    /// Shells moved out of `buried` all at once by a push that found none
    /// here, so that pushes touch a list and a lock that workers do not.
    ready: Padded<Ready>,
}

/// The pushes' list, and its length readable without the lock (nothing
/// to lock while no shell waits: the naive engine, handles kept).
struct Ready {
    list: Mutex<Vec<TaskRef>>,
    len: AtomicUsize,
}

#[derive(Default)]
struct Shells {
    list: Vec<TaskRef>,
    closed: bool,
}

impl Graveyard {
    pub(crate) fn new() -> Self {
        Self {
            buried: Mutex::new(Shells::default()),
            len: AtomicUsize::new(0),
            ready: Padded(Ready { list: Mutex::new(Vec::new()), len: AtomicUsize::new(0) }),
        }
    }

    /// Takes a worker's batch of shells (leaving `batch` empty); frees them
    /// on this thread instead if the graveyard is full or closed.
    pub(crate) fn bury(&self, batch: &mut Vec<TaskRef>) {
        let refused = {
            let mut buried = lock(&self.buried);
            if buried.closed || buried.list.len() + batch.len() > MAX_SHELLS {
                std::mem::take(batch)
            } else {
                buried.list.append(batch);
                self.len.store(buried.list.len(), Ordering::Relaxed);
                Vec::new()
            }
        };
        drop(refused);
    }

    /// Takes a shell for a push to reuse (or free, if its op type differs),
    /// and frees one more on this thread while more than half of
    /// [`MAX_SHELLS`] wait, so that the graveyard drains when it fills
    /// faster than pushes take (never in a steady stream of pushes).
    pub(crate) fn take(&self) -> Option<TaskRef> {
        if self.ready.len.load(Ordering::Relaxed) == 0 && self.len.load(Ordering::Relaxed) == 0 {
            return None;
        }
        let (shell, extra) = {
            let mut ready = lock(&self.ready.list);
            if ready.is_empty() && self.len.load(Ordering::Relaxed) > 0 {
                // Lock order: `ready`, then `buried`.
                let mut buried = lock(&self.buried);
                std::mem::swap(&mut *ready, &mut buried.list);
                self.len.store(0, Ordering::Relaxed);
            }
            let shell = ready.pop();
            // This shell's lines all at once, and the next push's ahead.
            shell.iter().chain(ready.last()).for_each(crate::op::prefetch);
            let extra = if ready.len() > MAX_SHELLS / 2 { ready.pop() } else { None };
            self.ready.len.store(ready.len(), Ordering::Relaxed);
            (shell, extra)
        };
        drop(extra);
        shell
    }

    /// Frees every shell and refuses later burials: shells hold references
    /// to the engine that owns this graveyard.
    pub(crate) fn close(&self) {
        let (ready, buried) = {
            let mut ready = lock(&self.ready.list);
            let mut buried = lock(&self.buried);
            buried.closed = true;
            self.len.store(0, Ordering::Relaxed);
            self.ready.len.store(0, Ordering::Relaxed);
            (std::mem::take(&mut *ready), std::mem::take(&mut buried.list))
        };
        drop((ready, buried));
    }

    #[cfg(all(test, not(depengine_loom)))]
    pub(crate) fn len(&self) -> usize {
        let ready = lock(&self.ready.list);
        ready.len() + lock(&self.buried).list.len()
    }

    /// Where the shells' records are; the last is the one a push takes next.
    #[cfg(all(test, not(depengine_loom)))]
    pub(crate) fn addresses(&self) -> Vec<*const ()> {
        let ready = lock(&self.ready.list);
        let buried = lock(&self.buried);
        let next = if ready.is_empty() { &buried.list } else { &*ready };
        let rest = if ready.is_empty() { &*ready } else { &buried.list };
        rest.iter().chain(next).map(|s| std::sync::Arc::as_ptr(s).cast()).collect()
    }
}
