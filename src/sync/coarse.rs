//! A coarse clock for the hang explainer: milliseconds since the process
//! started, kept only while some engine's watchdog runs (each of its looks
//! advances it), so that reading it costs a holder one relaxed load and no
//! system call. While no watchdog runs it stands still, and `since` says
//! nothing can be known.

use std::sync::OnceLock;
// std's atomics even under loom: a static cannot hold loom's, and the clock
// orders nothing.
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

static NOW_MS: AtomicU64 = AtomicU64::new(0);
/// Watchdogs running now.
static KEEPERS: AtomicU64 = AtomicU64::new(0);

fn origin() -> Instant {
    static ORIGIN: OnceLock<Instant> = OnceLock::new();
    *ORIGIN.get_or_init(Instant::now)
}

/// The clock's reading (0 until a watchdog first advanced it).
#[inline]
pub(crate) fn now_ms() -> u64 {
    NOW_MS.load(Ordering::Relaxed)
}

/// Advances the clock to the present (a watchdog's look). Readings start
/// at 1, so that 0 means "never kept".
pub(crate) fn tick() {
    NOW_MS.fetch_max(origin().elapsed().as_millis() as u64 + 1, Ordering::Relaxed);
}

/// How long ago the clock read `then`, if a watchdog has kept it since
/// (`then` is not 0: it was read while one ran) and keeps it now.
pub(crate) fn since(then: u64) -> Option<Duration> {
    if then == 0 || KEEPERS.load(Ordering::Relaxed) == 0 {
        return None;
    }
    tick();
    Some(Duration::from_millis(now_ms().saturating_sub(then)))
}

/// A watchdog keeps the clock while this lives.
pub(crate) struct Keeper(());

impl Keeper {
    pub(crate) fn new() -> Self {
        KEEPERS.fetch_add(1, Ordering::Relaxed);
        tick();
        Self(())
    }
}

impl Drop for Keeper {
    fn drop(&mut self) {
        KEEPERS.fetch_sub(1, Ordering::Relaxed);
    }
}
