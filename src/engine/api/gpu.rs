//! The engine's GPU devices, as its handle shows them.

use super::Engine;
use crate::error::Error;
use crate::gpu::Gpu;

impl Engine {
    /// GPU `ordinal`, opened (its pools started) if it had not been: to
    /// allocate buffers and to reach its simulator or CUDA context.
    ///
    /// # Errors
    ///
    /// The device cannot be used ([`Error::is_gpu_unavailable`], naming
    /// what is missing: a build without feature `cuda`, no driver, no such
    /// device), or its pools cannot start.
    pub fn gpu(&self, ordinal: usize) -> Result<Gpu, Error> {
        self.shared().dispatcher.gpu(ordinal)
    }

    /// Compute workers per GPU device (see [`EngineBuilder::gpu_workers`](crate::EngineBuilder::gpu_workers)).
    pub fn gpu_workers(&self) -> usize {
        self.shared().config.topology.gpu.workers
    }

    /// Workers per GPU device and copy lane (see
    /// [`EngineBuilder::gpu_copy_workers`](crate::EngineBuilder::gpu_copy_workers)).
    pub fn gpu_copy_workers(&self) -> usize {
        self.shared().config.topology.gpu.copy_workers
    }

    /// GPUs `Gpu(0)` to `Gpu(n - 1)` are simulated (see
    /// [`EngineBuilder::simulated_gpus`](crate::EngineBuilder::simulated_gpus)).
    pub fn simulated_gpus(&self) -> usize {
        self.shared().config.topology.gpu.simulated
    }
}
