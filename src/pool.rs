//! A pool of dedicated worker threads fed by one priority queue.
//!
//! Device-agnostic: the dispatcher decides which pool an op goes to; a pool
//! only runs what it is given, highest priority first, FIFO among equals.

use std::cmp::Ordering as CmpOrdering;
use std::collections::BinaryHeap;
use std::sync::{Arc, Condvar};
use std::thread::JoinHandle;

use crate::op::TaskRef;

pub(crate) struct Pool {
    shared: Arc<PoolShared>,
    threads: std::sync::Mutex<Vec<JoinHandle<()>>>,
}

struct PoolShared {
    queue: std::sync::Mutex<Queue>,
    available: Condvar,
}

#[derive(Default)]
struct Queue {
    heap: BinaryHeap<Queued>,
    seq: u64,
    stopping: bool,
    idle: usize,
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

impl Pool {
    /// Starts `workers` threads named `{name}-{k}`.
    pub(crate) fn start(name: &str, workers: usize) -> std::io::Result<Self> {
        let shared = Arc::new(PoolShared {
            queue: std::sync::Mutex::new(Queue::default()),
            available: Condvar::new(),
        });
        let threads = (0..workers.max(1))
            .map(|k| {
                let shared = shared.clone();
                std::thread::Builder::new().name(format!("{name}-{k}")).spawn(move || shared.work())
            })
            .collect::<std::io::Result<Vec<_>>>()?;
        Ok(Self { shared, threads: std::sync::Mutex::new(threads) })
    }

    /// Queues a ready op.
    pub(crate) fn submit(&self, task: TaskRef) {
        let priority = task.header().meta.priority;
        let wake = {
            let mut q = self.shared.queue.lock().unwrap_or_else(|e| e.into_inner());
            q.seq += 1;
            let seq = q.seq;
            q.heap.push(Queued { priority, seq, task });
            q.idle > 0
        };
        if wake {
            self.shared.available.notify_one();
        }
    }

    /// Tells the workers to exit once the queue is empty.
    pub(crate) fn stop(&self) {
        self.shared.queue.lock().unwrap_or_else(|e| e.into_inner()).stopping = true;
        self.shared.available.notify_all();
    }

    /// Joins the workers (after `stop`), except the calling thread if it is one.
    pub(crate) fn join(&self) {
        let me = std::thread::current().id();
        let threads = std::mem::take(&mut *self.threads.lock().unwrap_or_else(|e| e.into_inner()));
        for t in threads {
            if t.thread().id() != me {
                let _ = t.join();
            }
        }
    }
}

impl PoolShared {
    fn work(&self) {
        while let Some(task) = self.next() {
            crate::engine::run_here(task, false);
        }
    }

    fn next(&self) -> Option<TaskRef> {
        let mut q = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if let Some(item) = q.heap.pop() {
                return Some(item.task);
            }
            if q.stopping {
                return None;
            }
            q.idle += 1;
            q = self.available.wait(q).unwrap_or_else(|e| e.into_inner());
            q.idle -= 1;
        }
    }
}
