//! Parking idle workers without a lock on the submit path, and without
//! losing a wake-up.
//!
//! A worker that found nothing to do announces itself in `sleepers`, looks
//! at its queues once more, and only then waits on the condition variable.
//! A submitter queues its op, then reads `sleepers`, and takes the lock to
//! notify only if someone is parked or about to park. The worker holds the
//! lock from that last look until it waits, and the notification is sent
//! under the lock, so it cannot fall between the two.
//!
//! This is a store-buffering handshake: each side writes, then reads what
//! the other wrote. With a full fence on each side between the two, at
//! least one of them sees the other's write: either the worker finds the
//! op, or the submitter finds the worker. The worker has that fence. The
//! submitter does not, because on its side the fence is paid on every
//! push: it waits until the push's stores (the op it just queued, its
//! queue's end) have reached lines the workers are reading, a cross-core
//! round trip per op, which measured as a third of the push's cost.
//!
//! Without it, a submitter's read of `sleepers` may be performed before its
//! op is visible to other cores, so a worker may park in the meantime,
//! having missed the op, while the submitter missed the worker. That
//! window is bounded: a store leaves the core's store buffer within
//! nanoseconds (the hardware drains it on its own; an interrupt or a
//! preemption drains it too). So a parked worker looks at its queues a
//! second time after [`SECOND_LOOK`], which is far longer: only a submitter
//! whose read came before the worker's announcement can have missed it, its
//! op was queued (executed) before that read, so it is visible by then.
//! Any submitter reading later sees the worker and notifies it. Such a miss
//! costs that op at most [`SECOND_LOOK`] of delay, and only when every
//! worker is parking at the very moment of its push.
//!
//! Under loom, which has no notion of time, the submitter keeps the full
//! fence and the models check the fenced handshake. So it does under Miri:
//! the language's memory model, unlike the hardware, bounds the time to no
//! store's visibility, so the second look may miss the op too.

use std::time::Duration;

use crate::sync::atomic::{AtomicUsize, Ordering, fence};
use crate::sync::lock;
use crate::sync::{Condvar, Mutex};

/// How long a worker that parked waits before its second look at its
/// queues (see the module docs), unless notified first.
const SECOND_LOOK: Duration = Duration::from_micros(100);

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
        // Only keeps the compiler from reading `sleepers` before queuing:
        // see the module docs for why no fence is needed here.
        #[cfg(not(any(depengine_loom, miri)))]
        std::sync::atomic::compiler_fence(Ordering::SeqCst);
        #[cfg(any(depengine_loom, miri))]
        fence(Ordering::SeqCst);
        if n == 0 || self.sleepers.load(Ordering::Relaxed) == 0 {
            return;
        }
        let _sync = lock(&self.lock);
        for _ in 0..n {
            self.available.notify_one();
        }
    }

    /// Workers parked or about to park.
    pub(crate) fn sleepers(&self) -> usize {
        self.sleepers.load(Ordering::Relaxed)
    }

    /// Wakes every parked worker; called after the pool was told to stop
    /// (so that `park`'s `stop` check sees it).
    pub(crate) fn notify_all(&self) {
        let _sync = lock(&self.lock);
        self.available.notify_all();
    }

    /// Parks the calling worker until `poll` yields an op (returned) or
    /// `stop` holds (`None`). `poll` must see every op queued before the
    /// matching `notify` once it is visible to this thread.
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
            let (woken, wait) =
                self.available.wait_timeout(guard, SECOND_LOOK).unwrap_or_else(|e| e.into_inner());
            guard = woken;
            if wait.timed_out() {
                // Still announced: any submitter reading `sleepers` from
                // now on notifies; one that read it earlier queued its op
                // before, and that op is visible by now.
                let found = poll();
                if found.is_some() || stop() {
                    self.sleepers.fetch_sub(1, Ordering::Relaxed);
                    return found;
                }
                guard = self.available.wait(guard).unwrap_or_else(|e| e.into_inner());
            }
            self.sleepers.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

#[cfg(all(test, not(depengine_loom)))]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::AtomicBool;

    /// An op queued while a worker parks, by a submitter that missed the
    /// worker (here: never notified at all), is found by the worker's
    /// second look.
    #[test]
    fn second_look_finds_an_op_whose_notification_was_missed() {
        let parking = Arc::new(Parking::default());
        let queued = Arc::new(AtomicBool::new(false));
        let worker = {
            let (parking, queued) = (parking.clone(), queued.clone());
            std::thread::spawn(move || {
                parking.park(|| queued.swap(false, Ordering::AcqRel).then_some(()), || false)
            })
        };
        while parking.sleepers.load(Ordering::Acquire) == 0 {
            std::thread::yield_now();
        }
        // The worker has announced itself and is about to take, or has
        // taken, its first look: queue without notifying.
        queued.store(true, Ordering::Release);
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !worker.is_finished() {
            assert!(std::time::Instant::now() < deadline, "the parked worker never looked again");
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(worker.join().unwrap(), Some(()));
        assert_eq!(parking.sleepers.load(Ordering::Relaxed), 0);
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
