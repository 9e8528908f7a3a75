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
