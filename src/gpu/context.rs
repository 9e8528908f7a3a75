//! What a GPU op's body receives besides its guards: [`GpuContext`], with
//! the worker's stream and copies between host and device buffers that
//! work on either backend.

use std::time::Duration;

use super::GpuElement;
use super::backend::Stream;
use super::buffer::{BufferKind, Gpu, GpuBuffer, HostBuffer, HostKind};
use super::sim::SimBuffer;
use crate::device::{Device, Lane};
use crate::error::{Error, GpuFault};

/// The simulated copy engine's rate, in bytes per second (PCIe-like).
const SIM_COPY_RATE: f64 = 12e9;

/// What a GPU op's body receives besides its guards: the worker's stream
/// to enqueue on, and where it runs.
///
/// The body only *enqueues* work and returns; the engine records an event
/// behind it, and the op completes when the poller sees that event
/// complete.
///
/// A body may enqueue work on this stream that reads its read guards'
/// buffers and writes its write guards' buffers, and may replace a written
/// buffer (the old one is freed on this stream, after the op's work). It
/// must not enqueue on another stream, block on the GPU, clone a cudarc
/// `CudaSlice` (the clone is made on the stream the buffer was made on,
/// ordered with none of the op's work: [`copy`](Self::copy) into a buffer
/// made beforehand instead), or keep a device pointer beyond the body.
/// Blocking holds up the worker: the simulated stream's synchronize is
/// refused in debug builds, but a raw CUDA stream's blocking calls
/// (`synchronize`, `clone_dtoh`, `clone_htod`, copies from or to pageable
/// memory) are not caught.
pub struct GpuContext<'a> {
    pub(crate) stream: &'a Stream,
    pub(crate) gpu: &'a Gpu,
    pub(crate) lane: Lane,
}

impl std::fmt::Debug for GpuContext<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GpuContext").field("stream", self.stream).field("lane", &self.lane).finish()
    }
}

impl GpuContext<'_> {
    /// The stream to enqueue work on.
    pub fn stream(&self) -> &Stream {
        self.stream
    }

    /// The simulated stream, on a simulated device.
    pub fn sim_stream(&self) -> Option<&super::sim::SimStream> {
        self.stream.sim()
    }

    /// The CUDA stream, on a real device.
    #[cfg(feature = "cuda")]
    pub fn cuda_stream(&self) -> Option<&std::sync::Arc<cudarc::driver::CudaStream>> {
        self.stream.cuda()
    }

    /// The device the op runs on.
    pub fn device(&self) -> Device {
        Device::Gpu(self.gpu.ordinal())
    }

    /// The device, to reach its simulator or CUDA context.
    pub fn gpu(&self) -> &Gpu {
        self.gpu
    }

    /// The lane of the worker.
    pub fn lane(&self) -> Lane {
        self.lane
    }

    fn error(&self, err: GpuFault) -> Error {
        Error::gpu(None, self.gpu.ordinal(), err)
    }

    /// Enqueues a copy of `src` (host) into `dst` (device).
    ///
    /// # Errors
    ///
    /// Lengths that differ, buffers of another backend, or a CUDA error.
    pub fn copy_to_gpu<T: GpuElement>(
        &self,
        src: &HostBuffer<T>,
        dst: &mut GpuBuffer<T>,
    ) -> Result<(), Error> {
        check_len(src.len(), dst.len())?;
        match (&src.kind, &mut dst.kind) {
            (HostKind::Sim(s), BufferKind::Sim(d)) => self.sim_copy(s, d),
            #[cfg(feature = "cuda")]
            (HostKind::Cuda(s), BufferKind::Cuda(d)) => {
                super::cuda::htod(self.cuda()?, s, d).map_err(|e| self.error(e))
            }
            #[cfg(feature = "cuda")]
            _ => Err(Error::invalid("a copy between buffers of a simulated and a real device")),
        }
    }

    /// Enqueues a copy of `src` (device) into `dst` (host).
    ///
    /// # Errors
    ///
    /// As for [`copy_to_gpu`](Self::copy_to_gpu).
    pub fn copy_to_host<T: GpuElement>(
        &self,
        src: &GpuBuffer<T>,
        dst: &mut HostBuffer<T>,
    ) -> Result<(), Error> {
        check_len(src.len(), dst.len())?;
        match (&src.kind, &mut dst.kind) {
            (BufferKind::Sim(s), HostKind::Sim(d)) => self.sim_copy(s, d),
            #[cfg(feature = "cuda")]
            (BufferKind::Cuda(s), HostKind::Cuda(d)) => {
                super::cuda::dtoh(self.cuda()?, s, d).map_err(|e| self.error(e))
            }
            #[cfg(feature = "cuda")]
            _ => Err(Error::invalid("a copy between buffers of a simulated and a real device")),
        }
    }

    /// Enqueues a copy of `src` into `dst`, both on the device.
    ///
    /// # Errors
    ///
    /// As for [`copy_to_gpu`](Self::copy_to_gpu).
    pub fn copy<T: GpuElement>(&self, src: &GpuBuffer<T>, dst: &mut GpuBuffer<T>) -> Result<(), Error> {
        check_len(src.len(), dst.len())?;
        match (&src.kind, &mut dst.kind) {
            (BufferKind::Sim(s), BufferKind::Sim(d)) => self.sim_copy(s, d),
            #[cfg(feature = "cuda")]
            (BufferKind::Cuda(s), BufferKind::Cuda(d)) => {
                super::cuda::dtod(self.cuda()?, s, d).map_err(|e| self.error(e))
            }
            #[cfg(feature = "cuda")]
            _ => Err(Error::invalid("a copy between buffers of a simulated and a real device")),
        }
    }

    #[cfg(feature = "cuda")]
    fn cuda(&self) -> Result<&std::sync::Arc<cudarc::driver::CudaStream>, Error> {
        self.stream.cuda().ok_or_else(|| Error::invalid("a CUDA buffer on a simulated device's stream"))
    }

    fn sim_copy<T: GpuElement>(&self, src: &SimBuffer<T>, dst: &mut SimBuffer<T>) -> Result<(), Error> {
        let stream = self
            .stream
            .sim()
            .ok_or_else(|| Error::invalid("a simulated buffer on a real device's stream"))?;
        let bytes = (src.len() * std::mem::size_of::<T>()) as f64;
        let (ts, r) = src.reader();
        let (td, w) = dst.writer();
        let work = move || {
            let data = r.with(<[T]>::to_vec);
            w.with(|d| d.clone_from_slice(&data));
        };
        stream
            .launch("copy", Duration::from_secs_f64(bytes / SIM_COPY_RATE), vec![ts, td], work)
            .map_err(|e| self.error(e))
    }
}

fn check_len(src: usize, dst: usize) -> Result<(), Error> {
    if src != dst {
        return Err(Error::invalid(format!("a copy of {src} elements into a buffer of {dst}")));
    }
    Ok(())
}
