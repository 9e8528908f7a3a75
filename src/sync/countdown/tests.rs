use super::*;
use std::sync::Arc;

#[test]
fn release_reports_zero_once() {
    let c = Countdown::new(3);
    assert!(!c.release(1));
    assert!(!c.release(0));
    c.add(2);
    assert!(!c.release(3));
    assert!(c.release(1));
    assert_eq!(c.get(), 0);
}

#[test]
#[should_panic(expected = "released more than outstanding")]
fn over_release_panics() {
    Countdown::new(1).release(2);
}

#[test]
fn exactly_one_thread_sees_zero() {
    for _ in 0..200 {
        let c = Arc::new(Countdown::new(8));
        let hits: usize = (0..8)
            .map(|_| {
                let c = c.clone();
                std::thread::spawn(move || usize::from(c.release(1)))
            })
            .map(|h| h.join().unwrap())
            .sum();
        assert_eq!(hits, 1);
    }
}
