//! What the engine needs of a GPU, over its two backends: the simulated
//! device (always built) and CUDA through cudarc (feature `cuda`).

use std::sync::Arc;

#[cfg(feature = "cuda")]
use super::cuda;
use super::sim::{SimEvent, SimGpu, SimStream};
use crate::error::GpuFault;

/// A device's backend.
#[derive(Clone)]
pub(crate) enum Backend {
    Sim(Arc<SimGpu>),
    #[cfg(feature = "cuda")]
    Cuda(Arc<cudarc::driver::CudaContext>),
}

/// A stream of a GPU device, as a GPU op's body receives it: work enqueued
/// on it runs in order, after the engine's waits for the op's inputs.
#[derive(Clone)]
pub struct Stream {
    /// Unique within its device: the poller keeps one queue per stream.
    pub(crate) id: usize,
    pub(crate) kind: StreamKind,
}

#[derive(Clone)]
pub(crate) enum StreamKind {
    Sim(SimStream),
    #[cfg(feature = "cuda")]
    Cuda(Arc<cudarc::driver::CudaStream>),
}

impl std::fmt::Debug for Stream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.kind {
            StreamKind::Sim(_) => write!(f, "Stream(sim #{})", self.id),
            #[cfg(feature = "cuda")]
            StreamKind::Cuda(_) => write!(f, "Stream(cuda #{})", self.id),
        }
    }
}

impl Stream {
    /// The simulated stream, on a simulated device.
    pub fn sim(&self) -> Option<&SimStream> {
        match &self.kind {
            StreamKind::Sim(s) => Some(s),
            #[cfg(feature = "cuda")]
            StreamKind::Cuda(_) => None,
        }
    }

    /// The CUDA stream, on a real device: launch kernels and copies on it
    /// with cudarc.
    #[cfg(feature = "cuda")]
    pub fn cuda(&self) -> Option<&Arc<cudarc::driver::CudaStream>> {
        match &self.kind {
            StreamKind::Cuda(s) => Some(s),
            StreamKind::Sim(_) => None,
        }
    }

    /// A per-device id of the stream.
    pub fn id(&self) -> usize {
        self.id
    }

    pub(crate) fn record(&self, event: &RawEvent) -> Result<(), GpuFault> {
        match (&self.kind, event) {
            (StreamKind::Sim(s), RawEvent::Sim(e)) => s.gpu().record(e, s.index()),
            #[cfg(feature = "cuda")]
            (StreamKind::Cuda(s), RawEvent::Cuda(e)) => cuda::record(e, s),
            #[cfg(feature = "cuda")]
            _ => Err(GpuFault::ForeignEvent { call: "cuEventRecord" }),
        }
    }

    /// Blocks until the work enqueued on this stream so far has run; the
    /// device's sticky fault as an error. Never called on an engine
    /// thread (see `drain.rs`).
    pub(crate) fn synchronize(&self) -> Result<(), GpuFault> {
        match &self.kind {
            StreamKind::Sim(s) => s.gpu().drain(s.index()),
            #[cfg(feature = "cuda")]
            StreamKind::Cuda(s) => cuda::synchronize(s),
        }
    }

    /// Makes work enqueued on this stream from now on wait for `event`.
    pub(crate) fn wait(&self, event: &RawEvent) -> Result<(), GpuFault> {
        match (&self.kind, event) {
            (StreamKind::Sim(s), RawEvent::Sim(e)) => s.gpu().wait(e, s.index()),
            #[cfg(feature = "cuda")]
            (StreamKind::Cuda(s), RawEvent::Cuda(e)) => cuda::wait(s, e),
            #[cfg(feature = "cuda")]
            _ => Err(GpuFault::ForeignEvent { call: "cuStreamWaitEvent" }),
        }
    }
}

/// An event of a backend.
pub(crate) enum RawEvent {
    Sim(Arc<SimEvent>),
    #[cfg(feature = "cuda")]
    Cuda(cudarc::driver::CudaEvent),
}

impl Backend {
    /// A stream; `prioritized`: of the device's greatest priority.
    pub(crate) fn new_stream(&self, id: usize, prioritized: bool) -> Result<Stream, GpuFault> {
        // The simulated device has no priorities.
        let _ = prioritized;
        let kind = match self {
            Backend::Sim(gpu) => StreamKind::Sim(gpu.new_stream()),
            #[cfg(feature = "cuda")]
            Backend::Cuda(ctx) => StreamKind::Cuda(cuda::new_stream(ctx, prioritized)?),
        };
        Ok(Stream { id, kind })
    }

    pub(crate) fn new_event(&self) -> Result<RawEvent, GpuFault> {
        match self {
            Backend::Sim(_) => Ok(RawEvent::Sim(Arc::default())),
            #[cfg(feature = "cuda")]
            Backend::Cuda(ctx) => cuda::new_event(ctx).map(RawEvent::Cuda),
        }
    }

    /// Whether the work recorded in `event` has run; the device's sticky
    /// fault as an error.
    pub(crate) fn query(&self, event: &RawEvent) -> Result<bool, GpuFault> {
        match (self, event) {
            (Backend::Sim(gpu), RawEvent::Sim(e)) => gpu.query(e),
            #[cfg(feature = "cuda")]
            (Backend::Cuda(_), RawEvent::Cuda(e)) => cuda::query(e),
            #[cfg(feature = "cuda")]
            _ => Err(GpuFault::ForeignEvent { call: "cuEventQuery" }),
        }
    }

    /// Binds the device's context to the calling thread.
    pub(crate) fn bind(&self) -> Result<(), GpuFault> {
        match self {
            Backend::Sim(_) => Ok(()),
            #[cfg(feature = "cuda")]
            Backend::Cuda(ctx) => cuda::bind(ctx),
        }
    }

    pub(crate) fn stop(&self, join: bool) {
        match self {
            Backend::Sim(gpu) => gpu.stop(join),
            #[cfg(feature = "cuda")]
            Backend::Cuda(_) => {}
        }
    }
}
