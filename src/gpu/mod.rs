//! GPU ops: an opened device ([`Gpu`], from
//! [`Engine::gpu`](crate::Engine::gpu)) allocates device and host buffers
//! ([`GpuBuffer`], [`HostBuffer`]) of [`GpuElement`]s, which vars hold; a
//! GPU op's body gets a [`GpuContext`] with the [`Stream`] its worker owns,
//! enqueues its work there and returns. The op completes when the GPU has
//! done that work: the engine records an event after it and polls it, so
//! no thread waits on the GPU. Real GPUs need feature `cuda`; without a
//! GPU the same API runs on the simulated device ([`sim`]), which also
//! reports work of two streams on one buffer with no event between them.

// For maintainers:
// GPU devices, below the var and op layers: the backends (a simulated
// device, always built, and CUDA through cudarc with feature `cuda`),
// events from a pool, and the per-device poller that turns event
// completions into callbacks. Nothing here knows vars or ops; the op layer
// hands the poller a callback that completes an op. `README.md` beside
// this file has the design and the argument for early release.

pub(crate) mod backend;
pub(crate) mod blocking;
mod buffer;
mod context;
#[cfg(feature = "cuda")]
mod cuda;
mod drain;
pub(crate) mod early_release;
mod element;
pub(crate) mod event;
mod gpu_device;
mod poller;
pub mod sim;

use std::cell::RefCell;
use std::sync::Arc;

pub use crate::error::GpuFault;
// The foreign crates in this module's API, at the versions the engine is
// built with: `Pod`, what a GPU buffer holds; cudarc's streams and slices
// (feature `cuda`).
pub use backend::Stream;
pub use buffer::{Gpu, GpuBuffer, HostBuffer};
pub use bytemuck;
pub use context::GpuContext;
#[cfg(feature = "cuda")]
#[cfg_attr(docsrs, doc(cfg(feature = "cuda")))]
pub use cudarc;
pub(crate) use early_release::{FenceWait, Fences};
pub use element::GpuElement;
pub(crate) use event::Event;
pub(crate) use gpu_device::GpuDevice;

use crate::device::Lane;

/// Most GPU devices an engine may use.
pub(crate) const MAX_GPU_DEVICES: usize = 64;

thread_local! {
    /// The stream of the GPU worker running on this thread, with its
    /// device's ordinal and its lane.
    static WORKER: RefCell<Option<(usize, Lane, Stream)>> = const { RefCell::new(None) };
}

/// Makes this thread a GPU worker of `device`'s `lane`, owning `stream`:
/// binds the device's context and marks the thread as one that must never
/// block on the GPU.
pub(crate) fn become_worker(device: &GpuDevice, lane: Lane, stream: Stream) {
    if let Err(err) = device.backend.bind() {
        tracing::error!(target: "depengine", "gpu({}): cannot bind the context of a worker: {err}", device.ordinal);
    }
    blocking::mark_engine_thread();
    WORKER.with(|w| *w.borrow_mut() = Some((device.ordinal, lane, stream)));
}

/// The stream of this thread if it is a worker of `ordinal`'s `lane`.
pub(crate) fn worker_stream(ordinal: usize, lane: Lane) -> Option<Stream> {
    WORKER.with(|w| match &*w.borrow() {
        Some((o, l, s)) if *o == ordinal && *l == lane => Some(s.clone()),
        _ => None,
    })
}

/// The stream of this thread, if it is a GPU worker.
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
pub(crate) fn current_worker_stream() -> Option<Stream> {
    WORKER.with(|w| w.borrow().as_ref().map(|(_, _, s)| s.clone()))
}

/// A lane of a GPU device as an op is placed on it: the device, and the
/// stream an op of this lane uses when it runs on a thread that is not one
/// of the lane's workers.
#[derive(Clone)]
pub(crate) struct GpuLane {
    pub(crate) gpu: Gpu,
    pub(crate) lane: Lane,
    pub(crate) fallback: Stream,
    /// The engine's record of GPU work in flight per var.
    pub(crate) fences: Arc<Fences>,
    /// Ops of this lane let their vars go at enqueue.
    pub(crate) early: bool,
}

impl GpuLane {
    pub(crate) fn new(
        device: Arc<GpuDevice>,
        lane: Lane,
        fallback: Stream,
        fences: Arc<Fences>,
        early: bool,
    ) -> Self {
        Self { gpu: Gpu { device }, lane, fallback, fences, early }
    }

    /// The stream for an op of this lane running on this thread.
    pub(crate) fn stream(&self) -> Stream {
        worker_stream(self.gpu.ordinal(), self.lane).unwrap_or_else(|| self.fallback.clone())
    }
}
