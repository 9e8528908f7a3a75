//! Parking idle workers without a lock on the submit path, and without
//! losing a wake-up.
//!
//! A worker that found nothing to do announces itself in `sleepers`, looks
//! at its queues once more, and only then waits on the condition variable.
//! A submitter queues its op, then reads `sleepers`, and takes the lock to
//! notify only if someone is parked or about to park. Each side puts a
//! `SeqCst` fence between its write and its read, so at least one of them
//! sees the other's write (a store-buffering litmus test): either the worker
//! finds the op, or the submitter finds the worker and notifies it. The
//! worker holds the lock from that last look until it waits, and the
//! notification is sent under the lock, so it cannot fall between the two.

use crate::loom::lock;
use crate::loom::sync::atomic::{AtomicUsize, Ordering, fence};
use crate::loom::sync::{Condvar, Mutex};

#[derive(Default)]
pub(crate) struct Parking {
    /// Workers parked or about to park.
    sleepers: AtomicUsize,
    lock: Mutex<()>,
    available: Condvar,
}

impl Parking {
    /// Wakes up to `n` parked workers; called after `n` ops were queued.
    pub(crate) fn notify(&self, n: usize) {
        fence(Ordering::SeqCst);
        if n == 0 || self.sleepers.load(Ordering::Relaxed) == 0 {
            return;
        }
        let _sync = lock(&self.lock);
        for _ in 0..n {
            self.available.notify_one();
        }
    }

    /// Wakes every parked worker; called after the pool was told to stop
    /// (so that `park`'s `stop` check sees it).
    pub(crate) fn notify_all(&self) {
        let _sync = lock(&self.lock);
        self.available.notify_all();
    }

    /// Parks the calling worker until `poll` yields an op (returned) or
    /// `stop` holds (`None`). `poll` must see every op queued before the
    /// matching `notify`.
    pub(crate) fn park<T>(&self, mut poll: impl FnMut() -> Option<T>, stop: impl Fn() -> bool) -> Option<T> {
        let mut guard = lock(&self.lock);
        loop {
            self.sleepers.fetch_add(1, Ordering::Relaxed);
            fence(Ordering::SeqCst);
            let found = poll();
            if found.is_some() || stop() {
                self.sleepers.fetch_sub(1, Ordering::Relaxed);
                return found;
            }
            guard = self.available.wait(guard).unwrap_or_else(|e| e.into_inner());
            self.sleepers.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

#[cfg(all(test, depengine_loom))]
mod loom_tests {
    use super::*;
    use loom::sync::Arc;
    use loom::sync::atomic::AtomicBool;

    /// A queue of interchangeable ops: a count.
    #[derive(Default)]
    struct Queue(AtomicUsize);

    impl Queue {
        fn push(&self) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
        fn pop(&self) -> Option<()> {
            let mut n = self.0.load(Ordering::Relaxed);
            while n > 0 {
                match self.0.compare_exchange(n, n - 1, Ordering::Relaxed, Ordering::Relaxed) {
                    Ok(_) => return Some(()),
                    Err(now) => n = now,
                }
            }
            None
        }
    }

    /// Two submitters each queue an op; one worker must run both, in every
    /// interleaving (a lost wake-up deadlocks, which loom reports).
    #[test]
    fn no_lost_wake_up() {
        loom::model(|| {
            let parking = Arc::new(Parking::default());
            let queue = Arc::new(Queue::default());
            let submitters: Vec<_> = (0..2)
                .map(|_| {
                    let (parking, queue) = (parking.clone(), queue.clone());
                    loom::thread::spawn(move || {
                        queue.push();
                        parking.notify(1);
                    })
                })
                .collect();
            for _ in 0..2 {
                let got = queue.pop().or_else(|| parking.park(|| queue.pop(), || false));
                assert!(got.is_some());
            }
            submitters.into_iter().for_each(|t| t.join().unwrap());
        });
    }

    /// A worker parked with nothing queued leaves once told to stop.
    #[test]
    fn stop_reaches_a_parking_worker() {
        loom::model(|| {
            let parking = Arc::new(Parking::default());
            let stopping = Arc::new(AtomicBool::new(false));
            let worker = {
                let (parking, stopping) = (parking.clone(), stopping.clone());
                loom::thread::spawn(move || parking.park(|| None::<()>, || stopping.load(Ordering::Relaxed)))
            };
            stopping.store(true, Ordering::Relaxed);
            parking.notify_all();
            assert!(worker.join().unwrap().is_none());
        });
    }
}
