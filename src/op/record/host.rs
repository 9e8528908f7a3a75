//! The engine an op belongs to, as the op layer sees it: the one way up
//! from an op record to the layers above.
//!
//! An op completes deep inside the op layer (the last guard dropped, a
//! completion signalled), and its completion has consequences up there:
//! the ops it made ready must run where their placement says (the exec
//! layer's [`Dispatch`], reached through [`Host::dispatcher`]), a failure is
//! recorded for `wait_for_all`, a cancelling shutdown vetoes ops that have
//! not started. Every record holds its engine as a [`HostRef`], and reaches
//! it only through this trait (`engine::Shared` implements it).

use std::sync::Arc;

use super::TaskRef;
use super::spares::SpareRecords;
use crate::error::Error;
use crate::profile::OpRecord;
use crate::sync::small::SmallList;

/// Ops a completion made ready, in the order their vars let them through.
pub(crate) type ReadyList = SmallList<TaskRef, 4>;

/// Where ops made ready run: the exec layer's dispatcher, which the op
/// layer reaches without a call through the engine (the engine only hands
/// out the reference, [`Host::dispatcher`]).
pub(crate) trait Dispatch: Send + Sync {
    /// Runs the ops in `ready` (leaving it empty) where their placement
    /// says: called by the completion that made them ready.
    fn dispatch_ready(&self, ready: &mut ReadyList);
}

/// What an op needs of the engine that pushed it: seven methods.
pub(crate) trait Host: Send + Sync + 'static {
    /// The engine's dispatcher, which runs the ops a completion made ready.
    fn dispatcher(&self) -> &dyn Dispatch;

    /// Whether ops that have not started are to be cancelled, not run.
    fn is_cancelling(&self) -> bool;

    /// What happened to an op that the engine counts or keeps (see
    /// [`Note`]).
    fn note(&self, note: Note<'_>);

    /// Where records of finished ops wait to be rebuilt by pushes.
    fn spare_records(&self) -> &SpareRecords;

    /// Asked now and then by a worker with nothing to do: gives back all
    /// but a few spare records if no push has wanted them for long
    /// ([`SpareRecords::idle`]). Whether more than those few are still
    /// kept (then the worker asks again later).
    fn idle(&self) -> bool;

    /// A thread waits on an op's handle that has not completed (see
    /// [`Wait`]).
    fn wait(&self, wait: Wait) -> Help;

    /// A profiled op completed: its record, for the profiler.
    fn profiled(&self, op: OpRecord);
}

/// What an op tells its engine as it goes, for the engine's counts, its
/// limit of ops in flight and `wait_for_all`.
#[derive(Debug)]
pub(crate) enum Note<'a> {
    /// An op counted against the engine's limit of ops in flight will not
    /// be published (its push was refused after its record was built): its
    /// slot is free.
    Left,
    /// An op was published (completed, or resolved early): counted for
    /// metrics, and, if `counted` against the limit of ops in flight, its
    /// slot is free (an op resolved early keeps its slot until
    /// [`Gone`](Self::Gone)).
    Done { counted: bool },
    /// An op is resolved early (`Task::resolve_early`): it stays queued on
    /// its vars until they let it through, and is counted until then, so
    /// that its record counts against the limit of ops in flight and no
    /// pool stops while it may still be sent there.
    Lingers,
    /// An op resolved early has completed on its vars: it is the engine's
    /// no more, and, if `counted` against the limit of ops in flight, its
    /// slot is free.
    Gone { counted: bool },
    /// An op failed, was skipped or was cancelled with this error (counted
    /// for metrics; once per op, before it is published); `for_wait_all`:
    /// `wait_for_all` reports it too.
    Failed { err: &'a Error, for_wait_all: bool },
    /// A failure that only `wait_for_all` reports (an error an op passes on
    /// to its vars, already counted).
    ForWaitAll(&'a Error),
}

/// Why a thread waiting on an op's handle calls [`Host::wait`].
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

/// What [`Host::wait`] found to do.
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
/// it is cancelling (a call through [`Host`]). A static, so std's atomic
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

/// A record's reference to its engine.
pub(crate) type HostRef = Arc<dyn Host>;
