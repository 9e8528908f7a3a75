//! Pools started on first use, whose failed start is remembered for a
//! while instead of being tried again by every push.
//!
//! A pool that cannot start (the OS refuses threads: a memory limit, a
//! thread limit) fails the push that needed it. Trying again at once, on
//! every push, would ask the OS for every thread of the pool each time, in
//! the very state where it refuses them: with a thousand workers per pool
//! under an address-space limit, a hundred refused pushes start and stop a
//! hundred thousand threads and may exhaust the process. So a failure is
//! remembered: pushes within its back-off get the same error without
//! trying, and each failure in a row doubles the back-off, up to a bound.
//! A start that succeeds forgets the failures.

use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use super::pool::lock;
use crate::error::Error;
use crate::may_block;

/// The back-off after a first failure.
const FIRST_BACKOFF: Duration = Duration::from_millis(50);
/// The longest back-off, after many failures in a row.
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// A value (a pool, a device's pools) started on first use.
pub(super) struct Lazy<T> {
    value: OnceLock<T>,
    /// The last failed start, if the last start failed. Its lock is held
    /// while starting, so that two pushes never both start the value.
    failed: Mutex<Option<Failure>>,
}

struct Failure {
    error: Error,
    /// When it may be tried again.
    retry_at: Instant,
    /// The back-off that set `retry_at`.
    backoff: Duration,
}

impl<T> Default for Lazy<T> {
    fn default() -> Self {
        Self { value: OnceLock::new(), failed: Mutex::new(None) }
    }
}

impl<T> Lazy<T> {
    /// The value, if it has started.
    #[inline(always)]
    pub(super) fn get(&self) -> Option<&T> {
        self.value.get()
    }

    /// The value, started with `start` if it has not started.
    ///
    /// # Errors
    ///
    /// What `start` returned, now or, within the back-off after a failed
    /// start, then (without calling `start`). Only errors for which
    /// `remember` says so are remembered.
    #[cold]
    pub(super) fn get_or_start(
        &self,
        start: impl FnOnce() -> Result<T, Error>,
        remember: impl FnOnce(&Error) -> bool,
    ) -> Result<&T, Error> {
        if may_block::is_in_start_hook() {
            // The pool whose hook this is waits for it under a start lock
            // like this one: a push that needs a pool started waits for
            // that lock, or starts pools from inside a start.
            return Err(Error::would_deadlock(
                "a push in a thread start hook",
                "its op needs a pool that has not started, and a start hook may only push to pools \
                 already running",
            ));
        }
        self.get_or_start_at(Instant::now, start, remember)
    }

    /// [`get_or_start`](Self::get_or_start) on the clock `now`.
    fn get_or_start_at(
        &self,
        now: impl Fn() -> Instant,
        start: impl FnOnce() -> Result<T, Error>,
        remember: impl FnOnce(&Error) -> bool,
    ) -> Result<&T, Error> {
        let mut failed = lock(&self.failed);
        if let Some(value) = self.value.get() {
            return Ok(value);
        }
        let asked = now();
        if let Some(failure) = failed.as_ref().filter(|f| asked < f.retry_at) {
            return Err(failure.error.clone());
        }
        match start() {
            Ok(value) => {
                *failed = None;
                Ok(self.value.get_or_init(|| value))
            }
            Err(error) => {
                if remember(&error) {
                    let backoff = failed.as_ref().map_or(FIRST_BACKOFF, |f| (f.backoff * 2).min(MAX_BACKOFF));
                    // From the failed start's end: a start that took long
                    // (the threads it did start, stopped and joined on a
                    // loaded machine) must not use up its own back-off.
                    *failed = Some(Failure { error: error.clone(), retry_at: now() + backoff, backoff });
                }
                Err(error)
            }
        }
    }
}

#[cfg(all(test, not(depengine_loom)))]
mod tests;
