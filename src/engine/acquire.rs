//! Vars as async gates: `engine.acquire()...push().await`, and the engine's
//! side of `var.read().await` and `var.write().await` (`var/acquire.rs`),
//! ordered with ops by call time.
//!
//! An acquire is an op whose body hands its guards to the waiting future
//! instead of running user code; it completes when those guards drop.

use std::fmt;
use std::sync::Arc;

use super::shared::{Body, OpOptions, Role, Shared};
use crate::device::Lane;
use crate::error::Error;
use crate::op::Decl;
use crate::op::LiveRef;
use crate::op::access::{Append, AsVar, Decls, Item, OpToken, Reading, Writing, held_of};
use crate::op::job::{Job, Running};
use crate::var::{Acquire, AcquireSlot, Acquirer, OneAcquire};

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
    /// Adds shared access to `var` (a [`Var`](crate::Var) or a scope's var).
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
        L: Append<Reading<V::Held>>,
    {
        AcquireBuilder { shared: self.shared, items: self.items.append(Reading(held_of(var))) }
    }

    /// Adds exclusive access to `var` (a [`Var`](crate::Var) or a scope's var).
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
        L: Append<Writing<V::Held>>,
    {
        AcquireBuilder { shared: self.shared, items: self.items.append(Writing(held_of(var))) }
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
        L: Append<Reading<Vec<V::Held>>>,
    {
        let item = Reading(vars.into_iter().map(held_of).collect());
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
        L: Append<Writing<Vec<V::Held>>>,
    {
        let item = Writing(vars.into_iter().map(held_of).collect());
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

/// Pushes an acquire of `item`.
pub(super) fn push<I: Item>(shared: &Arc<Shared>, item: I) -> Acquire<I::Guard> {
    let slot = AcquireSlot::new();
    let mut decls = Decls(crate::op::DepList::new());
    item.declare(&mut decls);
    let job = AcquireJob { item, slot: slot.clone() };
    match shared.push(options(), Role::Acquire, decls.0, job, Body::Hands, true) {
        Ok(_) => Acquire::pending(slot),
        Err(err) => Acquire::refused(err),
    }
}

/// An acquire's options: it runs where its var lets it through.
fn options() -> OpOptions {
    let mut opts = OpOptions::new("acquire".into());
    opts.lane = Lane::Inline;
    opts
}

/// A var's own acquire (`Var::read`, `Var::write`), pushed on the engine
/// that made the var.
impl Acquirer for Shared {
    fn push_acquire(self: Arc<Self>, one: Box<dyn OneAcquire>) -> Result<(), Error> {
        let mut decls = crate::op::DepList::new();
        decls.push(Decl { var: one.var(), access: one.access(), typed: true });
        self.push(options(), Role::Acquire, decls, OneJob(one), Body::Hands, true).map(drop)
    }
}

struct OneJob(Box<dyn OneAcquire>);

impl Job for OneJob {
    type Output = ();

    fn start(self, op: Running<'_, ()>) {
        op.store(self.0.grant(LiveRef::new(op.task)));
    }

    fn vetoed(self, err: &Error) {
        self.0.refuse(err);
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
        op.store(self.slot.fill(|| item.guard(OpToken(op.task))));
    }

    fn vetoed(self, err: &Error) {
        self.slot.deliver(Err(err.clone()));
    }
}

impl<L> fmt::Debug for AcquireBuilder<'_, L> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AcquireBuilder").finish_non_exhaustive()
    }
}
