//! What the engine counts of its ops' outcomes, for `Engine::metrics`:
//! completions on every op (on stripes, for they come from every worker at
//! once), failures by kind (rare: one shared counter each).

use crate::error::Error;
use crate::profile::Outcome;
use crate::sync::atomic::{AtomicUsize, Ordering};
use crate::sync::tally::Tally;

#[derive(Default)]
pub(super) struct Counts {
    pub(super) completed: Tally,
    failed: AtomicUsize,
    skipped: AtomicUsize,
    cancelled: AtomicUsize,
}

/// Failures by kind: (failed, skipped, cancelled).
pub(super) type Failures = (u64, u64, u64);

impl Counts {
    /// Counts an op's failure by its kind.
    #[cold]
    pub(super) fn failed(&self, err: &Error) {
        let counter = match Outcome::of(err) {
            Outcome::Skipped => &self.skipped,
            Outcome::Cancelled => &self.cancelled,
            _ => &self.failed,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    pub(super) fn failures(&self) -> Failures {
        let get = |c: &AtomicUsize| c.load(Ordering::Relaxed) as u64;
        (get(&self.failed), get(&self.skipped), get(&self.cancelled))
    }
}
