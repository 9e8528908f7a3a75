//! A pool of dedicated worker threads fed by priority queues.
//!
//! Device-agnostic: the dispatcher (`place.rs`) decides which pool an op
//! goes to; a pool only runs what it is given, highest priority first, FIFO
//! among equals queued by one thread (see *feeds* below for ops queued by
//! several). The workers' loop is `worker.rs`; `README.md` beside this file
//! has the thread roles, the queues and the parking handshake.
//!
//! Four things keep the cost per op low:
//! * **a next slot**: an op that a worker's own op made ready, on the same
//!   pool, is kept by that worker and run next, without a queue round trip
//!   or a wake-up (one op at most, only while nothing more urgent is
//!   queued, and, while other ops are queued, at most `NEXT_STREAK` times
//!   in a row);
//! * **spinning before parking**: an idle worker watches the queues for a
//!   short while (yielding its core) before it sleeps, so a steady stream
//!   of ops never pays for a thread wake-up;
//! * **feeds**: a thread that is not one of the pool's workers (a pushing
//!   thread) queues its priority-0 ops on a FIFO of its own (`feed.rs`),
//!   which only it writes and the workers take from: queuing an op is plain
//!   stores, with no read-modify-write on a line the workers write (each of
//!   which would make the pusher wait for its earlier stores to reach lines
//!   the workers hold). Workers queue on a shared lock-free FIFO, the
//!   *injector*. A worker takes from the feeds and the injector in turn, at
//!   most `SOURCE_STREAK` ops from one while another holds ops, so none
//!   starves; FIFO order holds among the ops one thread queued (`feed_list.rs`);
//! * **no lock to submit**: a submit takes a lock only to wake a parked
//!   worker (see `park.rs`), or once per thread to set up its feed.
//!
//! Ops with other priorities sit in a heap that is consulted first for
//! positive priorities and last for negative ones, which is exactly
//! "highest first, FIFO among equals".

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

use crossbeam_deque::{Injector, Steal};

use super::feed::FeedShared;
use super::feed_list::{FeedView, Feeds};
use super::heap::Heap;
use super::park::Parking;
use super::stats::{PoolStats, Sums};
use super::this_thread;
use super::worker::Worker;
use crate::may_block;
use crate::op::TaskRef;
use crate::op::job::in_user_body;

static NEXT_POOL_ID: AtomicUsize = AtomicUsize::new(1);

/// Ops an engine holds back from its pools, which idle workers ask it to
/// push before they park. The one hook of bulk execution in this layer
/// (`engine::bulk`: the open segment); see `README.md`, *Parking*.
pub(crate) trait HeldBack: Send + Sync {
    /// Whether ops are held back. Read by a worker announced as parking,
    /// after a full fence (see [`Pool::all_parked`]).
    fn any(&self) -> bool;
    /// Pushes them.
    fn release(&self);
}

/// Called first on worker thread `k` of a pool (a GPU worker binds its
/// device and takes its stream).
pub(crate) type ThreadInit = Arc<dyn Fn(usize) + Send + Sync>;

/// Code of the program's, run on each worker thread of every pool.
pub(crate) type Hook = Arc<dyn Fn(usize) + Send + Sync>;

/// What the program asks of each worker thread (`EngineBuilder::
/// on_thread_start`, `on_thread_stop`, `thread_stack_size`).
#[derive(Clone, Default)]
pub(crate) struct ThreadHooks {
    /// Run as the thread starts, after the engine's own set-up (a GPU
    /// worker has bound its device), before it takes any op.
    pub(crate) start: Option<Hook>,
    /// Run as the thread ends, after its last op.
    pub(crate) stop: Option<Hook>,
    /// The thread's stack, in bytes; `None`: the standard library's.
    pub(crate) stack_size: Option<usize>,
}

impl std::fmt::Debug for ThreadHooks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ThreadHooks")
            .field("start", &self.start.is_some())
            .field("stop", &self.stop.is_some())
            .field("stack_size", &self.stack_size)
            .finish()
    }
}

/// Runs a hook of the program's; a panic in it is reported as an error
/// (the thread does not run ops then), not unwound through the engine.
fn run_hook(hook: Option<&Hook>, which: &str, thread: &str, k: usize) -> Result<(), String> {
    let Some(hook) = hook else { return Ok(()) };
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| hook(k))).map_err(|payload| {
        let message = crate::error::panic_message(payload.as_ref());
        format!("the thread {which} hook panicked on {thread}: {message}")
    })
}

pub(crate) struct Pool {
    /// Its threads' name prefix.
    name: String,
    shared: Arc<PoolShared>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

pub(super) struct PoolShared {
    pub(super) id: usize,
    /// Priority-0 ops queued by the workers, FIFO: lock-free, so that a
    /// worker queuing and one taking an op never wait for each other.
    fifo: Injector<TaskRef>,
    /// Priority-0 ops queued by other threads, one FIFO per thread.
    pub(super) feeds: Feeds,
    /// Ops with a non-zero priority.
    heap: Mutex<Heap>,
    /// Ops in `heap`, readable without its lock.
    in_heap: AtomicUsize,
    /// Ops in `heap` with a priority above zero.
    urgent: AtomicUsize,
    pub(super) parking: Parking,
    pub(super) stopping: AtomicBool,
    workers: usize,
    pub(super) held: Option<Arc<dyn HeldBack>>,
    /// How long an idle worker watches the queues before it parks.
    pub(super) spin: Duration,
    /// What the workers count for metrics.
    pub(super) stats: PoolStats,
    /// A thread that pushed an op runs it now (see [`Pool::claim_caller`]).
    caller_turn: AtomicBool,
    /// Ops of a pushing thread queued and not yet taken at which that
    /// thread runs its next ready ops itself (see [`Pool::offer`]).
    pub(super) crowded_at: usize,
}

/// The turn [`Pool::claim_caller`] gave: free again when dropped.
pub(crate) struct CallerTurn<'a>(&'a AtomicBool);

impl Drop for CallerTurn<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Pool {
    /// Starts `workers` threads named `{name}-{k}`, which watch the queues
    /// for `spin` when idle before they park; before they park, they release
    /// what `held` holds back. With `timing`, they measure queue waits and
    /// run times (`stats.rs`). A pushing thread with `crowded_at` of its
    /// ops queued runs its next ready ops itself (see [`Pool::offer`]).
    pub(crate) fn start(
        name: &str,
        workers: usize,
        held: Option<Arc<dyn HeldBack>>,
        (spin, timing, crowded_at): (Duration, bool, usize),
        init: Option<ThreadInit>,
        hooks: &ThreadHooks,
    ) -> std::io::Result<Self> {
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
            spin,
            stats: PoolStats::new(workers, timing),
            caller_turn: AtomicBool::new(false),
            crowded_at,
        });
        let pool = Self { name: name.to_owned(), shared, threads: Mutex::new(Vec::with_capacity(workers)) };
        // Each thread is started once the one before it has set itself up.
        // Started all at once, threads still setting up compete for memory
        // with the next one's start: near a memory limit, the OS may grant
        // a thread its stack and then refuse what the standard library
        // sets up inside it before any code of ours runs, which aborts the
        // process. One at a time, a refusal comes from the start itself,
        // where it is an error the push returns.
        for k in 0..workers {
            let (shared, init, hooks) = (pool.shared.clone(), init.clone(), hooks.clone());
            let (up, set_up) = std::sync::mpsc::channel::<Result<(), String>>();
            let thread = format!("{name}-{k}");
            let mut builder = std::thread::Builder::new().name(thread.clone());
            if let Some(bytes) = hooks.stack_size {
                builder = builder.stack_size(bytes);
            }
            let started = spawn_failure(k).map_or_else(
                || {
                    builder.spawn(move || {
                        crate::may_block::mark_engine_thread();
                        if let Some(init) = init {
                            init(k);
                        }
                        let started =
                            may_block::in_start_hook(|| run_hook(hooks.start.as_ref(), "start", &thread, k));
                        if let Err(err) = started {
                            let _ = up.send(Err(err));
                            return;
                        }
                        this_thread::become_worker(&shared);
                        crate::op::engine_core::deferred::defer_here();
                        let worker = Worker::new(&shared, k);
                        let _ = up.send(Ok(()));
                        drop(up);
                        worker.work();
                        if let Err(err) = run_hook(hooks.stop.as_ref(), "stop", &thread, k) {
                            tracing::error!(target: "depengine", "{err}");
                        }
                    })
                },
                Err,
            );
            // A thread that ends before it is set up (it panicked) drops
            // its sender: the wait ends either way. One whose start hook
            // failed says why, and the pool does not start.
            let started = match (started, set_up.recv()) {
                (Ok(thread), Ok(Err(hook))) => {
                    let _ = thread.join();
                    Err(std::io::Error::other(hook))
                }
                (started, _) => started,
            };
            match started {
                Ok(thread) => lock(&pool.threads).push(thread),
                Err(err) => {
                    // The threads that did start hold no op yet: they exit.
                    pool.stop();
                    pool.join();
                    return Err(err);
                }
            }
        }
        tracing::debug!(target: "depengine", pool = name, workers, "pool started");
        Ok(pool)
    }

    /// Queues a ready op.
    #[inline]
    pub(crate) fn submit(&self, task: TaskRef) {
        self.stamp(&task);
        self.queue(task);
        self.shared.parking.notify(1);
    }

    /// Queues a ready op pushed by this thread, unless this thread's feed
    /// is crowded (the workers far behind it): then hands it back, for this
    /// thread to run itself (see `place.rs`). Only priority-0 ops of a
    /// thread that is not one of the pool's workers go to a feed.
    #[inline]
    pub(crate) fn offer(&self, task: TaskRef) -> Option<TaskRef> {
        let shared = &self.shared;
        if this_thread::works_for(shared.id) || task.header().meta.priority != 0 {
            self.submit(task);
            return None;
        }
        self.stamp(&task);
        match this_thread::offer_to_own_feed(shared, task) {
            this_thread::Offered::Queued => {}
            this_thread::Offered::Crowded(task) => return Some(task),
            this_thread::Offered::Refused(task) => shared.enqueue(task),
        }
        self.shared.parking.notify(1);
        None
    }

    /// Queues ready ops together: a wake-up per op while workers sleep.
    pub(crate) fn submit_all(&self, tasks: impl Iterator<Item = TaskRef>) {
        let mut n = 0;
        for task in tasks {
            self.stamp(&task);
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
        let task = if !this_thread::works_for(shared.id) && task.header().meta.priority == 0 {
            // Not during this thread's exit (its feeds are gone), nor from
            // within the feed list's own upkeep.
            this_thread::queue_on_own_feed(shared, task)
        } else {
            Some(task)
        };
        if let Some(task) = task {
            shared.enqueue(task);
        }
    }

    /// Hands a ready op made ready by an op this thread ran to this thread's
    /// next slot, if this thread is a worker of this pool, its slot is free
    /// and nothing more urgent is queued. Otherwise queues it.
    pub(crate) fn submit_successor(&self, task: TaskRef) {
        let shared = &self.shared;
        let keep = this_thread::works_for(shared.id)
            && !in_user_body()
            && task.header().meta.priority >= 0
            && shared.urgent.load(Ordering::Relaxed) == 0;
        // The slot keeps the first successor; later ones are queued.
        self.stamp(&task);
        let queued = if keep { this_thread::keep_next(task) } else { Some(task) };
        if let Some(task) = queued {
            self.queue(task);
            self.shared.parking.notify(1);
        }
    }

    /// Stamps an op as ready now, for its queue wait (timing metrics only).
    #[inline(always)]
    fn stamp(&self, task: &TaskRef) {
        if self.shared.stats.timing {
            self.stamp_now(task);
        }
    }

    #[cold]
    #[inline(never)]
    fn stamp_now(&self, task: &TaskRef) {
        task.header().set_ready_at(self.shared.stats.stamp());
    }

    /// The workers' counters, summed (for metrics).
    pub(crate) fn sums(&self) -> Sums {
        self.shared.stats.snapshot()
    }

    /// The ops queued, not yet taken by a worker (for metrics; those kept
    /// in a worker's next slot are not counted).
    pub(crate) fn queued(&self) -> usize {
        let shared = &self.shared;
        shared.fifo.len() + shared.in_heap.load(Ordering::Relaxed) + shared.feeds.queued()
    }

    /// Its worker threads.
    pub(crate) fn workers(&self) -> usize {
        self.shared.workers
    }

    /// Its threads' name prefix.
    /// Whether the calling thread is one of this pool's workers.
    pub(crate) fn is_own_worker(&self) -> bool {
        this_thread::works_for(self.shared.id)
    }

    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// Claims the pool's one turn for an op run by the thread that pushed
    /// it (`Exec::InlineWhenIdle`): given if every worker is parked and no
    /// other thread holds the turn; held until the claim is dropped.
    pub(crate) fn claim_caller(&self) -> Option<CallerTurn<'_>> {
        let turn = &self.shared.caller_turn;
        let free = self.all_parked() && !turn.load(Ordering::Relaxed);
        (free && !turn.swap(true, Ordering::Acquire)).then_some(CallerTurn(turn))
    }

    /// Whether every worker is parked or about to park, so that none will
    /// look at the engine's held-back ops unless woken. The caller makes
    /// them visible to [`HeldBack::any`] first, then issues a full fence: then
    /// either this sees every worker parking, or the last one to park sees
    /// the ops (the handshake of `park.rs`).
    pub(crate) fn all_parked(&self) -> bool {
        self.shared.parking.sleepers() >= self.shared.workers
    }

    /// Calls `f` on every op queued (not on those in a worker's next slot),
    /// taking them out and queuing them again.
    pub(crate) fn each_queued(&self, mut f: impl FnMut(&TaskRef)) {
        let mut view = FeedView::default();
        let mut taken = Vec::new();
        while let Some(task) = self.shared.try_pop(&mut view) {
            f(&task);
            taken.push(task);
        }
        let n = taken.len();
        taken.into_iter().for_each(|task| self.shared.enqueue(task));
        self.shared.parking.notify(n);
    }

    /// The feeds in the pool's list.
    #[cfg(all(test, not(depengine_loom)))]
    pub(crate) fn feeds_listed(&self) -> usize {
        self.shared.feeds.len()
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

#[cfg(all(test, not(depengine_loom)))]
thread_local! {
    /// Tests: the worker whose start fails, on this thread's pool starts.
    pub(crate) static FAIL_SPAWN_AT: std::cell::Cell<Option<usize>> = const { std::cell::Cell::new(None) };
    /// Tests: the thread starts refused so on this thread.
    pub(crate) static SPAWNS_REFUSED: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Address space a thread's start may need beyond what the OS checks at
/// the spawn: the standard library maps the thread's signal stack inside
/// the new thread, and panics (and so aborts the process) when that fails;
/// glibc reserves a 64 MiB arena at a new thread's first allocation (while
/// the process has fewer arenas than eight per core), and aborts likewise.
/// The stack itself (2 MiB by default) is checked at the spawn; counted
/// here too, with the rest of the 72 MiB for what the thread sets up.
const START_HEADROOM: usize = 72 << 20;

/// Why a thread must not be started now, if it must not: the OS would
/// refuse its start (tests), or the address space left cannot hold it
/// ([`START_HEADROOM`], tried as a reservation that is given back at
/// once), so that a memory limit refuses the start here, as an error,
/// instead of aborting the process from inside the new thread.
#[inline]
fn spawn_failure(k: usize) -> Option<std::io::Error> {
    #[cfg(all(test, not(depengine_loom)))]
    if FAIL_SPAWN_AT.with(std::cell::Cell::get) == Some(k) {
        SPAWNS_REFUSED.with(|n| n.set(n.get() + 1));
        return Some(std::io::Error::from_raw_os_error(11));
    }
    let _ = k;
    if Vec::<u8>::new().try_reserve_exact(START_HEADROOM).is_err() {
        return Some(std::io::Error::new(
            std::io::ErrorKind::OutOfMemory,
            "too little address space left to start a thread safely",
        ));
    }
    None
}

impl PoolShared {
    /// Queues an op where the workers queue theirs.
    pub(super) fn enqueue(&self, task: TaskRef) {
        let priority = task.header().meta.priority;
        if priority == 0 {
            self.fifo.push(task);
            return;
        }
        let mut heap = lock(&self.heap);
        if priority > 0 {
            self.urgent.fetch_add(1, Ordering::Relaxed);
        }
        heap.push(priority, task);
        self.in_heap.fetch_add(1, Ordering::Relaxed);
    }

    /// Whether an op is queued (without taking it).
    pub(super) fn has_work(&self, view: &mut FeedView) -> bool {
        self.feeds.refresh(view);
        !self.fifo.is_empty()
            || self.in_heap.load(Ordering::Relaxed) > 0
            || view.feeds.iter().any(|feed| !feed.is_empty())
    }

    /// Takes the next op: a positive priority first, then priority 0 from
    /// the feeds and the injector in turn, then a negative priority.
    pub(super) fn try_pop(&self, view: &mut FeedView) -> Option<TaskRef> {
        self.pop_with(view, |feed, _| feed.take().map(|task| (task, 0)))
    }

    /// [`try_pop`](Self::try_pop) for a wait nested in an op that a wait
    /// runs (see `this_thread::help`): the ops the workers queued first
    /// (an urgent priority, then the injector), then the rest as `try_pop`.
    pub(super) fn try_pop_nested(&self, view: &mut FeedView) -> Option<TaskRef> {
        if self.urgent.load(Ordering::Relaxed) > 0
            && let Some(task) = self.pop_heap(|p| p > 0)
        {
            return Some(task);
        }
        self.take_injected().or_else(|| self.try_pop(view))
    }

    /// [`try_pop`](Self::try_pop), but an op taken from a feed brings up to
    /// `more` of the ops queued behind it, claimed at once and passed to
    /// `rest` in queue order (see `FeedShared::take_some`).
    pub(super) fn try_pop_some(
        &self,
        view: &mut FeedView,
        more: usize,
        mut rest: impl FnMut(TaskRef),
    ) -> Option<TaskRef> {
        self.pop_with(view, |feed, room| {
            let mut taken = 0;
            let first = feed.take_some(more.min(room as usize), |task| {
                taken += 1;
                rest(task);
            });
            first.map(|task| (task, taken))
        })
    }

    #[inline(always)]
    fn pop_with(
        &self,
        view: &mut FeedView,
        mut take: impl FnMut(&FeedShared<TaskRef>, u32) -> Option<(TaskRef, u32)>,
    ) -> Option<TaskRef> {
        if self.urgent.load(Ordering::Relaxed) > 0
            && let Some(task) = self.pop_heap(|p| p > 0)
        {
            return Some(task);
        }
        self.feeds.refresh(view);
        // The injector is source `n`, after the feeds.
        let FeedView { feeds, turns, .. } = view;
        let taken = turns.look(feeds.len() + 1, |source, room| match feeds.get(source) {
            Some(feed) => take(feed, room),
            None => self.take_injected().map(|task| (task, 0)),
        });
        if taken.is_some() {
            return taken;
        }
        if self.in_heap.load(Ordering::Relaxed) > 0 {
            return self.pop_heap(|_| true);
        }
        None
    }

    /// Takes a queued op of positive priority, if one is queued.
    pub(super) fn pop_urgent(&self) -> Option<TaskRef> {
        if self.urgent.load(Ordering::Relaxed) == 0 {
            return None;
        }
        self.pop_heap(|p| p > 0)
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
        let (priority, task) = lock(&self.heap).pop_if(take)?;
        self.in_heap.fetch_sub(1, Ordering::Relaxed);
        if priority > 0 {
            self.urgent.fetch_sub(1, Ordering::Relaxed);
        }
        Some(task)
    }
}
