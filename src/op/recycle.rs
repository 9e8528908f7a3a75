//! Record reuse: giving op records back to the threads that push them.
//! Everything about it is in this file, and the rest of the engine reaches
//! it at two points: a push takes a spare record when it builds its record
//! ([`Spare records::take`], then [`build`]), and a worker gives a record back
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

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

use super::host::Host;
use super::job::Job;
use super::op_cell::OpCell;
use super::record::{DepList, Header, Meta, Task, TaskRef, extras, prefetch};
use crate::error::panic_message;
use crate::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use crate::sync::countdown::Countdown;
use crate::sync::epoch::EpochRef;
use crate::sync::{Mutex, lock, small};

/// Spare records a worker collects before burying them at once.
const BATCH: usize = 32;

/// Spare records kept at most; beyond, workers free their batches themselves.
const MAX_SPARES: usize = 1024;

pub(crate) struct SpareRecords {
    /// Where workers keep their batches.
    kept: Mutex<KeptSpares>,
    /// `kept.list.len()`, readable without the lock.
    len: AtomicUsize,
}

#[derive(Default)]
struct KeptSpares {
    list: Vec<Spare>,
    closed: bool,
}

impl SpareRecords {
    pub(crate) fn new() -> Self {
        Self { kept: Mutex::new(KeptSpares::default()), len: AtomicUsize::new(0) }
    }

    /// Takes a worker's batch of spare records (leaving `batch` empty); frees them
    /// on this thread instead if the spare records is full or closed.
    pub(crate) fn keep_spares(&self, batch: &mut Vec<Spare>) {
        let refused = {
            let mut kept = lock(&self.kept);
            if kept.closed || kept.list.len() + batch.len() > MAX_SPARES {
                std::mem::take(batch)
            } else {
                kept.list.append(batch);
                self.len.store(kept.list.len(), Ordering::Relaxed);
                Vec::new()
            }
        };
        drop(refused);
    }

    /// Takes one spare record; frees it on this thread instead if the spare records is
    /// full or closed.
    pub(crate) fn keep_one(&self, shell: Spare) {
        let refused = {
            let mut kept = lock(&self.kept);
            if kept.closed || kept.list.len() >= MAX_SPARES {
                Some(shell)
            } else {
                kept.list.push(shell);
                self.len.store(kept.list.len(), Ordering::Relaxed);
                None
            }
        };
        drop(refused);
    }

    /// Takes a spare record from `ready`, the pushes' list, for a push to reuse (or
    /// free, if its op type differs), refilling `ready` with every kept
    /// spare record when it is empty. Also returns one more spare record, to be freed by
    /// the caller (outside its lock), while more than half of
    /// [`MAX_SPARES`] wait, so that the spare records drains when it fills
    /// faster than pushes take (never in a steady stream of pushes).
    pub(crate) fn take(&self, ready: &mut Vec<Spare>) -> (Option<Spare>, Option<Spare>) {
        let refilled = ready.is_empty();
        if refilled {
            if self.len.load(Ordering::Relaxed) == 0 {
                return (None, None);
            }
            let mut kept = lock(&self.kept);
            std::mem::swap(ready, &mut kept.list);
            self.len.store(0, Ordering::Relaxed);
        }
        let shell = ready.pop();
        // This spare record's lines were asked for by the push before, unless the
        // list was just refilled; the next push's, all at once, ahead.
        if let (true, Some(shell)) = (refilled, &shell) {
            shell.prefetch();
        }
        if let Some(next) = ready.last() {
            next.prefetch();
        }
        let extra = if ready.len() > MAX_SPARES / 2 { ready.pop() } else { None };
        (shell, extra)
    }

    /// Frees every kept spare record and refuses later burials: spare records hold
    /// references to the engine that owns this spare records. (The pushes'
    /// list is freed by its owner.)
    pub(crate) fn close(&self) {
        let kept = {
            let mut kept = lock(&self.kept);
            kept.closed = true;
            self.len.store(0, Ordering::Relaxed);
            std::mem::take(&mut kept.list)
        };
        drop(kept);
    }

    /// KeptSpares spare records.
    #[cfg(all(test, not(depengine_loom)))]
    pub(crate) fn len(&self) -> usize {
        lock(&self.kept).list.len()
    }

    /// Where the spare records' records are, `ready`'s (the pushes' list) and the
    /// kept ones; the last is the one a push takes next.
    #[cfg(all(test, not(depengine_loom)))]
    pub(crate) fn addresses(&self, ready: &[Spare]) -> Vec<*const ()> {
        let kept = lock(&self.kept);
        let (rest, next) = if ready.is_empty() { (ready, &*kept.list) } else { (&*kept.list, ready) };
        rest.iter().chain(next).map(Spare::addr).collect()
    }
}

/// Builds a record for a new op of the engine `host`: in `spare record` (a
/// stripped record of that engine nobody else holds) if that is a record of
/// this type, else freshly allocated, after `spare record` is freed (so that the
/// allocator hands out what this thread just freed).
#[inline(always)]
pub(crate) fn build<J: Job, H: Host>(
    shell: Option<Spare>,
    host: &Arc<H>,
    meta: Meta,
    deps: DepList,
    job: J,
    epoch: EpochRef,
) -> Arc<OpCell<J>> {
    // A spare record of another type is freed here, before `OpCell::new` allocates.
    let Some(mut record) = shell.and_then(Spare::downcast::<OpCell<J>>) else {
        return OpCell::new(host, meta, deps, job, epoch);
    };
    let place = record.get_mut();
    debug_assert!(
        std::ptr::addr_eq(Arc::as_ptr(&place.header().host), Arc::as_ptr(host)),
        "a shell of another engine"
    );
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
            let host = shell.header().host.clone();
            host.spare_records().keep_one(shell);
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
}

impl Returns {
    pub(crate) fn new() -> Self {
        Self { spares: Vec::with_capacity(BATCH) }
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
                    self.spares.first().is_none_or(|s| Arc::ptr_eq(&s.header().host, &shell.header().host)),
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
            let host = first.header().host.clone();
            host.spare_records().keep_spares(&mut self.spares);
        }
    }
}

/// A stripped op record that nothing else references: a push rebuilds it
/// in place without looking at its reference counts again. Not `Clone`, and
/// it lends out no `TaskRef`, so it stays the only reference to its record.
pub(crate) struct Spare(TaskRef);

impl Spare {
    /// Strips `task` and makes it a spare record if it is the only reference to
    /// its record; else hands it back. Stripping drops what the record
    /// held, which may run user code (a result nobody took): a panic there
    /// is caught and handed back with the record, for the caller to drop
    /// once the unwinding is over.
    #[allow(clippy::type_complexity)]
    fn strip(mut task: TaskRef) -> Result<Self, (TaskRef, Option<Box<dyn std::any::Any + Send>>)> {
        let Some(op) = Arc::get_mut(&mut task) else {
            return Err((task, None));
        };
        match catch_unwind(AssertUnwindSafe(|| op.strip())) {
            Ok(()) => Ok(Self(task)),
            Err(payload) => Err((task, Some(payload))),
        }
    }

    fn header(&self) -> &Header {
        self.0.header()
    }

    /// Where the record is.
    #[cfg(all(test, not(depengine_loom)))]
    pub(crate) fn addr(&self) -> *const () {
        Arc::as_ptr(&self.0).cast()
    }

    /// Fetches the record for writing (see `record::prefetch`).
    fn prefetch(&self) {
        prefetch(&self.0);
    }

    /// The record as a `T`, to be rebuilt in place; `None` (the spare record
    /// freed) if it is of another type.
    fn downcast<T: Task>(self) -> Option<Unique<T>> {
        let any: Arc<dyn std::any::Any + Send + Sync> = self.0;
        any.downcast::<T>().ok().map(Unique)
    }
}

/// The only reference to a record (made from a [`Spare`]).
struct Unique<T>(Arc<T>);

impl<T> Unique<T> {
    fn get_mut(&mut self) -> &mut T {
        Arc::get_mut(&mut self.0).expect("a spare record is its record's only reference")
    }

    fn into_arc(self) -> Arc<T> {
        self.0
    }
}

impl Header {
    /// Makes a stripped header (see [`strip`](Self::strip)) the header of a
    /// new op of the same engine: its engine reference stays as it is.
    pub(super) fn rebuild(&mut self, meta: Meta, deps: DepList) {
        debug_assert!(self.deps.is_empty() && self.extra.is_none(), "only a stripped header is rebuilt");
        self.pending = Countdown::new(deps.len());
        self.live = Countdown::new(1);
        self.has_errors = AtomicBool::new(false);
        self.vars_gone = AtomicBool::new(false);
        self.ready_at = AtomicU32::new(crate::sync::coarse::now_ms() as u32);
        self.meta = meta;
        // The stripped fields hold nothing: what they are replaced with is
        // not dropped (a drop call each, for nothing, on every push).
        let extra = std::mem::replace(&mut self.extra, extras(&self.meta));
        std::mem::forget(extra);
        small::discard(std::mem::replace(&mut self.deps, deps));
    }

    /// Drops the var references, span and errors (see [`Task::strip`]).
    /// Fields that hold nothing are left alone.
    pub(crate) fn strip(&mut self) {
        if !self.deps.is_empty() {
            self.deps = DepList::new();
        }
        if let Some(extra) = self.extra.take() {
            drop(extra);
        }
        // Errors are stored only with `has_errors` set; a nested op's
        // handoff state without it.
        let errors = self.errors.get_mut().unwrap_or_else(std::sync::PoisonError::into_inner);
        if self.has_errors.load(Ordering::Relaxed) || errors.has_detail() {
            *errors = Default::default();
        }
    }
}
