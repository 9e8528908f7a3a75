//! Record reuse: giving op records back to the threads that push them.
//! Everything about it is in this file, and the rest of the engine reaches
//! it at two points: a push takes a shell when it builds its record
//! ([`Graveyard::take`], then [`build`]), and a worker gives a record back
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
//! errors), exactly when it would have dropped it, and buries the empty
//! shell here, in batches. Each push takes one: it rebuilds its own op in
//! the shell if the shell's op type is its own (no allocator call at all:
//! the common case of a loop pushing one kind of op), else frees it just
//! before it allocates, so records cycle through the pusher's own allocator
//! cache. Pushes take from a list of their own (kept under the lock a push
//! takes anyway, the epoch tracker's), refilled with every buried shell at
//! once, and prefetch the shell they rebuild (and the next one): its lines
//! were written last by a worker. Shells still hold a reference
//! to their engine: closing the engine frees them all and turns later
//! burials into plain drops.

#![allow(unsafe_code)]

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

/// Shells a worker collects before burying them at once.
const BATCH: usize = 32;

/// Shells kept at most; beyond, workers free their batches themselves.
const MAX_SHELLS: usize = 1024;

pub(crate) struct Graveyard {
    /// Where workers bury their batches.
    buried: Mutex<Buried>,
    /// `buried.list.len()`, readable without the lock.
    len: AtomicUsize,
}

#[derive(Default)]
struct Buried {
    list: Vec<Shell>,
    closed: bool,
}

impl Graveyard {
    pub(crate) fn new() -> Self {
        Self { buried: Mutex::new(Buried::default()), len: AtomicUsize::new(0) }
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

    /// Takes one shell; frees it on this thread instead if the graveyard is
    /// full or closed.
    pub(crate) fn bury_one(&self, shell: Shell) {
        let refused = {
            let mut buried = lock(&self.buried);
            if buried.closed || buried.list.len() >= MAX_SHELLS {
                Some(shell)
            } else {
                buried.list.push(shell);
                self.len.store(buried.list.len(), Ordering::Relaxed);
                None
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

/// Builds a record for a new op of the engine `host`: in `shell` (a
/// stripped record of that engine nobody else holds) if that is a record of
/// this type, else freshly allocated, after `shell` is freed (so that the
/// allocator hands out what this thread just freed).
#[inline(always)]
pub(crate) fn build<J: Job, H: Host>(
    shell: Option<Shell>,
    host: &Arc<H>,
    meta: Meta,
    deps: DepList,
    job: J,
    epoch: EpochRef,
) -> Arc<OpCell<J>> {
    // A shell of another type is freed here, before `OpCell::new` allocates.
    let Some(mut record) = shell.and_then(Shell::downcast::<OpCell<J>>) else {
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
    /// Ops this thread built in a shell.
    pub(crate) static REBUILT: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Gives back the record of an op this thread ran inline (a thread that is
/// not a worker, which gathers shells in [`Returns`]): strips it and buries
/// its shell in its engine's graveyard at once if `task` is its last
/// reference (a thread that may push no more must not keep shells, which
/// hold their engine); else drops the reference.
pub(crate) fn give_back(task: TaskRef) {
    match Shell::strip(task) {
        Ok(shell) => {
            let host = shell.header().host.clone();
            host.graveyard().bury_one(shell);
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

/// A worker's shells on their way back to the pushing threads: filled after
/// each op it runs, buried in their engine's graveyard [`BATCH`] at a time,
/// and whenever the worker runs out of work.
pub(crate) struct Returns {
    shells: Vec<Shell>,
}

impl Returns {
    pub(crate) fn new() -> Self {
        Self { shells: Vec::with_capacity(BATCH) }
    }

    /// Gives back the record of an op this thread ran: strips it and keeps
    /// its shell if `task` is its last reference; else drops the reference.
    /// Dropping what the record holds may run a user destructor (a result
    /// nobody took): contained like the op itself. Inlined into the
    /// worker's loop, where it runs after every op.
    #[inline(always)]
    pub(crate) fn give(&mut self, task: TaskRef) {
        match Shell::strip(task) {
            Ok(shell) => {
                debug_assert!(
                    self.shells.first().is_none_or(|s| Arc::ptr_eq(&s.header().host, &shell.header().host)),
                    "shells of one engine"
                );
                self.shells.push(shell);
                if self.shells.len() >= BATCH {
                    self.bury();
                }
            }
            Err((record, stripping)) => let_go(record, stripping),
        }
    }

    /// Buries the shells it holds in their engine's graveyard.
    #[cold]
    pub(crate) fn bury(&mut self) {
        if let Some(first) = self.shells.first() {
            let host = first.header().host.clone();
            host.graveyard().bury(&mut self.shells);
        }
    }
}

/// A stripped op record that nothing else references: a push rebuilds it
/// in place without looking at its reference counts again. Not `Clone`, and
/// it lends out no `TaskRef`, so it stays the only reference to its record.
pub(crate) struct Shell(TaskRef);

impl Shell {
    /// Strips `task` and makes it a shell if it is the only reference to
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

    /// The record as a `T`, to be rebuilt in place; `None` (the shell
    /// freed) if it is of another type.
    fn downcast<T: Task>(self) -> Option<Unique<T>> {
        let any: Arc<dyn std::any::Any + Send + Sync> = self.0;
        any.downcast::<T>().ok().map(Unique)
    }
}

/// The only reference to a record (made from a [`Shell`]).
struct Unique<T>(Arc<T>);

impl<T> Unique<T> {
    fn get_mut(&mut self) -> &mut T {
        // SAFETY: this is the only reference to the record (`Shell`'s
        // invariant: `Arc::get_mut` succeeded when it was made, and no
        // reference was made from it since), so nothing else reads or
        // writes it while the borrow lasts; `Arc::as_ptr` derives the
        // pointer from the `Arc`'s own, with its mutable provenance, as
        // `Arc::get_mut` does.
        unsafe { &mut *Arc::as_ptr(&self.0).cast_mut() }
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
        if self.has_errors.load(Ordering::Relaxed) || errors.has_rare() {
            *errors = Default::default();
        }
    }
}
