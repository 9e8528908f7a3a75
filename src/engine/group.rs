//! Op groups: a request's ops (or a batch's, a job's) waited for,
//! cancelled and counted as one. The books themselves are the op layer's
//! (`op::record::group`); this is their public face.

use std::borrow::Cow;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use super::api::Engine;
use crate::error::Error;
use crate::may_block::{Instead, refuse_blocking};
use crate::op::body::{in_cancelled_group, inside_group};
use crate::op::record::GroupCore;

/// A group of ops: waited for, cancelled and counted as one, as Tokio's
/// `JoinSet` does for tasks and OpenMP's `taskgroup` for tasks.
///
/// Made by [`Engine::group`]; an op joins it at its push
/// ([`OpBuilder::group`](crate::engine::OpBuilder::group)), detached ops
/// too. An op in no group pays nothing for groups.
///
/// * [`wait`](Self::wait) resolves once every op of the group has completed,
///   with the first error any of them ended with;
/// * [`cancel`](Self::cancel) refuses the group's later pushes, resolves
///   its ops that have not started as cancelled without running them
///   (their vars are left as if they had never been pushed, as
///   [`OpHandle::abort`](crate::OpHandle::abort) leaves them), aborts the
///   tasks of its running future ops ([`spawn`](crate::engine::OpBuilder::spawn))
///   at their next `.await`, and lets running sync and async bodies see it:
///   [`is_cancelled`] inside them;
/// * **dropping the group cancels it**, as dropping a `JoinSet` aborts its
///   tasks: a request's group dropped with its handler (the client hung
///   up, a timeout fired) takes the request's unstarted work with it, and
///   a forgotten group leaves nothing queued behind it.
///   [`detach`](Self::detach) lets the ops run on instead.
///
/// Ops of a group never join a bulk segment
/// ([`EngineBuilder::bulk_size`](crate::EngineBuilder::bulk_size)): each
/// stays its own op, for the cancel to reach.
///
/// # Examples
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> depengine::Result<()> {
/// let engine = depengine::Engine::new();
/// let (input, output) = (engine.var(vec![1u32, 2, 3]), engine.var(0u32));
/// let request = engine.group("request 42");
/// engine.op("parse").group(&request).write(&input).run_detached(|(), (mut v,)| {
///     v.push(4);
///     Ok(())
/// })?;
/// engine.op("sum").group(&request).read(&input).write(&output).run_detached(|(v,), (mut s,)| {
///     *s = v.iter().sum();
///     Ok(())
/// })?;
/// request.wait().await?;
/// assert_eq!(request.counts().done, 2);
/// assert_eq!(*output.read().await?, 10);
/// # Ok(()) }
/// ```
pub struct OpGroup {
    core: Arc<GroupCore>,
    /// Cleared by `detach`.
    cancel_on_drop: bool,
}

impl Engine {
    /// A new, empty group of this engine's ops, named `name` for the hang
    /// explainer and the profiler (see [`OpGroup`]).
    ///
    /// # Examples
    ///
    /// ```
    /// let engine = depengine::Engine::new();
    /// let batch = engine.group("nightly batch");
    /// assert_eq!(batch.name(), "nightly batch");
    /// assert_eq!(batch.counts(), depengine::GroupCounts::default());
    /// ```
    pub fn group(&self, name: impl Into<Cow<'static, str>>) -> OpGroup {
        let host: Arc<dyn std::any::Any + Send + Sync> = self.shared().clone();
        OpGroup { core: GroupCore::new(name.into(), Arc::downgrade(&host)), cancel_on_drop: true }
    }
}

/// The ops of a group, by state (see [`OpGroup::counts`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct GroupCounts {
    /// Pushed, not started (queued on vars or on a pool).
    pub pending: usize,
    /// Started, not completed (a body running, an async op's token or
    /// guards still out).
    pub running: usize,
    /// Completed with success.
    pub done: u64,
    /// Completed with an error other than a cancellation (their body
    /// failed or panicked, or they were skipped for an error on a var).
    pub failed: u64,
    /// Completed cancelled (by the group's cancel, a cancelling shutdown,
    /// an abort through their handle).
    pub cancelled: u64,
}

impl OpGroup {
    /// The group's name.
    pub fn name(&self) -> &str {
        &self.core.name
    }

    /// Cancels the group (see [`OpGroup`]): later pushes into it are
    /// refused with [`Error::is_cancelled`], its ops that have not started
    /// resolve as cancelled at once, its running future ops are aborted.
    /// Returns whether this call cancelled it (false if it already was).
    ///
    /// # Examples
    ///
    /// ```
    /// let engine = depengine::Engine::new();
    /// let v = engine.var(0);
    /// let (held,) = engine.acquire().write(&v).push().blocking_wait()?; // `v` is busy
    /// let request = engine.group("request");
    /// let queued = engine.op("update").group(&request).write(&v).run(|(), (mut v,)| {
    ///     *v = 1;
    ///     Ok(())
    /// });
    /// assert!(request.cancel());
    /// assert!(queued.blocking_wait().unwrap_err().is_cancelled()); // at once
    /// let refused = engine.op("late").group(&request).run(|(), ()| Ok(()));
    /// assert!(refused.blocking_wait().unwrap_err().is_cancelled());
    /// drop(held);
    /// assert_eq!(*v.read().blocking_wait()?, 0); // the update never ran
    /// # Ok::<(), depengine::Error>(())
    /// ```
    pub fn cancel(&self) -> bool {
        self.core.cancel()
    }

    /// Whether the group was cancelled (or dropped).
    pub fn is_cancelled(&self) -> bool {
        self.core.is_cancelled()
    }

    /// How many of the group's ops are in each state now.
    ///
    /// # Examples
    ///
    /// ```
    /// let engine = depengine::Engine::new();
    /// let group = engine.group("batch");
    /// for i in 0..3 {
    ///     engine.op("step").group(&group).run_detached(move |(), ()| if i < 2 { Ok(()) } else { Err("bad".into()) })?;
    /// }
    /// let _ = group.wait().blocking_wait();
    /// let counts = group.counts();
    /// assert_eq!((counts.done, counts.failed, counts.pending, counts.running), (2, 1, 0, 0));
    /// # let _ = engine.wait_for_all().blocking_wait();
    /// # Ok::<(), depengine::Error>(())
    /// ```
    pub fn counts(&self) -> GroupCounts {
        let c = self.core.counts();
        GroupCounts {
            pending: c.pending,
            running: c.running,
            done: c.done,
            failed: c.failed,
            cancelled: c.cancelled,
        }
    }

    /// Waits until no op of the group is unfinished: resolves with `Ok` if
    /// every op that completed so far succeeded, else with the first error
    /// one of them ended with (a cancellation included). Ops pushed into
    /// the group while it waits are waited for too.
    ///
    /// # Errors
    ///
    /// The first error of the group's ops, and [`Error::is_would_deadlock`]
    /// inside a body of one of the group's own ops (it would wait for
    /// itself).
    pub fn wait(&self) -> GroupWait {
        let refused = inside_group(&self.core).then(|| {
            Error::would_deadlock(
                "OpGroup::wait",
                "it is called inside an op of this group, and would wait for it",
            )
        });
        GroupWait { core: self.core.clone(), refused }
    }

    /// Drops the group without cancelling it: its ops run on, and their
    /// outcome is left to their handles and to
    /// [`Engine::wait_for_all`](crate::Engine::wait_for_all).
    ///
    /// # Examples
    ///
    /// ```
    /// let engine = depengine::Engine::new();
    /// let v = engine.var(0);
    /// let group = engine.group("fire and forget");
    /// engine.op("write").group(&group).write(&v).run_detached(|(), (mut v,)| {
    ///     *v = 7;
    ///     Ok(())
    /// })?;
    /// group.detach();
    /// assert_eq!(*v.read().blocking_wait()?, 7);
    /// # Ok::<(), depengine::Error>(())
    /// ```
    pub fn detach(mut self) {
        self.cancel_on_drop = false;
    }

    pub(crate) fn core(&self) -> &Arc<GroupCore> {
        &self.core
    }
}

/// Dropping a group cancels it (see [`OpGroup`]).
impl Drop for OpGroup {
    fn drop(&mut self) {
        if self.cancel_on_drop {
            self.core.cancel();
        }
    }
}

impl fmt::Debug for OpGroup {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.core.fmt(f)
    }
}

/// Whether the op whose body runs here (a sync or async op's body on this
/// thread, a future op's task) belongs to a cancelled group: a long body
/// may check it now and then and stop early. False outside an op's body
/// and for an op in no group.
///
/// # Examples
///
/// ```
/// let engine = depengine::Engine::new();
/// let group = engine.group("request");
/// let (started_tx, started_rx) = std::sync::mpsc::channel();
/// let long = engine.op("long").group(&group).run(move |(), ()| {
///     started_tx.send(()).unwrap();
///     while !depengine::is_cancelled() {
///         std::thread::yield_now(); // a step of long work
///     }
///     Ok("stopped early")
/// });
/// started_rx.recv().unwrap();
/// group.cancel();
/// assert_eq!(long.blocking_wait()?, "stopped early"); // it saw the cancel
/// assert!(!depengine::is_cancelled());
/// # Ok::<(), depengine::Error>(())
/// ```
pub fn is_cancelled() -> bool {
    in_cancelled_group()
}

/// The future of [`OpGroup::wait`].
#[must_use = "futures do nothing unless awaited"]
pub struct GroupWait {
    core: Arc<GroupCore>,
    refused: Option<Error>,
}

impl GroupWait {
    /// Blocks the current thread until the wait resolves, for non-async
    /// callers.
    ///
    /// # Errors
    ///
    /// As for the future, and [`Error::is_blocking_in_runtime`] in an async
    /// task (`.await` it there).
    pub fn blocking_wait(self) -> Result<(), Error> {
        refuse_blocking("GroupWait::blocking_wait", Instead::Await)?;
        futures::executor::block_on(self)
    }
}

impl Future for GroupWait {
    type Output = Result<(), Error>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        if let Some(err) = self.refused.take() {
            return Poll::Ready(Err(err));
        }
        self.core.poll_idle(cx.waker()).map_or(Poll::Pending, Poll::Ready)
    }
}

impl fmt::Debug for GroupWait {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GroupWait").field("group", &self.core.name).finish_non_exhaustive()
    }
}
