//! The core's counts and failures, through the test engine's hooks (Miri
//! too).

use super::{KEPT_FAILURES, lock, test_engine};
use crate::error::Error;

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
