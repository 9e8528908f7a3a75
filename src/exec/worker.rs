//! A worker thread's loop: take an op (its next slot first, then the ops
//! it claimed with the last one it took from a feed, then the queues), run
//! it, let its reference go, and, with nothing to do, watch the queues a
//! while and then park.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::time::Instant;

use super::feed_list::{FeedView, SWEEP_EVERY};
use super::pool::PoolShared;
use super::stats::WorkerStats;
use super::this_thread;
use crate::op::TaskRef;
use crate::op::engine_core::deferred;

/// How many ops a worker runs from its next slot before it takes from the
/// queue again, if anything is queued (so that queued ops are never starved
/// by a long chain).
const NEXT_STREAK: u32 = 64;

/// How many ops a worker's take from a feed may bring besides the one it
/// runs next (while as many more stay queued: `FeedShared::take_some`).
const TAKE_MORE: usize = 7;

/// How many times a worker finds nothing to do between two looks for idle
/// feeds to retire (see `feed_list.rs`).
const SWEEP_IDLES: u32 = 256;

/// What a worker does next.
enum Next {
    Run(TaskRef),
    /// Queued ops had their turn: look again.
    Again,
    /// The pool stopped and its queues are empty.
    Exit,
}

/// A worker: its pool, its view of the pool's feeds, and the records of the
/// ops it ran on their way back to the pushing threads.
pub(super) struct Worker<'a> {
    pool: &'a PoolShared,
    /// Its index in the pool (its counters: `stats.rs`).
    k: usize,
    /// In a busy spell: it has run ops since it last waited.
    busy: bool,
    /// Its counters.
    mine: &'a WorkerStats,
    view: FeedView,
    /// Ops run in a row from the next slot.
    streak: u32,
    /// Times it found nothing to do.
    idles: u32,
    /// Ops run, for settling the releases deferred (`op::engine_core::deferred`).
    runs: u32,
    /// Ops it claimed from a feed together with the one it ran, to run
    /// next (ahead of the queues, behind its next slot and urgent ops).
    taken: VecDeque<TaskRef>,
}

impl<'a> Worker<'a> {
    pub(super) fn new(pool: &'a PoolShared, k: usize) -> Self {
        Self {
            pool,
            k,
            busy: false,
            mine: pool.stats.worker(k),
            view: FeedView::default(),
            streak: 0,
            idles: 0,
            runs: 0,
            taken: VecDeque::with_capacity(TAKE_MORE),
        }
    }

    /// Runs ops until the pool stops.
    pub(super) fn work(mut self) {
        loop {
            match self.next() {
                Next::Run(task) => self.run(task),
                Next::Again => {}
                Next::Exit => return deferred::settle(),
            }
        }
    }

    fn next(&mut self) -> Next {
        let Some(task) = this_thread::take_next() else {
            self.streak = 0;
            if !self.taken.is_empty() {
                let task = self.pool.pop_urgent().or_else(|| self.taken.pop_front());
                return Next::Run(task.expect("ops were taken"));
            }
            let taken = &mut self.taken;
            return match self.pool.try_pop_some(&mut self.view, TAKE_MORE, |task| taken.push_back(task)) {
                Some(task) => Next::Run(task),
                None => self.idle(),
            };
        };
        if self.streak < NEXT_STREAK {
            self.streak += 1;
            return Next::Run(task);
        }
        self.streak = 0;
        if self.taken.is_empty() && !self.pool.has_work(&mut self.view) {
            // Nothing is waiting for a turn.
            return Next::Run(task);
        }
        // Let the queue have a turn. No wake-up: this worker takes an op
        // from the queue next, so the queue holds no more ops for others
        // than it did.
        self.pool.enqueue(task);
        Next::Again
    }

    /// Runs a ready op, then lets its reference go: if it is the last, the
    /// record's slot goes back to this thread's slab magazine.
    fn run(&mut self, task: TaskRef) {
        if !self.busy {
            self.busy = true;
            self.pool.stats.busy(self.k);
        }
        self.mine.start();
        if self.pool.stats.timing {
            self.run_timed(&task);
        } else {
            this_thread::run_first(|| this_thread::run(&task));
        }
        self.mine.end();
        // What the record held may run a user destructor (a result nobody
        // took): contained like the op itself.
        crate::op::let_go(task);
        self.runs = self.runs.wrapping_add(1);
        if self.runs.is_multiple_of(deferred::SETTLE_EVERY) {
            deferred::settle();
        }
    }

    /// [`run`](Self::run)'s body with timing metrics on: out of line, so
    /// that the untimed path stays as it was.
    #[inline(never)]
    fn run_timed(&self, task: &TaskRef) {
        let stats = &self.pool.stats;
        let start = stats.starting(self.k, task.header().ready_at());
        this_thread::run_first(|| this_thread::run(task));
        stats.ran(self.k, start);
    }

    /// Nothing queued: waits.
    fn idle(&mut self) -> Next {
        // No engine waits for its end on a worker that has nothing to run.
        deferred::settle();
        // A look at the clock is not free: a sweep is considered once per
        // `SWEEP_IDLES` idle turns (and when parking for long).
        self.idles = self.idles.wrapping_add(1);
        if self.idles.is_multiple_of(SWEEP_IDLES) {
            self.pool.feeds.sweep(self.pool.parking.barriers());
        }
        match self.wait() {
            Some(Some(task)) => Next::Run(task),
            Some(None) => {
                if let Some(held) = &self.pool.held {
                    held.release();
                }
                Next::Again
            }
            None => Next::Exit,
        }
    }

    /// Waits for an op: watches the queues a while, then parks. `Some(None)`
    /// if the engine holds ops back and no op is queued; `None` once
    /// stopping and drained.
    fn wait(&mut self) -> Option<Option<TaskRef>> {
        let pool = self.pool;
        let start = Instant::now();
        if self.busy {
            self.busy = false;
            pool.stats.idle(self.k, start);
        }
        let view = &mut self.view;
        let mut spins = 0u32;
        while !pool.spin.is_zero() && !pool.has_work(view) && !pool.stopping.load(Ordering::Acquire) {
            spins += 1;
            if spins < 64 {
                std::hint::spin_loop();
            } else if start.elapsed() < pool.spin {
                std::thread::yield_now();
            } else {
                break;
            }
        }
        let held = || pool.held.as_ref().is_some_and(|held| held.any());
        // The look and the nap both use the view: one at a time.
        let view = std::cell::RefCell::new(view);
        pool.parking.park(
            || pool.try_pop(&mut view.borrow_mut()).map(Some).or_else(|| held().then_some(None)),
            || pool.stopping.load(Ordering::Acquire),
            // Asleep for long, the worker keeps no copy of the feed list,
            // which would keep the rings of retired feeds alive; while
            // feeds are listed, it wakes now and then to retire idle ones
            // (and while spare rings wait to be given back, to give them;
            // and while the slab keeps more free records than an idle
            // process keeps, to let it give them back once unused for long).
            || {
                view.borrow_mut().forget();
                pool.feeds.sweep(pool.parking.barriers());
                let records = crate::sync::slab::idle();
                (pool.feeds.need_sweeps() || records).then_some(SWEEP_EVERY)
            },
        )
    }
}
