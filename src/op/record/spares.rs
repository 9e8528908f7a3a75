//! Spare records: stripped op records kept for pushes to rebuild in place
//! (`../recycle.rs` has why and when), and what stripping and rebuilding
//! do to a record's header.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{DepList, Header, Meta, Task, TaskRef, cold, prefetch};
use crate::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use crate::sync::countdown::Countdown;
use crate::sync::{Mutex, lock, small};

/// Spare records kept at most, at the least: beyond, workers free their
/// batches themselves.
const MIN_SPARES: usize = 1024;

/// Spare records an idle engine keeps (see [`SpareRecords::idle`]): enough
/// for a trickle of pushes, little memory.
pub(crate) const IDLE_KEEP: usize = 64;

/// How long no push may have refilled its list from the kept records before
/// an idle engine gives back all but [`IDLE_KEEP`]: long enough that an
/// engine used in bursts keeps its records from one burst to the next.
const IDLE_RETURN: Duration = Duration::from_secs(1);

pub(crate) struct SpareRecords {
    /// Where workers keep their batches.
    kept: Mutex<KeptSpares>,
    /// `kept.list.len()`, readable without the lock.
    len: AtomicUsize,
    /// The most kept at once.
    max: usize,
    /// What the last look for idleness saw (see [`idle`](Self::idle)).
    watch: Mutex<Watch>,
}

/// The refill count at the last look, and since when it has not changed.
struct Watch {
    refills: u64,
    since: Instant,
}

#[derive(Default)]
struct KeptSpares {
    list: Vec<Spare>,
    closed: bool,
    /// Refills of a pushes' list from `list` so far (see
    /// [`SpareRecords::take`]).
    refills: u64,
}

impl SpareRecords {
    /// Spare records for an engine whose pushing threads may run `ahead`
    /// ops ahead of its workers (its soft bound on ops in flight; 0 for
    /// none): twice as many are kept, so that a thread waiting at the bound
    /// finds, when it goes on, a spare record for every op it pushes (the
    /// workers give back the ones they ran meanwhile, the bound's half and
    /// more); else [`MIN_SPARES`].
    pub(crate) fn new(ahead: usize) -> Self {
        let max = ahead.saturating_mul(2).max(MIN_SPARES);
        Self {
            kept: Mutex::new(KeptSpares::default()),
            len: AtomicUsize::new(0),
            max,
            watch: Mutex::new(Watch { refills: 0, since: Instant::now() }),
        }
    }

    /// Takes a worker's batch of spare records (leaving `batch` empty); frees them
    /// on this thread instead if the spare records is full or closed.
    pub(crate) fn keep_spares(&self, batch: &mut Vec<Spare>) {
        let refused = {
            let mut kept = lock(&self.kept);
            if kept.closed || kept.list.len() + batch.len() > self.max {
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
            if kept.closed || kept.list.len() >= self.max {
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
    /// the most it keeps wait, so that the spare records drains when it fills
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
            kept.refills += 1;
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
        let extra = if ready.len() > self.max / 2 { ready.pop() } else { None };
        (shell, extra)
    }

    /// Called now and then (at most every few tens of milliseconds) by a
    /// worker with nothing to do: whether no push has refilled its list
    /// for [`IDLE_RETURN`], so that the engine should give back its spare
    /// records but [`IDLE_KEEP`] ([`trim`](Self::trim)).
    pub(crate) fn idle(&self) -> bool {
        let Ok(mut watch) = self.watch.try_lock() else {
            return false;
        };
        let refills = lock(&self.kept).refills;
        if refills != watch.refills {
            *watch = Watch { refills, since: Instant::now() };
            return false;
        }
        watch.since.elapsed() >= IDLE_RETURN
    }

    /// Leaves [`IDLE_KEEP`] spare records, `ready`'s (the pushes' list) first,
    /// and hands the rest back to be freed by the caller, outside its locks.
    pub(crate) fn trim(&self, ready: &mut Vec<Spare>) -> Vec<Spare> {
        let mut gone = ready.split_off(ready.len().min(IDLE_KEEP));
        let room = IDLE_KEEP - ready.len();
        let mut kept = lock(&self.kept);
        let keep = kept.list.len().min(room);
        gone.extend(kept.list.drain(keep..));
        self.len.store(kept.list.len(), Ordering::Relaxed);
        gone
    }

    /// Whether more than [`IDLE_KEEP`] spare records are kept beside
    /// `ready`'s.
    pub(crate) fn holds_more_than_idle_keep(&self, ready: usize) -> bool {
        ready + self.len.load(Ordering::Relaxed) > IDLE_KEEP
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
    pub(crate) fn strip(mut task: TaskRef) -> Result<Self, (TaskRef, Option<Box<dyn std::any::Any + Send>>)> {
        let Some(op) = Arc::get_mut(&mut task) else {
            return Err((task, None));
        };
        match catch_unwind(AssertUnwindSafe(|| op.strip())) {
            Ok(()) => Ok(Self(task)),
            Err(payload) => Err((task, Some(payload))),
        }
    }

    pub(crate) fn header(&self) -> &Header {
        self.0.header()
    }

    /// Where the record is.
    #[cfg(all(test, not(depengine_loom)))]
    pub(crate) fn addr(&self) -> *const () {
        Arc::as_ptr(&self.0).cast()
    }

    /// Fetches the record for writing (see `record::prefetch`).
    pub(crate) fn prefetch(&self) {
        prefetch(&self.0);
    }

    /// The record as a `T`, to be rebuilt in place; `None` (the spare record
    /// freed) if it is of another type.
    pub(crate) fn downcast<T: Task>(self) -> Option<Unique<T>> {
        let any: Arc<dyn std::any::Any + Send + Sync> = self.0;
        any.downcast::<T>().ok().map(Unique)
    }
}

/// The only reference to a record (made from a [`Spare`]).
pub(crate) struct Unique<T>(Arc<T>);

impl<T> Unique<T> {
    pub(crate) fn get_mut(&mut self) -> &mut T {
        Arc::get_mut(&mut self.0).expect("a spare record is its record's only reference")
    }

    pub(crate) fn into_arc(self) -> Arc<T> {
        self.0
    }
}

impl Header {
    /// Makes a stripped header (see [`strip`](Self::strip)) the header of a
    /// new op of the same engine: its engine reference stays as it is.
    pub(crate) fn rebuild(&mut self, meta: Meta, deps: DepList) {
        debug_assert!(self.deps.is_empty() && self.cold.get().is_none(), "only a stripped header is rebuilt");
        self.pending = Countdown::new(deps.len());
        self.live = Countdown::new(1);
        self.has_errors = AtomicBool::new(false);
        self.vars_gone = AtomicBool::new(false);
        self.ready_at = AtomicU32::new(crate::sync::coarse::now_ms() as u32);
        self.meta = meta;
        // The stripped fields hold nothing: what they are replaced with is
        // not dropped (a drop call each, for nothing, on every push).
        let cold = std::mem::replace(&mut self.cold, cold::at_push(&self.meta));
        std::mem::forget(cold);
        small::discard(std::mem::replace(&mut self.deps, deps));
    }

    /// Drops the var references, span and errors (see [`Task::strip`]).
    /// Fields that hold nothing are left alone.
    pub(crate) fn strip(&mut self) {
        if !self.deps.is_empty() {
            self.deps = DepList::new();
        }
        if let Some(cold) = self.cold.take() {
            drop_cold(cold);
        }
    }
}

/// Drops a stripped op's cold box, out of line: most ops have none, and
/// the box's drop (errors, span, profile, group) would otherwise weigh on
/// every strip.
#[cold]
#[inline(never)]
fn drop_cold(cold: Box<super::cold::Cold>) {
    drop(cold);
}
