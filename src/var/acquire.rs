//! A var's own acquires, [`Var::read`] and [`Var::write`], and the future
//! every acquire resolves through ([`Acquire`]). The push goes up to the
//! engine that made the var through [`Acquirer`], which the engine layer
//! implements; its multi-var acquires (`engine.acquire()`) resolve through
//! the same future.

use std::fmt;
use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use super::gate::Access;
use super::guard::{ReadGuard, WriteGuard};
use super::handle::{AnyVar, OneAcquire, Var};
use crate::error::Error;
use crate::may_block::{Instead, refuse_blocking};
use crate::op::LiveRef;
use crate::sync::{Mutex, lock};

impl<T: Send + Sync + 'static> Var<T> {
    /// Waits, in push order, for shared access: resolves once every write
    /// pushed before this call has completed.
    ///
    /// The read is appended to the var when `read` is called, not when the
    /// future is first polled. Dropping the future gives up the access.
    ///
    /// # Errors
    ///
    /// The future resolves to an error if the var carries one from a failed
    /// write ([`Error::is_skipped`](crate::Error::is_skipped)), was deleted, or
    /// the engine is shut down.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a dropped future releases its place in the var's queue.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> depengine::Result<()> {
    /// let engine = depengine::Engine::new();
    /// let v = engine.var(vec![1, 2, 3]);
    /// engine.op("push").write(&v).run(|(), (mut v,)| { v.push(4); Ok(()) });
    /// assert_eq!(v.read().await?.len(), 4); // after the write pushed before it
    /// # Ok(()) }
    /// ```
    pub fn read(&self) -> Acquire<ReadGuard<T>> {
        one(self, Access::Read, Var::into_read_guard)
    }

    /// Waits, in push order, for exclusive access: resolves once every op
    /// pushed on this var before this call has completed. See [`read`](Var::read).
    ///
    /// # Errors
    ///
    /// As for [`read`](Var::read).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`read`](Var::read).
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> depengine::Result<()> {
    /// let engine = depengine::Engine::new();
    /// let config = engine.var(String::from("v1"));
    /// *config.write().await? = String::from("v2");
    /// let seen = engine.op("use").read(&config).run(|(c,), ()| Ok(c.clone()));
    /// assert_eq!(seen.await?, "v2");
    /// # Ok(()) }
    /// ```
    pub fn write(&self) -> Acquire<WriteGuard<T>> {
        one(self, Access::Write, Var::into_write_guard)
    }
}

/// Pushes an acquire of `var` on its own engine; `guard` makes its guard.
fn one<T, G>(var: &Var<T>, access: Access, guard: fn(Var<T>, LiveRef) -> G) -> Acquire<G>
where
    T: Send + Sync + 'static,
    G: Send + 'static,
{
    let slot = AcquireSlot::new();
    let one = Box::new(One { var: var.clone(), access, slot: slot.clone(), guard });
    match var.owner().clone().push_acquire(one) {
        Ok(()) => Acquire::pending(slot),
        Err(err) => Acquire::refused(err),
    }
}

struct One<T, G> {
    var: Var<T>,
    access: Access,
    slot: Arc<AcquireSlot<G>>,
    guard: fn(Var<T>, LiveRef) -> G,
}

impl<T: Send + Sync + 'static, G: Send + 'static> OneAcquire for One<T, G> {
    fn var(&self) -> AnyVar {
        self.var.any()
    }

    fn access(&self) -> Access {
        self.access
    }

    fn grant(self: Box<Self>, live: LiveRef) -> Result<(), Error> {
        let Self { var, slot, guard, .. } = *self;
        slot.fill(|| guard(var, live))
    }

    fn refuse(self: Box<Self>, err: &Error) {
        self.slot.deliver(Err(err.clone()));
    }
}

/// Where an acquire's guards (or its error) wait for its future.
pub(crate) struct AcquireSlot<G> {
    state: Mutex<SlotState<G>>,
}

struct SlotState<G> {
    value: Option<Result<G, Error>>,
    waker: Option<Waker>,
    abandoned: bool,
}

impl<G> Default for SlotState<G> {
    fn default() -> Self {
        Self { value: None, waker: None, abandoned: false }
    }
}

impl<G> AcquireSlot<G> {
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(Self { state: Mutex::new(SlotState::default()) })
    }

    /// Hands the guards (or the error) to the future, or drops them if the
    /// future is gone.
    /// Makes the guards with `make` and hands them to the future. A panic
    /// making them (the gate broken) fails the future and the acquire's op
    /// alike: the error is returned for the op to store.
    pub(crate) fn fill(&self, make: impl FnOnce() -> G) -> Result<(), Error> {
        match catch_unwind(AssertUnwindSafe(make)) {
            Ok(guards) => {
                self.deliver(Ok(guards));
                Ok(())
            }
            Err(payload) => {
                let err = Error::panicked("acquire".into(), payload);
                self.deliver(Err(err.clone()));
                Err(err)
            }
        }
    }

    pub(crate) fn deliver(&self, value: Result<G, Error>) {
        let mut state = lock(&self.state);
        if state.abandoned {
            drop(state);
            drop(value);
            return;
        }
        state.value = Some(value);
        let waker = state.waker.take();
        drop(state);
        if let Some(waker) = waker {
            waker.wake();
        }
    }
}

/// The future of an acquire's guards.
///
/// # Cancel safety
///
/// Cancel safe: dropping it before it resolves gives up its place; guards
/// already granted are released at once.
#[must_use = "an acquire holds its place in the vars' queues until awaited or dropped"]
pub struct Acquire<G> {
    slot: Option<Arc<AcquireSlot<G>>>,
    refused: Option<Error>,
}

impl<G> Acquire<G> {
    /// The future of the acquire pushed with `slot`.
    pub(crate) fn pending(slot: Arc<AcquireSlot<G>>) -> Self {
        Self { slot: Some(slot), refused: None }
    }

    /// The future of an acquire whose push was refused.
    pub(crate) fn refused(err: Error) -> Self {
        Self { slot: None, refused: Some(err) }
    }
}

impl<G: Send + 'static> Acquire<G> {
    /// Blocks the current thread until the guards are granted.
    ///
    /// # Errors
    ///
    /// As for awaiting it, and [`Error::is_blocking_in_runtime`] in an
    /// async task (`.await` it there; `spawn_blocking`, `block_in_place`
    /// and plain threads may block).
    ///
    /// # Examples
    ///
    /// ```
    /// let engine = depengine::Engine::new();
    /// let v = engine.var(5);
    /// let guard = v.read().blocking_wait()?; // outside any Tokio runtime
    /// assert_eq!(*guard, 5);
    /// # Ok::<(), depengine::Error>(())
    /// ```
    pub fn blocking_wait(self) -> Result<G, Error> {
        refuse_blocking("Acquire::blocking_wait", Instead::Await)?;
        crate::sync::block_on::block_on(self)
    }
}

impl<G> Future for Acquire<G> {
    type Output = Result<G, Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        if let Some(err) = this.refused.take() {
            return Poll::Ready(Err(err));
        }
        let slot = this.slot.as_ref().expect("acquire polled after it resolved");
        let mut state = lock(&slot.state);
        if let Some(value) = state.value.take() {
            drop(state);
            this.slot = None;
            return Poll::Ready(value);
        }
        state.waker = Some(cx.waker().clone());
        Poll::Pending
    }
}

impl<G> Drop for Acquire<G> {
    fn drop(&mut self) {
        if let Some(slot) = self.slot.take() {
            let value = {
                let mut state = lock(&slot.state);
                state.abandoned = true;
                state.value.take()
            };
            drop(value);
        }
    }
}

impl<G> fmt::Debug for Acquire<G> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Acquire").field("refused", &self.refused).finish_non_exhaustive()
    }
}
