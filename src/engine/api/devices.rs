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
}
