//! A pool of dedicated worker threads fed by one priority queue.
//!
//! Device-agnostic: the dispatcher decides which pool an op goes to; a pool
//! only runs what it is given, highest priority first, FIFO among equals.
//!
//! Three things keep the cost per op low:
//! * **a next slot**: an op that a worker's own op made ready, on the same
//!   pool, is kept by that worker and run next, without a queue round trip
//!   or a wake-up (one op at most, only while nothing more urgent is
//!   queued, and, while other ops are queued, at most [`NEXT_STREAK`] times
//!   in a row);
//! * **spinning before parking**: an idle worker watches the queue for a
//!   short while (yielding its core) before it sleeps, so a steady stream
//!   of ops never pays for a thread wake-up;
//! * **no lock to submit**: priority-0 ops (the common case) go to a
//!   lock-free FIFO, and a submit takes a lock only to wake a parked worker
//!   (see `park.rs`).
//!
//! Ops with other priorities sit in a heap that is consulted first for
//! positive priorities and last for negative ones, which is exactly
//! "highest first, FIFO among equals".

use std::cell::{Cell, RefCell};
use std::cmp::Ordering as CmpOrdering;
use std::collections::BinaryHeap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_deque::{Injector, Steal};

use crate::op::TaskRef;
use crate::park::Parking;

/// How many ops a worker runs from its next slot before it takes from the
/// queue again, if anything is queued (so that queued ops are never starved
/// by a long chain).
const NEXT_STREAK: u32 = 64;

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

pub(crate) struct Pool {
    shared: Arc<PoolShared>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

struct PoolShared {
    id: usize,
    /// Priority-0 ops, FIFO: lock-free, so that a push and a worker taking
    /// an op never wait for each other.
    fifo: Injector<TaskRef>,
    /// Ops with a non-zero priority.
    heap: Mutex<Heap>,
    /// Ops in `heap`, readable without its lock.
    in_heap: AtomicUsize,
    /// Ops in `heap` with a priority above zero.
    urgent: AtomicUsize,
    parking: Parking,
    stopping: AtomicBool,
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
    /// Starts `workers` threads named `{name}-{k}`.
    pub(crate) fn start(name: &str, workers: usize) -> std::io::Result<Self> {
        let shared = Arc::new(PoolShared {
            id: NEXT_POOL_ID.fetch_add(1, Ordering::Relaxed),
            fifo: Injector::new(),
            heap: Mutex::new(Heap::default()),
            in_heap: AtomicUsize::new(0),
            urgent: AtomicUsize::new(0),
            parking: Parking::default(),
            stopping: AtomicBool::new(false),
        });
        let threads = (0..workers.max(1))
            .map(|k| {
                let shared = shared.clone();
                std::thread::Builder::new().name(format!("{name}-{k}")).spawn(move || shared.work())
            })
            .collect::<std::io::Result<Vec<_>>>()?;
        Ok(Self { shared, threads: Mutex::new(threads) })
    }

    /// Queues a ready op.
    pub(crate) fn submit(&self, task: TaskRef) {
        self.shared.submit(task);
    }

    /// Queues ready ops together: a wake-up per op while workers sleep.
    pub(crate) fn submit_all(&self, tasks: impl Iterator<Item = TaskRef>) {
        self.shared.submit_all(tasks);
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
            shared.submit(task);
        }
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
    fn submit(&self, task: TaskRef) {
        self.enqueue(task);
        self.parking.notify(1);
    }

    /// Queues ready ops; wakes one sleeping worker per op.
    fn submit_all(&self, tasks: impl Iterator<Item = TaskRef>) {
        let mut n = 0;
        for task in tasks {
            self.enqueue(task);
            n += 1;
        }
        self.parking.notify(n);
    }

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
    fn has_work(&self) -> bool {
        !self.fifo.is_empty() || self.in_heap.load(Ordering::Relaxed) > 0
    }

    /// Takes the next op: a positive priority first, then the FIFO, then a
    /// negative priority.
    fn try_pop(&self) -> Option<TaskRef> {
        if self.urgent.load(Ordering::Relaxed) > 0 {
            if let Some(task) = self.pop_heap(|p| p > 0) {
                return Some(task);
            }
        }
        loop {
            match self.fifo.steal() {
                Steal::Success(task) => return Some(task),
                Steal::Empty => break,
                Steal::Retry => std::hint::spin_loop(),
            }
        }
        if self.in_heap.load(Ordering::Relaxed) > 0 {
            return self.pop_heap(|_| true);
        }
        None
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
                    if !self.has_work() {
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
                    match self.try_pop() {
                        Some(task) => task,
                        None => {
                            crate::engine::bury(&mut shells);
                            match self.wait() {
                                Some(task) => task,
                                None => return,
                            }
                        }
                    }
                }
            };
            crate::engine::run_on_worker(task, &mut shells);
        }
    }

    /// Waits for an op: spins a while, then parks. `None` once stopping and
    /// drained.
    fn wait(&self) -> Option<TaskRef> {
        let start = Instant::now();
        let mut spins = 0u32;
        while !self.has_work() && !self.stopping.load(Ordering::Acquire) {
            spins += 1;
            if spins < 64 {
                std::hint::spin_loop();
            } else if start.elapsed() < SPIN {
                std::thread::yield_now();
            } else {
                break;
            }
        }
        self.parking.park(|| self.try_pop(), || self.stopping.load(Ordering::Acquire))
    }
}
