//! The soft bound on ops in flight: a thread that pushes far ahead of the
//! workers waits for them now and then, so that the ops it has pushed and
//! not yet run stay few enough to live in the caches, and their records
//! go back to be reused by its next pushes.
//!
//! Unbounded, a pusher that is faster than the workers holds every op it
//! pushed: on `w1_indep` the engine held ~200,000 records, each of which
//! missed the cache when its turn came (PERFORMANCE.md, *The soft bound on
//! ops in flight*), and on a chain no record was reused, since none had run
//! by the time the next push built one. OpenMP runtimes throttle task
//! creation the same way.
//!
//! Every [`CHECK_EVERY`] pushes of a thread, it compares the engine's ops
//! in flight (pushed and not yet completed) with the bound; past it, the
//! thread yields until they are down to half the bound, so that it then
//! pushes in long runs. It never waits where a wait could stall what it
//! waits for, or anything else:
//!
//! * not in async code (a thread that runs a runtime's tasks), nor on an
//!   engine thread, nor inside an op's body: the ops in flight may need
//!   that very thread;
//! * not while nothing in the engine runs (every worker parked): what the
//!   ops in flight wait for is outside the engine (a guard the pushing
//!   thread holds, a completion not yet signalled, a GPU);
//! * not for longer than [`PATIENCE`] without a single completion (a body
//!   blocked on something the pushing thread holds).
//!
//! So the bound is soft: it bounds a pushing thread that the workers can
//! catch up with, and never makes a push wait for what cannot come.

use std::cell::Cell;
use std::time::{Duration, Instant};

/// A thread looks at the ops in flight once every this many of its pushes.
pub(super) const CHECK_EVERY: u32 = 256;

/// The longest a thread waits without seeing a single op complete.
const PATIENCE: Duration = Duration::from_millis(20);

thread_local! {
    /// Pushes this thread made, modulo [`CHECK_EVERY`].
    static PUSHES: Cell<u32> = const { Cell::new(0) };
}

/// Counts a push of this thread; true once every [`CHECK_EVERY`].
#[inline(always)]
pub(super) fn due() -> bool {
    PUSHES.with(|n| {
        let next = n.get() + 1;
        let due = next == CHECK_EVERY;
        n.set(if due { 0 } else { next });
        due
    })
}

/// What the throttle reads of its engine.
pub(super) trait Progress {
    /// Ops pushed so far.
    fn pushed(&self) -> u64;
    /// Ops completed so far.
    fn completed(&self) -> u64;
    /// Whether no worker runs or looks for an op.
    fn all_idle(&self) -> bool;
}

/// Waits for ops of `engine` to complete while more than `bound` are in
/// flight, where this thread may (see the module docs).
#[cold]
#[inline(never)]
pub(super) fn throttle(engine: &impl Progress, bound: usize) {
    let in_flight = |completed: u64| engine.pushed().saturating_sub(completed);
    let mut completed = engine.completed();
    if in_flight(completed) <= bound as u64 || !may_wait_here() {
        return;
    }
    let mut progress = Instant::now();
    while in_flight(completed) > (bound / 2) as u64 {
        if engine.all_idle() {
            return;
        }
        std::thread::yield_now();
        let now = engine.completed();
        if now != completed {
            completed = now;
            progress = Instant::now();
        } else if progress.elapsed() > PATIENCE {
            return;
        }
    }
}

/// Whether this thread may wait for ops to complete: not in async code, on
/// an engine thread or inside an op's body.
fn may_wait_here() -> bool {
    !crate::op::body::in_user_body()
        && !crate::may_block::is_engine_thread()
        && !crate::may_block::runs_async_code()
}
