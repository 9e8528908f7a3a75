//! What a pool's workers count for `Engine::metrics`: each worker writes
//! its own counters (plain loads and stores, on lines of its own: no
//! read-modify-write, nothing another thread writes), and a snapshot sums
//! them. Queue waits and run times are measured only with timing on, for
//! a look at the clock costs more than the rest of the counting together.
//!
//! A queue wait runs from the op's *ready stamp*, set in its header when it
//! is queued (`Pool::submit*`), to its start; the stamp is 32 bits of
//! 256 ns ticks since the pool started, so a wait is read modulo about
//! 18 minutes.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::metrics::{HISTOGRAM_BUCKETS, Histogram, bucket_of};
use crossbeam_utils::CachePadded;

/// A ready stamp's tick: 2^8 ns.
const TICK_SHIFT: u32 = 8;

/// Adds one to a counter that only the calling thread writes.
#[inline(always)]
fn bump(counter: &AtomicU64, n: u64) {
    counter.store(counter.load(Ordering::Relaxed) + n, Ordering::Relaxed);
}

/// One worker's counters.
pub(super) struct WorkerStats {
    /// Ops started, and ops whose run returned: the difference is the one
    /// running now, if any.
    started: AtomicU64,
    ended: AtomicU64,
    /// Busy time of the busy spells that ended (ns).
    busy_ns: AtomicU64,
    /// When the current busy spell began (ns since the pool started, plus
    /// one), 0 while the worker is idle.
    busy_since: AtomicU64,
    waits: [AtomicU64; HISTOGRAM_BUCKETS],
    runs: [AtomicU64; HISTOGRAM_BUCKETS],
    /// The waits and run times added up (ns).
    waits_ns: AtomicU64,
    runs_ns: AtomicU64,
}

impl Default for WorkerStats {
    fn default() -> Self {
        let zeros = || std::array::from_fn(|_| AtomicU64::new(0));
        Self {
            started: AtomicU64::new(0),
            ended: AtomicU64::new(0),
            busy_ns: AtomicU64::new(0),
            busy_since: AtomicU64::new(0),
            waits: zeros(),
            runs: zeros(),
            waits_ns: AtomicU64::new(0),
            runs_ns: AtomicU64::new(0),
        }
    }
}

/// The counters of a pool's workers, and the pool's clock.
pub(super) struct PoolStats {
    workers: Box<[CachePadded<WorkerStats>]>,
    /// Whether queue waits and run times are measured.
    pub(super) timing: bool,
    origin: Instant,
}

impl PoolStats {
    pub(super) fn new(workers: usize, timing: bool) -> Self {
        Self {
            workers: (0..workers).map(|_| CachePadded::default()).collect(),
            timing,
            origin: Instant::now(),
        }
    }

    /// Worker `k`'s counters.
    pub(super) fn worker(&self, k: usize) -> &WorkerStats {
        &self.workers[k]
    }

    fn ns(&self, at: Instant) -> u64 {
        at.saturating_duration_since(self.origin).as_nanos() as u64
    }

    /// The ready stamp for now.
    #[inline]
    pub(super) fn stamp(&self) -> u32 {
        (self.ns(Instant::now()) >> TICK_SHIFT) as u32
    }

    /// Worker `k` starts an op stamped `ready` (timing on): records its
    /// queue wait; returns the start, for [`Self::ran`].
    #[inline]
    pub(super) fn starting(&self, k: usize, ready: u32) -> Instant {
        let now = Instant::now();
        let waited = u64::from(((self.ns(now) >> TICK_SHIFT) as u32).wrapping_sub(ready)) << TICK_SHIFT;
        let w = &self.workers[k];
        bump(&w.waits[bucket_of(waited)], 1);
        bump(&w.waits_ns, waited);
        now
    }

    /// Worker `k` ran an op that started at `start` (timing on).
    #[inline]
    pub(super) fn ran(&self, k: usize, start: Instant) {
        let ran = start.elapsed().as_nanos() as u64;
        let w = &self.workers[k];
        bump(&w.runs[bucket_of(ran)], 1);
        bump(&w.runs_ns, ran);
    }

    /// Worker `k` found work after an idle spell: a busy spell begins.
    #[inline(never)]
    pub(super) fn busy(&self, k: usize) {
        self.workers[k].busy_since.store(self.ns(Instant::now()) + 1, Ordering::Relaxed);
    }

    /// Worker `k` found nothing to do at `now`: its busy spell, if one
    /// was on, ends.
    #[inline(never)]
    pub(super) fn idle(&self, k: usize, now: Instant) {
        let w = &self.workers[k];
        let since = w.busy_since.load(Ordering::Relaxed);
        if since != 0 {
            bump(&w.busy_ns, (self.ns(now) + 1).saturating_sub(since));
            w.busy_since.store(0, Ordering::Relaxed);
        }
    }

    /// Sums the workers' counters.
    pub(super) fn snapshot(&self) -> Sums {
        let now = self.ns(Instant::now()) + 1;
        let mut sums = Sums::default();
        let mut waits = [0; HISTOGRAM_BUCKETS];
        let mut runs = [0; HISTOGRAM_BUCKETS];
        let (mut waits_ns, mut runs_ns) = (0, 0);
        for w in self.workers.iter() {
            // `ended` first: a start is counted before its end.
            let ended = w.ended.load(Ordering::Relaxed);
            let started = w.started.load(Ordering::Relaxed);
            sums.ran += started;
            sums.running += usize::from(started > ended);
            let since = w.busy_since.load(Ordering::Relaxed);
            let spell = if since == 0 { 0 } else { now.saturating_sub(since) };
            sums.busy += Duration::from_nanos(w.busy_ns.load(Ordering::Relaxed) + spell);
            waits_ns += w.waits_ns.load(Ordering::Relaxed);
            runs_ns += w.runs_ns.load(Ordering::Relaxed);
            for (sum, n) in waits.iter_mut().zip(&w.waits) {
                *sum += n.load(Ordering::Relaxed);
            }
            for (sum, n) in runs.iter_mut().zip(&w.runs) {
                *sum += n.load(Ordering::Relaxed);
            }
        }
        sums.queue_wait = Histogram::from_counts(waits, Duration::from_nanos(waits_ns));
        sums.run_time = Histogram::from_counts(runs, Duration::from_nanos(runs_ns));
        sums
    }
}

impl WorkerStats {
    /// The worker starts an op.
    #[inline(always)]
    pub(super) fn start(&self) {
        bump(&self.started, 1);
    }

    /// The worker's op returned.
    #[inline(always)]
    pub(super) fn end(&self) {
        bump(&self.ended, 1);
    }
}

/// A pool's counters, summed over its workers.
#[derive(Default)]
pub(crate) struct Sums {
    pub(crate) ran: u64,
    pub(crate) running: usize,
    pub(crate) busy: Duration,
    pub(crate) queue_wait: Histogram,
    pub(crate) run_time: Histogram,
}
