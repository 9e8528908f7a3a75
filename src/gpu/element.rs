//! What a GPU buffer may hold, in its own file: the CUDA copies (`cuda.rs`)
//! and the buffers (`buffer.rs`) both bound their element by it.

/// What a GPU buffer may hold: plain data, for CUDA's copies and kernels
/// (with feature `cuda`: cudarc's `DeviceRepr` and `ValidAsZeroBits`).
#[cfg(feature = "cuda")]
pub trait GpuElement:
    cudarc::driver::DeviceRepr + cudarc::driver::ValidAsZeroBits + Clone + Send + Sync + 'static
{
}
#[cfg(feature = "cuda")]
impl<T: cudarc::driver::DeviceRepr + cudarc::driver::ValidAsZeroBits + Clone + Send + Sync + 'static>
    GpuElement for T
{
}

/// What a GPU buffer may hold: plain data, for CUDA's copies and kernels
/// (with feature `cuda`: cudarc's `DeviceRepr` and `ValidAsZeroBits`).
#[cfg(not(feature = "cuda"))]
pub trait GpuElement: Clone + Send + Sync + 'static {}
#[cfg(not(feature = "cuda"))]
impl<T: Clone + Send + Sync + 'static> GpuElement for T {}
