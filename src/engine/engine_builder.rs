//! Engine configuration: a builder, with the environment filling in what
//! the code left unset.

use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::time::Duration;

use super::recorder::{DEFAULT_KEEP, ENV_PROFILE, ENV_PROFILE_KEEP};

use super::Engine;
use crate::error::Error;
use crate::exec::{GpuSettings, Hook, ThreadHooks, Topology};

/// How the engine executes ops.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum EngineKind {
    /// Per-device worker pools; conflicting ops in push order, everything
    /// else in parallel (the default).
    #[default]
    Threaded,
    /// Every op runs on the thread that makes it ready, at push when its
    /// vars are free: with only sync ops, everything runs synchronously at
    /// push, in push order. For debugging.
    Naive,
}

/// The environment variables read by [`EngineBuilder::build`].
pub(crate) const ENV_TYPE: &str = "DEPENGINE_TYPE";
pub(crate) const ENV_CPU_WORKERS: &str = "DEPENGINE_CPU_WORKERS";
pub(crate) const ENV_PRIORITY_WORKERS: &str = "DEPENGINE_CPU_PRIORITY_WORKERS";
pub(crate) const ENV_BULK_SIZE: &str = "DEPENGINE_BULK_SIZE";
pub(crate) const ENV_SPIN_US: &str = "DEPENGINE_SPIN_US";
pub(crate) const ENV_GPU_SPIN_US: &str = "DEPENGINE_GPU_SPIN_US";
pub(crate) const ENV_GPU_WORKERS: &str = "DEPENGINE_GPU_WORKERS";
pub(crate) const ENV_GPU_COPY_WORKERS: &str = "DEPENGINE_GPU_COPY_WORKERS";
pub(crate) const ENV_SIM_GPUS: &str = "DEPENGINE_SIM_GPUS";
pub(crate) const ENV_MAX_IN_FLIGHT: &str = "DEPENGINE_MAX_IN_FLIGHT";
pub(crate) const ENV_METRICS_TIMING: &str = "DEPENGINE_METRICS_TIMING";
pub(crate) const ENV_WATCHDOG_MS: &str = "DEPENGINE_WATCHDOG_MS";
pub(crate) const ENV_TRACK_HOLDERS: &str = "DEPENGINE_TRACK_HOLDERS";
pub(crate) const ENV_PUSHER_RUNS_AT: &str = "DEPENGINE_PUSHER_RUNS_AT";
pub(crate) const ENV_THROTTLE_AT: &str = "DEPENGINE_THROTTLE_AT";

/// Ops in flight past which a pushing thread waits for the workers, by
/// default (see [`EngineBuilder::throttle_at`]; PERFORMANCE.md, *The soft
/// bound on ops in flight*).
pub(crate) const DEFAULT_THROTTLE_AT: usize = 4096;

/// How long an idle worker watches its queues before it parks, by default:
/// at one request at a time it saves a third of the CPU per request against
/// 50 µs, for the same latency, and no workload measured slower
/// (PERFORMANCE.md, *Idle cost at low load*).
pub(crate) const DEFAULT_SPIN: Duration = Duration::from_micros(10);
/// The longest such watch a setting may ask for.
pub(crate) const MAX_SPIN: Duration = Duration::from_secs(1);

/// The most worker threads one pool may have, and the most CPU devices: a
/// setting past these is a mistake (a typo, a unit error) far more often
/// than a need, and asking the OS for that many threads fails or exhausts
/// the process.
pub(crate) const MAX_WORKERS: usize = 1024;
/// The most CPU devices an engine may have (see `MAX_WORKERS`).
pub(crate) const MAX_CPU_DEVICES: usize = 1024;

/// The longest threshold a watchdog may have: one day. A longer one is a
/// unit error far more often than a need.
const MAX_WATCHDOG: Duration = Duration::from_secs(24 * 60 * 60);

/// The largest bound on ops in flight (see [`EngineBuilder::max_in_flight`]).
pub(crate) const MAX_IN_FLIGHT: usize = tokio::sync::Semaphore::MAX_PERMITS;

/// An engine's settings, as built ([`Engine::settings`](crate::Engine::settings)):
/// each the builder's, else the environment's, else the default.
///
/// ```
/// let engine = depengine::Engine::builder().cpu_workers(3).build()?;
/// assert_eq!(engine.settings().cpu_workers, 3);
/// assert_eq!(engine.settings().spin, depengine::EngineBuilder::DEFAULT_SPIN);
/// # Ok::<(), depengine::Error>(())
/// ```
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Settings {
    /// The engine type ([`EngineBuilder::kind`]).
    pub kind: EngineKind,
    /// Worker threads per CPU device ([`EngineBuilder::cpu_workers`]).
    pub cpu_workers: usize,
    /// How long an idle worker watches its queues ([`EngineBuilder::spin`]).
    pub spin: Duration,
    /// Most ops fused into one bulk segment; 1: bulk execution is off
    /// ([`EngineBuilder::bulk_size`]).
    pub bulk_size: usize,
    /// The bound on user ops in flight, if any ([`EngineBuilder::max_in_flight`]).
    pub max_in_flight: Option<usize>,
    /// Ops in flight past which a pushing thread waits for the workers; 0:
    /// never ([`EngineBuilder::throttle_at`]).
    pub throttle_at: usize,
    /// Compute workers per GPU device ([`EngineBuilder::gpu_workers`]).
    pub gpu_workers: usize,
    /// Workers per GPU device and copy lane ([`EngineBuilder::gpu_copy_workers`]).
    pub gpu_copy_workers: usize,
    /// GPUs `Gpu(0)` to `Gpu(n - 1)` are simulated ([`EngineBuilder::simulated_gpus`]).
    pub simulated_gpus: usize,
    /// How long idle GPU workers and pollers watch for work
    /// ([`EngineBuilder::gpu_spin`]).
    pub gpu_spin: Duration,
}

/// Settled configuration.
#[derive(Clone, Debug)]
pub(crate) struct Config {
    pub(crate) kind: EngineKind,
    /// The pools the engine may start (`naive` follows `kind`).
    pub(crate) topology: Topology,
    /// The most ops fused into one bulk segment; 1: no bulk execution.
    pub(crate) bulk_size: usize,
    /// The most user ops in flight; `None`: no bound.
    pub(crate) max_in_flight: Option<usize>,
    /// Ops in flight past which a pushing thread waits; 0: never.
    pub(crate) throttle_at: usize,
    /// How long an op may wait on vars before the watchdog warns; `None`:
    /// no watchdog.
    pub(crate) watchdog: Option<Duration>,
    /// Whether vars name the ops holding them, for the hang explainer.
    pub(crate) track_holders: bool,
    /// How many completed ops the profiler keeps.
    pub(crate) profile_keep: usize,
    /// Where the profiler saves every op's record at shutdown, if the
    /// environment says (`DEPENGINE_PROFILE`).
    pub(crate) profile_to: Option<PathBuf>,
}

/// Configures and builds an [`Engine`].
///
/// Each setting is taken from, in order: the builder call, the environment
/// variable named in its documentation (so a deployment can tune what the
/// code leaves open without a rebuild, as with MXNet's variables), the
/// default. This is the order of rayon's `ThreadPoolBuilder`: an explicit
/// call wins, and an environment variable is not even read for a setting
/// the code gave. The program has the last word:
/// [`ignore_environment`](Self::ignore_environment) reads no variable at
/// all (for an engine that a library builds for itself, which the
/// process's `DEPENGINE_*` variables, meant for the application's engine,
/// should not reach). A variable whose value is invalid makes
/// [`build`](Self::build) fail, saying which; [`Engine::new`] reports it
/// and uses the default.
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
    kind: Option<EngineKind>,
    cpu_workers: Option<usize>,
    priority_workers: Option<usize>,
    cpu_devices: Option<usize>,
    bulk_size: Option<usize>,
    thread_name: Option<String>,
    spin: Option<Duration>,
    gpu_spin: Option<Duration>,
    runtime: Option<tokio::runtime::Handle>,
    gpu_workers: Option<usize>,
    gpu_copy_workers: Option<usize>,
    simulated_gpus: Option<usize>,
    gpu_early_release: Option<bool>,
    max_in_flight: Option<usize>,
    throttle_at: Option<usize>,
    metrics_timing: Option<bool>,
    watchdog: Option<Duration>,
    track_holders: Option<bool>,
    pusher_runs_at: Option<usize>,
    hooks: ThreadHooks,
    ignore_environment: bool,
}

impl EngineBuilder {
    /// How long an idle worker watches its queues before it parks, by
    /// default: at one request at a time it saves a third of the CPU per
    /// request against 50 µs, for the same latency, and no workload
    /// measured slower (PERFORMANCE.md, *Idle cost at low load*).
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
    /// The most GPU devices an engine may use.
    ///
    /// # Examples
    ///
    /// ```
    /// use depengine::EngineBuilder;
    /// let err = EngineBuilder::default().simulated_gpus(EngineBuilder::MAX_GPU_DEVICES + 1).build().unwrap_err();
    /// assert!(err.is_invalid_argument());
    /// ```
    pub const MAX_GPU_DEVICES: usize = crate::gpu::MAX_GPU_DEVICES;
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

    /// How long an idle GPU worker or poller watches for work before it
    /// parks, by default: a GPU op's round trip (launch, the GPU, the event
    /// seen complete, the waiter woken) is some tens of microseconds, and a
    /// thread that parks between two such ops costs each a wake-up.
    ///
    /// # Examples
    ///
    /// ```
    /// use depengine::EngineBuilder;
    /// let engine = EngineBuilder::default().build()?;
    /// # if std::env::var_os("DEPENGINE_GPU_SPIN_US").is_none() {
    /// assert_eq!(engine.settings().gpu_spin, EngineBuilder::DEFAULT_GPU_SPIN);
    /// # }
    /// # Ok::<(), depengine::Error>(())
    /// ```
    pub const DEFAULT_GPU_SPIN: Duration = Duration::from_micros(100);

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
        self.kind = Some(kind);
        self
    }

    /// Worker threads per CPU device for normal ops, at most
    /// [`MAX_WORKERS`](Self::MAX_WORKERS). Environment: `DEPENGINE_CPU_WORKERS`. Default: the
    /// machine's available parallelism.
    ///
    /// # Examples
    ///
    /// ```
    /// let engine = depengine::Engine::builder().cpu_workers(4).build()?;
    /// assert_eq!(engine.settings().cpu_workers, 4);
    /// # Ok::<(), depengine::Error>(())
    /// ```
    pub fn cpu_workers(mut self, n: usize) -> Self {
        self.cpu_workers = Some(n);
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
        self.priority_workers = Some(n);
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
        self.cpu_devices = Some(n);
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
        self.bulk_size = Some(n);
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
        self.thread_name = Some(prefix.into());
        self
    }

    /// Reads no `DEPENGINE_*` environment variable: every setting is this
    /// builder's or its default, whatever the process's environment says
    /// (the profiler's `DEPENGINE_PROFILE` included). For an engine a
    /// library builds for itself, or a test that must not depend on the
    /// machine's environment.
    ///
    /// # Examples
    ///
    /// ```
    /// use depengine::engine::EngineKind;
    /// // Whatever DEPENGINE_TYPE or DEPENGINE_CPU_WORKERS say:
    /// let engine = depengine::Engine::builder().ignore_environment().cpu_workers(2).build()?;
    /// assert_eq!(engine.settings().kind, EngineKind::Threaded);
    /// assert_eq!(engine.settings().cpu_workers, 2);
    /// # Ok::<(), depengine::Error>(())
    /// ```
    pub fn ignore_environment(mut self) -> Self {
        self.ignore_environment = true;
        self
    }

    /// Runs `start` on each worker thread as it starts, before it takes
    /// any op, after the engine's own set-up (a GPU worker has bound its
    /// device's context): where to set up per-thread state (a tracing
    /// dispatcher, an allocator arena), pin the thread near its device or
    /// lower its priority. The thread's name says its pool
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
    ///     .on_thread_start(move || _ = up.fetch_add(1, Ordering::Relaxed))
    ///     .on_thread_stop(move || _ = down.fetch_add(1, Ordering::Relaxed))
    ///     .build()?;
    /// engine.op("first").run(|(), ()| Ok(())).blocking_wait()?;
    /// assert_eq!(started.load(Ordering::Relaxed), 2);
    /// engine.blocking_shutdown(depengine::ShutdownMode::Drain)?; // waits for the workers to end
    /// assert_eq!(stopped.load(Ordering::Relaxed), 2);
    /// # Ok::<(), depengine::Error>(())
    /// ```
    pub fn on_thread_start(mut self, start: impl Fn() + Send + Sync + 'static) -> Self {
        self.hooks.start = Some(std::sync::Arc::new(start) as Hook);
        self
    }

    /// Runs `stop` on each worker thread as it ends, after its last op:
    /// where per-thread state set up by
    /// [`on_thread_start`](Self::on_thread_start) is torn down.
    /// [`Engine::shutdown`](crate::Engine::shutdown) returns once every
    /// worker has run it; a dropped engine's workers run it as they end,
    /// soon after. A panic in it is caught and logged (`tracing`, target
    /// `depengine`).
    pub fn on_thread_stop(mut self, stop: impl Fn() + Send + Sync + 'static) -> Self {
        self.hooks.stop = Some(std::sync::Arc::new(stop) as Hook);
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
        self.hooks.stack_size = Some(bytes);
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
        self.spin = Some(spin);
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
        self.max_in_flight = Some(n);
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
        self.metrics_timing = Some(on);
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
        self.watchdog = Some(threshold);
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
        self.pusher_runs_at = Some(queued);
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
        self.throttle_at = Some(in_flight);
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
        self.track_holders = Some(on);
        self
    }

    /// Compute workers per GPU device, each owning its own stream, at most
    /// [`MAX_WORKERS`](Self::MAX_WORKERS). Environment: `DEPENGINE_GPU_WORKERS`. Default: 1.
    ///
    /// # Examples
    ///
    /// ```
    /// let engine = depengine::Engine::builder().simulated_gpus(1).gpu_workers(2).build()?;
    /// assert_eq!(engine.settings().gpu_workers, 2);
    /// # Ok::<(), depengine::Error>(())
    /// ```
    pub fn gpu_workers(mut self, n: usize) -> Self {
        self.gpu_workers = Some(n);
        self
    }

    /// Workers per GPU device for each copy lane ([`Lane::CopyToGpu`](crate::Lane),
    /// [`Lane::CopyFromGpu`](crate::Lane)), each owning its own stream, at
    /// most [`MAX_WORKERS`](Self::MAX_WORKERS). Environment: `DEPENGINE_GPU_COPY_WORKERS`.
    /// Default: 1.
    ///
    /// # Examples
    ///
    /// ```
    /// let engine = depengine::Engine::builder().simulated_gpus(1).gpu_copy_workers(2).build()?;
    /// assert_eq!(engine.settings().gpu_copy_workers, 2);
    /// # Ok::<(), depengine::Error>(())
    /// ```
    pub fn gpu_copy_workers(mut self, n: usize) -> Self {
        self.gpu_copy_workers = Some(n);
        self
    }

    /// Simulates GPUs `Gpu(0)` to `Gpu(n - 1)` (see [`SimGpu`](crate::gpu::sim::SimGpu))
    /// instead of opening them through CUDA; at most
    /// [`MAX_GPU_DEVICES`](crate::EngineBuilder::MAX_GPU_DEVICES). Environment:
    /// `DEPENGINE_SIM_GPUS`. Default: 0.
    ///
    /// # Examples
    ///
    /// ```
    /// use depengine::Device;
    /// use std::time::Duration;
    /// let engine = depengine::Engine::builder().simulated_gpus(1).build()?;
    /// let gpu = engine.gpu(0)?;
    /// let x = engine.var(gpu.sim_buffer(vec![1.0f32, 2.0, 3.0])?);
    /// engine.op("scale").device(Device::Gpu(0)).write(&x).run_gpu(|(), (mut x,), ctx| {
    ///     let (touch, w) = x.sim_mut().unwrap().writer();
    ///     let stream = ctx.sim_stream().unwrap();
    ///     stream.launch("scale", Duration::from_micros(5), vec![touch], move || {
    ///         w.with(|v| v.iter_mut().for_each(|e| *e *= 2.0))
    ///     })?;
    ///     Ok(())
    /// });
    /// assert_eq!(x.read().blocking_wait()?.sim().unwrap().to_vec(), vec![2.0, 4.0, 6.0]);
    /// # Ok::<(), depengine::Error>(())
    /// ```
    pub fn simulated_gpus(mut self, n: usize) -> Self {
        self.simulated_gpus = Some(n);
        self
    }

    /// How long an idle GPU worker or a GPU's poller watches for work
    /// before it parks, at most [`MAX_SPIN`](Self::MAX_SPIN): the GPU's counterpart of
    /// [`spin`](Self::spin), longer by default, since a GPU op's round trip
    /// outlasts a CPU op's and a GPU has few such threads. Environment:
    /// `DEPENGINE_GPU_SPIN_US` (microseconds). Default: [`DEFAULT_GPU_SPIN`](Self::DEFAULT_GPU_SPIN).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// let engine = depengine::Engine::builder().gpu_spin(Duration::from_micros(20)).build()?;
    /// assert_eq!(engine.settings().gpu_spin, Duration::from_micros(20));
    /// # Ok::<(), depengine::Error>(())
    /// ```
    pub fn gpu_spin(mut self, spin: Duration) -> Self {
        self.gpu_spin = Some(spin);
        self
    }

    /// Whether a GPU op lets its vars go as soon as its work is enqueued
    /// (early release, the default), so that the next GPU op of the same
    /// device is ordered behind it on the GPU (`cuStreamWaitEvent`) instead
    /// of waiting for its completion; CPU consumers, handles and
    /// `wait_for_var` still wait for completion. Off: every GPU op lets its
    /// vars go at completion (for comparison and debugging).
    ///
    /// # Examples
    ///
    /// ```
    /// // Every GPU op holds its vars until the GPU has run it.
    /// let engine = depengine::Engine::builder().simulated_gpus(1).gpu_early_release(false).build()?;
    /// # drop(engine);
    /// # Ok::<(), depengine::Error>(())
    /// ```
    pub fn gpu_early_release(mut self, on: bool) -> Self {
        self.gpu_early_release = Some(on);
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
        self.runtime = Some(handle);
        self
    }

    /// Builds the engine. Worker threads start lazily, on the first op for
    /// each pool.
    ///
    /// # Errors
    ///
    /// A count of zero or past its bound ([`MAX_WORKERS`](Self::MAX_WORKERS),
    /// [`MAX_CPU_DEVICES`](Self::MAX_CPU_DEVICES)), a thread name with a NUL byte, or an
    /// environment variable read for a setting left unset that does not
    /// parse. Nothing is started: a pool whose threads the OS then refuses
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
        let env = Env { read: !self.ignore_environment, lenient: false };
        self.build_with(&env)
    }

    /// [`build`](Self::build), with bad environment values ignored (and
    /// reported) when `lenient`: for [`Engine::new`].
    pub(crate) fn build_leniently(self) -> Result<Engine, Error> {
        let env = Env { read: !self.ignore_environment, lenient: true };
        self.build_with(&env)
    }

    fn build_with(self, env: &Env) -> Result<Engine, Error> {
        if self.hooks.stack_size == Some(0) {
            return Err(Error::invalid("a worker thread's stack size must be above zero"));
        }
        let kind = match self.kind {
            Some(kind) => kind,
            None => env_kind(env)?.unwrap_or_default(),
        };
        let default_workers = std::thread::available_parallelism().map_or(1, NonZeroUsize::get);
        let topology = Topology {
            naive: kind == EngineKind::Naive,
            cpu_workers: setting(
                env,
                "cpu_workers",
                self.cpu_workers,
                ENV_CPU_WORKERS,
                default_workers,
                MAX_WORKERS,
            )?,
            priority_workers: setting(
                env,
                "priority_workers",
                self.priority_workers,
                ENV_PRIORITY_WORKERS,
                1,
                MAX_WORKERS,
            )?,
            cpu_devices: setting(env, "cpu_devices", self.cpu_devices, "", 1, MAX_CPU_DEVICES)?,
            thread_name: thread_name(self.thread_name)?,
            spin: spin(env, self.spin, ENV_SPIN_US, DEFAULT_SPIN)?,
            timing: flag(env, self.metrics_timing, ENV_METRICS_TIMING, false)?,
            pusher_runs_at: pusher_runs_at(env, self.pusher_runs_at)?,
            gpu: GpuSettings {
                workers: setting(env, "gpu_workers", self.gpu_workers, ENV_GPU_WORKERS, 1, MAX_WORKERS)?,
                copy_workers: setting(
                    env,
                    "gpu_copy_workers",
                    self.gpu_copy_workers,
                    ENV_GPU_COPY_WORKERS,
                    1,
                    MAX_WORKERS,
                )?,
                simulated: simulated_gpus(env, self.simulated_gpus)?,
                early_release: self.gpu_early_release.unwrap_or(true),
                spin: spin(env, self.gpu_spin, ENV_GPU_SPIN_US, Self::DEFAULT_GPU_SPIN)?,
            },
            hooks: self.hooks,
        };
        let bulk_size = setting(env, "bulk_size", self.bulk_size, ENV_BULK_SIZE, 1, usize::MAX)?;
        let max_in_flight = match self.max_in_flight {
            Some(given) => Some(in_bounds("max_in_flight", given, MAX_IN_FLIGHT).map_err(Error::invalid)?),
            None => env.count(ENV_MAX_IN_FLIGHT, MAX_IN_FLIGHT)?,
        };
        let throttle_at = count_from_zero(
            env,
            ("throttle_at", self.throttle_at),
            (ENV_THROTTLE_AT, "expected a count of ops, 0 for never"),
            DEFAULT_THROTTLE_AT,
            usize::MAX,
        )?;
        let watchdog = match self.watchdog {
            Some(threshold) => Some(watchdog_bounded(threshold).map_err(Error::invalid)?),
            None => env.get(ENV_WATCHDOG_MS, |raw| {
                let ms = raw
                    .trim()
                    .parse::<u64>()
                    .map_err(|_| format!("{ENV_WATCHDOG_MS}={raw:?}: expected a number of milliseconds"))?;
                watchdog_bounded(Duration::from_millis(ms))
            })?,
        };
        let track_holders = flag(env, self.track_holders, ENV_TRACK_HOLDERS, true)?;
        let profile_keep = env.count(ENV_PROFILE_KEEP, usize::MAX)?.unwrap_or(DEFAULT_KEEP);
        let profile_to = env.path(ENV_PROFILE);
        let config = Config {
            kind,
            topology,
            bulk_size,
            max_in_flight,
            throttle_at,
            watchdog,
            track_holders,
            profile_keep,
            profile_to,
        };
        let runtime = self.runtime.or_else(|| tokio::runtime::Handle::try_current().ok());
        Engine::from_config(config, runtime)
    }
}

/// A watchdog threshold, if it is above zero and within its bound.
fn watchdog_bounded(threshold: Duration) -> Result<Duration, String> {
    if threshold.is_zero() {
        return Err("the watchdog's threshold must be above zero".to_owned());
    }
    if threshold > MAX_WATCHDOG {
        return Err(format!("the watchdog's threshold {threshold:?} is past its bound of {MAX_WATCHDOG:?}"));
    }
    Ok(threshold)
}

/// Ops of a pushing thread queued at which it runs its next ones itself,
/// by default (see [`EngineBuilder::pusher_runs_at`]).
const DEFAULT_PUSHER_RUNS_AT: usize = 256;

/// Where a setting the builder left unset is read: the environment's
/// `DEPENGINE_*` variable, unless the builder ignores the environment
/// ([`EngineBuilder::ignore_environment`]). A value that does not parse,
/// or is out of bounds, is an error of `build`; for [`Engine::new`]
/// (`lenient`) it is reported (a `tracing` warning, target `depengine`)
/// and the default is used instead.
struct Env {
    read: bool,
    lenient: bool,
}

impl Env {
    /// Variable `name`, if set (and readable), parsed by `parse`, which
    /// says what is wrong with a bad value.
    fn get<T>(&self, name: &str, parse: impl FnOnce(&str) -> Result<T, String>) -> Result<Option<T>, Error> {
        if !self.read || name.is_empty() {
            return Ok(None);
        }
        let Some(raw) = std::env::var_os(name) else { return Ok(None) };
        let parsed = match raw.to_str() {
            Some(raw) => parse(raw),
            None => Err(format!("{name}={raw:?}: not UTF-8 text")),
        };
        match parsed {
            Ok(value) => Ok(Some(value)),
            Err(wrong) if self.lenient => {
                tracing::warn!(target: "depengine", "{wrong}: ignored, the setting's default is used");
                Ok(None)
            }
            Err(wrong) => Err(Error::invalid(wrong)),
        }
    }

    /// A path from variable `name`, if set and not empty: any bytes the OS
    /// allows in a path, UTF-8 or not.
    fn path(&self, name: &str) -> Option<PathBuf> {
        if !self.read {
            return None;
        }
        std::env::var_os(name).filter(|p| !p.is_empty()).map(PathBuf::from)
    }

    /// A count from variable `name`: from 1 to `max`.
    fn count(&self, name: &str, max: usize) -> Result<Option<usize>, Error> {
        self.get(name, |raw| {
            let value = raw
                .trim()
                .parse::<usize>()
                .map_err(|_| format!("{name}={raw:?}: expected a positive integer"))?;
            in_bounds(name, value, max)
        })
    }
}

/// `value`, if it is from 1 to `max`; else what is wrong, for `source`.
fn in_bounds(source: &str, value: usize, max: usize) -> Result<usize, String> {
    if value == 0 {
        return Err(format!("{source} must be at least 1"));
    }
    if value > max {
        return Err(format!("{source}={value} is past its bound of {max}"));
    }
    Ok(value)
}

/// A count that may be zero: the builder's `given` (named `what`), else
/// variable `name` (`expected` says what it should hold), else `default`;
/// at most `max`.
fn count_from_zero(
    env: &Env,
    (what, given): (&str, Option<usize>),
    (name, expected): (&str, &str),
    default: usize,
    max: usize,
) -> Result<usize, Error> {
    let bounded = |source: &str, n: usize| {
        if n > max { Err(format!("{source}={n} is past its bound of {max}")) } else { Ok(n) }
    };
    if let Some(n) = given {
        return bounded(what, n).map_err(Error::invalid);
    }
    let from_env = env.get(name, |raw| {
        let n = raw.trim().parse::<usize>().map_err(|_| format!("{name}={raw:?}: {expected}"))?;
        bounded(name, n)
    })?;
    Ok(from_env.unwrap_or(default))
}

fn pusher_runs_at(env: &Env, given: Option<usize>) -> Result<usize, Error> {
    let expected = "expected a count of ops, 0 for never";
    let max = MAX_WORKERS * 1024;
    count_from_zero(
        env,
        ("pusher_runs_at", given),
        (ENV_PUSHER_RUNS_AT, expected),
        DEFAULT_PUSHER_RUNS_AT,
        max,
    )
}

fn env_kind(env: &Env) -> Result<Option<EngineKind>, Error> {
    env.get(ENV_TYPE, |raw| match raw.trim().to_ascii_lowercase().as_str() {
        "threaded" | "threadedengineperdevice" => Ok(EngineKind::Threaded),
        "naive" | "naiveengine" => Ok(EngineKind::Naive),
        _ => Err(format!("{ENV_TYPE}={raw:?}: expected `threaded` or `naive`")),
    })
}

/// A spin budget: the builder's, else environment variable `name` (in
/// microseconds), else `default`; at most `MAX_SPIN`.
fn spin(env: &Env, given: Option<Duration>, name: &str, default: Duration) -> Result<Duration, Error> {
    let bounded = |spin: Duration| {
        if spin > MAX_SPIN {
            Err(format!("spin {spin:?} is past its bound of {MAX_SPIN:?}"))
        } else {
            Ok(spin)
        }
    };
    if let Some(spin) = given {
        return bounded(spin).map_err(Error::invalid);
    }
    let from_env = env.get(name, |raw| {
        let us = raw
            .trim()
            .parse::<u64>()
            .map_err(|_| format!("{name}={raw:?}: expected a number of microseconds"))?;
        bounded(Duration::from_micros(us))
    })?;
    Ok(from_env.unwrap_or(default))
}

/// A yes/no setting: the builder's, else environment variable `name`, else
/// `default`.
fn flag(env: &Env, given: Option<bool>, name: &str, default: bool) -> Result<bool, Error> {
    if let Some(on) = given {
        return Ok(on);
    }
    let from_env = env.get(name, |raw| match raw.trim().to_ascii_lowercase().as_str() {
        "1" | "true" | "on" | "yes" => Ok(true),
        "0" | "false" | "off" | "no" | "" => Ok(false),
        _ => Err(format!("{name}={raw:?}: expected 1 or 0")),
    })?;
    Ok(from_env.unwrap_or(default))
}

/// GPUs to simulate: the builder's, else `DEPENGINE_SIM_GPUS`, else 0.
fn simulated_gpus(env: &Env, given: Option<usize>) -> Result<usize, Error> {
    let expected = "expected a number of devices";
    count_from_zero(env, ("simulated_gpus", given), (ENV_SIM_GPUS, expected), 0, crate::gpu::MAX_GPU_DEVICES)
}

/// The thread name prefix, checked: the OS refuses a name with a NUL byte.
fn thread_name(given: Option<String>) -> Result<String, Error> {
    let name = given.unwrap_or_else(|| "depengine".to_owned());
    if name.contains('\0') {
        return Err(Error::invalid(format!("thread_name {name:?} contains a NUL byte")));
    }
    Ok(name)
}

/// A count: the builder's `given` value, else environment variable `name`
/// (none if empty), else `default`; from 1 to `max`.
fn setting(
    env: &Env,
    what: &str,
    given: Option<usize>,
    name: &str,
    default: usize,
    max: usize,
) -> Result<usize, Error> {
    match given {
        Some(value) => in_bounds(what, value, max).map_err(Error::invalid),
        None => Ok(env.count(name, max)?.unwrap_or(default)),
    }
}
