//! The engine's public face: [`Engine`], its waits and its shutdown.

use std::borrow::Cow;
use std::fmt;
use std::sync::{Arc, Weak};

use super::OpHandle;
use super::acquire::AcquireBuilder;
use super::config::{Config, Settings};
use super::engine_builder::EngineBuilder;
use super::jobs::{DeleteJob, WaitJob};
use super::op_builder::OpBuilder;
use super::shared::{Body, OpOptions, Role, Shared};
use super::watchdog::Watchdog;
use crate::error::Error;
use crate::may_block::{Instead, refuse_blocking};
use crate::op::Decl;
use crate::op::DepList;
use crate::op::access::{AsVar, var_of};
use crate::op::job::{current_body_holds, inside_op_of};
use crate::var::{Access, Owner, Var};

/// Var ids are unique across engines: they order lock acquisition.
static NEXT_VAR_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

/// A dependency engine.
///
/// Cheap to clone: every clone is a handle to the same engine. When the
/// last handle is dropped the engine stops taking work, lets what was pushed
/// finish, then stops its threads; [`shutdown`](Engine::shutdown) does the
/// same and waits for it.
///
/// # Examples
///
/// ```
/// # #[tokio::main]
/// # async fn main() -> depengine::Result<()> {
/// use depengine::Engine;
///
/// let engine = Engine::new();
/// let x = engine.var(vec![1.0f32; 1024]);
/// let s = engine.var(0.0f32);
/// engine.op("sum").read(&x).write(&s).run(|(x,), (mut s,)| {
///     *s = x.iter().sum();
///     Ok(())
/// });
/// let total = engine.op("get").read(&s).run(|(s,), ()| Ok(*s)).await?;
/// assert_eq!(total, 1024.0);
/// engine.wait_for_all().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Engine {
    handle: Arc<EngineHandle>,
}

/// Closes the engine when the last `Engine` clone goes.
struct EngineHandle {
    shared: Arc<Shared>,
}

impl Engine {
    /// The most var declarations one op or acquire may make (each var of a
    /// `read_all`/`write_all` list counts, duplicates too): a push of more is
    /// refused with [`ErrorKind::InvalidArgument`](crate::ErrorKind).
    ///
    /// ```
    /// let engine = depengine::Engine::new();
    /// let v = engine.var(0u8);
    /// let many = vec![&v; depengine::Engine::MAX_DECLARATIONS + 1];
    /// let err = engine.op("wide").read_all(many).run(|_, ()| Ok(())).blocking_wait().unwrap_err();
    /// assert!(err.is_invalid_argument());
    /// ```
    pub const MAX_DECLARATIONS: usize = crate::op::MAX_DECLS;

    /// An engine with the default settings: a CPU pool as wide as the
    /// machine, and no `DEPENGINE_*` environment variable read (an engine a
    /// library makes for itself obeys nothing set for another program; an
    /// application that wants the deployment to tune it uses
    /// [`Engine::from_env`]).
    ///
    /// # Examples
    ///
    /// ```
    /// let engine = depengine::Engine::new();
    /// let v = engine.var(1u32);
    /// let doubled = engine.op("double").read(&v).run(|(v,), ()| Ok(*v * 2));
    /// assert_eq!(doubled.blocking_wait()?, 2);
    /// # Ok::<(), depengine::Error>(())
    /// ```
    pub fn new() -> Self {
        Self::builder().build().expect("the default configuration builds")
    }

    /// An engine configured from the environment: each setting from its
    /// `DEPENGINE_*` variable if set, else the default (what
    /// [`EngineBuilder::from_env`] builds). A variable whose value is
    /// invalid is reported (a `tracing` warning, target `depengine`) and
    /// ignored: its setting takes its default, where
    /// `EngineBuilder::from_env().build()` returns it as an error.
    ///
    /// # Panics
    ///
    /// Only if the watchdog that `DEPENGINE_WATCHDOG_MS` asks for cannot
    /// start its thread (the OS refuses one).
    ///
    /// # Examples
    ///
    /// ```
    /// // DEPENGINE_TYPE=naive, say, makes it the naive engine.
    /// let engine = depengine::Engine::from_env();
    /// let v = engine.var(1u32);
    /// assert_eq!(engine.op("double").read(&v).run(|(v,), ()| Ok(*v * 2)).blocking_wait()?, 2);
    /// # Ok::<(), depengine::Error>(())
    /// ```
    pub fn from_env() -> Self {
        EngineBuilder::from_env().build_leniently().expect("the default configuration builds")
    }

    /// A builder to configure an engine.
    ///
    /// # Examples
    ///
    /// ```
    /// use depengine::{Engine, EngineBuilder};
    /// let engine = Engine::builder().cpu_workers(2).max_in_flight(1_000).build()?;
    /// assert_eq!(engine.settings().cpu_workers, 2);
    /// assert!(EngineBuilder::MAX_WORKERS >= 2);
    /// # Ok::<(), depengine::Error>(())
    /// ```
    pub fn builder() -> EngineBuilder {
        EngineBuilder::default()
    }

    pub(super) fn from_config(
        config: Config,
        runtime: Option<tokio::runtime::Handle>,
    ) -> Result<Self, Error> {
        let watchdog = config.watchdog;
        let name = config.topology.thread_name.clone();
        let shared = Shared::new(config, runtime);
        if let Some(threshold) = watchdog {
            let dog = Watchdog::start(Arc::downgrade(&shared), threshold, &name)
                .map_err(|e| Error::pool_unavailable(&format!("{name}-watchdog"), &e))?;
            shared.watch(dog);
        }
        Ok(Self { handle: Arc::new(EngineHandle { shared }) })
    }

    pub(super) fn shared(&self) -> &Arc<Shared> {
        &self.handle.shared
    }

    /// The engine's settings, as built (each the builder's, else the
    /// environment's for a builder made by [`EngineBuilder::from_env`], else
    /// the default).
    ///
    /// # Examples
    ///
    /// ```
    /// let engine = depengine::Engine::builder().bulk_size(8).build()?;
    /// let settings = engine.settings();
    /// assert_eq!(settings.bulk_size, 8);
    /// assert_eq!(settings.max_in_flight, None);
    /// # Ok::<(), depengine::Error>(())
    /// ```
    pub fn settings(&self) -> Settings {
        let config = &self.shared().config;
        let topology = &config.topology;
        Settings {
            kind: config.kind,
            cpu_workers: topology.cpu_workers,
            spin: topology.spin,
            bulk_size: self.shared().bulk.size(),
            max_in_flight: self.shared().limit().map(|limit| limit.max()),
            throttle_at: config.throttle_at,
            gpu_workers: topology.gpu.workers,
            gpu_copy_workers: topology.gpu.copy_workers,
            simulated_gpus: topology.gpu.simulated,
            gpu_spin: topology.gpu.spin,
        }
    }

    /// Whether the engine has stopped taking work.
    ///
    /// # Examples
    ///
    /// ```
    /// use depengine::{Engine, ShutdownMode};
    /// let engine = Engine::new();
    /// assert!(!engine.is_closed());
    /// engine.blocking_shutdown(ShutdownMode::Drain)?;
    /// assert!(engine.is_closed());
    /// # Ok::<(), depengine::Error>(())
    /// ```
    pub fn is_closed(&self) -> bool {
        self.shared().tracker.is_closed()
    }

    /// A new var owning `value`.
    ///
    /// # Examples
    ///
    /// ```
    /// let engine = depengine::Engine::new();
    /// let weights = engine.var(vec![0.5f32; 4]);
    /// let tag = engine.var(()); // a bare tag for state outside the engine
    /// engine.op("scale").write(&weights).read(&tag).run(|(_tag,), (mut w,)| {
    ///     w.iter_mut().for_each(|x| *x *= 2.0);
    ///     Ok(())
    /// });
    /// assert_eq!(*weights.read().blocking_wait()?, vec![1.0; 4]);
    /// # Ok::<(), depengine::Error>(())
    /// ```
    pub fn var<T: Send + Sync + 'static>(&self, value: T) -> Var<T> {
        self.make_var(None, value)
    }

    /// A new var owning `value`, named `name`: the profiler, the hang
    /// explainer, errors and `Debug` show the name (with the id), where
    /// they show a bare id for a var without one. Names need not be unique.
    ///
    /// # Examples
    ///
    /// ```
    /// let engine = depengine::Engine::new();
    /// let model = engine.var_named("model", 0u64);
    /// assert_eq!(model.name(), Some("model"));
    /// assert!(model.label().starts_with("`model` (#"));
    /// ```
    pub fn var_named<T: Send + Sync + 'static>(&self, name: impl Into<Arc<str>>, value: T) -> Var<T> {
        self.make_var(Some(name.into()), value)
    }

    fn make_var<T: Send + Sync + 'static>(&self, name: Option<Arc<str>>, value: T) -> Var<T> {
        let id = NEXT_VAR_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let owner: Owner = self.shared().clone();
        let var = Var::new(owner, id, name, self.shared().config.track_holders, value);
        self.shared().queues.register(var.queue());
        var
    }

    /// Pushes the open bulk segment now, if there is one, instead of when it
    /// is full or a wait needs it (see [`EngineBuilder::bulk_size`]).
    ///
    /// # Examples
    ///
    /// ```
    /// let engine = depengine::Engine::builder().bulk_size(64).build()?;
    /// let v = engine.var(0u32);
    /// for _ in 0..10 {
    ///     engine.op("add").write(&v).run_detached(|(), (mut v,)| {
    ///         *v += 1;
    ///         Ok(())
    ///     })?;
    /// }
    /// engine.flush(); // the ten ops go to the workers as one segment now
    /// engine.blocking_wait_for_var(&v)?;
    /// assert_eq!(v.version(), 10);
    /// # Ok::<(), depengine::Error>(())
    /// ```
    pub fn flush(&self) {
        self.shared().bulk.flush();
    }

    /// Starts building an op named `name`.
    ///
    /// # Examples
    ///
    /// ```
    /// use depengine::{Device, Lane};
    /// let engine = depengine::Engine::new();
    /// let (x, y) = (engine.var(3i64), engine.var(0i64));
    /// let square = engine
    ///     .op("square")
    ///     .read(&x)
    ///     .write(&y)
    ///     .device(Device::Cpu(0))
    ///     .lane(Lane::Normal)
    ///     .priority(1)
    ///     .run(|(x,), (mut y,)| {
    ///         *y = *x * *x;
    ///         Ok(*y)
    ///     });
    /// assert_eq!(square.blocking_wait()?, 9);
    /// # Ok::<(), depengine::Error>(())
    /// ```
    pub fn op(&self, name: impl Into<Cow<'static, str>>) -> OpBuilder<'_> {
        OpBuilder::new(self.shared(), name.into())
    }

    /// Starts building a multi-var acquire.
    ///
    /// # Examples
    ///
    /// ```
    /// # futures::executor::block_on(async {
    /// let engine = depengine::Engine::new();
    /// let (from, to) = (engine.var(10u32), engine.var(0u32));
    /// // Both vars at once, in push order with every op on them.
    /// let (mut a, mut b) = engine.acquire().write(&from).write(&to).push().await?;
    /// *b += std::mem::take(&mut *a);
    /// drop((a, b));
    /// assert_eq!(*to.read().await?, 10);
    /// # Ok::<(), depengine::Error>(())
    /// # }).unwrap();
    /// ```
    pub fn acquire(&self) -> AcquireBuilder<'_> {
        AcquireBuilder::new(self.shared())
    }

    /// Resolves once every write pushed to `var` before this call has
    /// completed. It is a read pushed on `var`, so it never blocks a thread.
    ///
    /// # Errors
    ///
    /// The error `var` carries from a failed write, which this wait clears
    /// (as MXNet's `WaitForVar` does), so later ops use the var again; or a
    /// refused push (deleted var, closed engine).
    ///
    /// # Examples
    ///
    /// ```
    /// # futures::executor::block_on(async {
    /// let engine = depengine::Engine::new();
    /// let v = engine.var(0u32);
    /// engine.op("fails").write(&v).run(|(), _| Err::<(), _>("disk full".into()));
    /// let err = engine.wait_for_var(&v).await.unwrap_err();
    /// assert!(err.root().is_failed());
    /// engine.wait_for_var(&v).await?; // the first wait cleared the error
    /// # Ok::<(), depengine::Error>(())
    /// # }).unwrap();
    /// ```
    pub fn wait_for_var<V: AsVar>(&self, var: &V) -> OpHandle<()> {
        let var = var_of(var);
        let mut decls = DepList::new();
        decls.push(Decl { var: var.any(), access: Access::Read, typed: false });
        let opts = OpOptions::internal("wait_for_var");
        let pushed = self.shared().push(opts, Role::WaitForVar, decls, WaitJob, Body::Hands, false);
        OpHandle::of_push(pushed)
    }

    /// Resolves once every op pushed before this call has completed (later
    /// ops are not waited for).
    ///
    /// # Errors
    ///
    /// The first op failure recorded since the previous `wait_for_all`.
    ///
    /// Inside a body of one of this engine's ops (a future op's included)
    /// it resolves at once to [`Error::is_would_deadlock`]: it would wait
    /// for that very op.
    ///
    /// # Examples
    ///
    /// ```
    /// # futures::executor::block_on(async {
    /// let engine = depengine::Engine::new();
    /// let vars: Vec<_> = (0..4).map(|i| engine.var(i)).collect();
    /// for v in &vars {
    ///     engine.op("inc").write(v).run_detached(|(), (mut v,)| {
    ///         *v += 1;
    ///         Ok(())
    ///     })?;
    /// }
    /// engine.wait_for_all().await?;
    /// assert!(vars.iter().all(|v| v.version() == 1));
    /// # Ok::<(), depengine::Error>(())
    /// # }).unwrap();
    /// ```
    pub fn wait_for_all(&self) -> WaitForAll {
        self.wait_all("Engine::wait_for_all")
    }

    /// `wait_for_all`, refused as `what` inside an op of this engine.
    fn wait_all(&self, what: &'static str) -> WaitForAll {
        if let Err(err) = self.refuse_inside_op(what) {
            return WaitForAll { wait: Err(Some(err)), shared: self.shared().clone() };
        }
        self.shared().bulk.flush();
        let latch = self.shared().tracker.rotate(false);
        WaitForAll { wait: Ok(latch.wait()), shared: self.shared().clone() }
    }

    /// Refuses an engine-wide wait inside a body of this engine's ops.
    fn refuse_inside_op(&self, what: &'static str) -> Result<(), Error> {
        if inside_op_of(Arc::as_ptr(self.shared()).cast()) {
            return Err(Error::would_deadlock(
                what,
                "it is called inside an op of this engine, and would wait for it",
            ));
        }
        Ok(())
    }

    /// Blocking [`wait_for_var`](Engine::wait_for_var), for non-async callers.
    ///
    /// # Errors
    ///
    /// As for `wait_for_var`, and [`Error::is_blocking_in_runtime`] in an
    /// async task (`.await` `wait_for_var` there; `spawn_blocking`,
    /// `block_in_place` and plain threads may block). Inside an op body whose op declared `var`,
    /// [`Error::is_would_deadlock`]: a write pushed before this call and
    /// not yet completed could only run after that op.
    ///
    /// # Examples
    ///
    /// ```
    /// let engine = depengine::Engine::new();
    /// let v = engine.var(String::new());
    /// engine.op("fill").write(&v).run_detached(|(), (mut s,)| {
    ///     s.push_str("done");
    ///     Ok(())
    /// })?;
    /// engine.blocking_wait_for_var(&v)?;
    /// assert_eq!(v.version(), 1);
    /// # Ok::<(), depengine::Error>(())
    /// ```
    pub fn blocking_wait_for_var<V: AsVar>(&self, var: &V) -> Result<(), Error> {
        const WHAT: &str = "Engine::blocking_wait_for_var";
        let var = var_of(var);
        refuse_blocking(WHAT, Instead::Await)?;
        if current_body_holds(var.id()) {
            return Err(Error::would_deadlock(WHAT, "the op running this body holds the var"));
        }
        self.wait_for_var(var).blocking_wait()
    }

    /// Deletes `var` once every op pushed on it so far has completed, and
    /// returns its data. Any later push that uses the var is refused with
    /// [`Error::is_var_deleted`]. The deletion runs whatever error the var
    /// carries, and also under a cancelling shutdown.
    ///
    /// # Examples
    ///
    /// ```
    /// let engine = depengine::Engine::new();
    /// let v = engine.var(vec![1, 2, 3]);
    /// engine.op("push").write(&v).run_detached(|(), (mut v,)| {
    ///     v.push(4);
    ///     Ok(())
    /// })?;
    /// let data = engine.delete_var(&v).blocking_wait()?;
    /// assert_eq!(data, [1, 2, 3, 4]);
    /// assert!(v.is_deleted());
    /// let refused = engine.op("late").read(&v).run(|_, ()| Ok(())).pushed();
    /// assert!(refused.unwrap_err().is_var_deleted());
    /// # Ok::<(), depengine::Error>(())
    /// ```
    pub fn delete_var<T: Send + Sync + 'static>(&self, var: &Var<T>) -> OpHandle<T> {
        let mut decls = DepList::new();
        decls.push(Decl { var: var.any(), access: Access::Write, typed: false });
        let job = DeleteJob { var: var.clone() };
        let pushed = self.shared().push(
            OpOptions::internal("delete_var"),
            Role::Delete,
            decls,
            job,
            Body::Hands,
            false,
        );
        OpHandle::of_push(pushed)
    }

    /// A handle that does not keep the engine open: the engine closes when
    /// its last `Engine` clone goes, whatever [`WeakEngine`]s remain.
    pub fn downgrade(&self) -> WeakEngine {
        WeakEngine { handle: Arc::downgrade(&self.handle) }
    }
}

/// A handle to an [`Engine`] that does not keep it open, from
/// [`Engine::downgrade`]: for what lives beside the engine and must not
/// outlive its users' intent (a metrics collector in a registry, a
/// callback), as `std::sync::Weak` is to `Arc`.
#[derive(Clone)]
pub struct WeakEngine {
    handle: Weak<EngineHandle>,
}

impl WeakEngine {
    /// The engine, unless every [`Engine`] clone is gone (the engine has
    /// then closed, and this never gives it again).
    ///
    /// # Examples
    ///
    /// ```
    /// let engine = depengine::Engine::new();
    /// let weak = engine.downgrade();
    /// assert!(weak.upgrade().is_some());
    /// drop(engine);
    /// assert!(weak.upgrade().is_none());
    /// ```
    pub fn upgrade(&self) -> Option<Engine> {
        self.handle.upgrade().map(|handle| Engine { handle })
    }
}

impl fmt::Debug for WeakEngine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WeakEngine").field("open", &(self.handle.strong_count() > 0)).finish()
    }
}

impl Default for Engine {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for Engine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let shared = self.shared();
        f.debug_struct("Engine")
            .field("kind", &shared.config.kind)
            .field("cpu_workers", &shared.config.topology.cpu_workers)
            .field("closed", &shared.tracker.is_closed())
            .finish_non_exhaustive()
    }
}

impl Drop for EngineHandle {
    fn drop(&mut self) {
        // Nobody can ask the engine anything any more.
        self.shared.stop_watchdog();
        let latch = self.shared.close(false);
        let weak: Weak<Shared> = Arc::downgrade(&self.shared);
        latch.on_set(move || {
            let Some(lingering) = weak.upgrade().map(|shared| shared.lingering()) else { return };
            lingering.on_set(move || {
                if let Some(shared) = weak.upgrade() {
                    shared.dispatcher.stop();
                    shared.recorder.autosave();
                }
            });
        });
    }
}

mod devices;
mod pending;
mod profiler;
mod room;
mod shutdown;
mod snapshot;
mod wait_all;
pub use profiler::Profiler;
pub use shutdown::ShutdownMode;
pub use wait_all::WaitForAll;
#[cfg(all(test, not(depengine_loom)))]
mod tests;
