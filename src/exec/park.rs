//! Parking idle workers without a lock on the submit path, and without
//! losing a wake-up.
//!
//! A worker that found nothing to do announces itself in `sleepers`, looks
//! at its queues once more, and only then waits on the condition variable.
//! A submitter queues its op, then reads `sleepers`, and takes the lock to
//! notify only if someone is parked or about to park. The worker holds the
//! lock from its last look until it waits, and the notification is sent
//! under the lock, so it cannot fall between the two.
//!
//! This is a store-buffering handshake: each side writes, then reads what
//! the other wrote, and with a full fence on each side between the two, at
//! least one of them sees the other's write: either the worker finds the
//! op, or the submitter finds the worker. The submitter, on the path of
//! every push, pays only the light half of a pair of asymmetric barriers
//! (`sync::barrier`: a compiler fence). So a worker parks in two steps:
//!
//! 1. a wait of at most [`SECOND_LOOK`], after a look that no fence
//!    guards: it and a submitter may miss each other, and then the op waits
//!    for the timeout (a wake-up delayed, never lost);
//! 2. after a timeout, the heavy half of the pair (the kernel's
//!    process-wide barrier), a last look, and a wait without a timeout:
//!    the full handshake guards the only wait that could last for ever.
//!
//! The heavy barrier interrupts every running thread of the process, the
//! pushing one included, and a worker that keeps up with a pushing thread
//! parks many times a second: so only a worker idle past the first wait
//! pays it (PERFORMANCE.md, *Parking*). Under loom and Miri both halves of the pair are full fences, and
//! under loom the first wait times out at once (loom has no time): the
//! model checks the path every park can take (`README.md` beside this file
//! has the proof sketch).

use std::time::Duration;

use crate::sync::atomic::{AtomicUsize, Ordering};
use crate::sync::barrier::Barriers;
use crate::sync::{Condvar, Mutex, lock, wait_timeout};

/// How long a parked worker waits before it pays for the full handshake.
const SECOND_LOOK: Duration = Duration::from_micros(100);

pub(crate) struct Parking {
    /// Workers parked or about to park.
    sleepers: AtomicUsize,
    lock: Mutex<()>,
    available: Condvar,
    barriers: Barriers,
}

impl Default for Parking {
    fn default() -> Self {
        Self::with(Barriers::new())
    }
}

impl Parking {
    fn with(barriers: Barriers) -> Self {
        Self { sleepers: AtomicUsize::new(0), lock: Mutex::new(()), available: Condvar::new(), barriers }
    }

    /// The barrier pair of this pool's handshakes.
    pub(crate) fn barriers(&self) -> Barriers {
        self.barriers
    }

    /// Wakes up to `n` parked workers; called after `n` ops were queued.
    pub(crate) fn notify(&self, n: usize) {
        self.barriers.light();
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
    /// matching `notify` once it is visible to this thread. `nap` runs
    /// before each long wait, and says how long it may last at most (none:
    /// until woken).
    pub(crate) fn park<T>(
        &self,
        mut poll: impl FnMut() -> Option<T>,
        stop: impl Fn() -> bool,
        mut nap: impl FnMut() -> Option<Duration>,
    ) -> Option<T> {
        let mut guard = lock(&self.lock);
        loop {
            self.sleepers.fetch_add(1, Ordering::Relaxed);
            let found = poll();
            if found.is_some() || stop() {
                self.sleepers.fetch_sub(1, Ordering::Relaxed);
                return found;
            }
            let (woken, timed_out) = wait_timeout(&self.available, guard, SECOND_LOOK);
            guard = woken;
            if timed_out {
                self.barriers.heavy();
                let found = poll();
                if found.is_some() || stop() {
                    self.sleepers.fetch_sub(1, Ordering::Relaxed);
                    return found;
                }
                guard = match nap() {
                    None => self.available.wait(guard).unwrap_or_else(|e| e.into_inner()),
                    Some(most) => wait_timeout(&self.available, guard, most).0,
                };
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
    /// second look. The op is queued just after the worker's first look,
    /// which found nothing: the submitter's read of `sleepers` came before
    /// the worker's announcement (it missed the worker), and its op was not
    /// yet visible to the worker's first look.
    #[test]
    fn second_look_finds_an_op_whose_notification_was_missed() {
        let parking = Arc::new(Parking::default());
        let queued = Arc::new(AtomicBool::new(false));
        let worker = {
            let (parking, queued) = (parking.clone(), queued.clone());
            std::thread::spawn(move || {
                let mut first = true;
                let poll = || {
                    if std::mem::take(&mut first) {
                        queued.store(true, Ordering::Release);
                        return None;
                    }
                    queued.swap(false, Ordering::AcqRel).then_some(())
                };
                parking.park(poll, || false, || None)
            })
        };
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !worker.is_finished() {
            assert!(std::time::Instant::now() < deadline, "the parked worker never looked again");
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(worker.join().unwrap(), Some(()));
        assert_eq!(parking.sleepers.load(Ordering::Relaxed), 0);
    }

    /// A worker parks and is woken, over and over, while a submitter queues
    /// one op at a time, each just as the worker announces itself: in both
    /// modes of the barriers, every op is found (a lost wake-up leaves the
    /// worker parked for good, and the test times out).
    #[test]
    fn no_op_is_missed_while_workers_park() {
        const ROUNDS: usize = 2_000;
        for barriers in [Barriers::new(), Barriers::symmetric()] {
            let parking = Arc::new(Parking::with(barriers));
            let queued = Arc::new(AtomicBool::new(false));
            let worker = {
                let (parking, queued) = (parking.clone(), queued.clone());
                std::thread::spawn(move || {
                    for _ in 0..ROUNDS {
                        let take = || queued.swap(false, Ordering::AcqRel).then_some(());
                        parking.park(take, || false, || None).expect("never told to stop");
                    }
                })
            };
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
            let waiting = || assert!(std::time::Instant::now() < deadline, "a parked worker missed an op");
            for _ in 0..ROUNDS {
                // Wait for the worker to announce itself, then queue.
                while parking.sleepers() == 0 {
                    waiting();
                }
                queued.store(true, Ordering::Release);
                parking.notify(1);
                while queued.load(Ordering::Acquire) {
                    waiting();
                }
            }
            worker.join().unwrap();
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
                let got = queue.pop().or_else(|| parking.park(|| queue.pop(), || false, || None));
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
                loom::thread::spawn(move || {
                    parking.park(|| None::<()>, || stopping.load(Ordering::Relaxed), || None)
                })
            };
            stopping.store(true, Ordering::Relaxed);
            parking.notify_all();
            assert!(worker.join().unwrap().is_none());
        });
    }
}
