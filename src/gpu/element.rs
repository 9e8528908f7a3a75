//! What a GPU buffer may hold, in its own file: the CUDA copies (`cuda.rs`)
//! and the buffers (`buffer.rs`) both bound their element by it.

/// What a GPU buffer may hold: plain bytes ([`bytemuck::Pod`]: `Copy`, no
/// padding, any bit pattern valid, no pointers), which CUDA's copies and
/// kernels move as bytes. The bound is the same with and without feature
/// `cuda`, so turning the feature on (anywhere in a build) never stops a
/// program from compiling: a type with a `String` field is refused in both.
/// The simulator alone takes any `Clone + Send` element
/// ([`Gpu::sim_buffer`](crate::gpu::Gpu::sim_buffer)).
///
/// # Examples
///
/// A type of one's own, `#[repr(C)]` without padding (bytemuck's derive,
/// feature `derive`, writes the two `impl`s and checks them):
///
/// ```
/// use depengine::gpu::bytemuck::{Pod, Zeroable};
/// #[derive(Clone, Copy)]
/// #[repr(C)]
/// struct Particle {
///     position: [f32; 3],
///     mass: f32,
/// }
/// // SAFETY: `repr(C)`, four `f32`s, no padding: any bits are a `Particle`.
/// unsafe impl Zeroable for Particle {}
/// // SAFETY: as above, and `Particle` is `Copy` and `'static`.
/// unsafe impl Pod for Particle {}
/// fn takes<T: depengine::gpu::GpuElement>() {}
/// takes::<Particle>();
/// ```
///
/// A type that holds a pointer is refused, with or without `cuda`:
///
/// ```compile_fail,E0277
/// #[derive(Clone)]
/// struct Named {
///     name: String,
///     mass: f32,
/// }
/// fn takes<T: depengine::gpu::GpuElement>() {}
/// takes::<Named>();
/// ```
pub trait GpuElement: bytemuck::Pod + Send + Sync + 'static {}
impl<T: bytemuck::Pod + Send + Sync + 'static> GpuElement for T {}
