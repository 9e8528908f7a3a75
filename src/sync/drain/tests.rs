use std::time::{Duration, Instant};

use super::Drain;

#[test]
fn completions_wake_a_waiter_once_its_need_is_met() {
    let waiters = std::sync::Arc::new(Drain::default());
    let parker = {
        let waiters = waiters.clone();
        std::thread::spawn(move || {
            let start = Instant::now();
            waiters.park(3, || 0, Duration::from_secs(60));
            start.elapsed()
        })
    };
    while waiters.parked() == 0 {
        std::thread::yield_now();
    }
    for _ in 0..3 {
        waiters.completed_one();
    }
    let parked = parker.join().unwrap();
    assert!(parked < Duration::from_secs(60), "not woken: {parked:?}");
    assert!(!waiters.is_waiting());
    // With nobody waiting, a completion counts nothing down.
    waiters.completed_one();
    assert!(!waiters.is_waiting());
}

#[test]
fn a_waiter_that_times_out_leaves_completions_uncounted() {
    let waiters = Drain::default();
    waiters.park(10, || 0, Duration::from_millis(1));
    assert!(!waiters.is_waiting());
    // Nor one whose goal was met as it came.
    waiters.park(10, || 10, Duration::from_secs(60));
    assert!(!waiters.is_waiting());
}
