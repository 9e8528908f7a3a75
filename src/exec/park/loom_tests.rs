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
