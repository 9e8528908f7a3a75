//! Device memory as var data: [`GpuBuffer`], and the handle to a device
//! that allocates it ([`Gpu`]).

use std::sync::Arc;

use super::device::GpuDevice;
use super::sim::{SimBuffer, SimGpu};
use crate::error::Error;

/// A buffer of `T` in a GPU's memory, to be held in a var
/// (`Var<GpuBuffer<T>>`): a GPU op's read guard gives `&GpuBuffer<T>`, its
/// write guard `&mut GpuBuffer<T>`, so the engine's ordering is the only
/// way to reach it.
pub struct GpuBuffer<T> {
    kind: BufferKind<T>,
}

enum BufferKind<T> {
    Sim(SimBuffer<T>),
    #[cfg(feature = "cuda")]
    Cuda(cudarc::driver::CudaSlice<T>),
}

impl<T> std::fmt::Debug for GpuBuffer<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.kind {
            BufferKind::Sim(b) => write!(f, "GpuBuffer({b:?})"),
            #[cfg(feature = "cuda")]
            BufferKind::Cuda(b) => write!(f, "GpuBuffer(cuda, len {})", b.len()),
        }
    }
}

impl<T> GpuBuffer<T> {
    /// Elements in the buffer.
    pub fn len(&self) -> usize {
        match &self.kind {
            BufferKind::Sim(b) => b.len(),
            #[cfg(feature = "cuda")]
            BufferKind::Cuda(b) => b.len(),
        }
    }

    /// Whether the buffer is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The buffer of a simulated device.
    pub fn sim(&self) -> Option<&SimBuffer<T>> {
        match &self.kind {
            BufferKind::Sim(b) => Some(b),
            #[cfg(feature = "cuda")]
            BufferKind::Cuda(_) => None,
        }
    }

    /// The buffer of a simulated device, mutably.
    pub fn sim_mut(&mut self) -> Option<&mut SimBuffer<T>> {
        match &mut self.kind {
            BufferKind::Sim(b) => Some(b),
            #[cfg(feature = "cuda")]
            BufferKind::Cuda(_) => None,
        }
    }

    /// The CUDA buffer, on a real device.
    #[cfg(feature = "cuda")]
    pub fn cuda(&self) -> Option<&cudarc::driver::CudaSlice<T>> {
        match &self.kind {
            BufferKind::Cuda(b) => Some(b),
            BufferKind::Sim(_) => None,
        }
    }

    /// The CUDA buffer, on a real device, mutably.
    #[cfg(feature = "cuda")]
    pub fn cuda_mut(&mut self) -> Option<&mut cudarc::driver::CudaSlice<T>> {
        match &mut self.kind {
            BufferKind::Cuda(b) => Some(b),
            BufferKind::Sim(_) => None,
        }
    }
}

impl<T> From<SimBuffer<T>> for GpuBuffer<T> {
    fn from(b: SimBuffer<T>) -> Self {
        Self { kind: BufferKind::Sim(b) }
    }
}

#[cfg(feature = "cuda")]
impl<T> From<cudarc::driver::CudaSlice<T>> for GpuBuffer<T> {
    fn from(b: cudarc::driver::CudaSlice<T>) -> Self {
        Self { kind: BufferKind::Cuda(b) }
    }
}

/// A GPU device of an engine, opened: from
/// [`Engine::gpu`](crate::Engine::gpu). Allocates buffers and reports on
/// the device.
#[derive(Clone)]
pub struct Gpu {
    pub(crate) device: Arc<GpuDevice>,
}

impl std::fmt::Debug for Gpu {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gpu")
            .field("ordinal", &self.device.ordinal)
            .field("simulated", &self.device.sim().is_some())
            .field("fault", &self.device.fault())
            .finish_non_exhaustive()
    }
}

impl Gpu {
    /// The device's ordinal.
    pub fn ordinal(&self) -> usize {
        self.device.ordinal
    }

    /// The simulated GPU, if the device is simulated.
    pub fn sim(&self) -> Option<&Arc<SimGpu>> {
        self.device.sim()
    }

    /// The CUDA context, on a real device.
    #[cfg(feature = "cuda")]
    pub fn cuda(&self) -> Option<&Arc<cudarc::driver::CudaContext>> {
        match &self.device.backend {
            super::backend::Backend::Cuda(ctx) => Some(ctx),
            super::backend::Backend::Sim(_) => None,
        }
    }

    /// The device's sticky fault, once it had one: every later GPU push to
    /// it is refused with it.
    pub fn fault(&self) -> Option<String> {
        self.device.fault().cloned()
    }

    /// GPU ops whose event the device's poller has observed complete.
    pub fn completions(&self) -> u64 {
        self.device.completions()
    }

    /// Events in the device's pool, ready to be recorded again.
    pub fn pooled_events(&self) -> usize {
        self.device.pooled_events()
    }

    /// A buffer holding `data`, on a simulated device.
    ///
    /// # Errors
    ///
    /// [`Error::is_unsupported`] on a real device: allocate there with
    /// cudarc (`stream.alloc_zeros`, `memcpy_stod`) and wrap the slice with
    /// `GpuBuffer::from`.
    pub fn sim_buffer<T: Clone + Send + 'static>(&self, data: Vec<T>) -> Result<GpuBuffer<T>, Error> {
        match self.device.sim() {
            Some(gpu) => Ok(SimBuffer::new(gpu, data).into()),
            None => Err(Error::unsupported(format!("gpu({}) is not simulated", self.device.ordinal))),
        }
    }
}
