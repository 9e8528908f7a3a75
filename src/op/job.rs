//! Op bodies: the [`Job`] trait a typed record runs, the bodies of the
//! user API (a sync closure, a closure with a completion token, a future on
//! the Tokio runtime, a GPU op's enqueue), and which op's body runs on this
//! thread.
//!
//! A GPU op's body enqueues work on its worker's stream and returns; an
//! event is recorded behind that work, and the device's poller completes
//! the op when the event completes. No thread waits on the GPU.
//!
//! The op layer is the one that knows when user code runs on a thread:
//! [`in_user_body`] tells the workers (`exec`) not to keep an op made
//! ready from inside a body in their next slot, since the body may block
//! until that op has run; a wait inside a body that could never end is
//! refused ([`waits_for_current_body`], [`inside_op_of`]).
//!
//! Why `unsafe`: the op whose body runs on this thread is kept in a
//! thread-local by address (a thread-local cannot hold a borrow), set only
//! for the body's call, while the running thread holds the record; a
//! counted reference there would cost every op two atomic operations, the
//! cost PERFORMANCE.md's *An op runs on its worker's reference* took out of
//! the run.

#![allow(unsafe_code)]

use std::cell::Cell;
use std::future::Future;
use std::marker::PhantomData;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

use super::access::{Item, OpToken};
use super::life::release_vars_early;
use super::slot::{Completion, SlotBorrow, SlotRef, watching_token};
use super::{GROUP_REASON, GroupCore, Header, TaskRef};
use crate::error::{BoxError, Error, GpuFault, Kind};
use crate::gpu::early_release::{self, Released};
use crate::gpu::{Event, GpuContext, GpuLane, Stream};
use crate::may_block::BODY;
use crate::var::Access;

/// An op's body, typed.
pub(crate) trait Job: Send + 'static {
    type Output: Send + 'static;

    /// Starts the body. It must lead to exactly one store of its result:
    /// [`Running::store`] before returning, or `SlotRef::store` on
    /// [`Running::to_owned`] from a [`Completion`] or a spawned task.
    fn start(self, op: Running<'_, Self::Output>);

    /// The op will not run (`err` says why); called instead of `start`.
    fn vetoed(self, _err: &Error)
    where
        Self: Sized,
    {
    }
}

/// A running op, as its body's [`Job::start`] sees it: borrowed from the
/// thread that runs it, which holds a reference for the call.
pub(crate) struct Running<'a, R: 'static> {
    /// A reference to the record (guards are made of it).
    pub(crate) task: &'a TaskRef,
    pub(super) slot: SlotBorrow<'a, R>,
}

impl<R: 'static> Running<'_, R> {
    pub(crate) fn header(&self) -> &Header {
        self.task.header()
    }

    /// Stores the body's result (see `SlotVtable::store`).
    pub(crate) fn store(&self, result: Result<R, Error>) {
        self.slot.store(result);
    }

    /// An owned reference, for a body that stores its result after
    /// `start` returns.
    pub(crate) fn to_owned(&self) -> SlotRef<R> {
        self.slot.to_owned()
    }
}

/// Maps a body's outcome, panics included, to the op's result: inlined,
/// so that an `Ok` costs a move.
/// `header` is asked for only on a failure.
#[inline(always)]
pub(super) fn op_result<'h, R>(
    header: impl FnOnce() -> &'h Header,
    caught: std::thread::Result<Result<R, BoxError>>,
) -> Result<R, Error> {
    match caught {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(source)) => Err(failed(header(), source)),
        Err(payload) => Err(Error::panicked(header().meta.name.clone(), payload)),
    }
}

/// The error of a body that returned `source`.
#[cold]
fn failed(header: &Header, source: BoxError) -> Error {
    Error::new(Kind::Failed { op: header.meta.name.clone(), source })
}

/// A closure run to completion on a worker.
pub(crate) struct SyncJob<Rd, Wr, F> {
    pub(crate) reads: Rd,
    pub(crate) writes: Wr,
    pub(crate) body: F,
}

impl<Rd, Wr, F, R> Job for SyncJob<Rd, Wr, F>
where
    Rd: Item,
    Wr: Item,
    F: FnOnce(Rd::Guard, Wr::Guard) -> Result<R, BoxError> + Send + 'static,
    R: Send + 'static,
{
    type Output = R;

    #[inline]
    fn start(self, op: Running<'_, R>) {
        let Self { reads, writes, body } = self;
        let caught = catch_unwind(AssertUnwindSafe(|| {
            let reads = reads.guard(OpToken(op.task));
            let writes = writes.guard(OpToken(op.task));
            in_body(op.header(), || body(reads, writes))
        }));
        let result = op_result(|| op.header(), caught);
        op.store(result);
    }
}

/// A closure that receives a [`Completion`] to signal, now or later.
pub(crate) struct AsyncJob<Rd, Wr, F, R> {
    pub(crate) reads: Rd,
    pub(crate) writes: Wr,
    pub(crate) body: F,
    pub(crate) output: PhantomData<fn(R)>,
}

impl<Rd, Wr, F, R> Job for AsyncJob<Rd, Wr, F, R>
where
    Rd: Item,
    Wr: Item,
    F: FnOnce(Rd::Guard, Wr::Guard, Completion<R>) + Send + 'static,
    R: Send + 'static,
{
    type Output = R;

    #[inline]
    fn start(self, op: Running<'_, R>) {
        let done = Completion::new(op.to_owned());
        let Self { reads, writes, body, .. } = self;
        let caught = catch_unwind(AssertUnwindSafe(|| {
            let reads = reads.guard(OpToken(op.task));
            let writes = writes.guard(OpToken(op.task));
            in_body_with_token(op.header(), || body(reads, writes, done))
        }));
        // A token the body dropped (by unwinding or not) stored nothing:
        // what the body did decides. A token signalled before a panic has
        // stored its result, and the store below is then ignored.
        let name = || op.header().meta.name.clone();
        match caught {
            Ok(false) => {}
            Ok(true) => op.store(Err(Error::new(Kind::CompletionDropped { op: name() }))),
            Err(payload) => {
                op.store(Err(Error::panicked(name(), payload)));
            }
        }
    }
}

/// A future run on the engine's Tokio runtime.
pub(crate) struct FutureJob<Rd, Wr, F> {
    pub(crate) reads: Rd,
    pub(crate) writes: Wr,
    pub(crate) body: F,
    pub(crate) runtime: tokio::runtime::Handle,
}

impl<Rd, Wr, F, Fut, R> Job for FutureJob<Rd, Wr, F>
where
    Rd: Item,
    Wr: Item,
    F: FnOnce(Rd::Guard, Wr::Guard) -> Fut + Send + 'static,
    Fut: Future<Output = Result<R, BoxError>> + Send + 'static,
    R: Send + 'static,
{
    type Output = R;

    #[inline]
    fn start(self, op: Running<'_, R>) {
        let Self { reads, writes, body, runtime } = self;
        let caught = catch_unwind(AssertUnwindSafe(|| {
            (reads.guard(OpToken(op.task)), writes.guard(OpToken(op.task)))
        }));
        let (reads, writes) = match caught {
            Ok(guards) => guards,
            Err(payload) => return op.store(op_result(|| op.header(), Err(payload))),
        };
        let on_drop = StoreOnDrop(Some(op.to_owned()));
        let engine = op.header().engine.as_ptr() as usize;
        // The future runs in the op's span at every poll, so that what it
        // logs is attributed to its op by any subscriber.
        let span = op.header().span().cloned().unwrap_or_else(tracing::Span::none);
        let task = FUTURE_OP_OF.scope(engine, async move {
            let on_drop = on_drop;
            // The body is called at the first poll, inside the catch.
            let mut future = std::pin::pin!(async move { body(reads, writes).await });
            let caught = std::future::poll_fn(|cx| {
                match catch_unwind(AssertUnwindSafe(|| future.as_mut().poll(cx))) {
                    Ok(poll) => poll.map(Ok),
                    Err(payload) => std::task::Poll::Ready(Err(payload)),
                }
            })
            .await;
            if let Some(slot) = on_drop.disarm() {
                let result = op_result(|| slot.header(), caught);
                slot.store(result);
            }
        });
        let header = op.header();
        match header.meta.watched().then(|| header.group()).flatten() {
            None => drop(runtime.spawn(tracing::Instrument::instrument(task, span))),
            Some(link) => {
                // A group's future op: its body may ask whether its group
                // was cancelled, and a cancel aborts its task.
                let task = FUTURE_OP_GROUP.scope(link.core.clone(), task);
                let spawned = runtime.spawn(tracing::Instrument::instrument(task, span));
                header.group_spawned(spawned.abort_handle());
            }
        }
    }
}

/// Stores an error if a future op's task is dropped unfinished (its runtime
/// shut down), so that the op still completes.
struct StoreOnDrop<R: 'static>(Option<SlotRef<R>>);

impl<R: 'static> StoreOnDrop<R> {
    fn disarm(mut self) -> Option<SlotRef<R>> {
        self.0.take()
    }
}

impl<R: 'static> Drop for StoreOnDrop<R> {
    fn drop(&mut self) {
        if let Some(slot) = self.0.take() {
            let op = slot.header().meta.name.clone();
            let aborted = slot.header().group().is_some_and(|link| link.core.is_cancelled());
            let reason =
                if aborted { GROUP_REASON } else { "its tokio runtime shut down before it finished" };
            slot.store(Err(Error::new(Kind::Cancelled { op, reason })));
        }
    }
}

/// Whether user code of an op body is running on this thread: an op it
/// makes ready (by signalling a completion, dropping a guard) must not wait
/// for it to return.
#[inline]
pub(crate) fn in_user_body() -> bool {
    !BODY.with(Cell::get).is_null()
}

/// The op whose user body runs on this thread (the innermost one, if
/// bodies nest), for checks that would otherwise wait for it.
pub(crate) fn current_body<T>(look: impl FnOnce(Option<&Header>) -> T) -> T {
    let header = BODY.with(Cell::get).cast::<Header>();
    // SAFETY: a non-null pointer is set by `in_body` (to a `Header`) for
    // the duration of the body's call, during which the thread running it
    // holds a reference to the record (`Running::task`).
    look(unsafe { header.as_ref() })
}

tokio::task_local! {
    /// The engine (its host's address) whose future op this task runs.
    pub(super) static FUTURE_OP_OF: usize;
}

tokio::task_local! {
    /// The group of the future op this task runs, if it is in one.
    pub(super) static FUTURE_OP_GROUP: Arc<GroupCore>;
}

/// The group of the op whose body runs here (on this thread, or as this
/// future op's task), if it is in one: `look` is asked with it.
fn current_group<T>(look: impl Fn(Option<&GroupCore>) -> T) -> T {
    let on_thread = current_body(|body| body.and_then(Header::group).map(|link| look(Some(&link.core))));
    match on_thread {
        Some(seen) => seen,
        None => FUTURE_OP_GROUP.try_with(|core| look(Some(core))).unwrap_or_else(|_| look(None)),
    }
}

/// Whether the op whose body runs here belongs to a cancelled group.
pub(crate) fn in_cancelled_group() -> bool {
    current_group(|group| group.is_some_and(GroupCore::is_cancelled))
}

/// Whether the op whose body runs here belongs to `group`: waiting for the
/// group there would wait for that very op.
pub(crate) fn inside_group(group: &GroupCore) -> bool {
    current_group(|current| current.is_some_and(|c| std::ptr::eq(c, group)))
}

/// Whether the caller runs inside a body of an op of the engine `host`: a
/// body on this thread (the innermost one), or a future op's task. An
/// engine-wide wait there would wait for that very op.
pub(crate) fn inside_op_of(host: *const ()) -> bool {
    let on_thread = current_body(|body| body.is_some_and(|b| std::ptr::addr_eq(b.engine.as_ptr(), host)));
    on_thread || FUTURE_OP_OF.try_with(|&of| of == host as usize).unwrap_or(false)
}

/// Whether waiting, inside the body running on this thread, for `other`
/// (not complete) could never end: it is that op, or it needs a var that op
/// holds, with a write on either side, so it waits for that op to complete.
pub(crate) fn waits_for_current_body(other: &Header) -> bool {
    current_body(|body| body.is_some_and(|body| std::ptr::eq(body, other) || conflict(body, other)))
}

/// Whether two ops share a var that one of them writes (deps are sorted by
/// var id, one per var).
fn conflict(a: &Header, b: &Header) -> bool {
    let (mut a, mut b) = (a.deps.iter().peekable(), b.deps.iter().peekable());
    while let (Some(x), Some(y)) = (a.peek(), b.peek()) {
        match x.var.id().cmp(&y.var.id()) {
            std::cmp::Ordering::Less => drop(a.next()),
            std::cmp::Ordering::Greater => drop(b.next()),
            std::cmp::Ordering::Equal => {
                if x.access == Access::Write || y.access == Access::Write {
                    return true;
                }
                a.next();
                b.next();
            }
        }
    }
    false
}

/// Whether the body running on this thread holds `var` (declared it).
pub(crate) fn current_body_holds(var: u64) -> bool {
    current_body(|body| body.is_some_and(|body| body.deps.iter().any(|d| d.var.id() == var)))
}

/// Runs the user body of `header`'s op, marking this thread as busy with
/// it.
#[inline]
pub(super) fn in_body<R>(header: &Header, body: impl FnOnce() -> R) -> R {
    struct Leave(*const ());
    impl Drop for Leave {
        fn drop(&mut self) {
            BODY.with(|b| b.set(self.0));
        }
    }
    let _leave = Leave(BODY.with(|b| b.replace(std::ptr::from_ref(header).cast())));
    body()
}

/// [`in_body`] for a body that receives a token: also returns whether it
/// dropped its own token unsignalled.
pub(super) fn in_body_with_token(header: &Header, body: impl FnOnce()) -> bool {
    watching_token(|| in_body(header, body))
}

/// A GPU op's body: it enqueues on its worker's stream and returns.
pub(crate) struct GpuJob<Rd, Wr, F> {
    pub(crate) reads: Rd,
    pub(crate) writes: Wr,
    pub(crate) body: F,
    pub(crate) lane: GpuLane,
}

impl<Rd, Wr, F, R> Job for GpuJob<Rd, Wr, F>
where
    Rd: Item,
    Wr: Item,
    F: FnOnce(Rd::Guard, Wr::Guard, &GpuContext<'_>) -> Result<R, BoxError> + Send + 'static,
    R: Send + 'static,
{
    type Output = R;

    fn start(self, op: Running<'_, R>) {
        let Self { reads, writes, body, lane } = self;
        let stream = lane.stream();
        let device = lane.gpu.device.clone();
        let deps = || op.header().deps.iter().map(|d| (d.var.id(), d.access == Access::Write));
        // Same-device GPU work still in flight on the op's vars (their ops
        // let them go at enqueue): ordered on the GPU, not waited for here.
        if let Err(err) = early_release::follow_in_flight(&lane, &stream, deps()) {
            return op.store(Err(Error::gpu(Some(op.header().meta.name.clone()), device.ordinal, err)));
        }
        let caught = catch_unwind(AssertUnwindSafe(|| {
            let reads = reads.guard(OpToken(op.task));
            let writes = writes.guard(OpToken(op.task));
            let ctx = GpuContext { stream: &stream, gpu: &lane.gpu, lane: lane.lane };
            in_body(op.header(), || body(reads, writes, &ctx))
        }));
        // A body that failed may have enqueued work before it did: the op
        // completes, with its error, only once that work has run.
        let result = op_result(|| op.header(), caught);
        let event = match device.record(&stream) {
            Ok(event) => event,
            // Its work is enqueued, and nothing tells when it ends: the op
            // keeps its vars until its stream has drained (`gpu/drain.rs`).
            Err(err) => {
                let (slot, ordinal) = (op.to_owned(), device.ordinal);
                let err = Error::gpu(Some(op.header().meta.name.clone()), ordinal, err);
                return device.after_drained(stream, Box::new(move |_| slot.store(Err(err))));
            }
        };
        // Early release: a successful op lets its vars go now, its work
        // fenced on them, so that the next GPU op of this device is ordered
        // behind it on the GPU; everything else waits for the event.
        let released = match result {
            Ok(_) => early_release::release_at_enqueue(&lane, &stream, &event, deps, || {
                release_vars_early(op.task)
            }),
            Err(_) => None,
        };
        complete_after(op.to_owned(), &lane, &stream, event, result, released);
    }
}

/// Has the device's poller complete the op once `event` completes: with
/// `result`, or with the device's fault.
fn complete_after<R: Send + 'static>(
    slot: SlotRef<R>,
    lane: &GpuLane,
    stream: &Stream,
    event: Event,
    result: Result<R, Error>,
    released: Option<Released>,
) {
    let device = &lane.gpu.device;
    let ordinal = device.ordinal;
    let done = move |polled: Result<(), GpuFault>| {
        let result = match polled {
            Ok(()) => {
                if let Some(released) = released {
                    released.completed(slot.header().deps.iter().map(|d| d.var.id()));
                }
                result
            }
            // The fences stay: the device's fault fails whoever comes for
            // those vars. (Their event goes back to the pool with the
            // `released` dropped here, before the op completes: whoever
            // waits for the op then finds it there.)
            Err(fault) => {
                drop(released);
                Err(Error::gpu(Some(slot.header().meta.name.clone()), ordinal, fault))
            }
        };
        slot.store(result);
    };
    device.after(stream, event, Box::new(done));
}
