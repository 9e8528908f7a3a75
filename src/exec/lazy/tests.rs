use super::*;
use std::cell::Cell;

fn refused() -> Error {
    Error::pool_unavailable("p", &std::io::Error::from_raw_os_error(11))
}

#[test]
fn a_failed_start_is_not_tried_again_within_its_backoff_which_doubles() {
    let lazy: Lazy<u32> = Lazy::default();
    let t0 = Instant::now();
    let at = |ms: u64| move || t0 + Duration::from_millis(ms);
    let tries = Cell::new(0);
    let failing = || {
        tries.set(tries.get() + 1);
        Err(refused())
    };
    for ms in 0..100 {
        assert!(lazy.get_or_start_at(at(ms / 4), failing, |_| true).unwrap_err().is_pool_unavailable());
    }
    assert_eq!(tries.get(), 1, "retried within the back-off");
    assert!(lazy.get_or_start_at(at(50), failing, |_| true).is_err());
    assert_eq!(tries.get(), 2, "not retried after the back-off");
    let ok = || Ok(7);
    assert!(lazy.get_or_start_at(at(149), ok, |_| true).is_err(), "the second back-off is twice the first");
    assert_eq!(*lazy.get_or_start_at(at(150), ok, |_| true).unwrap(), 7);
    assert_eq!(lazy.get(), Some(&7));
    // Failures in a row back off up to the bound.
    let capped: Lazy<u32> = Lazy::default();
    let mut t = 0;
    for _ in 0..20 {
        assert!(capped.get_or_start_at(at(t), || Err(refused()), |_| true).is_err());
        t += MAX_BACKOFF.as_millis() as u64;
    }
    assert_eq!(*capped.get_or_start_at(at(t), ok, |_| true).unwrap(), 7);
}

#[test]
fn errors_not_remembered_are_tried_again_at_once() {
    let lazy: Lazy<u32> = Lazy::default();
    assert!(lazy.get_or_start(|| Err(refused()), |_| false).is_err());
    assert_eq!(*lazy.get_or_start(|| Ok(3), |_| true).unwrap(), 3);
}

#[test]
fn the_backoff_counts_from_the_end_of_a_slow_failed_start() {
    let lazy: Lazy<u32> = Lazy::default();
    let t0 = Instant::now();
    // The clock moves 100 ms during the failing start.
    let clock = Cell::new(t0);
    let slow_failing = || {
        clock.set(t0 + Duration::from_millis(100));
        Err(refused())
    };
    assert!(lazy.get_or_start_at(|| clock.get(), slow_failing, |_| true).is_err());
    let tries = Cell::new(0);
    let counted = || {
        tries.set(tries.get() + 1);
        Err(refused())
    };
    let at = |ms: u64| move || t0 + Duration::from_millis(ms);
    assert!(lazy.get_or_start_at(at(120), counted, |_| true).is_err());
    assert_eq!(tries.get(), 0, "retried within the back-off that followed the slow start");
    assert!(lazy.get_or_start_at(at(150), counted, |_| true).is_err());
    assert_eq!(tries.get(), 1, "not retried after it");
}
