//! What an op's steps tell the layers above, besides its engine's core
//! (`engine_core.rs`): the list of ops a completion made ready, why a
//! thread waits on a handle and what its help found, and whether any engine
//! of the process has begun a cancelling shutdown.

use super::TaskRef;
use crate::sync::small::SmallList;

/// Ops a completion made ready, in the order their vars let them through.
pub(crate) type ReadyList = SmallList<TaskRef, 4>;

/// Why a thread waiting on an op's handle calls `EngineCore::wait`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Wait {
    /// A nested op's handle is waited on: its parent may still be held
    /// back by the engine, which is to push it now (see `nest.rs`).
    OnNested,
    /// A thread blocks on the handle: run one op this thread may run
    /// meanwhile (one it queued to run after its current op; on a worker,
    /// one of its pool's queue, where the op waited for may be), and say
    /// what it found.
    Blocked,
}

/// What `EngineCore::wait` found to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Help {
    /// It ran an op.
    Ran,
    /// Nothing now; this thread is a worker, whose pool may get work that
    /// nobody will wake it for: look again soon.
    Later,
    /// Nothing, ever, until this thread's wait ends: park until woken.
    Nothing,
}

/// Engines of this process that have begun a cancelling shutdown (ever):
/// while there are none, an op's start does not ask its own engine whether
/// it is cancelling. A static, so std's atomic
/// even under loom: it orders nothing (the start that misses a shutdown
/// begun meanwhile is one that raced with it, as reading the engine's own
/// flag could).
static CANCELLING: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// An engine begins a cancelling shutdown: from now on every op's start
/// asks its engine.
pub(crate) fn note_cancelling() {
    CANCELLING.fetch_add(1, std::sync::atomic::Ordering::Release);
}

/// Whether any engine of this process has begun a cancelling shutdown.
#[inline]
pub(crate) fn any_cancelling() -> bool {
    CANCELLING.load(std::sync::atomic::Ordering::Acquire) != 0
}
