//! Op bodies: the [`Job`] trait a typed record runs, and the bodies of
//! the user API (a sync closure, a closure with a completion token, a
//! future on the Tokio runtime).
//!
//! The op layer is also the one that knows when user code runs on a
//! thread: [`in_user_body`] tells the workers (`exec`) not to keep an op
//! made ready from inside a body in their next slot, since the body may
//! block until that op has run.
//!
//! Why `unsafe`: the op whose body runs on this thread is kept in a
//! thread-local by address (a thread-local cannot hold a borrow), set only for the
//! body's call, while the running thread holds the record; a counted
//! reference there would cost every op two atomic operations, the cost
//! PERFORMANCE.md's *An op runs on its worker's reference* took out of the
//! run.

#![allow(unsafe_code)]

use std::cell::Cell;
use std::future::Future;
use std::marker::PhantomData;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

use futures::FutureExt;

use super::access::{Item, OpToken};
use super::op_cell::{OpSlot, SlotRef};
use super::op_handle::Completion;
use super::record::{Header, TaskRef};
use crate::error::{BoxError, Error, Kind, panic_message};
use crate::var::Access;

/// An op's body, typed.
pub(crate) trait Job: Send + 'static {
    type Output: Send + 'static;

    /// Starts the body. It must lead to exactly one store of its result:
    /// [`Running::store`] before returning, or [`OpSlot::store_owned`] on
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
pub(crate) struct Running<'a, R> {
    /// A reference to the record (guards are made of it).
    pub(crate) task: &'a TaskRef,
    pub(super) slot: &'a dyn OpSlot<R>,
}

impl<R: 'static> Running<'_, R> {
    pub(crate) fn header(&self) -> &Header {
        self.task.header()
    }

    /// Stores the body's result (see [`OpSlot::store`]).
    pub(crate) fn store(&self, result: Result<R, Error>) {
        self.slot.store(self.task, result);
    }

    /// An owned reference, for a body that stores its result after
    /// `start` returns.
    pub(crate) fn to_owned(&self) -> SlotRef<R> {
        self.slot.to_owned(self.task)
    }
}

thread_local! {
    /// The op whose user body runs on this thread (innermost), or null.
    static BODY: Cell<*const Header> = const { Cell::new(std::ptr::null()) };
    /// Whether that body dropped its own [`Completion`] unsignalled.
    static TOKEN_LEFT: Cell<bool> = const { Cell::new(false) };
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
    let header = BODY.with(Cell::get);
    // SAFETY: a non-null pointer is set by `in_body` for the duration of
    // the body's call, during which the thread running it holds a
    // reference to the record (`Running::task`).
    look(unsafe { header.as_ref() })
}

tokio::task_local! {
    /// The engine (its host's address) whose future op this task runs.
    static FUTURE_OP_OF: usize;
}

/// Whether the caller runs inside a body of an op of the engine `host`: a
/// body on this thread (the innermost one), or a future op's task. An
/// engine-wide wait there would wait for that very op.
pub(crate) fn inside_op_of(host: *const ()) -> bool {
    let on_thread = current_body(|body| body.is_some_and(|b| std::ptr::addr_eq(Arc::as_ptr(&b.host), host)));
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

/// Called by a [`Completion`] dropped unsignalled: if it is dropped by its
/// own op's body, on the thread running it, the body's end decides what
/// the op's result is (a panic, or a dropped token), and this returns true.
pub(super) fn token_left_by_own_body(header: &Header) -> bool {
    let own = std::ptr::eq(BODY.with(Cell::get), header);
    if own {
        TOKEN_LEFT.with(|left| left.set(true));
    }
    own
}

/// Runs the user body of `header`'s op, marking this thread as busy with
/// it.
#[inline]
pub(super) fn in_body<R>(header: &Header, body: impl FnOnce() -> R) -> R {
    struct Leave(*const Header);
    impl Drop for Leave {
        fn drop(&mut self) {
            BODY.with(|b| b.set(self.0));
        }
    }
    let _leave = Leave(BODY.with(|b| b.replace(header)));
    body()
}

/// [`in_body`] for a body that receives a token: also returns whether it
/// dropped its own token unsignalled.
fn in_body_with_token(header: &Header, body: impl FnOnce()) -> bool {
    struct Leave(bool);
    impl Drop for Leave {
        fn drop(&mut self) {
            TOKEN_LEFT.with(|left| left.set(self.0));
        }
    }
    let _leave = Leave(TOKEN_LEFT.with(|left| left.replace(false)));
    in_body(header, body);
    TOKEN_LEFT.with(Cell::get)
}

/// Maps a body's outcome, panics included, to the op's result.
pub(super) fn op_result<R>(
    name: &Header,
    caught: std::thread::Result<Result<R, BoxError>>,
) -> Result<R, Error> {
    let op = || name.meta.name.clone();
    match caught {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(source)) => Err(Error::new(Kind::Failed { op: op(), source })),
        Err(payload) => Err(Error::new(Kind::Panicked { op: op(), message: panic_message(&*payload) })),
    }
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
        let result = op_result(op.header(), caught);
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
                op.store(Err(Error::new(Kind::Panicked { op: name(), message: panic_message(&*payload) })));
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
            Err(payload) => return op.store(op_result(op.header(), Err(payload))),
        };
        let on_drop = StoreOnDrop(Some(op.to_owned()));
        let engine = Arc::as_ptr(&op.header().host).cast::<()>() as usize;
        // The future runs in the op's span at every poll, so that what it
        // logs is attributed to its op by any subscriber.
        let span = op.header().span().cloned().unwrap_or_else(tracing::Span::none);
        let task = FUTURE_OP_OF.scope(engine, async move {
            let on_drop = on_drop;
            let caught = AssertUnwindSafe(async move { body(reads, writes).await }).catch_unwind().await;
            if let Some(slot) = on_drop.disarm() {
                let result = op_result(slot.header(), caught);
                slot.store_owned(result);
            }
        });
        runtime.spawn(tracing::Instrument::instrument(task, span));
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
            let reason = "its tokio runtime shut down before it finished";
            slot.store_owned(Err(Error::new(Kind::Cancelled { op, reason })));
        }
    }
}
