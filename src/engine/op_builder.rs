//! The typed op builder: `engine.op(name).read(&x).write(&y).run(body)`.

use std::borrow::Cow;
use std::future::Future;
use std::marker::PhantomData;
use std::sync::Arc;

use tokio::sync::OwnedSemaphorePermit;

use super::shared::{Body, OpOptions, Role, Shared};

use super::OpHandle;
use crate::error::{BoxError, Error, Kind};
use crate::op::Decl;
use crate::op::DepList;
use crate::op::GroupCore;
use crate::op::access::{Append, AsVar, Decls, Item, Reading, Writing, held_of};
use crate::op::job::{AsyncJob, FutureJob, Job, SyncJob};
use crate::op::slot::Completion;
use crate::var::{Access, AnyVar};

/// Builds an op: what it reads and writes, where it runs, then its body.
///
/// Created by [`Engine::op`](crate::Engine::op). Each [`read`](Self::read)
/// or [`write`](Self::write) adds one guard to the tuple the body receives,
/// in call order; [`read_all`](Self::read_all) and
/// [`write_all`](Self::write_all) add one `Vec` of guards for a list known
/// only at run time. The op is pushed, atomically on all its vars, when a
/// `run*`/`spawn` method is called.
///
/// # Examples
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> depengine::Result<()> {
/// use depengine::Engine;
/// let engine = Engine::new();
/// let parts: Vec<_> = (1..=4u64).map(|i| engine.var(i)).collect();
/// let sum = engine.var(0u64);
/// engine
///     .op("sum")
///     .read_all(&parts)
///     .write(&sum)
///     .run(|(parts,), (mut sum,)| {
///         *sum = parts.iter().map(|p| **p).sum();
///         Ok(())
///     })
///     .await?;
/// assert_eq!(*sum.read().await?, 10);
/// # Ok(()) }
/// ```
#[must_use = "an op is pushed only when one of its run or spawn methods is called"]
pub struct OpBuilder<'e, Rd = (), Wr = (), G = ()> {
    shared: &'e Arc<Shared>,
    opts: OpOptions,
    reads: Rd,
    writes: Wr,
    untyped: DepList,
    /// The room of a [`Reservation`](super::Reservation), until the push
    /// uses it (dropped unused, it goes back).
    reserved: Option<OwnedSemaphorePermit>,
    /// The group the op joins: `()` (none, and nothing to carry), or
    /// [`InGroup`] after [`group`](Self::group), whose push goes out of
    /// line. A type, not a field's value, so that the common push carries
    /// nothing of groups.
    pub(super) group: G,
}

impl<'e> OpBuilder<'e> {
    #[inline]
    pub(crate) fn new(shared: &'e Arc<Shared>, name: Cow<'static, str>) -> Self {
        Self {
            shared,
            opts: OpOptions::new(name),
            reads: (),
            writes: (),
            untyped: DepList::new(),
            reserved: None,
            group: (),
        }
    }
}

impl<'e> OpBuilder<'e> {
    /// A builder whose push uses the room a reservation holds.
    pub(super) fn reserved(
        shared: &'e Arc<Shared>,
        name: Cow<'static, str>,
        reserved: Option<OwnedSemaphorePermit>,
    ) -> Self {
        let opts = OpOptions::new(name);
        OpBuilder { shared, opts, reads: (), writes: (), untyped: DepList::new(), reserved, group: () }
    }
}

impl<'e, Rd, Wr, G> OpBuilder<'e, Rd, Wr, G> {
    /// Declares a read of `var` (a [`Var`](crate::Var) or a scope's var): the body
    /// receives a [`ReadGuard`](crate::ReadGuard).
    ///
    /// # Examples
    ///
    /// ```
    /// let engine = depengine::Engine::new();
    /// let (a, b) = (engine.var(2), engine.var(3));
    /// let product = engine.op("mul").read(&a).read(&b).run(|(a, b), ()| Ok(*a * *b));
    /// assert_eq!(product.blocking_wait()?, 6);
    /// # Ok::<(), depengine::Error>(())
    /// ```
    pub fn read<V: AsVar>(self, var: &V) -> OpBuilder<'e, Rd::Output, Wr, G>
    where
        Rd: Append<Reading<V::Held>>,
    {
        let Self { shared, opts, reads, writes, untyped, reserved, group } = self;
        OpBuilder {
            shared,
            opts,
            reads: reads.append(Reading(held_of(var))),
            writes,
            untyped,
            reserved,
            group,
        }
    }

    /// Declares a read of each var: the body receives a `Vec` of guards.
    ///
    /// # Examples
    ///
    /// ```
    /// let engine = depengine::Engine::new();
    /// let parts: Vec<_> = (1..=4).map(|i| engine.var(i)).collect();
    /// let total = engine.op("sum").read_all(&parts).run(|(parts,), ()| Ok(parts.iter().map(|p| **p).sum::<i32>()));
    /// assert_eq!(total.blocking_wait()?, 10);
    /// # Ok::<(), depengine::Error>(())
    /// ```
    pub fn read_all<'v, V, I>(self, vars: I) -> OpBuilder<'e, Rd::Output, Wr, G>
    where
        V: AsVar + 'v,
        I: IntoIterator<Item = &'v V>,
        Rd: Append<Reading<Vec<V::Held>>>,
    {
        let Self { shared, opts, reads, writes, untyped, reserved, group } = self;
        let reads = reads.append(Reading(vars.into_iter().map(held_of).collect()));
        OpBuilder { shared, opts, reads, writes, untyped, reserved, group }
    }

    /// Declares a write of `var` (a [`Var`](crate::Var) or a scope's var): the body
    /// receives a [`WriteGuard`](crate::WriteGuard).
    ///
    /// # Examples
    ///
    /// ```
    /// let engine = depengine::Engine::new();
    /// let (src, dst) = (engine.var(vec![1, 2, 3]), engine.var(Vec::new()));
    /// engine.op("copy").read(&src).write(&dst).run(|(src,), (mut dst,)| {
    ///     dst.clone_from(&src);
    ///     Ok(())
    /// });
    /// assert_eq!(*dst.read().blocking_wait()?, vec![1, 2, 3]);
    /// # Ok::<(), depengine::Error>(())
    /// ```
    pub fn write<V: AsVar>(self, var: &V) -> OpBuilder<'e, Rd, Wr::Output, G>
    where
        Wr: Append<Writing<V::Held>>,
    {
        let Self { shared, opts, reads, writes, untyped, reserved, group } = self;
        OpBuilder {
            shared,
            opts,
            reads,
            writes: writes.append(Writing(held_of(var))),
            untyped,
            reserved,
            group,
        }
    }

    /// Declares a write of each var: the body receives a `Vec` of guards.
    ///
    /// # Examples
    ///
    /// ```
    /// let engine = depengine::Engine::new();
    /// let shards: Vec<_> = (0..4).map(|_| engine.var(0u32)).collect();
    /// engine.op("reset").write_all(&shards).run(|(), (mut shards,)| {
    ///     shards.iter_mut().enumerate().for_each(|(i, s)| **s = i as u32);
    ///     Ok(())
    /// });
    /// assert_eq!(*shards[3].read().blocking_wait()?, 3);
    /// # Ok::<(), depengine::Error>(())
    /// ```
    pub fn write_all<'v, V, I>(self, vars: I) -> OpBuilder<'e, Rd, Wr::Output, G>
    where
        V: AsVar + 'v,
        I: IntoIterator<Item = &'v V>,
        Wr: Append<Writing<Vec<V::Held>>>,
    {
        let Self { shared, opts, reads, writes, untyped, reserved, group } = self;
        let writes = writes.append(Writing(vars.into_iter().map(held_of).collect()));
        OpBuilder { shared, opts, reads, writes, untyped, reserved, group }
    }

    /// Declares a read of a var without receiving its data (a dependency
    /// only, as for MXNet's tags).
    ///
    /// # Examples
    ///
    /// ```
    /// let engine = depengine::Engine::new();
    /// let file = engine.var(()).any(); // stands for state the engine does not hold
    /// let wrote = engine.op("append").write_any(&file).run(|(), ()| Ok(()));
    /// let read = engine.op("scan").read_any(&file).run(|(), ()| Ok("after the append"));
    /// wrote.blocking_wait()?;
    /// assert_eq!(read.blocking_wait()?, "after the append");
    /// # Ok::<(), depengine::Error>(())
    /// ```
    pub fn read_any(mut self, var: &AnyVar) -> Self {
        self.untyped.push(Decl { var: var.clone(), access: Access::Read, typed: false });
        self
    }

    /// Declares a write of a var without receiving its data.
    ///
    /// # Examples
    ///
    /// ```
    /// let engine = depengine::Engine::new();
    /// let (a, b) = (engine.var(1u8), engine.var(2u16));
    /// // One op over vars of different types, their data not needed.
    /// let done = engine.op("barrier").write_any(&a.any()).write_any(&b.any()).run(|(), ()| Ok(()));
    /// done.blocking_wait()?;
    /// assert_eq!((a.version(), b.version()), (1, 1));
    /// # Ok::<(), depengine::Error>(())
    /// ```
    pub fn write_any(mut self, var: &AnyVar) -> Self {
        self.untyped.push(Decl { var: var.clone(), access: Access::Write, typed: false });
        self
    }
}

impl<'e, Rd: Item, Wr: Item, G: GroupSlot> OpBuilder<'e, Rd, Wr, G> {
    /// Pushes the op with a body run to completion on a worker of its lane.
    ///
    /// A refused push (closed engine, deleted var, invalid arguments)
    /// returns a handle that resolves at once to that error;
    /// [`OpHandle::pushed`] gives it here instead. So do the other ways
    /// to push.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> depengine::Result<()> {
    /// let engine = depengine::Engine::new();
    /// let (x, y) = (engine.var(vec![1.0f32, 2.0, 3.0]), engine.var(0.0f32));
    /// let norm = engine.op("norm").read(&x).write(&y).run(|(x,), (mut y,)| {
    ///     *y = x.iter().map(|v| v * v).sum::<f32>().sqrt();
    ///     Ok(*y)
    /// });
    /// assert!((norm.await? - 14f32.sqrt()).abs() < 1e-6);
    /// # Ok(()) }
    /// ```
    pub fn run<R, F>(self, body: F) -> OpHandle<R>
    where
        F: FnOnce(Rd::Guard, Wr::Guard) -> Result<R, BoxError> + Send + 'static,
        R: Send + 'static,
    {
        self.push(|reads, writes, _| Ok(SyncJob { reads, writes, body }), Body::Sync)
    }

    /// Pushes the op with a body run to completion on a worker of its lane,
    /// and no handle: the fire-and-forget push of MXNet's `PushSync`.
    ///
    /// Cheaper than [`run`](Self::run) with its handle dropped: no
    /// reference to the op is taken for a handle, and none is dropped with
    /// it. The op's outcome is not lost: an error it returns, or a panic, is
    /// stored on the vars it writes (skipping the ops that use them after
    /// it) and is reported by [`Engine::wait_for_all`](crate::Engine::wait_for_all).
    ///
    /// # Errors
    ///
    /// A refused push (see [`OpHandle::pushed`]).
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> depengine::Result<()> {
    /// let engine = depengine::Engine::new();
    /// let total = engine.var(0u64);
    /// for i in 1..=10u64 {
    ///     engine.op("add").write(&total).run_detached(move |(), (mut t,)| {
    ///         *t += i;
    ///         Ok(())
    ///     })?;
    /// }
    /// engine.wait_for_all().blocking_wait()?;
    /// assert_eq!(*futures::executor::block_on(total.read())?, 55);
    /// # Ok(()) }
    /// ```
    pub fn run_detached<F>(self, body: F) -> Result<(), Error>
    where
        F: FnOnce(Rd::Guard, Wr::Guard) -> Result<(), BoxError> + Send + 'static,
    {
        let (shared, opts, decls, reads, writes, group) = self.declared();
        let job = SyncJob { reads, writes, body };
        match group.in_group() {
            None => shared.push(opts, Role::User, decls, job, Body::Sync, true).map(drop),
            Some(InGroup(group)) => shared.push_grouped(opts, decls, job, Body::Sync, true, group).map(drop),
        }
    }

    /// Pushes an async op: the body receives a [`Completion`] and the op
    /// completes when it is signalled (from any thread, any time) and the
    /// guards are dropped.
    ///
    /// # Examples
    ///
    /// ```
    /// let engine = depengine::Engine::new();
    /// let v = engine.var(20);
    /// let h = engine.op("callback").read(&v).run_async(|(v,), (), done| {
    ///     let value = *v * 2 + 2;
    ///     // Signalled from another thread, once its work is done.
    ///     std::thread::spawn(move || { drop(v); done.succeed(value) });
    /// });
    /// assert_eq!(h.blocking_wait()?, 42);
    /// # Ok::<(), depengine::Error>(())
    /// ```
    pub fn run_async<R, F>(self, body: F) -> OpHandle<R>
    where
        F: FnOnce(Rd::Guard, Wr::Guard, Completion<R>) + Send + 'static,
        R: Send + 'static,
    {
        let output = PhantomData;
        self.push(|reads, writes, _| Ok(AsyncJob { reads, writes, body, output }), Body::Async)
    }

    /// Pushes a future op: once its vars are free, `body` is called with the
    /// guards and the future it returns runs on the engine's Tokio runtime.
    /// The op completes when the future resolves and the guards are dropped.
    /// An engine without a Tokio runtime refuses it
    /// ([`Error::is_no_runtime`]).
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> depengine::Result<()> {
    /// let engine = depengine::Engine::new(); // built inside a runtime: spawns there
    /// let cache = engine.var(String::new());
    /// let fetched = engine.op("fetch").write(&cache).spawn(|(), (mut cache,)| async move {
    ///     tokio::task::yield_now().await; // a request elsewhere, say
    ///     *cache = "fresh".to_owned();
    ///     Ok(cache.len())
    /// });
    /// assert_eq!(fetched.await?, 5);
    /// # Ok(()) }
    /// ```
    pub fn spawn<R, F, Fut>(self, body: F) -> OpHandle<R>
    where
        F: FnOnce(Rd::Guard, Wr::Guard) -> Fut + Send + 'static,
        Fut: Future<Output = Result<R, BoxError>> + Send + 'static,
        R: Send + 'static,
    {
        self.push(
            |reads, writes, shared| {
                let runtime = shared.runtime().ok_or_else(|| Error::new(Kind::NoRuntime))?;
                Ok(FutureJob { reads, writes, body, runtime })
            },
            Body::Hands,
        )
    }

    /// Pushes the op with the job `make` makes; a refusal is the handle's.
    fn push<J: Job>(
        self,
        make: impl FnOnce(Rd, Wr, &Shared) -> Result<J, Error>,
        body: Body,
    ) -> OpHandle<J::Output> {
        let (shared, opts, decls, reads, writes, group) = self.declared();
        let job = match make(reads, writes, shared) {
            Ok(job) => job,
            Err(err) => {
                if opts.has(OpOptions::RESERVED) {
                    shared.give_slot();
                }
                return OpHandle::refused(err);
            }
        };
        OpHandle::of_push(match group.in_group() {
            None => shared.push(opts, Role::User, decls, job, body, false),
            Some(InGroup(group)) => shared.push_grouped(opts, decls, job, body, false, group),
        })
    }

    /// The builder's parts, with every declaration collected. Inlined into
    /// every push, the reservation's case out of line: the common push has
    /// none.
    #[inline(always)]
    fn declared(self) -> (&'e Arc<Shared>, OpOptions, DepList, Rd, Wr, G) {
        let Self { shared, mut opts, reads, writes, untyped, reserved, group } = self;
        let mut decls = Decls(untyped);
        reads.declare(&mut decls);
        writes.declare(&mut decls);
        if let Some(room) = reserved {
            use_room(room, &mut opts);
        }
        (shared, opts, decls.0, reads, writes, group)
    }
}

/// The push that follows holds the reserved slot from now: a refused one
/// gives it back.
#[cold]
fn use_room(room: OwnedSemaphorePermit, opts: &mut OpOptions) {
    room.forget();
    opts.set(OpOptions::RESERVED, true);
}

/// Whether an op builder's op joins a group: `()` for none (the default),
/// [`InGroup`] after [`OpBuilder::group`], `Option<InGroup>` after
/// [`OpBuilder::group_opt`]. Implemented by those three only.
pub trait GroupSlot {
    #[doc(hidden)]
    fn in_group(self) -> Option<InGroup>;
}

impl GroupSlot for () {
    #[inline(always)]
    fn in_group(self) -> Option<InGroup> {
        None
    }
}

/// The group an op builder's op joins (see [`OpBuilder::group`]).
#[derive(Debug)]
pub struct InGroup(pub(super) Arc<GroupCore>);

impl GroupSlot for InGroup {
    #[inline]
    fn in_group(self) -> Option<InGroup> {
        Some(self)
    }
}

/// A group or none, decided at run time ([`OpBuilder::group_opt`]).
impl GroupSlot for Option<InGroup> {
    #[inline]
    fn in_group(self) -> Option<InGroup> {
        self
    }
}

impl<Rd, Wr, G> std::fmt::Debug for OpBuilder<'_, Rd, Wr, G> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpBuilder").field("options", &self.opts).finish_non_exhaustive()
    }
}

mod policy;
mod run_gpu;
