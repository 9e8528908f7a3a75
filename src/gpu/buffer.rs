//! Device memory as var data: [`GpuBuffer`], and the handle to a device
//! that allocates it ([`Gpu`]).

use std::sync::Arc;

use super::GpuElement;
use super::gpu_device::GpuDevice;
use super::sim::{SimBuffer, SimGpu};
use crate::error::{Error, GpuFault};

/// Page-locked host memory for copies to and from a GPU, to be held in a
/// var (`Var<HostBuffer<T>>`): a copy op on a GPU's copy lane reads or
/// writes it on the GPU's schedule, and CPU ops reach its data once that
/// copy has completed (the engine holds them back until then).
pub struct HostBuffer<T> {
    pub(crate) kind: HostKind<T>,
}

pub(crate) enum HostKind<T> {
    Sim(SimBuffer<T>),
    #[cfg(feature = "cuda")]
    Cuda(super::cuda::Pinned<T>),
}

impl<T> std::fmt::Debug for HostBuffer<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "HostBuffer(len {})", self.len())
    }
}

impl<T> HostBuffer<T> {
    /// Elements in the buffer.
    pub fn len(&self) -> usize {
        match &self.kind {
            HostKind::Sim(b) => b.len(),
            #[cfg(feature = "cuda")]
            HostKind::Cuda(b) => b.len(),
        }
    }

    /// Whether the buffer is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl<T: GpuElement> HostBuffer<T> {
    /// A copy of the data.
    ///
    /// # Errors
    ///
    /// A CUDA error reaching the memory.
    pub fn to_vec(&self) -> Result<Vec<T>, Error> {
        match &self.kind {
            HostKind::Sim(b) => Ok(b.to_vec()),
            #[cfg(feature = "cuda")]
            HostKind::Cuda(b) => Ok(b.as_slice().to_vec()),
        }
    }

    /// Overwrites the data with `src` (of the same length).
    ///
    /// # Errors
    ///
    /// A length that differs ([`Error::is_invalid_argument`]), or a CUDA
    /// error reaching the memory.
    pub fn copy_from_slice(&mut self, src: &[T]) -> Result<(), Error> {
        if src.len() != self.len() {
            return Err(Error::invalid(format!(
                "{} elements into a host buffer of {}",
                src.len(),
                self.len()
            )));
        }
        match &mut self.kind {
            HostKind::Sim(b) => b.copy_from_slice(src),
            #[cfg(feature = "cuda")]
            HostKind::Cuda(b) => b.as_mut_slice().clone_from_slice(src),
        }
        Ok(())
    }
}

/// A buffer of `T` in a GPU's memory, to be held in a var
/// (`Var<GpuBuffer<T>>`): a GPU op's read guard gives `&GpuBuffer<T>`, its
/// write guard `&mut GpuBuffer<T>`, so the engine's ordering is the only
/// way to reach it.
pub struct GpuBuffer<T> {
    pub(crate) kind: BufferKind<T>,
}

pub(crate) enum BufferKind<T> {
    Sim(SimBuffer<T>),
    /// Dropped by `GpuBuffer`'s drop, with its context bound.
    #[cfg(feature = "cuda")]
    Cuda(std::mem::ManuallyDrop<cudarc::driver::CudaSlice<T>>),
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
            BufferKind::Cuda(b) => Some(&**b),
            BufferKind::Sim(_) => None,
        }
    }

    /// The CUDA buffer, on a real device, mutably.
    #[cfg(feature = "cuda")]
    pub fn cuda_mut(&mut self) -> Option<&mut cudarc::driver::CudaSlice<T>> {
        match &mut self.kind {
            BufferKind::Cuda(b) => Some(&mut **b),
            BufferKind::Sim(_) => None,
        }
    }
}

/// cudarc frees device memory without making its context current, which
/// fails on a thread that never bound it (a Tokio task, a CPU worker, the
/// caller of `delete_var`), and parks a failed free's error for whichever
/// cudarc call comes next, on any thread. So the drop binds the buffer's
/// context first (as cudarc's own drops of streams and events do), and
/// takes back any error the free parked, reporting it as the free's.
///
/// Where the free goes: dropped by a GPU op's body (a buffer it replaced
/// through its write guard), on that op's stream, after its waits and its
/// work; anywhere else, every GPU access of the buffer's var has completed
/// already (the engine holds other threads back until then), and cudarc
/// frees it on the device's setup stream.
impl<T> Drop for GpuBuffer<T> {
    fn drop(&mut self) {
        #[cfg(feature = "cuda")]
        if let BufferKind::Cuda(slice) = &mut self.kind {
            let on = super::current_worker_stream();
            super::cuda::drop_buffer(slice, on.as_ref().and_then(super::Stream::cuda));
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
        Self { kind: BufferKind::Cuda(std::mem::ManuallyDrop::new(b)) }
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

    /// The CUDA driver's version (`cuDriverGetVersion`: 12080 for 12.8), on
    /// a real device.
    ///
    /// # Errors
    ///
    /// [`Error::is_unsupported`] on a simulated device, or a CUDA error.
    pub fn driver_version(&self) -> Result<i32, Error> {
        match &self.device.backend {
            super::backend::Backend::Sim(_) => {
                Err(Error::unsupported(format!("gpu({}) is simulated: it has no driver", self.ordinal())))
            }
            #[cfg(feature = "cuda")]
            super::backend::Backend::Cuda(_) => {
                super::cuda::driver_version().map_err(|e| Error::gpu(None, self.ordinal(), e))
            }
        }
    }

    /// The device's sticky fault, once it had one: every later GPU push to
    /// it is refused with it.
    pub fn fault(&self) -> Option<GpuFault> {
        self.device.fault().cloned()
    }

    /// GPU ops whose event the device's poller has observed complete.
    pub fn completions(&self) -> u64 {
        self.device.completions()
    }

    /// Events the device has created: an op takes one from the pool when
    /// the pool has one, so this stays near the most ops in flight at once.
    pub fn events_created(&self) -> usize {
        self.device.events_created()
    }

    /// Events in the device's pool, ready to be recorded again.
    pub fn pooled_events(&self) -> usize {
        self.device.pooled_events()
    }

    /// A buffer in the device's memory holding `data`. On a real device
    /// the copy is waited for: setup work, refused (in debug builds) on an
    /// engine thread.
    ///
    /// # Errors
    ///
    /// A CUDA error (out of memory, a sticky fault).
    pub fn buffer<T: GpuElement>(&self, data: &[T]) -> Result<GpuBuffer<T>, Error> {
        match &self.device.backend {
            super::backend::Backend::Sim(gpu) => Ok(SimBuffer::new(gpu, data.to_vec()).into()),
            #[cfg(feature = "cuda")]
            super::backend::Backend::Cuda(_) => {
                super::blocking::check("Gpu::buffer");
                let made = self.device.setup_stream().and_then(|stream| {
                    let stream = stream.cuda().expect("a CUDA device's streams are CUDA streams");
                    super::cuda::buffer(stream, data)
                });
                Ok(made.map_err(|e| Error::gpu(None, self.ordinal(), e))?.into())
            }
        }
    }

    /// Page-locked host memory holding `data`, for the copy lanes. On a
    /// real device, pinning memory may synchronize the device: setup work,
    /// refused (in debug builds) on an engine thread.
    ///
    /// # Errors
    ///
    /// A CUDA error (out of memory).
    pub fn host_buffer<T: GpuElement>(&self, data: &[T]) -> Result<HostBuffer<T>, Error> {
        match &self.device.backend {
            super::backend::Backend::Sim(gpu) => {
                Ok(HostBuffer { kind: HostKind::Sim(SimBuffer::new(gpu, data.to_vec())) })
            }
            #[cfg(feature = "cuda")]
            super::backend::Backend::Cuda(ctx) => {
                super::blocking::check("Gpu::host_buffer");
                let host =
                    super::cuda::Pinned::new(ctx, data).map_err(|e| Error::gpu(None, self.ordinal(), e))?;
                Ok(HostBuffer { kind: HostKind::Cuda(host) })
            }
        }
    }

    /// A buffer holding `data`, on a simulated device.
    ///
    /// # Errors
    ///
    /// [`Error::is_unsupported`] on a real device.
    pub fn sim_buffer<T: Clone + Send + 'static>(&self, data: Vec<T>) -> Result<GpuBuffer<T>, Error> {
        match self.device.sim() {
            Some(gpu) => Ok(SimBuffer::new(gpu, data).into()),
            None => Err(Error::unsupported(format!("gpu({}) is not simulated", self.device.ordinal))),
        }
    }
}
