//! Vars as async gates: `var.read().await`, `var.write().await` and
//! `engine.acquire()...push().await`, ordered with ops by call time.
//!
//! An acquire is an op whose body hands its guards to the waiting future
//! instead of running user code; it completes when those guards drop.

use std::fmt;
use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use super::shared::{Body, OpOptions, Role, Shared};
use crate::device::Lane;
use crate::error::{Error, Kind, panic_message, refuse_in_runtime};
use crate::op::access::{Append, AsVar, Decls, Item, OpToken, Reading, Writing, var_of};
use crate::op::job::{Job, Running};
use crate::sync::{Mutex, lock};
use crate::var::{ReadGuard, Var, WriteGuard};

/// Builds a multi-var acquire: `engine.acquire().read(&x).write(&y).push()`.
///
/// Created by [`Engine::acquire`](crate::Engine::acquire). The guards come
/// back as one tuple, in call order. Nothing is appended to any var until
/// [`push`](Self::push), which appends to all of them at once.
///
/// # Examples
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> depengine::Result<()> {
/// let engine = depengine::Engine::new();
/// let (x, s) = (engine.var(vec![1.0f32, 2.0]), engine.var(0.0f32));
/// let (x_guard, mut s_guard) = engine.acquire().read(&x).write(&s).push().await?;
/// *s_guard = x_guard.iter().sum();
/// drop((x_guard, s_guard));
/// assert_eq!(*s.read().await?, 3.0);
/// # Ok(()) }
/// ```
#[must_use = "nothing is acquired until push is called"]
pub struct AcquireBuilder<'e, L = ()> {
    shared: &'e Arc<Shared>,
    items: L,
}

impl<'e> AcquireBuilder<'e> {
    pub(crate) fn new(shared: &'e Arc<Shared>) -> Self {
        Self { shared, items: () }
    }
}

impl<'e, L> AcquireBuilder<'e, L> {
    /// Adds shared access to `var` (a [`Var`] or a scope's var).
    ///
    /// # Examples
    ///
    /// ```
    /// let engine = depengine::Engine::new();
    /// let (a, b) = (engine.var(1), engine.var(2));
    /// let (a, b) = engine.acquire().read(&a).read(&b).push().blocking_wait()?;
    /// assert_eq!(*a + *b, 3);
    /// # Ok::<(), depengine::Error>(())
    /// ```
    pub fn read<V: AsVar>(self, var: &V) -> AcquireBuilder<'e, L::Output>
    where
        L: Append<Reading<Var<V::Data>>>,
    {
        AcquireBuilder { shared: self.shared, items: self.items.append(Reading(var_of(var).clone())) }
    }

    /// Adds exclusive access to `var` (a [`Var`] or a scope's var).
    ///
    /// # Examples
    ///
    /// ```
    /// let engine = depengine::Engine::new();
    /// let (from, to) = (engine.var(10), engine.var(0));
    /// let (mut from_g, mut to_g) = engine.acquire().write(&from).write(&to).push().blocking_wait()?;
    /// (*from_g, *to_g) = (*from_g - 4, *to_g + 4); // a transfer, atomic to every op
    /// drop((from_g, to_g));
    /// assert_eq!(*to.read().blocking_wait()?, 4);
    /// # Ok::<(), depengine::Error>(())
    /// ```
    pub fn write<V: AsVar>(self, var: &V) -> AcquireBuilder<'e, L::Output>
    where
        L: Append<Writing<Var<V::Data>>>,
    {
        AcquireBuilder { shared: self.shared, items: self.items.append(Writing(var_of(var).clone())) }
    }

    /// Adds shared access to each var of a list: one `Vec` of guards.
    ///
    /// # Examples
    ///
    /// ```
    /// let engine = depengine::Engine::new();
    /// let parts: Vec<_> = (1..=3).map(|i| engine.var(i)).collect();
    /// let (guards,) = engine.acquire().read_all(&parts).push().blocking_wait()?;
    /// assert_eq!(guards.iter().map(|g| **g).sum::<i32>(), 6);
    /// # Ok::<(), depengine::Error>(())
    /// ```
    pub fn read_all<'v, V, I>(self, vars: I) -> AcquireBuilder<'e, L::Output>
    where
        V: AsVar + 'v,
        I: IntoIterator<Item = &'v V>,
        L: Append<Reading<Vec<Var<V::Data>>>>,
    {
        let item = Reading(vars.into_iter().map(|v| var_of(v).clone()).collect());
        AcquireBuilder { shared: self.shared, items: self.items.append(item) }
    }

    /// Adds exclusive access to each var of a list: one `Vec` of guards.
    ///
    /// # Examples
    ///
    /// ```
    /// let engine = depengine::Engine::new();
    /// let parts: Vec<_> = (0..3).map(|_| engine.var(0)).collect();
    /// let (mut guards,) = engine.acquire().write_all(&parts).push().blocking_wait()?;
    /// guards.iter_mut().for_each(|g| **g = 9);
    /// drop(guards);
    /// assert_eq!(*parts[2].read().blocking_wait()?, 9);
    /// # Ok::<(), depengine::Error>(())
    /// ```
    pub fn write_all<'v, V, I>(self, vars: I) -> AcquireBuilder<'e, L::Output>
    where
        V: AsVar + 'v,
        I: IntoIterator<Item = &'v V>,
        L: Append<Writing<Vec<Var<V::Data>>>>,
    {
        let item = Writing(vars.into_iter().map(|v| var_of(v).clone()).collect());
        AcquireBuilder { shared: self.shared, items: self.items.append(item) }
    }
}

impl<L: Item> AcquireBuilder<'_, L> {
    /// Appends the acquire to all its vars now, in push order with every op,
    /// and returns the future of its guards.
    ///
    /// # Examples
    ///
    /// ```
    /// let engine = depengine::Engine::new();
    /// let v = engine.var(0);
    /// let pending = engine.acquire().write(&v).push(); // in v's queue from here
    /// let later = engine.op("after").read(&v).run(|(v,), ()| Ok(*v));
    /// let (mut g,) = pending.blocking_wait()?;
    /// *g = 1;
    /// drop(g);
    /// assert_eq!(later.blocking_wait()?, 1);
    /// # Ok::<(), depengine::Error>(())
    /// ```
    pub fn push(self) -> Acquire<L::Guard> {
        push(self.shared, self.items)
    }
}

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
        push(&owner(self), Reading(self.clone()))
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
        push(&owner(self), Writing(self.clone()))
    }
}

/// The engine `var` belongs to.
fn owner<T: Send + Sync + 'static>(var: &Var<T>) -> Arc<Shared> {
    var.owner().clone().downcast().expect("a var's owner is its engine")
}

/// Pushes an acquire of `item`.
pub(super) fn push<I: Item>(shared: &Arc<Shared>, item: I) -> Acquire<I::Guard> {
    let slot = Arc::new(AcquireSlot { state: Mutex::new(Default::default()) });
    let mut decls = Decls(crate::op::DepList::new());
    item.declare(&mut decls);
    let mut opts = OpOptions::new("acquire".into());
    opts.lane = Lane::Inline;
    let job = AcquireJob { item, slot: slot.clone() };
    match shared.push_detached_as(Role::Acquire, opts, decls.0, job, Body::Hands) {
        Ok(()) => Acquire { slot: Some(slot), refused: None },
        Err(err) => Acquire { slot: None, refused: Some(err) },
    }
}

struct AcquireSlot<G> {
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
    /// Hands the guards (or the error) to the future, or drops them if the
    /// future is gone.
    fn deliver(&self, value: Result<G, Error>) {
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

struct AcquireJob<I: Item> {
    item: I,
    slot: Arc<AcquireSlot<I::Guard>>,
}

impl<I: Item> Job for AcquireJob<I> {
    type Output = ();

    fn start(self, op: Running<'_, ()>) {
        let item = self.item;
        match catch_unwind(AssertUnwindSafe(|| item.guard(OpToken(op.task)))) {
            Ok(guards) => {
                self.slot.deliver(Ok(guards));
                op.store(Ok(()));
            }
            Err(payload) => {
                let err = Error::new(Kind::Panicked {
                    op: op.header().meta.name.clone(),
                    message: panic_message(&*payload),
                });
                self.slot.deliver(Err(err.clone()));
                op.store(Err(err));
            }
        }
    }

    fn vetoed(self, err: &Error) {
        self.slot.deliver(Err(err.clone()));
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

impl<G: Send + 'static> Acquire<G> {
    /// Blocks the current thread until the guards are granted.
    ///
    /// # Errors
    ///
    /// As for awaiting it, and [`Error::is_blocking_in_runtime`] inside a
    /// Tokio runtime.
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
        refuse_in_runtime("Acquire::blocking_wait")?;
        futures::executor::block_on(self)
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

impl<L> fmt::Debug for AcquireBuilder<'_, L> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AcquireBuilder").finish_non_exhaustive()
    }
}
