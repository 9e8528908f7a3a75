//! The soft bound on ops in flight: a thread that pushes far ahead of
//! workers that keep up with it waits for them now and then, so that the
//! ops it has pushed and not yet run stay few enough to live in the
//! caches, and their records go back to be reused by its next pushes.
//!
//! Unbounded, a pusher that is faster than the workers holds every op it
//! pushed: on `w1_indep` the engine held ~200,000 records, each of which
//! missed the cache when its turn came (PERFORMANCE.md, *The soft bound on
//! ops in flight*), and on a chain no record was reused, since none had run
//! by the time the next push built one. OpenMP runtimes throttle task
//! creation the same way.
//!
//! # The rule
//!
//! Every [`CHECK_EVERY`] pushes a thread *looks*: it reads the ops in
//! flight (pushed and not yet completed) and the ops completed since its
//! last look, and when that look was.
//!
//! * **At or under the bound**, it goes on.
//! * **Past it, with nothing completed since its last look**, it goes on
//!   too: while it pushed [`CHECK_EVERY`] ops, the workers finished none.
//!   They are held by long ops, or by something outside the engine (a
//!   guard, a token, a body waiting for this very thread): a wait would
//!   last as long as those take, and may never end. A stall that stands is
//!   thus looked at once per [`CHECK_EVERY`] pushes and never waited for:
//!   a thread remembers, in its last look, that nothing moved, and the
//!   first look that finds ops completed since waits.
//! * **Past it, with ops completed since**, it waits until the ops in
//!   flight are down to half the bound, so that it then pushes in long
//!   runs. It parks and is woken by the completion that gets them there
//!   (the completing thread counts down what the waiters need: one load
//!   per completion while nobody waits), as a bounded channel's sender is
//!   woken by a receive: never by polling, never later than the ops ahead
//!   of it take.
//!
//! A wait that stops draining ends, by the same rule as the look: the
//! waiting thread looks again each time the ops still ahead of its target
//! should have drained at the pace it measured (the ops completed over the
//! time between its last two looks), and stops waiting if none completed
//! in that span. So no wait lasts a fixed time: each span is what the ops
//! ahead of the thread take at the pace the workers kept.
//!
//! A thread never waits where a wait could stall what it waits for, or
//! anything else: not in async code (a thread that runs a runtime's
//! tasks), nor on an engine thread, nor inside an op's body (the ops in
//! flight may need that very thread), nor while every worker is parked
//! (what the ops wait for is outside the engine). So the bound is soft: it
//! bounds a pushing thread that the workers keep up with, and never makes
//! a push wait for what cannot come.

use std::cell::Cell;
use std::time::{Duration, Instant};

use crate::sync::atomic::{AtomicUsize, Ordering};

/// A thread looks at the ops in flight once every this many of its pushes.
pub(super) const CHECK_EVERY: u32 = 256;

thread_local! {
    /// Pushes this thread made, modulo [`CHECK_EVERY`].
    static PUSHES: Cell<u32> = const { Cell::new(0) };
    /// This thread's last look.
    static LAST: Cell<Option<Look>> = const { Cell::new(None) };
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

/// What the throttle reads of its engine, and how it waits for it.
pub(super) trait Progress {
    /// Which engine this is (a look at another engine tells nothing of this one).
    fn id(&self) -> usize;
    /// Ops pushed so far.
    fn pushed(&self) -> u64;
    /// Ops completed so far.
    fn completed(&self) -> u64;
    /// Whether no worker runs or looks for an op.
    fn all_idle(&self) -> bool;
    /// The time now.
    fn now(&self) -> Instant;
    /// Parks until `goal` ops have completed in all or `patience` has
    /// passed (woken early at times; the caller looks again).
    fn park(&self, goal: u64, patience: Duration);
    /// Counts what a look decided.
    fn decided(&self, decision: Decision);
}

/// What a thread saw when it looked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Look {
    engine: usize,
    completed: u64,
    at: Instant,
}

/// What a look past the bound decided, for the engine's metrics.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Decision {
    /// It waited.
    Waited,
    /// It went on, or stopped waiting, as the workers had drained nothing.
    Passed,
}

/// What a look decides.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Verdict {
    /// Go on pushing.
    Go,
    /// Past the bound with nothing drained: go on.
    Pass,
    /// Wait for `need` more completions, for at most `patience` without one.
    Wait { need: u64, patience: Duration },
}

/// The look: `now` against the thread's `last` look, `pushed` ops so far.
fn judge(last: Option<Look>, now: Look, pushed: u64, bound: u64) -> Verdict {
    let in_flight = pushed.saturating_sub(now.completed);
    if in_flight <= bound {
        return Verdict::Go;
    }
    // A thread's first look at an engine knows no pace yet.
    let Some(last) = last.filter(|l| l.engine == now.engine) else { return Verdict::Pass };
    let drained = now.completed.saturating_sub(last.completed);
    if drained == 0 {
        return Verdict::Pass;
    }
    let need = in_flight - bound / 2;
    Verdict::Wait { need, patience: pace(now.at.saturating_duration_since(last.at), drained, need) }
}

/// How long `need` ops take where `drained` took `span`.
fn pace(span: Duration, drained: u64, need: u64) -> Duration {
    let nanos = span.as_nanos().saturating_mul(u128::from(need)) / u128::from(drained.max(1));
    Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
}

/// Looks at the ops of `engine` in flight, and waits for them where the
/// rule says (see the module docs).
#[cold]
#[inline(never)]
pub(super) fn throttle(engine: &impl Progress, bound: usize) {
    let bound = bound as u64;
    let now = Look { engine: engine.id(), completed: engine.completed(), at: engine.now() };
    let last = LAST.with(|l| l.replace(Some(now)));
    match judge(last, now, engine.pushed(), bound) {
        Verdict::Go => {}
        Verdict::Pass => engine.decided(Decision::Passed),
        Verdict::Wait { need, patience } => {
            if !may_wait_here() || engine.all_idle() {
                return;
            }
            engine.decided(Decision::Waited);
            if !hold(engine, bound / 2, need, patience) {
                engine.decided(Decision::Passed);
            }
            // The next look measures the pushes after the wait, not the wait.
            let after = Look { engine: now.engine, completed: engine.completed(), at: engine.now() };
            LAST.with(|l| l.set(Some(after)));
        }
    }
}

/// Waits for the ops in flight to fall to `target`: `need` more
/// completions, each span of `patience` without one ending the wait.
/// Whether the ops in flight got there (false: the drain stopped, or
/// every worker parked).
fn hold(engine: &impl Progress, target: u64, mut need: u64, mut patience: Duration) -> bool {
    loop {
        let (before, start) = (engine.completed(), engine.now());
        engine.park(before + need, patience);
        let after = engine.completed();
        let in_flight = engine.pushed().saturating_sub(after);
        if in_flight <= target {
            return true;
        }
        if engine.all_idle() {
            return false;
        }
        let drained = after.saturating_sub(before);
        let span = engine.now().saturating_duration_since(start);
        // Nothing completed in the span the ops ahead should have taken: a
        // wake before it ended (another waiter's target) parks again.
        if drained == 0 {
            if span >= patience {
                return false;
            }
            patience -= span;
            continue;
        }
        need = in_flight - target;
        patience = pace(span, drained, need);
    }
}

/// Whether this thread may wait for ops to complete: not in async code, on
/// an engine thread or inside an op's body.
fn may_wait_here() -> bool {
    !crate::op::job::in_user_body()
        && !crate::may_block::is_engine_thread()
        && !crate::may_block::runs_async_code()
}

/// How many looks past the bound waited, and how many went on (for
/// `Engine::metrics`).
#[derive(Default)]
pub(super) struct Tallies {
    waited: AtomicUsize,
    passed: AtomicUsize,
}

impl Tallies {
    pub(super) fn count(&self, decision: Decision) {
        let counter = match decision {
            Decision::Waited => &self.waited,
            Decision::Passed => &self.passed,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// (waited, passed).
    pub(super) fn get(&self) -> (u64, u64) {
        (self.waited.load(Ordering::Relaxed) as u64, self.passed.load(Ordering::Relaxed) as u64)
    }
}

#[cfg(all(test, not(depengine_loom)))]
mod tests;
