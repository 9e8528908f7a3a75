//! What an engine runs with: its kind, the settings it reports
//! ([`Settings`]), the configuration the running engine reads
//! ([`Config`]), and each setting's bound and default. `settle.rs` makes a
//! `Config` of a builder's choices and the environment; the builder
//! (`engine_builder.rs`) is the front door, and nothing of the running
//! engine names it.

use std::path::PathBuf;
use std::time::Duration;

use crate::exec::Topology;

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

/// Ops in flight past which a pushing thread waits for the workers, by
/// default (see [`EngineBuilder::throttle_at`](crate::EngineBuilder::throttle_at); PERFORMANCE.md, *The soft
/// bound on ops in flight*).
pub(crate) const DEFAULT_THROTTLE_AT: usize = 4096;

/// How long an idle worker watches its queues before it parks, by default:
/// at one request at a time it saves a third of the CPU per request against
/// 50 µs, for the same latency, and no workload measured slower
/// (PERFORMANCE-HISTORY.md, *Idle cost at low load*).
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
pub(crate) const MAX_WATCHDOG: Duration = Duration::from_secs(24 * 60 * 60);

/// The largest bound on ops in flight (see [`EngineBuilder::max_in_flight`](crate::EngineBuilder::max_in_flight)).
pub(crate) const MAX_IN_FLIGHT: usize = tokio::sync::Semaphore::MAX_PERMITS;

/// How long idle GPU workers and pollers watch for work before they park,
/// by default (see [`EngineBuilder::gpu_spin`](crate::EngineBuilder::gpu_spin)).
pub(crate) const DEFAULT_GPU_SPIN: Duration = Duration::from_micros(100);

/// Ops of a pushing thread queued at which it runs its next ones itself,
/// by default (see [`EngineBuilder::pusher_runs_at`](crate::EngineBuilder::pusher_runs_at)).
pub(crate) const DEFAULT_PUSHER_RUNS_AT: usize = 256;

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
    /// The engine type ([`EngineBuilder::kind`](crate::EngineBuilder::kind)).
    pub kind: EngineKind,
    /// Worker threads per CPU device ([`EngineBuilder::cpu_workers`](crate::EngineBuilder::cpu_workers)).
    pub cpu_workers: usize,
    /// How long an idle worker watches its queues ([`EngineBuilder::spin`](crate::EngineBuilder::spin)).
    pub spin: Duration,
    /// Most ops fused into one bulk segment; 1: bulk execution is off
    /// ([`EngineBuilder::bulk_size`](crate::EngineBuilder::bulk_size)).
    pub bulk_size: usize,
    /// The bound on user ops in flight, if any ([`EngineBuilder::max_in_flight`](crate::EngineBuilder::max_in_flight)).
    pub max_in_flight: Option<usize>,
    /// Ops in flight past which a pushing thread waits for the workers; 0:
    /// never ([`EngineBuilder::throttle_at`](crate::EngineBuilder::throttle_at)).
    pub throttle_at: usize,
    /// Compute workers per GPU device ([`EngineBuilder::gpu_workers`](crate::EngineBuilder::gpu_workers)).
    pub gpu_workers: usize,
    /// Workers per GPU device and copy lane ([`EngineBuilder::gpu_copy_workers`](crate::EngineBuilder::gpu_copy_workers)).
    pub gpu_copy_workers: usize,
    /// GPUs `Gpu(0)` to `Gpu(n - 1)` are simulated ([`EngineBuilder::simulated_gpus`](crate::EngineBuilder::simulated_gpus)).
    pub simulated_gpus: usize,
    /// How long idle GPU workers and pollers watch for work
    /// ([`EngineBuilder::gpu_spin`](crate::EngineBuilder::gpu_spin)).
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
