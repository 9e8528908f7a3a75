//! Op groups: a request's ops (or a batch's, a job's) waited for,
//! cancelled and counted as one. The books themselves are the op layer's
//! (`op::group`); this is their public face.

use std::borrow::Cow;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use super::api::Engine;
use super::block_helping;
use super::shared::Shared;
use crate::error::Error;
use crate::may_block::{Instead, refuse_blocking};
use crate::op::GroupCore;
use crate::op::Help;
use crate::op::job::{in_cancelled_group, in_user_body, inside_group, waits_for_current_body};
use crate::sync::atomic::{AtomicBool, Ordering};

/// A group of ops: waited for, cancelled and counted as one, as Tokio's
/// `TaskTracker` and `JoinSet` do for tasks and OpenMP's `taskgroup` for
/// tasks.
///
/// Made by [`Engine::group`]; an op joins it at its push
/// ([`OpBuilder::group`](crate::engine::OpBuilder::group)), detached ops
/// too. An op in no group pays nothing for groups. A clone is another
/// handle to the same group, as a `TaskTracker`'s is.
///
/// * [`close`](Self::close) and [`wait`](Self::wait) have `TaskTracker`'s
///   meaning: the wait resolves once the group is closed (or cancelled)
///   and every op of it has completed, with the first error any of them
///   ended with;
/// * [`cancel`](Self::cancel) refuses the group's later pushes, resolves
///   its ops that have not started as cancelled without running them
///   (their vars are left as if they had never been pushed, as
///   [`OpHandle::abort`](crate::OpHandle::abort) leaves them), aborts the
///   tasks of its running future ops ([`spawn`](crate::engine::OpBuilder::spawn))
///   at their next `.await`, and lets running sync and async bodies see it:
///   [`is_cancelled`] inside them;
/// * **dropping the group's last clone cancels it**, as dropping a
///   `JoinSet` aborts its tasks: a request's group dropped with its
///   handler (the client hung up, a timeout fired) takes the request's
///   unstarted work with it, and a forgotten group leaves nothing queued
///   behind it. [`detach`](Self::detach) lets the ops run on instead;
/// * [`cancelled`](Self::cancelled) is a future of the cancel, and
///   `tie` (feature `tokio-util`) cancels the group with a
///   `CancellationToken`.
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
/// request.close();
/// request.wait().await?;
/// assert_eq!(request.counts().done, 2);
/// assert_eq!(*output.read().await?, 10);
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct OpGroup {
    owner: Arc<Owner>,
}

/// What the clones of one group share: the books, and whether the last
/// clone's drop cancels them.
struct Owner {
    core: Arc<GroupCore>,
    /// Cleared by `detach`.
    cancel_on_drop: AtomicBool,
}

/// Dropping a group's last clone cancels it (see [`OpGroup`]).
impl Drop for Owner {
    fn drop(&mut self) {
        if self.cancel_on_drop.load(Ordering::Acquire) {
            self.core.cancel();
        }
    }
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
    /// assert_eq!(batch.counts(), depengine::engine::GroupCounts::default());
    /// ```
    pub fn group(&self, name: impl Into<Cow<'static, str>>) -> OpGroup {
        let host: Arc<dyn std::any::Any + Send + Sync> = self.shared().clone();
        let core = GroupCore::new(name.into(), Arc::downgrade(&host));
        OpGroup { owner: Arc::new(Owner { core, cancel_on_drop: AtomicBool::new(true) }) }
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
        &self.core().name
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
        self.core().cancel()
    }

    /// Whether the group was cancelled (or dropped).
    pub fn is_cancelled(&self) -> bool {
        self.core().is_cancelled()
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
    /// group.close();
    /// let _ = group.wait().blocking_wait();
    /// let counts = group.counts();
    /// assert_eq!((counts.done, counts.failed, counts.pending, counts.running), (2, 1, 0, 0));
    /// # let _ = engine.wait_for_all().blocking_wait();
    /// # Ok::<(), depengine::Error>(())
    /// ```
    pub fn counts(&self) -> GroupCounts {
        let c = self.core().counts();
        GroupCounts {
            pending: c.pending,
            running: c.running,
            done: c.done,
            failed: c.failed,
            cancelled: c.cancelled,
        }
    }

    /// Closes the group, as Tokio's `TaskTracker::close`: its
    /// [`wait`](Self::wait)s resolve once it is closed and none of its ops
    /// is unfinished. Ops may still join a closed group (the waits then
    /// wait for them too). Returns whether this call closed it.
    ///
    /// # Examples
    ///
    /// ```
    /// let engine = depengine::Engine::new();
    /// let batch = engine.group("batch");
    /// assert!(batch.close());
    /// assert!(!batch.close());
    /// assert!(batch.is_closed());
    /// batch.wait().blocking_wait()?; // closed and empty
    /// # Ok::<(), depengine::Error>(())
    /// ```
    pub fn close(&self) -> bool {
        self.core().set_closed(true)
    }

    /// Reopens a closed group: its waits wait for a `close` again.
    /// Returns whether this call reopened it.
    pub fn reopen(&self) -> bool {
        self.core().set_closed(false)
    }

    /// Whether the group is closed.
    pub fn is_closed(&self) -> bool {
        self.core().is_closed()
    }

    /// Waits until the group is closed (or cancelled) and none of its ops
    /// is unfinished, as Tokio's `TaskTracker::wait`: a wait on a group
    /// that is still open waits for its [`close`](Self::close), so that
    /// clones pushing into the group from several tasks cannot end it
    /// early between two pushes. Resolves with `Ok` if every op that
    /// completed succeeded, else with the first error one of them ended
    /// with (a cancellation included).
    ///
    /// Blocking ([`GroupWait::blocking_wait`]), the thread runs the group's
    /// own ready ops while it waits (those it may run: on a worker, its
    /// pool's), then, inside an op's body, other queued ops, as
    /// [`OpHandle::blocking_wait`](crate::OpHandle::blocking_wait) does: so
    /// a body that fans ops out into a group and joins them never hangs,
    /// on one worker or many, however many such bodies wait in each other.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> depengine::Result<()> {
    /// let engine = depengine::Engine::new();
    /// let parts = engine.group("parts");
    /// // A clone is a shared handle, as a TaskTracker's: this wait waits
    /// // for the close, however the pushes below interleave with the ops.
    /// let waiter = tokio::spawn({
    ///     let parts = parts.clone();
    ///     async move { parts.wait().await }
    /// });
    /// for _ in 0..4 {
    ///     engine.op("part").group(&parts).run_detached(|(), ()| Ok(()))?;
    /// }
    /// parts.close();
    /// waiter.await.unwrap()?;
    /// assert_eq!(parts.counts().done, 4);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// The first error of the group's ops; [`Error::is_would_deadlock`]
    /// inside a body of one of the group's own ops (it would wait for
    /// itself), or inside a body whose op holds a var that one of the
    /// group's unfinished ops needs (with a write on either side: that op
    /// could only run once the body's op has completed).
    pub fn wait(&self) -> GroupWait {
        let refused = self.refusal();
        GroupWait {
            core: self.core().clone(),
            key: None,
            refused,
            #[cfg(feature = "tokio-util")]
            token: None,
        }
    }

    /// Why a wait for the group, here, would wait for ever, if it would.
    fn refusal(&self) -> Option<Error> {
        let core = self.core();
        if inside_group(core) {
            return Some(Error::would_deadlock(
                "OpGroup::wait",
                "it is called inside an op of this group, and would wait for it",
            ));
        }
        if in_user_body() && core.any_unfinished(waits_for_current_body) {
            return Some(Error::would_deadlock(
                "OpGroup::wait",
                "an op of the group needs a var that the op running this body holds",
            ));
        }
        None
    }

    /// Resolves once the group is cancelled ([`cancel`](Self::cancel),
    /// the drop of its last clone, or its tied token), as
    /// `CancellationToken::cancelled` does.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let engine = depengine::Engine::new();
    /// let request = engine.group("request");
    /// let watcher = tokio::spawn({
    ///     let request = request.clone();
    ///     async move { request.cancelled().await }
    /// });
    /// request.cancel();
    /// watcher.await.unwrap();
    /// # }
    /// ```
    pub fn cancelled(&self) -> GroupCancelled {
        GroupCancelled {
            core: self.core().clone(),
            key: None,
            #[cfg(feature = "tokio-util")]
            token: None,
        }
    }

    /// Ties the group to `token`: once the token is cancelled, the group
    /// is as if [`cancel`](Self::cancel)ed (the group's cancel does not
    /// cancel the token). No task watches the token: the group looks at it
    /// whenever it is looked at itself (a push into it, an op of it about
    /// to start, a wait for it polled), so no op of it starts after the
    /// token's cancel, and a wait for it wakes on the token.
    ///
    /// # Examples
    ///
    /// ```
    /// let engine = depengine::Engine::new();
    /// let shutdown = tokio_util::sync::CancellationToken::new();
    /// let request = engine.group("request");
    /// request.tie(&shutdown)?;
    /// shutdown.cancel();
    /// assert!(request.is_cancelled());
    /// let refused = engine.op("late").group(&request).run(|(), ()| Ok(()));
    /// assert!(refused.blocking_wait().unwrap_err().is_cancelled());
    /// # Ok::<(), depengine::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::is_invalid_argument`] if the group is tied to a token
    /// already.
    #[cfg(feature = "tokio-util")]
    #[cfg_attr(docsrs, doc(cfg(feature = "tokio-util")))]
    pub fn tie(&self, token: &tokio_util::sync::CancellationToken) -> Result<(), Error> {
        if self.core().tie(token.clone()) {
            return Ok(());
        }
        Err(Error::invalid(format!("group `{}` is tied to a cancellation token already", self.name())))
    }

    /// Drops this handle to the group without cancelling it: the group's
    /// ops run on when its last clone is dropped, and their outcome is
    /// left to their handles and to
    /// [`Engine::wait_for_all`](crate::Engine::wait_for_all). It holds for
    /// every clone of the group.
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
    pub fn detach(self) {
        self.owner.cancel_on_drop.store(false, Ordering::Release);
    }

    /// Wakers kept for this group's waits (to check that dropped waits
    /// leave none behind).
    #[doc(hidden)]
    pub fn waiters_kept(&self) -> usize {
        self.core().waiters()
    }

    pub(crate) fn core(&self) -> &Arc<GroupCore> {
        &self.owner.core
    }
}

impl fmt::Debug for OpGroup {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.core().fmt(f)
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
///     while !depengine::engine::is_cancelled() {
///         std::thread::yield_now(); // a step of long work
///     }
///     Ok("stopped early")
/// });
/// started_rx.recv().unwrap();
/// group.cancel();
/// assert_eq!(long.blocking_wait()?, "stopped early"); // it saw the cancel
/// assert!(!depengine::engine::is_cancelled());
/// # Ok::<(), depengine::Error>(())
/// ```
pub fn is_cancelled() -> bool {
    in_cancelled_group()
}

/// The wait of a tied token, boxed: made only for a tied group's waits.
#[cfg(feature = "tokio-util")]
type TokenWait = Pin<Box<tokio_util::sync::WaitForCancellationFutureOwned>>;

/// Polls the tied token's cancel (kept in `wait` once made): ready once
/// it is cancelled.
#[cfg(feature = "tokio-util")]
fn poll_token(core: &GroupCore, wait: &mut Option<TokenWait>, cx: &mut Context<'_>) -> bool {
    let Some(token) = core.tied_token() else { return false };
    let wait = wait.get_or_insert_with(|| Box::pin(token.clone().cancelled_owned()));
    wait.as_mut().poll(cx).is_ready()
}

/// Runs one of `group`'s ready ops on this thread, out of turn, if one may
/// run here (see `Dispatcher::may_run_out_of_turn`): a blocking wait for
/// a group runs the group's own ops first, as OpenMP's `taskgroup` runs
/// descendants of the waiting task, so that waits nested in one another
/// finish their own children instead of taking the next parent from the
/// queues. The op's queue entry, taken later, finds it started.
fn run_one_of(group: &GroupCore) -> bool {
    let Some(shared) = group.engine().and_then(|e| e.downcast::<Shared>().ok()) else { return false };
    for op in group.ready_ops(64) {
        if shared.dispatcher.may_run_out_of_turn(&op) && op.try_execute() {
            return true;
        }
    }
    false
}

/// The future of [`OpGroup::wait`].
#[must_use = "futures do nothing unless awaited"]
pub struct GroupWait {
    core: Arc<GroupCore>,
    /// Its waker's key in the group's books, once polled.
    key: Option<u64>,
    refused: Option<Error>,
    #[cfg(feature = "tokio-util")]
    token: Option<TokenWait>,
}

impl GroupWait {
    /// Blocks the current thread until the wait resolves, for non-async
    /// callers. Inside an op's body, it runs queued ops meanwhile (see
    /// [`OpGroup::wait`]).
    ///
    /// # Errors
    ///
    /// As for the future, and [`Error::is_blocking_in_runtime`] in an async
    /// task (`.await` it there).
    pub fn blocking_wait(mut self) -> Result<(), Error> {
        refuse_blocking("GroupWait::blocking_wait", Instead::Await)?;
        let core = self.core.clone();
        let help = || if run_one_of(&core) { Help::Ran } else { crate::exec::help() };
        block_helping(|cx| Pin::new(&mut self).poll(cx), help)
    }
}

impl Future for GroupWait {
    type Output = Result<(), Error>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = &mut *self;
        if let Some(err) = this.refused.take() {
            return Poll::Ready(Err(err));
        }
        if let Some(done) = this.core.poll_done(&mut this.key, cx.waker()) {
            return Poll::Ready(done);
        }
        #[cfg(feature = "tokio-util")]
        if poll_token(&this.core, &mut this.token, cx) {
            // The token's cancel is the group's now: looked at again.
            if let Some(done) = this.core.poll_done(&mut this.key, cx.waker()) {
                return Poll::Ready(done);
            }
        }
        Poll::Pending
    }
}

/// A wait dropped before it resolved leaves no waker behind.
impl Drop for GroupWait {
    fn drop(&mut self) {
        if self.key.is_some() {
            self.core.forget_done(self.key.take());
        }
    }
}

impl fmt::Debug for GroupWait {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GroupWait").field("group", &self.core.name).finish_non_exhaustive()
    }
}

/// The future of [`OpGroup::cancelled`].
#[must_use = "futures do nothing unless awaited"]
pub struct GroupCancelled {
    core: Arc<GroupCore>,
    key: Option<u64>,
    #[cfg(feature = "tokio-util")]
    token: Option<TokenWait>,
}

impl Future for GroupCancelled {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = &mut *self;
        if this.core.poll_cancelled(&mut this.key, cx.waker()) {
            return Poll::Ready(());
        }
        #[cfg(feature = "tokio-util")]
        if poll_token(&this.core, &mut this.token, cx) && this.core.poll_cancelled(&mut this.key, cx.waker())
        {
            return Poll::Ready(());
        }
        Poll::Pending
    }
}

/// A wait dropped before it resolved leaves no waker behind.
impl Drop for GroupCancelled {
    fn drop(&mut self) {
        if self.key.is_some() {
            self.core.forget_cancelled(self.key.take());
        }
    }
}

impl fmt::Debug for GroupCancelled {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GroupCancelled").field("group", &self.core.name).finish_non_exhaustive()
    }
}
