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
    ///
    /// # Examples
    ///
    /// ```
    /// let engine = depengine::Engine::builder().simulated_gpus(2).build()?;
    /// let second = engine.gpu(1)?;
    /// assert_eq!(second.ordinal(), 1);
    /// let buf = second.sim_buffer(vec![0u8; 16])?; // a buffer on that device
    /// assert_eq!(buf.len(), 16);
    /// # Ok::<(), depengine::Error>(())
    /// ```
    pub fn gpu(&self, ordinal: usize) -> Result<Gpu, Error> {
        self.shared().dispatcher.gpu(ordinal)
    }
}
