//! Devices and lanes: where an op runs.

use std::fmt;

/// The device an op is placed on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum Device {
    /// CPU device `i`: a pool of dedicated worker threads. Most programs use
    /// only `Cpu(0)`; more devices (see
    /// [`EngineBuilder::cpu_devices`](crate::EngineBuilder::cpu_devices)) give
    /// separate pools, e.g. one per NUMA node.
    Cpu(usize),
    /// GPU `i`: its compute workers, copy lanes and prioritized lane, each
    /// worker owning a stream; GPU ops are pushed with
    /// `OpBuilder::run_gpu`. Real through CUDA
    /// with feature `cuda`, or simulated (see
    /// [`EngineBuilder::simulated_gpus`](crate::EngineBuilder::simulated_gpus)).
    Gpu(usize),
}

impl Default for Device {
    fn default() -> Self {
        Device::Cpu(0)
    }
}

impl fmt::Display for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Device::Cpu(i) => write!(f, "cpu({i})"),
            Device::Gpu(i) => write!(f, "gpu({i})"),
        }
    }
}

/// The kind of work an op is, which decides the worker pool that runs it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Lane {
    /// The device's normal pool.
    #[default]
    Normal,
    /// One shared pool of CPU workers for latency-sensitive ops, whatever
    /// their device (MXNet's `kCPUPrioritized`).
    Prioritized,
    /// Run on the thread that makes the op ready: the pushing thread when its
    /// vars are free at push, else the thread that completes its last
    /// dependency. For short, non-blocking bodies only.
    Inline,
    /// Host-to-GPU copies, on the GPU's copy workers.
    CopyToGpu,
    /// GPU-to-host copies, on the GPU's copy workers.
    CopyFromGpu,
    /// Collectives across GPUs (NCCL, feature `nccl`), on the GPU's one
    /// communication worker and its stream: a collective's kernels wait
    /// for the other ranks, so they get a stream that no compute queues
    /// behind.
    Collective,
}
