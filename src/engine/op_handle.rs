//! What the pusher holds: the op's handle, a future of its result through
//! the record's [`SlotRef`] (`op/slot.rs`), and the blocking wait that
//! helps while it waits.

use std::fmt;
use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::Pin;
use std::task::{Context, Poll};

use crate::error::{Error, Kind, panic_message};
use crate::may_block::{Instead, refuse_blocking};
use crate::op::job::waits_for_current_body;
use crate::op::slot::SlotRef;
use crate::op::{HandleKind, Header, Help, Wait};

/// How long a blocking wait watches for completion before parking.
const WAIT_SPIN: std::time::Duration = std::time::Duration::from_micros(20);
/// The part of [`WAIT_SPIN`] that does not yield the core.
const WAIT_PURE_SPIN: std::time::Duration = std::time::Duration::from_micros(5);

/// A pushed op's result, as a future.
///
/// Resolves once the op has completed: its body has finished, every guard
/// it received is dropped, and its vars are released (so a var it wrote
/// already shows the new [`version`](crate::Var::version)). `Send` and
/// `'static`; dropping it detaches the op, which still runs, like
/// `tokio::task::JoinHandle`.
///
/// # Examples
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> depengine::Result<()> {
/// let engine = depengine::Engine::new();
/// let x = engine.var(20u32);
/// let doubled = engine.op("double").read(&x).run(|(x,), ()| Ok(*x * 2)).await?;
/// assert_eq!(doubled, 40);
/// # Ok(()) }
/// ```
///
/// # Errors
///
/// The op's own failure: its body returned an error or panicked, it was
/// skipped because a var carries an error, it was cancelled, or the push
/// itself was refused (closed engine, deleted var, invalid arguments).
///
/// # Panics
///
/// Polling again after it returned `Ready` panics.
pub struct OpHandle<R: 'static> {
    inner: Inner<R>,
}

enum Inner<R: 'static> {
    Pushed(SlotRef<R>),
    Refused(Option<Error>),
    /// The result was returned; the record is let go (only the name kept).
    Done(std::borrow::Cow<'static, str>),
}

impl<R: Send + 'static> OpHandle<R> {
    pub(crate) fn of_slot(slot: SlotRef<R>) -> Self {
        Self { inner: Inner::Pushed(slot) }
    }

    pub(crate) fn refused(err: Error) -> Self {
        Self { inner: Inner::Refused(Some(err)) }
    }

    /// The handle of a push that asked for one: its record, or its refusal.
    pub(crate) fn of_push(pushed: Result<Option<SlotRef<R>>, Error>) -> Self {
        match pushed {
            Ok(record) => Self::of_slot(record.expect("a record for the handle of an op pushed with one")),
            Err(err) => Self::refused(err),
        }
    }

    /// The handle, if its push went through; else the error it was
    /// refused with (a closed engine, a deleted var or one of another
    /// engine, a var declared twice with a write, an invalid device or
    /// lane, a full engine): `engine.op(..).run(body).pushed()?` stops at
    /// a refusal where the handle alone would resolve to it later.
    ///
    /// # Errors
    ///
    /// The refusal.
    ///
    /// ```
    /// let engine = depengine::Engine::new();
    /// let v = engine.var(0u32);
    /// let twice = engine.op("bad").write(&v).write(&v).run(|(), _| Ok(()));
    /// assert!(twice.pushed().unwrap_err().is_invalid_argument());
    /// ```
    pub fn pushed(mut self) -> Result<Self, Error> {
        match &mut self.inner {
            Inner::Refused(err) => match err.take() {
                Some(err) => Err(err),
                // Its error was read already, by a poll.
                None => Ok(self),
            },
            _ => Ok(self),
        }
    }

    /// Whether the op has completed (or its push was refused).
    ///
    /// # Examples
    ///
    /// ```
    /// let engine = depengine::Engine::new();
    /// let h = engine.op("quick").run(|(), ()| Ok(()));
    /// engine.wait_for_all().blocking_wait()?;
    /// assert!(h.is_finished());
    /// # Ok::<(), depengine::Error>(())
    /// ```
    pub fn is_finished(&self) -> bool {
        match &self.inner {
            Inner::Pushed(slot) => slot.is_complete(),
            Inner::Refused(_) | Inner::Done(_) => true,
        }
    }

    /// The op's name.
    ///
    /// # Examples
    ///
    /// ```
    /// let engine = depengine::Engine::new();
    /// let h = engine.op("resize").run(|(), ()| Ok(()));
    /// assert_eq!(h.name(), Some("resize"));
    /// ```
    pub fn name(&self) -> Option<&str> {
        match &self.inner {
            Inner::Pushed(slot) => Some(&slot.header().meta.name),
            Inner::Done(name) => Some(name),
            Inner::Refused(_) => None,
        }
    }

    /// Cancels the op if it has not started, as tokio's
    /// `JoinHandle::abort`: its body is dropped unrun, and the handle
    /// resolves with [`Error::is_cancelled`]. The op leaves no error on the
    /// vars it writes (a write of it still counts in their
    /// [`version`](crate::Var::version), as every completed write does),
    /// and `wait_for_all` does not report its cancellation. Returns whether
    /// it was cancelled; an op that has started runs on.
    ///
    /// # Examples
    ///
    /// ```
    /// let engine = depengine::Engine::new();
    /// let v = engine.var(0);
    /// let gate = engine.acquire().write(&v).push(); // holds v
    /// let queued = engine.op("queued").write(&v).run(|(), (mut v,)| { *v = 1; Ok(()) });
    /// assert!(queued.abort());
    /// drop(gate);
    /// assert!(queued.blocking_wait().unwrap_err().is_cancelled());
    /// assert_eq!(*v.read().blocking_wait()?, 0);
    /// # Ok::<(), depengine::Error>(())
    /// ```
    pub fn abort(&self) -> bool {
        match &self.inner {
            Inner::Pushed(slot) => abort(slot, "aborted through its handle"),
            Inner::Refused(_) | Inner::Done(_) => false,
        }
    }

    /// Blocks the current thread until the op completes.
    ///
    /// Inside an op body it may wait for ops pushed from that body: while
    /// it waits, the thread runs the ops it would otherwise run only after
    /// the body (an inline op, on the naive engine any op) and, on a
    /// worker, ops of its pool's queue, so a body on a pool of one worker
    /// can wait for an op it pushed there.
    ///
    /// # Errors
    ///
    /// The op's result; [`Error::is_blocking_in_runtime`] in an async task
    /// (a thread that runs a Tokio runtime's tasks would stall: `.await`
    /// the handle there; `spawn_blocking`, `block_in_place` and plain
    /// threads may block); and [`Error::is_would_deadlock`] inside an op
    /// body when the op waited for needs a var that the body's op holds
    /// (with a write on either side): it could only run once this body's
    /// op has completed, and on an engine thread outside any body. A
    /// `Waker` must not block: one woken by an op's completion runs on the
    /// thread completing it, where a wait that includes that op could never
    /// end (on an engine worker it is refused; on a thread of the
    /// program's that runs ops inline, it would hang).
    ///
    /// # Examples
    ///
    /// ```
    /// let engine = depengine::Engine::new();
    /// let h = engine.op("answer").run(|(), ()| Ok(42));
    /// assert_eq!(h.blocking_wait()?, 42);
    /// # Ok::<(), depengine::Error>(())
    /// ```
    pub fn blocking_wait(mut self) -> Result<R, Error> {
        refuse_blocking("OpHandle::blocking_wait", Instead::Await)?;
        let Inner::Pushed(slot) = &self.inner else {
            return crate::sync::block_on::block_on(self);
        };
        if !slot.is_complete() && waits_for_current_body(slot.header()) {
            return Err(Error::would_deadlock(
                "OpHandle::blocking_wait",
                "the op waited for needs a var that the op running this body holds",
            ));
        }
        let engine = slot.header().engine.clone();
        release_held(slot.header());
        // Small ops finish within microseconds: watch for that briefly
        // before paying for parking the thread and waking it again. After
        // the first microseconds the watch yields its core: the thread that
        // completes the op may share it (an MPI rank bound to one core, a
        // machine with more busy threads than cores), and a pure spin would
        // keep it off for the whole watch.
        let start = std::time::Instant::now();
        while !self.is_finished() {
            let waited = start.elapsed();
            if waited >= WAIT_SPIN {
                break;
            }
            if waited < WAIT_PURE_SPIN {
                for _ in 0..32 {
                    std::hint::spin_loop();
                }
            } else {
                std::thread::yield_now();
            }
        }
        block_helping(|cx| Pin::new(&mut self).poll(cx), || engine.wait(Wait::Blocked))
    }
}

/// Polls `poll` on this thread until it is ready, running what `help`
/// finds to run between polls (the ops this thread would run only after
/// its body, or its pool's queue on a worker: see
/// [`OpHandle::blocking_wait`]), and parking when there is nothing.
pub(crate) fn block_helping<T>(
    mut poll: impl FnMut(&mut Context<'_>) -> Poll<T>,
    help: impl Fn() -> Help,
) -> T {
    let waker = crate::sync::block_on::unpark_waker();
    let mut cx = Context::from_waker(&waker);
    loop {
        if let Poll::Ready(value) = poll(&mut cx) {
            return value;
        }
        match help() {
            Help::Ran => {}
            Help::Later => std::thread::park_timeout(HELP_PARK),
            Help::Nothing => std::thread::park(),
        }
    }
}

/// How long a worker blocked on a handle sleeps before it looks at its
/// pool's queue again (nobody wakes it for new work there).
const HELP_PARK: std::time::Duration = std::time::Duration::from_micros(200);

impl<R: Send + 'static> Future for OpHandle<R> {
    type Output = Result<R, Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let inner = &mut self.get_mut().inner;
        match inner {
            Inner::Pushed(slot) => {
                let result = slot.poll_result(cx);
                if result.is_pending() {
                    release_held(slot.header());
                    return result;
                }
                // A failure handed over here is one the caller has seen: a
                // shutdown does not report it again.
                if let Poll::Ready(Err(err)) = &result {
                    err.mark_seen();
                }
                // The record, and with it the vars it may hold last, goes
                // now: a handle that returned its result holds nothing.
                let name = slot.header().meta.name.clone();
                if let Inner::Pushed(slot) = std::mem::replace(inner, Inner::Done(name)) {
                    let_go(slot);
                }
                result
            }
            Inner::Refused(err) => {
                Poll::Ready(Err(err.take().expect("op handle polled after it returned its result")))
            }
            Inner::Done(_) => panic!("op handle polled after it returned its result"),
        }
    }
}

impl<R: 'static> Drop for OpHandle<R> {
    fn drop(&mut self) {
        if let Inner::Pushed(slot) = std::mem::replace(&mut self.inner, Inner::Refused(None)) {
            if slot.header().meta.handle == HandleKind::CancelOnDrop && !slot.is_complete() {
                abort(&slot, "its handle was dropped before it started");
            }
            let_go(slot);
        }
    }
}

/// Resolves the op of `slot` as cancelled if it has not started, leaving
/// no trace on its vars (see [`OpHandle::abort`]).
fn abort<R: 'static>(slot: &SlotRef<R>, reason: &'static str) -> bool {
    let op = slot.header().meta.name.clone();
    slot.task().resolve_early(Error::new(Kind::Cancelled { op, reason }), false)
}

/// Drops a handle's reference to its record. If it is the last one, the
/// record's vars may be the last references to their data, whose user
/// destructors then run here: a panic of theirs is logged and contained,
/// as wherever else the engine drops user values, so that it neither
/// takes the op's result with it nor unwinds into the caller.
fn let_go<R: 'static>(slot: SlotRef<R>) {
    if let Err(payload) = catch_unwind(AssertUnwindSafe(move || drop(slot))) {
        tracing::error!(target: "depengine", "a panic escaped a destructor run by an op's handle: {}", panic_message(&*payload));
    }
}

/// A wait on a nested op: its parent may be held back (see `op/engine_core.rs`).
fn release_held(header: &Header) {
    if header.meta.nested() {
        header.engine.wait(Wait::OnNested);
    }
}

impl<R: 'static> fmt::Debug for OpHandle<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.inner {
            Inner::Pushed(slot) => f.debug_tuple("OpHandle").field(&slot.header().meta.name).finish(),
            Inner::Refused(err) => f.debug_tuple("OpHandle").field(err).finish(),
            Inner::Done(name) => f.debug_tuple("OpHandle").field(name).finish(),
        }
    }
}
