//! Record reuse: giving op records back to the threads that push them.
//! Everything about it is in this file, and the rest of the engine reaches
//! it at two points: a push takes a spare record when it builds its record
//! (`SpareRecords::take`, then [`build`]), and a worker gives a record back
//! after the op ran ([`Returns::give`]).
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
//! errors), exactly when it would have dropped it, and keeps the empty
//! spare record here, in batches. Each push takes one: it rebuilds its own op in
//! the spare record if the spare record's op type is its own (no allocator call at all:
//! the common case of a loop pushing one kind of op), else frees it just
//! before it allocates, so records cycle through the pusher's own allocator
//! cache. Pushes take from a list of their own (kept under the lock a push
//! takes anyway, the epoch tracker's), refilled with every kept spare record at
//! once, and prefetch the spare record they rebuild (and the next one): its lines
//! were written last by a worker. Spare records still hold a reference
//! to their engine: closing the engine frees them all and turns later
//! burials into plain drops.
//!
//! An engine keeps up to twice its soft bound on ops in flight of them
//! (`SpareRecords::new`), a few megabytes after a burst. Once no push has
//! refilled its list for a second, a worker with nothing to do lets it give
//! back all but a few ([`Returns::idle`], `SpareRecords::idle` and `trim`):
//! an engine used in bursts keeps them from one burst to the next, one left
//! idle holds little.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

use super::job::Job;
use super::op_cell::OpCell;
use super::record::{DepList, EngineRef, Meta, Spare, TaskRef, WeakEngine};
use crate::error::panic_message;
use crate::sync::epoch::EpochRef;

/// Spare records a worker collects before burying them at once.
const BATCH: usize = 32;

/// Builds a record for a new op of `engine`: in `spare record` (a
/// stripped record of that engine nobody else holds) if that is a record of
/// this type, else freshly allocated, after `spare record` is freed (so that the
/// allocator hands out what this thread just freed).
#[inline(always)]
pub(crate) fn build<J: Job>(
    shell: Option<Spare>,
    engine: impl FnOnce() -> EngineRef,
    meta: Meta,
    deps: DepList,
    job: J,
    epoch: EpochRef,
) -> Arc<OpCell<J>> {
    // A spare record of another type is freed here, before `OpCell::new` allocates.
    let Some(mut record) = shell.and_then(Spare::downcast::<OpCell<J>>) else {
        return OpCell::new(engine(), meta, deps, job, epoch);
    };
    let place = record.get_mut();
    place.rebuild(meta, deps, job, epoch);
    #[cfg(all(test, not(depengine_loom)))]
    REBUILT.with(|n| n.set(n.get() + 1));
    record.into_arc()
}

#[cfg(all(test, not(depengine_loom)))]
thread_local! {
    /// Ops this thread built in a spare record.
    pub(crate) static REBUILT: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Gives back the record of an op this thread ran inline (a thread that is
/// not a worker, which gathers spare records in [`Returns`]): strips it and keeps
/// its spare record in its engine's spare records at once if `task` is its last
/// reference (a thread that may push no more must not keep spare records, which
/// hold their engine); else drops the reference.
pub(crate) fn give_back(task: TaskRef) {
    match Spare::strip(task) {
        Ok(shell) => {
            let engine = shell.header().engine.clone();
            engine.spare_records().keep_one(shell);
        }
        Err((record, stripping)) => let_go(record, stripping),
    }
}

/// Drops a reference to a record someone else still held when it was
/// offered back: its holder frees it, unless it let go meanwhile (then
/// this drop is the last). A panic of a destructor run by the stripping
/// (`stripping`) or by this drop is logged and contained.
fn let_go(record: TaskRef, stripping: Option<Box<dyn std::any::Any + Send>>) {
    if let Some(payload) = stripping {
        tracing::error!(
            target: "depengine",
            "a panic escaped a destructor run when an op finished: {}",
            panic_message(&*payload)
        );
    }
    if let Err(payload) = catch_unwind(AssertUnwindSafe(move || drop(record))) {
        tracing::error!(target: "depengine", "a panic escaped an op's destructor: {}", panic_message(&*payload));
    }
}

/// A worker's spare records on their way back to the pushing threads: filled after
/// each op it runs, kept in their engine's spare records [`BATCH`] at a time,
/// and whenever the worker runs out of work.
pub(crate) struct Returns {
    spares: Vec<Spare>,
    /// The engine it last gave spare records back to: asked, when the
    /// worker idles, whether to give them back to the system
    /// ([`idle`](Self::idle)). Weak: a worker must not keep its engine.
    engine: Option<WeakEngine>,
}

impl Returns {
    pub(crate) fn new() -> Self {
        Self { spares: Vec::with_capacity(BATCH), engine: None }
    }

    /// Gives back the record of an op this thread ran: strips it and keeps
    /// its spare record if `task` is its last reference; else drops the reference.
    /// Dropping what the record holds may run a user destructor (a result
    /// nobody took): contained like the op itself. Inlined into the
    /// worker's loop, where it runs after every op.
    #[inline(always)]
    pub(crate) fn give(&mut self, task: TaskRef) {
        match Spare::strip(task) {
            Ok(shell) => {
                debug_assert!(
                    self.spares
                        .first()
                        .is_none_or(|s| s.header().engine.as_ptr() == shell.header().engine.as_ptr()),
                    "shells of one engine"
                );
                self.spares.push(shell);
                if self.spares.len() >= BATCH {
                    self.keep_spares();
                }
            }
            Err((record, stripping)) => let_go(record, stripping),
        }
    }

    /// Keeps the spare records it holds in their engine's spare records.
    #[cold]
    pub(crate) fn keep_spares(&mut self) {
        if let Some(first) = self.spares.first() {
            let engine = first.header().engine.clone();
            if self.engine.as_ref().is_none_or(|e| e.as_ptr() != engine.as_ptr()) {
                self.engine = Some(engine.downgrade());
            }
            engine.spare_records().keep_spares(&mut self.spares);
        }
    }

    /// The worker has had nothing to do for a while: lets the engine it
    /// gave spare records to give them back to the system if no push
    /// wants them (see `EngineCore::idle`). Whether to ask again later.
    #[cold]
    pub(crate) fn idle(&mut self) -> bool {
        let Some(engine) = self.engine.as_ref().and_then(WeakEngine::upgrade) else {
            self.engine = None;
            return false;
        };
        engine.idle()
    }
}
