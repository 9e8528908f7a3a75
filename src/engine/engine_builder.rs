//! The front door of configuration: [`EngineBuilder`], whose calls say
//! what the program chose; `settle.rs` fills in the rest from the
//! environment (if the program asked) and the defaults (`config.rs`).

use std::time::Duration;

use super::Engine;
use super::config::{DEFAULT_SPIN, EngineKind, MAX_CPU_DEVICES, MAX_IN_FLIGHT, MAX_SPIN, MAX_WORKERS};
use super::settle::{Choices, Env, settle};
use crate::error::Error;
use crate::exec::Hook;

mod gpu;

/// Configures and builds an [`Engine`].
///
/// Each setting is the builder call's, else its default. A builder made by
/// [`from_env`](Self::from_env) also reads, for each setting the code
/// left unset, the `DEPENGINE_*` variable named in its documentation (so
/// that a deployment can tune what the application leaves open without a
/// rebuild, as with MXNet's variables): an explicit call wins, and the
/// variable is not even read then, as with rayon's `ThreadPoolBuilder`.
/// Reading the environment is the application's choice: an engine a
/// library builds with [`Engine::builder`] or [`Engine::new`] obeys no
/// variable set for another program. A variable whose value is invalid
/// makes [`build`](Self::build) fail, saying which; [`Engine::from_env`]
/// reports it and uses the default.
///
/// # Examples
///
/// ```
/// # fn main() -> depengine::Result<()> {
/// use depengine::Engine;
/// use depengine::engine::EngineKind;
/// let engine = Engine::builder().kind(EngineKind::Threaded).cpu_workers(2).build()?;
/// # Ok(()) }
/// ```
#[derive(Debug, Default)]
#[must_use = "a builder does nothing until build is called"]
pub struct EngineBuilder {
    choices: Choices,
}

impl EngineBuilder {
    /// How long an idle worker watches its queues before it parks, by
    /// default: at one request at a time it saves a third of the CPU per
    /// request against 50 µs, for the same latency, and no workload
    /// measured slower.
    ///
    /// # Examples
    ///
    /// ```
    /// use depengine::EngineBuilder;
    /// let engine = EngineBuilder::default().build()?;
    /// # if std::env::var_os("DEPENGINE_SPIN_US").is_none() {
    /// assert_eq!(engine.settings().spin, EngineBuilder::DEFAULT_SPIN);
    /// # }
    /// # Ok::<(), depengine::Error>(())
    /// ```
    pub const DEFAULT_SPIN: Duration = DEFAULT_SPIN;
    /// The longest watch [`spin`](Self::spin) and
    /// [`gpu_spin`](Self::gpu_spin) may ask for.
    ///
    /// # Examples
    ///
    /// ```
    /// use depengine::EngineBuilder;
    /// use std::time::Duration;
    /// let too_long = EngineBuilder::MAX_SPIN + Duration::from_micros(1);
    /// let err = EngineBuilder::default().spin(too_long).build().unwrap_err();
    /// assert!(err.is_invalid_argument());
    /// ```
    pub const MAX_SPIN: Duration = MAX_SPIN;
    /// The most worker threads one pool may have: a setting past it is a
    /// mistake (a typo, a unit error) far more often than a need, and
    /// asking the OS for that many threads fails or exhausts the process.
    ///
    /// # Examples
    ///
    /// ```
    /// use depengine::EngineBuilder;
    /// let err = EngineBuilder::default().cpu_workers(EngineBuilder::MAX_WORKERS + 1).build().unwrap_err();
    /// assert!(err.is_invalid_argument());
    /// ```
    pub const MAX_WORKERS: usize = MAX_WORKERS;
    /// The most CPU devices an engine may have.
    ///
    /// # Examples
    ///
    /// ```
    /// use depengine::EngineBuilder;
    /// assert!(EngineBuilder::default().cpu_devices(EngineBuilder::MAX_CPU_DEVICES).build().is_ok());
    /// assert!(EngineBuilder::default().cpu_devices(EngineBuilder::MAX_CPU_DEVICES + 1).build().is_err());
    /// ```
    pub const MAX_CPU_DEVICES: usize = MAX_CPU_DEVICES;
    /// The largest bound on ops in flight ([`max_in_flight`](Self::max_in_flight)).
    ///
    /// # Examples
    ///
    /// ```
    /// use depengine::EngineBuilder;
    /// let err = EngineBuilder::default().max_in_flight(EngineBuilder::MAX_IN_FLIGHT + 1).build().unwrap_err();
    /// assert!(err.is_invalid_argument());
    /// ```
    pub const MAX_IN_FLIGHT: usize = MAX_IN_FLIGHT;

    /// The engine type. Environment: `DEPENGINE_TYPE=threaded|naive`.
    ///
    /// # Examples
    ///
    /// ```
    /// use depengine::{engine::EngineKind, Engine};
    /// // Every op runs at push when its vars are free: handy when debugging.
    /// let engine = Engine::builder().kind(EngineKind::Naive).build()?;
    /// let v = engine.var(0);
    /// engine.op("set").write(&v).run(|(), (mut v,)| { *v = 7; Ok(()) });
    /// assert_eq!(*v.read().blocking_wait()?, 7);
    /// assert_eq!(engine.settings().kind, EngineKind::Naive);
    /// # Ok::<(), depengine::Error>(())
    /// ```
    pub fn kind(mut self, kind: EngineKind) -> Self {
        self.choices.kind = Some(kind);
        self
    }

    /// Worker threads per CPU device for normal ops, at most
    /// [`MAX_WORKERS`](Self::MAX_WORKERS). Environment: `DEPENGINE_CPU_WORKERS`. Default: the
    /// machine's available parallelism; for a builder made by
    /// [`from_env`](Self::from_env) in one of several ranks of an MPI job
    /// on the machine (as Open MPI's `OMPI_COMM_WORLD_LOCAL_SIZE` or
    /// MPICH's `MPI_LOCALNRANKS` say), the rank's share of it (at least 1).
    ///
    /// # Examples
    ///
    /// ```
    /// let engine = depengine::Engine::builder().cpu_workers(4).build()?;
    /// assert_eq!(engine.settings().cpu_workers, 4);
    /// # Ok::<(), depengine::Error>(())
    /// ```
    pub fn cpu_workers(mut self, n: usize) -> Self {
        self.choices.cpu_workers = Some(n);
        self
    }

    /// Worker threads of the shared pool for [`Lane::Prioritized`](crate::Lane)
    /// ops, at most [`MAX_WORKERS`](Self::MAX_WORKERS). Environment:
    /// `DEPENGINE_CPU_PRIORITY_WORKERS`. Default: 1.
    ///
    /// # Examples
    ///
    /// ```
    /// use depengine::{Engine, Lane};
    /// let engine = Engine::builder().priority_workers(2).build()?;
    /// let urgent = engine.op("urgent").lane(Lane::Prioritized).run(|(), ()| Ok(1));
    /// assert_eq!(urgent.blocking_wait()?, 1);
    /// # Ok::<(), depengine::Error>(())
    /// ```
    pub fn priority_workers(mut self, n: usize) -> Self {
        self.choices.priority_workers = Some(n);
        self
    }

    /// Number of CPU devices, `Cpu(0)` to `Cpu(n - 1)`, each with its own
    /// pool; at most [`MAX_CPU_DEVICES`](Self::MAX_CPU_DEVICES). Default: 1.
    ///
    /// # Examples
    ///
    /// ```
    /// use depengine::{Device, Engine};
    /// let engine = Engine::builder().cpu_devices(2).cpu_workers(1).build()?;
    /// let on_second = engine.op("io").device(Device::Cpu(1)).run(|(), ()| Ok("ran on Cpu(1)"));
    /// assert_eq!(on_second.blocking_wait()?, "ran on Cpu(1)");
    /// # Ok::<(), depengine::Error>(())
    /// ```
    pub fn cpu_devices(mut self, n: usize) -> Self {
        self.choices.cpu_devices = Some(n);
        self
    }

    /// Bulk execution: up to `n` consecutive sync ops for one CPU device
    /// (same priority, normal lane) are fused into one engine op, with
    /// their var lists merged, and run one after the other, in push order,
    /// on one worker. Each op keeps its own handle, result and errors. A
    /// segment is flushed when it is full, when an op that cannot join it
    /// is pushed, on any wait (`wait_for_var`, `wait_for_all`, polling the
    /// handle of an op in it), on [`Engine::flush`](crate::Engine::flush),
    /// at shutdown, and whenever every worker of its pool is idle.
    /// Environment: `DEPENGINE_BULK_SIZE`. Default: 1 (no bulk execution).
    ///
    /// Fusing trades parallelism for overhead: ops of one segment never run
    /// at the same time, and the segment waits for every var any of them
    /// uses. While bulk execution is on, pushes take one engine-wide lock.
    ///
    /// # Examples
    ///
    /// ```
    /// let engine = depengine::Engine::builder().bulk_size(16).build()?;
    /// let v = engine.var(0u64);
    /// for _ in 0..100 {
    ///     engine.op("tiny").write(&v).run_detached(|(), (mut v,)| { *v += 1; Ok(()) })?;
    /// }
    /// engine.flush(); // pushes a partly filled segment now
    /// assert_eq!(*v.read().blocking_wait()?, 100);
    /// # Ok::<(), depengine::Error>(())
    /// ```
    pub fn bulk_size(mut self, n: usize) -> Self {
        self.choices.bulk_size = Some(n);
        self
    }

    /// The prefix of worker thread names: `{prefix}-cpu{i}-{k}` for CPU
    /// device `i`, `{prefix}-prio-{k}` for the prioritized pool. Default:
    /// `depengine`. It may not contain a NUL byte (the OS refuses such a
    /// name).
    ///
    /// # Examples
    ///
    /// ```
    /// let engine = depengine::Engine::builder().thread_name("solver").build()?;
    /// let name = engine.op("who").run(|(), ()| Ok(std::thread::current().name().map(str::to_owned)));
    /// assert!(name.blocking_wait()?.unwrap().starts_with("solver-cpu0-"));
    /// assert!(depengine::Engine::builder().thread_name("bad\0name").build().is_err());
    /// # Ok::<(), depengine::Error>(())
    /// ```
    pub fn thread_name(mut self, prefix: impl Into<String>) -> Self {
        self.choices.thread_name = Some(prefix.into());
        self
    }

    /// A builder that fills in each setting the code leaves unset from its
    /// `DEPENGINE_*` environment variable, if set (the table in the
    /// package's README lists them), else the default: for the
    /// application's own engine, so that a deployment can tune it without
    /// a rebuild. [`Engine::builder`] reads no variable. A variable set
    /// to nothing (or to blanks) is as if it were not set, whichever it is;
    /// any other value that does not parse, or is out of its bound, is an
    /// error of [`build`](Self::build) that names the variable.
    ///
    /// # Examples
    ///
    /// ```
    /// use depengine::EngineBuilder;
    /// // DEPENGINE_CPU_WORKERS cannot change what the code gave:
    /// let engine = EngineBuilder::from_env().cpu_workers(2).build()?;
    /// assert_eq!(engine.settings().cpu_workers, 2);
    /// # Ok::<(), depengine::Error>(())
    /// ```
    pub fn from_env() -> Self {
        let mut builder = Self::default();
        builder.choices.read_environment = true;
        builder
    }

    /// Reads no `DEPENGINE_*` environment variable: what every builder does
    /// unless made by [`from_env`](Self::from_env), which this undoes.
    #[deprecated(note = "builders read no environment unless made by `EngineBuilder::from_env`")]
    pub fn ignore_environment(mut self) -> Self {
        self.choices.read_environment = false;
        self
    }

    /// Runs `start` on each worker thread as it starts, before it takes
    /// any op, after the engine's own set-up (a GPU worker has bound its
    /// device's context): where to set up per-thread state (a tracing
    /// dispatcher, an allocator arena), pin the thread near its device or
    /// lower its priority. It gets the worker's index in its pool, from 0,
    /// as rayon's `start_handler` does (the `-k` that ends the thread's
    /// name); the thread's name says its pool
    /// ([`thread_name`](Self::thread_name)). Every worker of every pool
    /// runs it, pools started on first use included; the naive engine has
    /// no workers, and the engine's service threads (GPU pollers, the
    /// watchdog) run no user code and no hook. A panic in it is caught: that
    /// pool does not start, and the push that needed it fails
    /// ([`Error::is_pool_unavailable`], saying which thread's hook
    /// panicked).
    ///
    /// The pool being started waits for its hooks, so a hook must not wait
    /// for ops: in a start hook, a push whose op needs a pool not yet
    /// running, and every blocking wait, fail with
    /// [`Error::is_would_deadlock`] instead of hanging. Pushes to pools
    /// already running are taken.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::sync::atomic::{AtomicUsize, Ordering};
    /// let (started, stopped) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    /// let (up, down) = (started.clone(), stopped.clone());
    /// let engine = depengine::Engine::builder()
    ///     .cpu_workers(2)
    ///     .on_thread_start(move |k| _ = up.fetch_add(k + 1, Ordering::Relaxed))
    ///     .on_thread_stop(move |_| _ = down.fetch_add(1, Ordering::Relaxed))
    ///     .build()?;
    /// engine.op("first").run(|(), ()| Ok(())).blocking_wait()?;
    /// assert_eq!(started.load(Ordering::Relaxed), 1 + 2); // workers 0 and 1
    /// engine.blocking_shutdown(depengine::ShutdownMode::Drain)?; // waits for the workers to end
    /// assert_eq!(stopped.load(Ordering::Relaxed), 2);
    /// # Ok::<(), depengine::Error>(())
    /// ```
    pub fn on_thread_start(mut self, start: impl Fn(usize) + Send + Sync + 'static) -> Self {
        self.choices.hooks.start = Some(std::sync::Arc::new(start) as Hook);
        self
    }

    /// Runs `stop` on each worker thread as it ends, after its last op:
    /// where per-thread state set up by
    /// [`on_thread_start`](Self::on_thread_start) is torn down. It gets the
    /// worker's index in its pool, as the start hook does.
    /// [`Engine::shutdown`](crate::Engine::shutdown) returns once every
    /// worker has run it; a dropped engine's workers run it as they end,
    /// soon after. A panic in it is caught and logged (`tracing`, target
    /// `depengine`).
    pub fn on_thread_stop(mut self, stop: impl Fn(usize) + Send + Sync + 'static) -> Self {
        self.choices.hooks.stop = Some(std::sync::Arc::new(stop) as Hook);
        self
    }

    /// The stack size of each worker thread, in bytes. Default: the
    /// standard library's (`RUST_MIN_STACK`, else 2 MiB). Ops whose bodies
    /// recurse deeply or keep large arrays on the stack need more. Zero is
    /// refused by [`build`](Self::build).
    ///
    /// # Examples
    ///
    /// ```
    /// // A body that keeps 3 MiB on its stack (more than the default 2 MiB).
    /// let engine = depengine::Engine::builder().thread_stack_size(32 << 20).build()?;
    /// let sum = engine.op("deep").run(|(), ()| {
    ///     let block = std::hint::black_box([1u8; 3 << 20]);
    ///     Ok(block.iter().map(|&b| u64::from(b)).sum::<u64>())
    /// });
    /// assert_eq!(sum.blocking_wait()?, 3 << 20);
    /// assert!(depengine::Engine::builder().thread_stack_size(0).build().unwrap_err().is_invalid_argument());
    /// # Ok::<(), depengine::Error>(())
    /// ```
    pub fn thread_stack_size(mut self, bytes: usize) -> Self {
        self.choices.hooks.stack_size = Some(bytes);
        self
    }

    /// How long an idle worker watches its queues (yielding its core)
    /// before it parks, at most [`MAX_SPIN`](Self::MAX_SPIN). Longer keeps a steady stream
    /// of ops from paying for wake-ups; shorter costs less CPU while the
    /// engine is mostly idle; zero parks at once. Environment:
    /// `DEPENGINE_SPIN_US` (microseconds). Default: [`DEFAULT_SPIN`](Self::DEFAULT_SPIN).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// // A mostly idle service: park at once rather than watch the queues.
    /// let engine = depengine::Engine::builder().spin(Duration::ZERO).build()?;
    /// assert_eq!(engine.settings().spin, Duration::ZERO);
    /// # Ok::<(), depengine::Error>(())
    /// ```
    pub fn spin(mut self, spin: Duration) -> Self {
        self.choices.spin = Some(spin);
        self
    }

    /// The most user ops in flight (pushed and not yet completed) at once:
    /// backpressure for a service. At the bound a push is refused with
    /// [`Error::is_full`] (a `run` handle resolves to it; `pushed()` returns
    /// it), and [`Engine::reserve`](crate::Engine::reserve) waits for room
    /// instead. Waits, acquires and deletions are not counted. An op
    /// cancelled before its vars let it through (aborted, or its
    /// `cancel_on_drop` handle dropped) counts until they have, for its
    /// record waits in their queues till then: the bound bounds memory.
    /// Environment: `DEPENGINE_MAX_IN_FLIGHT`. Default: no bound.
    ///
    /// # Examples
    ///
    /// ```
    /// let engine = depengine::Engine::builder().max_in_flight(1).cpu_workers(1).build()?;
    /// let (tx, rx) = std::sync::mpsc::channel::<()>();
    /// let first = engine.op("holds").run(move |(), ()| { rx.recv().ok(); Ok(()) });
    /// let second = engine.op("refused").run(|(), ()| Ok(()));
    /// assert!(second.blocking_wait().unwrap_err().is_full());
    /// tx.send(()).unwrap();
    /// first.blocking_wait()?;
    /// # Ok::<(), depengine::Error>(())
    /// ```
    pub fn max_in_flight(mut self, n: usize) -> Self {
        self.choices.max_in_flight = Some(n);
        self
    }

    /// Whether the workers measure each op's queue wait (from ready to
    /// started) and run time, for the distributions of
    /// [`Engine::metrics`](crate::Engine::metrics). It costs two looks at
    /// the clock per op; the counters are kept either way. Environment:
    /// `DEPENGINE_METRICS_TIMING=1|0` (or `true|false`). Default: off.
    ///
    /// # Examples
    ///
    /// ```
    /// let engine = depengine::Engine::builder().metrics_timing(true).build()?;
    /// engine.op("timed").run(|(), ()| Ok(())).blocking_wait()?;
    /// // The worker records the op's times just after it completes; a
    /// // draining shutdown waits for that too.
    /// engine.blocking_shutdown(depengine::ShutdownMode::Drain)?;
    /// let metrics = engine.metrics();
    /// assert_eq!(metrics.run_time().count(), 1);
    /// # Ok::<(), depengine::Error>(())
    /// ```
    pub fn metrics_timing(mut self, on: bool) -> Self {
        self.choices.metrics_timing = Some(on);
        self
    }

    /// A watchdog: a thread (`{prefix}-watchdog`) that looks at the engine
    /// every half `threshold` and, for each op that has waited on vars for
    /// longer than `threshold`, emits one `tracing` warning (target
    /// `depengine::watchdog`) naming the chain from it down to the holder
    /// at its end (see [`Engine::debug_pending`](crate::Engine::debug_pending)).
    /// Each look visits every live var under its lock. The threshold is
    /// above zero and at most one day. The thread stops with the engine
    /// (its shutdown, or its last handle dropped). Environment:
    /// `DEPENGINE_WATCHDOG_MS`. Default: none.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// // Warns (through `tracing`) about any op that waits on vars for over 5 s.
    /// let engine = depengine::Engine::builder().watchdog(Duration::from_secs(5)).build()?;
    /// assert!(depengine::Engine::builder().watchdog(Duration::ZERO).build().is_err());
    /// # drop(engine);
    /// # Ok::<(), depengine::Error>(())
    /// ```
    pub fn watchdog(mut self, threshold: Duration) -> Self {
        self.choices.watchdog = Some(threshold);
        self
    }

    /// How many of a thread's ops may wait queued on a CPU pool, not yet
    /// taken by its workers, before that thread runs its next ready ops
    /// itself, inside their pushes, until half as many wait: a pushing
    /// thread that outpaces the workers works instead of queuing further
    /// (LLVM's OpenMP runtime does the same once its task queue is full).
    /// It costs no hand-off, and the ops it runs are ones the workers would
    /// have taken only after those queued. Such an op may start before
    /// ops the thread queued earlier (push order is kept on every var, as
    /// ever). Only ops of `Cpu(0)`'s normal lane with priority 0 run so,
    /// never inside an op's body, and never on a Tokio runtime's thread
    /// but for ops pushed with
    /// [`inline_when_idle`](crate::engine::OpBuilder::inline_when_idle). At most
    /// [`MAX_WORKERS`](Self::MAX_WORKERS) × 1,024; 0: a pushing thread never runs its ops.
    /// Environment: `DEPENGINE_PUSHER_RUNS_AT`. Default: 256.
    ///
    /// # Examples
    ///
    /// ```
    /// // A pushing thread never runs ops itself: every op goes to a worker.
    /// let engine = depengine::Engine::builder().pusher_runs_at(0).build()?;
    /// let v = engine.var(0);
    /// for _ in 0..1_000 {
    ///     engine.op("inc").write(&v).run_detached(|(), (mut v,)| { *v += 1; Ok(()) })?;
    /// }
    /// assert_eq!(*v.read().blocking_wait()?, 1_000);
    /// # Ok::<(), depengine::Error>(())
    /// ```
    pub fn pusher_runs_at(mut self, queued: usize) -> Self {
        self.choices.pusher_runs_at = Some(queued);
        self
    }

    /// Ops in flight (pushed and not yet completed) past which a pushing
    /// thread waits for the workers: it yields until half as many are in
    /// flight, so that the ops it runs ahead with stay few enough to live
    /// in the caches and their records are reused by its next pushes. A
    /// soft bound, looked at every 256 pushes of a thread: a push never
    /// waits in async code, inside an op's body or on an engine thread,
    /// nor while no worker runs (the ops in flight then wait for something
    /// outside the engine, such as a guard the pushing thread holds), nor
    /// for more than 20 ms without an op completing. For a hard bound, see
    /// [`max_in_flight`](Self::max_in_flight). 0: a pushing thread never
    /// waits. Environment: `DEPENGINE_THROTTLE_AT`. Default: 4,096.
    ///
    /// # Examples
    ///
    /// ```
    /// let engine = depengine::Engine::builder().throttle_at(1_024).build()?;
    /// assert_eq!(engine.settings().throttle_at, 1_024);
    /// let v = engine.var(0u64);
    /// for _ in 0..10_000 {
    ///     engine.op("inc").write(&v).run_detached(|(), (mut v,)| { *v += 1; Ok(()) })?;
    /// }
    /// assert_eq!(*v.read().blocking_wait()?, 10_000);
    /// # Ok::<(), depengine::Error>(())
    /// ```
    pub fn throttle_at(mut self, in_flight: usize) -> Self {
        self.choices.throttle_at = Some(in_flight);
        self
    }

    /// Whether each var names the ops holding it (every write, the first
    /// four reads), so that [`Engine::debug_pending`](crate::Engine::debug_pending)
    /// and the watchdog can name who holds a var. It costs each op a few
    /// stores per var under the var's lock (PERFORMANCE.md, *The hang
    /// explainer*); off, the explainer still shows the queues and the
    /// counts. Environment: `DEPENGINE_TRACK_HOLDERS=1|0`. Default: on.
    ///
    /// # Examples
    ///
    /// ```
    /// let engine = depengine::Engine::builder().track_holders(false).build()?;
    /// assert!(engine.debug_pending().is_empty());
    /// # Ok::<(), depengine::Error>(())
    /// ```
    pub fn track_holders(mut self, on: bool) -> Self {
        self.choices.track_holders = Some(on);
        self
    }

    /// The Tokio runtime that future ops run on. Default: the runtime
    /// current when [`build`](Self::build) is called, if any.
    ///
    /// # Examples
    ///
    /// ```
    /// let rt = tokio::runtime::Runtime::new().unwrap();
    /// // Built outside the runtime, the engine still runs future ops on it.
    /// let engine = depengine::Engine::builder().runtime(rt.handle().clone()).build()?;
    /// let answer = engine.op("fetch").spawn(|(), ()| async { Ok(42) });
    /// assert_eq!(rt.block_on(answer)?, 42);
    /// # Ok::<(), depengine::Error>(())
    /// ```
    pub fn runtime(mut self, handle: tokio::runtime::Handle) -> Self {
        self.choices.runtime = Some(handle);
        self
    }

    /// Builds the engine. Worker threads start lazily, on the first op for
    /// each pool.
    ///
    /// # Errors
    ///
    /// A count of zero or past its bound ([`MAX_WORKERS`](Self::MAX_WORKERS),
    /// [`MAX_CPU_DEVICES`](Self::MAX_CPU_DEVICES)), a thread name with a NUL byte, or (for
    /// a builder made by [`from_env`](Self::from_env)) an environment
    /// variable read for a setting left unset that does not parse. Nothing is started: a pool whose threads the OS then refuses
    /// makes the push that needed it fail
    /// ([`Error::is_pool_unavailable`]).
    ///
    /// # Examples
    ///
    /// ```
    /// let engine = depengine::Engine::builder().cpu_workers(2).build()?;
    /// assert_eq!(engine.settings().cpu_workers, 2);
    /// let err = depengine::Engine::builder().cpu_workers(0).build().unwrap_err();
    /// assert!(err.is_invalid_argument());
    /// # Ok::<(), depengine::Error>(())
    /// ```
    pub fn build(self) -> Result<Engine, Error> {
        let env = Env { read: self.choices.read_environment, lenient: false };
        let (config, runtime) = settle(self.choices, &env)?;
        Engine::from_config(config, runtime)
    }

    /// [`build`](Self::build), with bad environment values ignored (and
    /// reported): for [`Engine::from_env`].
    pub(crate) fn build_leniently(self) -> Result<Engine, Error> {
        let env = Env { read: self.choices.read_environment, lenient: true };
        let (config, runtime) = settle(self.choices, &env)?;
        Engine::from_config(config, runtime)
    }
}
