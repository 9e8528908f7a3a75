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
//! cache. Pushes take from a list of their own (kept under the lock a push
//! takes anyway, see `epoch::Tracker`), refilled with every buried shell at
//! once, and prefetch the shell they rebuild (and the next one): its lines
//! were written last by a worker. Shells still hold a reference
//! to their engine: closing the engine frees them all and turns later
//! burials into plain drops.

use crate::loom::lock;
use crate::loom::sync::Mutex;
use crate::loom::sync::atomic::{AtomicUsize, Ordering};
use crate::op::Shell;

/// Shells a worker collects before burying them at once.
pub(crate) const BATCH: usize = 32;

/// Shells kept at most; beyond, workers free their batches themselves.
const MAX_SHELLS: usize = 1024;

pub(crate) struct Graveyard {
    /// Where workers bury their batches.
    buried: Mutex<Shells>,
    /// `buried.list.len()`, readable without the lock.
    len: AtomicUsize,
}

#[derive(Default)]
struct Shells {
    list: Vec<Shell>,
    closed: bool,
}

impl Graveyard {
    pub(crate) fn new() -> Self {
        Self { buried: Mutex::new(Shells::default()), len: AtomicUsize::new(0) }
    }

    /// Takes a worker's batch of shells (leaving `batch` empty); frees them
    /// on this thread instead if the graveyard is full or closed.
    pub(crate) fn bury(&self, batch: &mut Vec<Shell>) {
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

    /// Takes a shell from `ready`, the pushes' list, for a push to reuse (or
    /// free, if its op type differs), refilling `ready` with every buried
    /// shell when it is empty. Also returns one more shell, to be freed by
    /// the caller (outside its lock), while more than half of
    /// [`MAX_SHELLS`] wait, so that the graveyard drains when it fills
    /// faster than pushes take (never in a steady stream of pushes).
    pub(crate) fn take(&self, ready: &mut Vec<Shell>) -> (Option<Shell>, Option<Shell>) {
        let refilled = ready.is_empty();
        if refilled {
            if self.len.load(Ordering::Relaxed) == 0 {
                return (None, None);
            }
            let mut buried = lock(&self.buried);
            std::mem::swap(ready, &mut buried.list);
            self.len.store(0, Ordering::Relaxed);
        }
        let shell = ready.pop();
        // This shell's lines were asked for by the push before, unless the
        // list was just refilled; the next push's, all at once, ahead.
        if let (true, Some(shell)) = (refilled, &shell) {
            shell.prefetch();
        }
        if let Some(next) = ready.last() {
            next.prefetch();
        }
        let extra = if ready.len() > MAX_SHELLS / 2 { ready.pop() } else { None };
        (shell, extra)
    }

    /// Frees every buried shell and refuses later burials: shells hold
    /// references to the engine that owns this graveyard. (The pushes'
    /// list is freed by its owner.)
    pub(crate) fn close(&self) {
        let buried = {
            let mut buried = lock(&self.buried);
            buried.closed = true;
            self.len.store(0, Ordering::Relaxed);
            std::mem::take(&mut buried.list)
        };
        drop(buried);
    }

    /// Buried shells.
    #[cfg(all(test, not(depengine_loom)))]
    pub(crate) fn len(&self) -> usize {
        lock(&self.buried).list.len()
    }

    /// Where the shells' records are, `ready`'s (the pushes' list) and the
    /// buried ones; the last is the one a push takes next.
    #[cfg(all(test, not(depengine_loom)))]
    pub(crate) fn addresses(&self, ready: &[Shell]) -> Vec<*const ()> {
        let buried = lock(&self.buried);
        let (rest, next) = if ready.is_empty() { (ready, &*buried.list) } else { (&*buried.list, ready) };
        rest.iter().chain(next).map(Shell::addr).collect()
    }
}
