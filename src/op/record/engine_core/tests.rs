//! The core's counts, through the test engine's hooks (Miri too).

use super::{KEPT_FAILURES, lock, test_engine};
use crate::error::Error;

#[test]
fn a_weak_reference_outlives_its_engine_and_upgrades_while_it_lives() {
    let engine = test_engine();
    let other = engine.clone();
    let weak = engine.downgrade();
    assert_eq!(weak.as_ptr(), engine.as_ptr());
    drop(engine);
    let back = weak.upgrade().expect("a counted reference keeps the engine");
    assert_eq!(back.as_ptr(), other.as_ptr());
    drop((back, other));
    assert!(weak.upgrade().is_none(), "the last count freed the engine");
}

#[test]
fn the_core_keeps_the_first_failures_and_forgets_them_when_taken() {
    let engine = test_engine();
    for _ in 0..2 * KEPT_FAILURES {
        engine.failed(&Error::invalid("a test's failure"), true);
    }
    assert_eq!(engine.counts.failures(), (2 * KEPT_FAILURES as u64, 0, 0));
    assert_eq!(lock(&engine.failures).len(), KEPT_FAILURES);
    assert!(engine.take_failure(|_| true).is_err());
    assert!(engine.take_failure(|_| true).is_ok(), "taken once");
}
