//! A coarse clock for the hang explainer: milliseconds since the process
//! started, advanced by one thread (`depengine-clock`) every [`PERIOD`]
//! while some engine keeps it (each engine that tracks who holds its vars
//! holds a [`Keeper`]), so that reading it costs a holder, or a push, one
//! relaxed load and no system call. Readings are accurate to the period.
//!
//! The thread exits when the last keeper goes (and is joined there); a new
//! keeper starts it again. If it cannot start, the clock stands still and
//! [`since`] says nothing can be known.

use std::sync::{Condvar, Mutex, MutexGuard, OnceLock};
// std's atomics even under loom: a static cannot hold loom's, and the clock
// orders nothing.
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How often the clock advances while kept.
pub(crate) const PERIOD: Duration = Duration::from_millis(50);

static NOW_MS: AtomicU64 = AtomicU64::new(0);
/// Whether the clock thread runs (else readings may be stale).
static TICKING: AtomicBool = AtomicBool::new(false);

fn origin() -> Instant {
    static ORIGIN: OnceLock<Instant> = OnceLock::new();
    *ORIGIN.get_or_init(Instant::now)
}

/// The clock's reading (0 until it first advanced).
#[inline]
pub(crate) fn now_ms() -> u64 {
    NOW_MS.load(Ordering::Relaxed)
}

/// Advances the clock to the present. Readings start at 1, so that 0
/// means "never kept".
pub(crate) fn tick() {
    NOW_MS.fetch_max(origin().elapsed().as_millis() as u64 + 1, Ordering::Relaxed);
}

/// How long ago the clock read `then`, if it was kept then (`then` is not
/// 0) and is kept now.
pub(crate) fn since(then: u64) -> Option<Duration> {
    if then == 0 || !TICKING.load(Ordering::Relaxed) {
        return None;
    }
    tick();
    Some(Duration::from_millis(now_ms().saturating_sub(then)))
}

/// How long ago the clock read `then`, a reading cut to 32 bits (it
/// wraps after 49 days), if it was kept then and is now.
pub(crate) fn since_u32(then: u32) -> Option<Duration> {
    if then == 0 {
        return None;
    }
    since(1)?;
    Some(Duration::from_millis(u64::from((now_ms() as u32).wrapping_sub(then))))
}

/// The clock thread's state.
struct Ticker {
    keepers: usize,
    /// Bumped each time the thread is told to stop: a thread exits once its
    /// own generation is past.
    generation: u64,
    thread: Option<JoinHandle<()>>,
}

fn ticker() -> (&'static Mutex<Ticker>, &'static Condvar) {
    static STATE: Mutex<Ticker> = Mutex::new(Ticker { keepers: 0, generation: 0, thread: None });
    static WAKE: Condvar = Condvar::new();
    (&STATE, &WAKE)
}

fn lock(m: &Mutex<Ticker>) -> MutexGuard<'_, Ticker> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Keeps the clock advancing while it lives.
pub(crate) struct Keeper(());

impl Keeper {
    pub(crate) fn new() -> Self {
        let (state, _) = ticker();
        let mut t = lock(state);
        t.keepers += 1;
        if t.thread.is_none() {
            tick();
            let generation = t.generation;
            let started =
                std::thread::Builder::new().name("depengine-clock".into()).spawn(move || keep(generation));
            if let Ok(thread) = started {
                TICKING.store(true, Ordering::Relaxed);
                t.thread = Some(thread);
            }
        }
        Self(())
    }
}

impl Drop for Keeper {
    fn drop(&mut self) {
        let (state, wake) = ticker();
        let thread = {
            let mut t = lock(state);
            t.keepers -= 1;
            if t.keepers > 0 {
                return;
            }
            t.generation += 1;
            TICKING.store(false, Ordering::Relaxed);
            t.thread.take()
        };
        wake.notify_all();
        if let Some(thread) = thread.filter(|t| t.thread().id() != std::thread::current().id()) {
            let _ = thread.join();
        }
    }
}

/// The clock thread: advances the clock every [`PERIOD`] until its
/// generation is past.
fn keep(generation: u64) {
    let (state, wake) = ticker();
    let mut t = lock(state);
    while t.generation == generation {
        tick();
        t = wake.wait_timeout(t, PERIOD).unwrap_or_else(|e| e.into_inner()).0;
    }
}

#[cfg(all(test, not(depengine_loom)))]
mod tests;
