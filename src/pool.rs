//! A pool of dedicated worker threads fed by priority queues.
//!
//! Device-agnostic: the dispatcher decides which pool an op goes to; a pool
//! only runs what it is given, highest priority first, FIFO among equals
//! queued by one thread (see *feeds* below for ops queued by several).
//!
//! Four things keep the cost per op low:
//! * **a next slot**: an op that a worker's own op made ready, on the same
//!   pool, is kept by that worker and run next, without a queue round trip
//!   or a wake-up (one op at most, only while nothing more urgent is
//!   queued, and, while other ops are queued, at most [`NEXT_STREAK`] times
//!   in a row);
//! * **spinning before parking**: an idle worker watches the queues for a
//!   short while (yielding its core) before it sleeps, so a steady stream
//!   of ops never pays for a thread wake-up;
//! * **feeds**: a thread that is not one of the pool's workers (a pushing
//!   thread) queues its priority-0 ops on a FIFO of its own (`feed.rs`),
//!   which only it writes and the workers take from: queuing an op is plain
//!   stores, with no read-modify-write on a line the workers write (each of
//!   which would make the pusher wait for its earlier stores to reach lines
//!   the workers hold). Workers queue on a shared lock-free FIFO, the *injector*. A
//!   worker takes from the feeds and the injector in turn, at most
//!   [`SOURCE_STREAK`] ops from one while another holds ops, so none
//!   starves; FIFO order holds among the ops one thread queued;
//! * **no lock to submit**: a submit takes a lock only to wake a parked
//!   worker (see `park.rs`), or once per thread to set up its feed.
//!
//! Ops with other priorities sit in a heap that is consulted first for
//! positive priorities and last for negative ones, which is exactly
//! "highest first, FIFO among equals".

use std::cell::{Cell, RefCell};
use std::cmp::Ordering as CmpOrdering;
use std::collections::BinaryHeap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_deque::{Injector, Steal};

use crate::feed::{Feed, FeedShared};

use crate::op::TaskRef;
use crate::park::Parking;

/// How many ops a worker runs from its next slot before it takes from the
/// queue again, if anything is queued (so that queued ops are never starved
/// by a long chain).
const NEXT_STREAK: u32 = 64;

/// How many ops a worker takes in a row from one queue (a feed, the
/// injector) while others hold ops too, before it looks at the next.
const SOURCE_STREAK: u32 = 64;

/// How long an idle worker watches the queue before it parks.
const SPIN: Duration = Duration::from_micros(50);

static NEXT_POOL_ID: AtomicUsize = AtomicUsize::new(1);

thread_local! {
    /// The pool this thread works for (0: none).
    static POOL_ID: Cell<usize> = const { Cell::new(0) };
    /// The op this worker runs next.
    static NEXT: RefCell<Option<TaskRef>> = const { RefCell::new(None) };
    /// User bodies running on this thread: while one runs, an op it makes
    /// ready (by signalling a completion) must not wait for it to return.
    static IN_BODY: Cell<u32> = const { Cell::new(0) };
    /// This thread's feeds, one per pool it queued ops on (outside it).
    static FEEDS: RefCell<Vec<OwnFeed>> = const { RefCell::new(Vec::new()) };
}

/// Runs a user body, marking this thread as busy with it: ops made ready
/// meanwhile go to the queue, not to this worker's next slot (the body may
/// even block until they have run).
pub(crate) fn in_body<R>(body: impl FnOnce() -> R) -> R {
    struct Leave;
    impl Drop for Leave {
        fn drop(&mut self) {
            IN_BODY.with(|n| n.set(n.get() - 1));
        }
    }
    IN_BODY.with(|n| n.set(n.get() + 1));
    let _leave = Leave;
    body()
}

/// Ops an engine holds back from its pools (a bulk segment not yet
/// pushed), which idle workers ask it to push before they park.
pub(crate) trait Held: Send + Sync {
    /// Whether ops are held back. Read by a worker announced as parking,
    /// after a full fence (see [`Pool::all_parked`]).
    fn any(&self) -> bool;
    /// Pushes them.
    fn release(&self);
}

pub(crate) struct Pool {
    shared: Arc<PoolShared>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

struct PoolShared {
    id: usize,
    /// Priority-0 ops queued by the workers, FIFO: lock-free, so that a
    /// worker queuing and one taking an op never wait for each other.
    fifo: Injector<TaskRef>,
    /// Priority-0 ops queued by other threads, one FIFO per thread.
    feeds: Feeds,
    /// Ops with a non-zero priority.
    heap: Mutex<Heap>,
    /// Ops in `heap`, readable without its lock.
    in_heap: AtomicUsize,
    /// Ops in `heap` with a priority above zero.
    urgent: AtomicUsize,
    parking: Parking,
    stopping: AtomicBool,
    workers: usize,
    held: Option<Arc<dyn Held>>,
}

#[derive(Default)]
struct Heap {
    heap: BinaryHeap<Queued>,
    seq: u64,
}

struct Queued {
    priority: i32,
    seq: u64,
    task: TaskRef,
}

impl Ord for Queued {
    fn cmp(&self, other: &Self) -> CmpOrdering {
        self.priority.cmp(&other.priority).then_with(|| other.seq.cmp(&self.seq))
    }
}

impl PartialOrd for Queued {
    fn partial_cmp(&self, other: &Self) -> Option<CmpOrdering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for Queued {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == CmpOrdering::Equal
    }
}

impl Eq for Queued {}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Pool {
    /// Starts `workers` threads named `{name}-{k}`; before they park, they
    /// release what `held` holds back.
    pub(crate) fn start(name: &str, workers: usize, held: Option<Arc<dyn Held>>) -> std::io::Result<Self> {
        let workers = workers.max(1);
        let shared = Arc::new(PoolShared {
            id: NEXT_POOL_ID.fetch_add(1, Ordering::Relaxed),
            fifo: Injector::new(),
            feeds: Feeds::default(),
            heap: Mutex::new(Heap::default()),
            in_heap: AtomicUsize::new(0),
            urgent: AtomicUsize::new(0),
            parking: Parking::default(),
            stopping: AtomicBool::new(false),
            workers,
            held,
        });
        let threads = (0..workers)
            .map(|k| {
                let shared = shared.clone();
                std::thread::Builder::new().name(format!("{name}-{k}")).spawn(move || shared.work())
            })
            .collect::<std::io::Result<Vec<_>>>()?;
        Ok(Self { shared, threads: Mutex::new(threads) })
    }

    /// Queues a ready op.
    pub(crate) fn submit(&self, task: TaskRef) {
        self.queue(task);
        self.shared.parking.notify(1);
    }

    /// Queues ready ops together: a wake-up per op while workers sleep.
    pub(crate) fn submit_all(&self, tasks: impl Iterator<Item = TaskRef>) {
        let mut n = 0;
        for task in tasks {
            self.queue(task);
            n += 1;
        }
        self.shared.parking.notify(n);
    }

    /// Queues an op: on this thread's feed if this thread is not one of the
    /// pool's workers and the op has priority 0 (see the module docs), else
    /// where the workers queue.
    fn queue(&self, task: TaskRef) {
        let shared = &self.shared;
        let mut task = Some(task);
        if POOL_ID.with(Cell::get) != shared.id
            && task.as_ref().is_some_and(|t| t.header().meta.priority == 0)
        {
            // Not during this thread's exit (its feeds are gone), nor from
            // within the feed list's own upkeep.
            let _ = FEEDS.try_with(|feeds| {
                if let Ok(mut feeds) = feeds.try_borrow_mut() {
                    feed_of(&mut feeds, shared).push(task.take().expect("queued once"));
                }
            });
        }
        if let Some(task) = task {
            shared.enqueue(task);
        }
    }

    /// Hands a ready op made ready by an op this thread ran to this thread's
    /// next slot, if this thread is a worker of this pool, its slot is free
    /// and nothing more urgent is queued. Otherwise queues it.
    pub(crate) fn submit_successor(&self, task: TaskRef) {
        let shared = &self.shared;
        let keep = POOL_ID.with(Cell::get) == shared.id
            && IN_BODY.with(Cell::get) == 0
            && task.header().meta.priority >= 0
            && shared.urgent.load(Ordering::Relaxed) == 0;
        // The slot keeps the first successor; later ones are queued.
        let queued = if keep {
            NEXT.with(|next| {
                let mut slot = next.borrow_mut();
                if slot.is_some() { Some(task) } else { slot.replace(task) }
            })
        } else {
            Some(task)
        };
        if let Some(task) = queued {
            self.submit(task);
        }
    }

    /// Whether every worker is parked or about to park, so that none will
    /// look at the engine's held-back ops unless woken. The caller makes
    /// them visible to [`Held::any`] first, then issues a full fence: then
    /// either this sees every worker parking, or the last one to park sees
    /// the ops (the handshake of `park.rs`).
    pub(crate) fn all_parked(&self) -> bool {
        self.shared.parking.sleepers() >= self.shared.workers
    }

    /// Tells the workers to exit once the queue is empty.
    pub(crate) fn stop(&self) {
        self.shared.stopping.store(true, Ordering::Release);
        self.shared.parking.notify_all();
    }

    /// Joins the workers (after `stop`), except the calling thread if it is one.
    pub(crate) fn join(&self) {
        let me = std::thread::current().id();
        let threads = std::mem::take(&mut *lock(&self.threads));
        for t in threads {
            if t.thread().id() != me {
                let _ = t.join();
            }
        }
    }
}

impl PoolShared {
    /// Queues an op where the workers queue theirs.
    fn enqueue(&self, task: TaskRef) {
        let priority = task.header().meta.priority;
        if priority == 0 {
            self.fifo.push(task);
            return;
        }
        let mut heap = lock(&self.heap);
        if priority > 0 {
            self.urgent.fetch_add(1, Ordering::Relaxed);
        }
        heap.seq += 1;
        let seq = heap.seq;
        heap.heap.push(Queued { priority, seq, task });
        self.in_heap.fetch_add(1, Ordering::Relaxed);
    }

    /// Whether an op is queued (without taking it).
    fn has_work(&self, view: &mut FeedView) -> bool {
        self.feeds.refresh(view);
        !self.fifo.is_empty()
            || self.in_heap.load(Ordering::Relaxed) > 0
            || view.feeds.iter().any(|feed| !feed.is_empty())
    }

    /// Takes the next op: a positive priority first, then priority 0 from
    /// the feeds and the injector in turn, then a negative priority.
    fn try_pop(&self, view: &mut FeedView) -> Option<TaskRef> {
        if self.urgent.load(Ordering::Relaxed) > 0 {
            if let Some(task) = self.pop_heap(|p| p > 0) {
                return Some(task);
            }
        }
        self.feeds.refresh(view);
        // The injector is source `n`, after the feeds.
        let FeedView { feeds, turns, .. } = view;
        let taken = turns.look(feeds.len() + 1, |source| match feeds.get(source) {
            Some(feed) => feed.take(),
            None => self.take_injected(),
        });
        if taken.is_some() {
            return taken;
        }
        if self.in_heap.load(Ordering::Relaxed) > 0 {
            return self.pop_heap(|_| true);
        }
        None
    }

    /// Takes an op from the injector, retrying while it is contended.
    fn take_injected(&self) -> Option<TaskRef> {
        loop {
            match self.fifo.steal() {
                Steal::Success(task) => return Some(task),
                Steal::Empty => return None,
                Steal::Retry => std::hint::spin_loop(),
            }
        }
    }

    /// Pops the heap's top op if its priority passes `take`.
    fn pop_heap(&self, take: impl FnOnce(i32) -> bool) -> Option<TaskRef> {
        let mut heap = lock(&self.heap);
        if !take(heap.heap.peek()?.priority) {
            return None;
        }
        let Queued { priority, task, .. } = heap.heap.pop()?;
        self.in_heap.fetch_sub(1, Ordering::Relaxed);
        if priority > 0 {
            self.urgent.fetch_sub(1, Ordering::Relaxed);
        }
        Some(task)
    }

    fn work(&self) {
        POOL_ID.with(|id| id.set(self.id));
        let mut streak = 0;
        let mut view = FeedView::default();
        // Shells of finished records, given back to the pushing threads.
        let mut shells = Vec::with_capacity(crate::engine::SHELL_BATCH);
        loop {
            let next = NEXT.with(|next| next.borrow_mut().take());
            let task = match next {
                Some(task) if streak < NEXT_STREAK => {
                    streak += 1;
                    task
                }
                Some(task) => {
                    streak = 0;
                    if !self.has_work(&mut view) {
                        // Nothing is waiting for a turn.
                        task
                    } else {
                        // Let the queue have a turn. No wake-up: this worker
                        // takes an op from the queue next, so the queue holds
                        // no more ops for others than it did.
                        self.enqueue(task);
                        continue;
                    }
                }
                None => {
                    streak = 0;
                    match self.try_pop(&mut view) {
                        Some(task) => task,
                        None => {
                            crate::engine::bury(&mut shells);
                            match self.wait(&mut view) {
                                Some(Some(task)) => task,
                                Some(None) => {
                                    if let Some(held) = &self.held {
                                        held.release();
                                    }
                                    continue;
                                }
                                None => return,
                            }
                        }
                    }
                }
            };
            crate::engine::run_on_worker(task, &mut shells);
        }
    }

    /// Waits for an op: spins a while, then parks. `Some(None)` if the
    /// engine holds ops back and no op is queued; `None` once stopping and
    /// drained.
    fn wait(&self, view: &mut FeedView) -> Option<Option<TaskRef>> {
        let start = Instant::now();
        let mut spins = 0u32;
        while !self.has_work(view) && !self.stopping.load(Ordering::Acquire) {
            spins += 1;
            if spins < 64 {
                std::hint::spin_loop();
            } else if start.elapsed() < SPIN {
                std::thread::yield_now();
            } else {
                break;
            }
        }
        let held = || self.held.as_ref().is_some_and(|held| held.any());
        self.parking.park(
            || self.try_pop(view).map(Some).or_else(|| held().then_some(None)),
            || self.stopping.load(Ordering::Acquire),
        )
    }
}

/// The feeds of a pool: the taking ends of the FIFOs of the threads that
/// queue ops on it from outside.
#[derive(Default)]
struct Feeds {
    list: Mutex<Vec<Arc<FeedShared<TaskRef>>>>,
    /// Bumped under `list`'s lock whenever it changes, so that workers
    /// refresh their copies ([`FeedView`]) without taking the lock.
    version: AtomicUsize,
}

/// A worker's copy of its pool's feed list, and where its next look starts.
#[derive(Default)]
struct FeedView {
    version: usize,
    feeds: Vec<Arc<FeedShared<TaskRef>>>,
    turns: Turns,
}

/// Which queue a worker looks at first: sources take turns, at most
/// [`SOURCE_STREAK`] ops in a row from one while another holds ops.
#[derive(Default)]
struct Turns {
    /// The source the last op came from…
    turn: usize,
    /// …and how many ops in a row came from it.
    streak: u32,
}

impl Turns {
    /// Takes an op from one of `sources` sources (`take(k)`, an op from
    /// source `k`, or none). The look starts at the source the last op came
    /// from (looking at an empty queue is not free), or at the next one
    /// after [`SOURCE_STREAK`] ops in a row from it.
    fn look<T>(&mut self, sources: usize, mut take: impl FnMut(usize) -> Option<T>) -> Option<T> {
        // (`turn` is past the end if sources left since the last look.)
        let turn = if self.turn >= sources { 0 } else { self.turn };
        let stay = self.streak < SOURCE_STREAK;
        let start = if stay { turn } else { (turn + 1) % sources };
        for k in 0..sources {
            let source = if start + k >= sources { start + k - sources } else { start + k };
            if let Some(op) = take(source) {
                // A streak goes on only where the look started: back at
                // `turn` after the others were found empty, it starts over.
                self.streak = if source == turn && stay { self.streak + 1 } else { 1 };
                self.turn = source;
                return Some(op);
            }
        }
        None
    }
}

impl Feeds {
    /// Adds a feed.
    fn add(&self, feed: Arc<FeedShared<TaskRef>>) {
        let mut list = lock(&self.list);
        list.push(feed);
        // Release: a worker that sees the new version sees the list's new
        // entry (it reads the list under the lock anyway), and the ops
        // queued on the feed after this.
        self.version.fetch_add(1, Ordering::Release);
    }

    /// Removes a feed (its thread is leaving, its ops were requeued).
    fn remove(&self, gone: &Arc<FeedShared<TaskRef>>) {
        let mut list = lock(&self.list);
        list.retain(|feed| !Arc::ptr_eq(feed, gone));
        self.version.fetch_add(1, Ordering::Release);
    }

    /// Brings a worker's copy up to date: a plain load while nothing changed.
    fn refresh(&self, view: &mut FeedView) {
        if self.version.load(Ordering::Acquire) == view.version {
            return;
        }
        let list = lock(&self.list);
        view.version = self.version.load(Ordering::Relaxed);
        view.feeds = list.clone();
    }
}

/// A thread's feed on one pool: the queuing end of its FIFO.
struct OwnFeed {
    pool_id: usize,
    pool: Weak<PoolShared>,
    feed: Feed<TaskRef>,
}

/// This thread's feed on `pool`, set up on first use (and the feeds of
/// pools that are gone dropped then).
fn feed_of<'a>(feeds: &'a mut Vec<OwnFeed>, pool: &Arc<PoolShared>) -> &'a mut Feed<TaskRef> {
    let found = match feeds.iter().position(|feed| feed.pool_id == pool.id) {
        Some(k) => k,
        None => {
            feeds.retain(|feed| feed.pool.strong_count() > 0);
            let feed = Feed::new();
            pool.feeds.add(feed.shared().clone());
            feeds.push(OwnFeed { pool_id: pool.id, pool: Arc::downgrade(pool), feed });
            feeds.len() - 1
        }
    };
    &mut feeds[found].feed
}

impl Drop for OwnFeed {
    /// The thread is leaving: its queued ops move to the injector, and its
    /// feed leaves the list. (Workers may still take from it meanwhile.)
    fn drop(&mut self) {
        let Some(pool) = self.pool.upgrade() else {
            return;
        };
        let mut moved = 0;
        while let Some(task) = self.feed.pop() {
            pool.enqueue(task);
            moved += 1;
        }
        pool.feeds.remove(self.feed.shared());
        pool.parking.notify(moved);
    }
}

#[cfg(all(test, not(depengine_loom)))]
mod tests {
    use super::*;
    use crate::{Engine, ShutdownMode};

    /// Takes `ops` ops from sources that always (or never) hold ops, as
    /// `has_ops` says: the source of each op taken, and how many looks at
    /// a source that took.
    fn takes(turns: &mut Turns, has_ops: &[bool], ops: usize) -> (Vec<usize>, usize) {
        let mut taken = Vec::new();
        let mut looks = 0;
        for _ in 0..ops {
            let op = turns.look(has_ops.len(), |k| {
                looks += 1;
                has_ops[k].then_some(k)
            });
            taken.push(op.expect("a source holds ops"));
        }
        (taken, looks)
    }

    /// With ops in every source, each gives SOURCE_STREAK in a row, in turn.
    #[test]
    fn sources_take_turns_while_all_hold_ops() {
        let streak = SOURCE_STREAK as usize;
        let (taken, _) = takes(&mut Turns::default(), &[true, true, true], 6 * streak);
        let runs: Vec<(usize, usize)> =
            taken.chunk_by(|a, b| a == b).map(|run| (run[0], run.len())).collect();
        assert_eq!(runs, [(0, streak), (1, streak), (2, streak), (0, streak), (1, streak), (2, streak)]);
    }

    /// With ops in one source only, a worker looks at the empty ones once
    /// per SOURCE_STREAK ops, not before every op once a streak is over.
    #[test]
    fn a_streak_starts_over_when_the_others_are_empty() {
        let ops = 10 * SOURCE_STREAK as usize;
        let (taken, looks) = takes(&mut Turns::default(), &[true, false], ops);
        assert!(taken.iter().all(|&k| k == 0));
        assert_eq!(looks - ops, ops / SOURCE_STREAK as usize - 1, "looks at the empty source");
        // A source list that shrank leaves no turn past its end.
        let mut turns = Turns { turn: 5, streak: 3 };
        assert_eq!(takes(&mut turns, &[false, true], 1).0, [1]);
    }

    /// A thread that pushed to many engines, one after the other, keeps a
    /// feed only for pools that still exist.
    #[test]
    fn a_thread_keeps_no_feeds_of_pools_that_are_gone() {
        for _ in 0..20 {
            let engine = Engine::builder().cpu_workers(1).build().unwrap();
            engine.op("op").run(|(), ()| Ok(())).blocking_wait().unwrap();
            assert!(FEEDS.with(|feeds| feeds.borrow().iter().any(|feed| feed.pool.strong_count() > 0)));
            engine.blocking_shutdown(ShutdownMode::Drain).unwrap();
            drop(engine);
            assert!(FEEDS.with(|feeds| feeds.borrow().len()) <= 2, "feeds of dropped pools are kept");
        }
    }
}
