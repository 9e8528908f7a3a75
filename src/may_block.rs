//! Whether this thread may block: the one check before every blocking call
//! of the crate's API (`blocking_wait`, `blocking_*`, `scope`, a
//! distribution's `wait`), and the marks it reads.
//!
//! A blocking wait is refused where it would stall what the wait itself
//! needs, or what the program around it needs:
//!
//! * **in async code**: a task on a Tokio runtime's worker (either
//!   flavour), the future a `block_on` drives, a `LocalSet`'s task. The
//!   thread would stall every task it runs, and a future op waited for may
//!   be one of them. This is where Tokio's own `blocking_recv` refuses.
//!   Allowed, as Tokio allows blocking there: inside `spawn_blocking`,
//!   inside `block_in_place`, and on plain threads (a runtime entered with
//!   `Runtime::enter` or not);
//! * **inside a thread start hook** of the engine's pools: the pool's start
//!   waits for the hook, and what the hook would wait for may need the pool;
//! * **on an engine thread outside an op's body** (a waker woken by an op's
//!   completion, a destructor the engine runs): that thread is completing
//!   an op, which the wait may well include.
//!
//! How async code is told apart: Tokio keeps its "entered" state to itself,
//! but shows it in two public behaviours, probed without allocating (the
//! probes' waker is one shared `Arc` that sets a thread-local flag).
//!
//! 1. `yield_now` hands its waker to the scheduler when polled on a thread
//!    that runs the runtime's tasks (to be woken once the scheduler has run
//!    its other tasks), and wakes it at once when polled anywhere else. One
//!    poll tells a worker's task (or a current-thread runtime's `block_on`)
//!    from the rest. A deferred wake, later, only sets the flag that every
//!    probe resets first.
//! 2. Elsewhere, the task budget (`tokio::task::coop`): every future the
//!    runtime polls (a `block_on` of either flavour, a `LocalSet`'s task)
//!    runs under a budget of [`TOKIO_BUDGET`] steps, while `spawn_blocking`,
//!    `block_in_place` and plain threads run unconstrained. Taking steps
//!    until the budget says `Pending` tells the two apart: a budget runs out
//!    within [`TOKIO_BUDGET`] steps, an unconstrained thread never does.
//!    The steps taken are consumed (the refused async code yields at its
//!    next Tokio call, as if it had done that work); an unconstrained
//!    thread has nothing to consume.
//!
//! The first probe costs one poll; the second, taken only on threads that
//! entered a runtime without running its tasks, a few hundred instructions.
//! Plain threads without a runtime pay a thread-local read.

use std::cell::Cell;
use std::future::Future;
use std::pin::pin;
use std::sync::{Arc, LazyLock};
use std::task::{Context, Poll, Waker};

use crate::error::Error;

thread_local! {
    /// A thread of the engine's own: a pool's worker, a GPU poller, the
    /// MPI comm thread.
    static ENGINE_THREAD: Cell<bool> = const { Cell::new(false) };
    /// Running a thread start hook of the engine's pools.
    static IN_START_HOOK: Cell<bool> = const { Cell::new(false) };
    /// The op whose user body runs on this thread (its record's address,
    /// kept by `op::job`), or null.
    pub(crate) static BODY: Cell<*const ()> = const { Cell::new(std::ptr::null()) };
    /// Set by the probe's waker when it is woken.
    static WOKEN: Cell<bool> = const { Cell::new(false) };
}

/// Marks this thread as one of the engine's own (for its whole life).
pub(crate) fn mark_engine_thread() {
    ENGINE_THREAD.with(|m| m.set(true));
}

/// Whether this thread is one of the engine's own.
pub(crate) fn is_engine_thread() -> bool {
    ENGINE_THREAD.with(Cell::get)
}

/// Runs a thread start hook of the engine's pools, marked as one.
pub(crate) fn in_start_hook<R>(hook: impl FnOnce() -> R) -> R {
    struct Leave(bool);
    impl Drop for Leave {
        fn drop(&mut self) {
            IN_START_HOOK.with(|m| m.set(self.0));
        }
    }
    let _leave = Leave(IN_START_HOOK.with(|m| m.replace(true)));
    hook()
}

/// Whether a thread start hook of the engine's pools runs on this thread:
/// a pool it pushes to must not be one still starting.
pub(crate) fn is_in_start_hook() -> bool {
    IN_START_HOOK.with(Cell::get)
}

/// What to do instead of a refused blocking call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Instead {
    /// `.await` the call's future (it has one).
    Await,
    /// Call it from `spawn_blocking` (it has no async form).
    SpawnBlocking,
}

impl Instead {
    fn say(self) -> &'static str {
        match self {
            Self::Await => "`.await` its async form instead, or call it inside `tokio::task::spawn_blocking`",
            Self::SpawnBlocking => {
                "call it inside `tokio::task::spawn_blocking` (or `tokio::task::block_in_place` on a \
                 multi-thread runtime)"
            }
        }
    }
}

/// Refuses the blocking call `what` where it may not block (see the
/// module docs), saying why and what to do instead.
pub(crate) fn refuse_blocking(what: &'static str, instead: Instead) -> Result<(), Error> {
    if is_in_start_hook() {
        return Err(Error::would_deadlock(
            what,
            "it is called in a thread start hook, and the pool starting waits for the hook",
        ));
    }
    if is_engine_thread() && BODY.with(Cell::get).is_null() {
        return Err(Error::would_deadlock(
            what,
            "it is called on an engine thread outside an op's body (a waker or a destructor the \
             engine runs), which is completing an op the wait may include",
        ));
    }
    if runs_async_code() {
        return Err(Error::blocking_in_runtime(what, instead.say()));
    }
    Ok(())
}

/// Steps past Tokio's task budget (128 today) after which a thread is
/// taken to run unconstrained: twice it, so that a larger budget in a later
/// Tokio is still seen.
const TOKIO_BUDGET: usize = 256;

/// Whether this thread runs async code of a Tokio runtime (see the module
/// docs).
pub(crate) fn runs_async_code() -> bool {
    if tokio::runtime::Handle::try_current().is_err() {
        return false;
    }
    /// Records its wake in this thread's flag.
    struct Probe;
    impl std::task::Wake for Probe {
        fn wake(self: Arc<Self>) {
            WOKEN.with(|w| w.set(true));
        }
    }
    static PROBE: LazyLock<Arc<Probe>> = LazyLock::new(|| Arc::new(Probe));
    let waker = Waker::from(PROBE.clone());
    let mut cx = Context::from_waker(&waker);
    WOKEN.with(|w| w.set(false));
    let yielded = pin!(tokio::task::yield_now());
    let _ = yielded.poll(&mut cx);
    if !WOKEN.with(Cell::get) {
        return true;
    }
    for _ in 0..=TOKIO_BUDGET {
        match tokio::task::coop::poll_proceed(&mut cx) {
            Poll::Ready(step) => step.made_progress(),
            Poll::Pending => return true,
        }
    }
    false
}

#[cfg(all(test, not(depengine_loom)))]
mod tests;
