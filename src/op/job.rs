//! Op bodies: the [`Job`] trait a typed record runs, and the bodies of
//! the user API (a sync closure, a closure with a completion token, a
//! future on the Tokio runtime). Which body runs on this thread is
//! `body.rs`'s.

use std::future::Future;
use std::marker::PhantomData;
use std::panic::{AssertUnwindSafe, catch_unwind};

use super::access::{Item, OpToken};
use super::body::{FUTURE_OP_GROUP, FUTURE_OP_OF, in_body, in_body_with_token};
use super::op_handle::{Completion, SlotBorrow, SlotRef};
use super::record::{GROUP_REASON, Header, TaskRef};
use crate::error::{BoxError, Error, Kind};

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
