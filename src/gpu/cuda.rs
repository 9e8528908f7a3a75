//! The CUDA backend, through cudarc (feature `cuda`): probing the driver
//! without letting its panics out, the context, streams and events.
//!
//! Why `unsafe`: cudarc's raw driver calls (the event record and wait
//! without cudarc's parked-error check, page-locked memory by address, the
//! driver version), each with its invariant at the call.

#![allow(unsafe_code)]

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

use crate::error::GpuFault;
use cudarc::driver::{CudaContext, CudaEvent, CudaStream, DriverError};

/// The name of a CUDA error, as the driver spells it.
pub(crate) fn name(err: &DriverError) -> String {
    format!("{:?}", err.0)
}

/// The fault of driver call `call` that returned `err`.
fn fault(call: &'static str) -> impl FnOnce(DriverError) -> GpuFault {
    move |err| GpuFault::Cuda { call, error: name(&err) }
}

/// Runs a driver call that may panic (cudarc panics when libcuda cannot be
/// loaded, or lacks a symbol its bindings need), turning the panic into a
/// fault.
fn guarded<T>(call: &'static str, f: impl FnOnce() -> Result<T, DriverError>) -> Result<T, GpuFault> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(result) => result.map_err(fault(call)),
        Err(payload) => Err(GpuFault::Driver { call, why: crate::error::panic_message(&*payload) }),
    }
}

/// Opens CUDA device `ordinal`: checks that the driver library loads and
/// has the device, creates its primary context, and turns off cudarc's own
/// event tracking (the engine orders work between streams itself).
pub(crate) fn open(ordinal: usize) -> Result<Arc<CudaContext>, String> {
    // SAFETY: only tries to load the driver library; no other state is touched.
    let present = catch_unwind(|| unsafe { cudarc::driver::sys::is_culib_present() }).unwrap_or(false);
    if !present {
        return Err("no CUDA driver: libcuda could not be loaded on this machine".to_owned());
    }
    let count = guarded("cuDeviceGetCount", CudaContext::device_count).map_err(|f| f.to_string())?;
    if ordinal >= usize::try_from(count).unwrap_or(0) {
        return Err(format!("the machine has {count} CUDA device(s), so gpu({ordinal}) does not exist"));
    }
    let ctx = guarded("cuDevicePrimaryCtxRetain", || CudaContext::new(ordinal)).map_err(|f| f.to_string())?;
    // SAFETY: called before this context has any stream or buffer, as
    // cudarc requires; the engine orders cross-stream work with its own events.
    unsafe { ctx.disable_event_tracking() };
    Ok(ctx)
}

/// A non-blocking stream; `greatest`: of the device's greatest priority
/// (the prioritized lane's), else of the default one.
pub(crate) fn new_stream(ctx: &Arc<CudaContext>, greatest: bool) -> Result<Arc<CudaStream>, GpuFault> {
    if !greatest {
        return guarded("cuStreamCreate", || ctx.new_stream());
    }
    bind_raw(ctx)?;
    let (_, top) =
        guarded("cuCtxGetStreamPriorityRange", cudarc::driver::result::stream::get_priority_range)?;
    guarded("cuStreamCreateWithPriority", || ctx.new_stream_with_priority(top))
}

pub(crate) fn new_event(ctx: &Arc<CudaContext>) -> Result<CudaEvent, GpuFault> {
    guarded("cuEventCreate", || ctx.new_event(None))
}

pub(crate) fn bind(ctx: &Arc<CudaContext>) -> Result<(), GpuFault> {
    guarded("cuCtxSetCurrent", || ctx.bind_to_thread())
}

/// Makes `ctx` current on this thread. cudarc's `bind_to_thread` also
/// hands back an error that an earlier drop on any thread parked (one no
/// op owns); the engine's own calls bind without taking it, so that such
/// an error never fails an unrelated op.
fn bind_raw(ctx: &CudaContext) -> Result<(), GpuFault> {
    use cudarc::driver::result::ctx;
    match ctx::get_current() {
        Ok(Some(current)) if current == ctx.cu_ctx() => Ok(()),
        // SAFETY: the context is alive (`ctx` holds it) and was retained
        // by cudarc, so it may be made current on any thread.
        Ok(_) => unsafe { ctx::set_current(ctx.cu_ctx()) }.map_err(fault("cuCtxSetCurrent")),
        Err(e) => Err(fault("cuCtxGetCurrent")(e)),
    }
}

/// Frees a buffer's device memory with its context current, and takes
/// back the error a failed free parked in cudarc, so that it is reported
/// as the free's rather than handed to an unrelated call.
///
/// `on`: the stream of the GPU op whose body drops the buffer (one it
/// replaced through its write guard), if any. The free goes on that
/// stream, after the op's waits for every earlier GPU access of its var
/// and its own work; cudarc would free it on the stream it was made on,
/// ordered after none of that.
pub(crate) fn drop_buffer<T>(
    slot: &mut std::mem::ManuallyDrop<cudarc::driver::CudaSlice<T>>,
    on: Option<&Arc<CudaStream>>,
) {
    let ctx = slot.context().clone();
    if let Err(err) = bind_raw(&ctx) {
        tracing::error!(target: "depengine", "gpu({}): a buffer's drop cannot bind its context: {err}", ctx.ordinal());
    }
    // SAFETY: called once, from `GpuBuffer`'s drop, which never touches
    // the slot again.
    let slice = unsafe { std::mem::ManuallyDrop::take(slot) };
    match on.filter(|stream| stream.context().cu_ctx() == ctx.cu_ctx()) {
        Some(stream) => {
            let ptr = slice.leak();
            // SAFETY: `leak` gave up the memory without freeing it, so it
            // is freed once, here; its context is current (bound above).
            if let Err(err) = unsafe { cudarc::driver::result::free_async(ptr, stream.cu_stream()) } {
                tracing::error!(target: "depengine", "gpu({}): freeing a buffer failed: {}", ctx.ordinal(), name(&err));
            }
        }
        None => drop(slice),
    }
    if let Err(err) = ctx.check_err() {
        tracing::error!(target: "depengine", "gpu({}): freeing a buffer failed: {}", ctx.ordinal(), name(&err));
    }
}

/// `cuEventRecord`, without cudarc's check of parked errors.
pub(crate) fn record(event: &CudaEvent, stream: &CudaStream) -> Result<(), GpuFault> {
    bind_raw(stream.context())?;
    // SAFETY: both handles are alive (the arguments own them) and belong
    // to one context: the engine makes a device's events and streams from
    // its one context.
    unsafe { cudarc::driver::result::event::record(event.cu_event(), stream.cu_stream()) }
        .map_err(fault("cuEventRecord"))
}

/// `cuStreamWaitEvent`, without cudarc's check of parked errors.
pub(crate) fn wait(stream: &CudaStream, event: &CudaEvent) -> Result<(), GpuFault> {
    use cudarc::driver::sys::CUevent_wait_flags::CU_EVENT_WAIT_DEFAULT;
    bind_raw(stream.context())?;
    // SAFETY: as for `record`.
    unsafe {
        cudarc::driver::result::stream::wait_event(
            stream.cu_stream(),
            event.cu_event(),
            CU_EVENT_WAIT_DEFAULT,
        )
    }
    .map_err(fault("cuStreamWaitEvent"))
}

/// `cuStreamSynchronize`: blocks until the stream's work has run. Only
/// for a thread that may block (see `drain.rs`).
pub(crate) fn synchronize(stream: &CudaStream) -> Result<(), GpuFault> {
    bind_raw(stream.context())?;
    // SAFETY: the stream is alive (the argument owns it) and its context
    // is current.
    unsafe { cudarc::driver::result::stream::synchronize(stream.cu_stream()) }
        .map_err(fault("cuStreamSynchronize"))
}

/// `cuEventQuery`: not ready is `Ok(false)`, a device fault an error.
pub(crate) fn query(event: &CudaEvent) -> Result<bool, GpuFault> {
    event.try_is_complete().map_err(fault("cuEventQuery"))
}

/// A buffer holding `data`, made and copied in on the device's setup
/// stream and waited for (setup work, on the caller's thread).
pub(crate) fn buffer<T: super::GpuElement>(
    stream: &Arc<CudaStream>,
    data: &[T],
) -> Result<cudarc::driver::CudaSlice<T>, GpuFault> {
    // Allocated and copied as bytes: cudarc's typed calls ask for its own
    // `DeviceRepr`, which the element's bound (`Pod`, the same with and
    // without this feature) cannot promise for a type of the user's.
    let bytes: &[u8] = bytemuck::cast_slice(data);
    // SAFETY: the allocation's bytes are written by the copy just below,
    // before anything reads them.
    let mut raw = guarded("cuMemAllocAsync", || unsafe { stream.alloc::<u8>(bytes.len()) })?;
    {
        use cudarc::driver::DevicePtrMut;
        let (ptr, _) = raw.device_ptr_mut(stream);
        // SAFETY: `raw` holds `bytes.len()` bytes on this stream's context;
        // the stream is synchronized below, before `bytes` may go.
        guarded("cuMemcpyHtoDAsync", || unsafe {
            cudarc::driver::result::memcpy_htod_async(ptr, bytes, stream.cu_stream())
        })?;
    }
    guarded("cuStreamSynchronize", || stream.synchronize())?;
    let ptr = raw.leak();
    // SAFETY: `ptr` is the allocation just made on this stream, of
    // `size_of_val(data)` bytes, holding `data.len()` `T`s copied from
    // `data` (valid `T`s: `Pod`); the slice made here owns it and frees it.
    Ok(unsafe { stream.upgrade_device_ptr::<T>(ptr, data.len()) })
}

/// Page-locked host memory, its address taken once, when it is made.
/// cudarc's accessors of pinned memory synchronize an event of its own
/// first (a blocking call, on whichever engine thread reads the buffer,
/// and one that hands out errors parked by unrelated drops), and its
/// copies make the stream wait for that event; with cudarc's event
/// tracking off that event is never recorded, so both do nothing but cost.
/// The engine's fences are what order the GPU's accesses with the CPU's:
/// a CPU op reaches a host buffer only once the GPU work on its var has
/// completed, and a copy op runs only once the CPU ops before it have.
///
/// The memory is held as bytes (page-aligned, so it holds any `T`), so
/// that its free can be sent to another thread whatever `T` is.
pub(crate) struct Pinned<T> {
    slice: std::mem::ManuallyDrop<cudarc::driver::PinnedHostSlice<u8>>,
    ptr: *mut T,
    len: usize,
}

// SAFETY: `ptr` is an address inside `slice`, which is Send and Sync for
// such `T`; the pointer adds no sharing of its own (it is reached through
// `&self` or `&mut self` only).
unsafe impl<T: Send> Send for Pinned<T> {}
// SAFETY: as above.
unsafe impl<T: Sync> Sync for Pinned<T> {}

impl<T: super::GpuElement> Pinned<T> {
    /// Page-locked memory holding `data` (setup work: it may synchronize
    /// the device, on the caller's thread).
    pub(crate) fn new(ctx: &Arc<CudaContext>, data: &[T]) -> Result<Self, GpuFault> {
        let bytes = std::mem::size_of_val(data);
        // SAFETY: the bytes are uninitialised until they are zeroed just
        // below, before anything reads them.
        let mut slice = guarded("cuMemHostAlloc", || unsafe { ctx.alloc_pinned_with_flags::<u8>(bytes, 0) })?;
        let ptr = slice.as_mut_ptr().map_err(fault("cuEventSynchronize"))?.cast::<T>();
        assert!(ptr.is_aligned(), "cuMemHostAlloc gives page-aligned memory");
        // SAFETY: the allocation holds `bytes` bytes at `ptr`; zero bits
        // are a valid `T` (`Pod` is `Zeroable`), so the slices made below
        // only ever see initialised elements.
        unsafe { ptr.cast::<u8>().write_bytes(0, bytes) };
        let mut pinned = Self { slice: std::mem::ManuallyDrop::new(slice), ptr, len: data.len() };
        pinned.as_mut_slice().clone_from_slice(data);
        Ok(pinned)
    }
}

impl<T> Pinned<T> {
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn as_slice(&self) -> &[T] {
        // SAFETY: `ptr` points at `len` initialised elements (`new`
        // wrote them) that live as long as `self`; no GPU work touches
        // them while a CPU op holds the buffer (the type's comment).
        unsafe { std::slice::from_raw_parts(self.ptr, self.len()) }
    }

    pub(crate) fn as_mut_slice(&mut self) -> &mut [T] {
        // SAFETY: as for `as_slice`, and `&mut self` is the only access.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len()) }
    }
}

/// `cuMemFreeHost` is widely reported to synchronize the device: a buffer
/// dropped on a GPU worker or a poller (by a completion that drops the
/// last handle of its var) is freed on a thread of its own instead, so
/// that none of them waits behind all queued work.
impl<T> Drop for Pinned<T> {
    fn drop(&mut self) {
        // SAFETY: called once, from the drop, which never touches the
        // slice again.
        let slice = unsafe { std::mem::ManuallyDrop::take(&mut self.slice) };
        let free = move || {
            let ctx = slice.context().clone();
            drop(slice);
            // The free's error, parked by cudarc, is the free's to report.
            if let Err(err) = ctx.check_err() {
                tracing::error!(target: "depengine", "gpu({}): freeing page-locked memory failed: {}", ctx.ordinal(), name(&err));
            }
        };
        if super::blocking::is_engine_thread() {
            super::blocking::run_off_engine_threads(Box::new(free));
        } else {
            free();
        }
    }
}

pub(crate) fn htod<T: super::GpuElement>(
    stream: &Arc<CudaStream>,
    src: &Pinned<T>,
    dst: &mut cudarc::driver::CudaSlice<T>,
) -> Result<(), GpuFault> {
    use cudarc::driver::DevicePtrMut;
    bind_raw(stream.context())?;
    let (ptr, _) = dst.device_ptr_mut(stream);
    // SAFETY: `dst` holds `src.len()` elements (the caller checked the
    // lengths) on this stream's context; `src` is page-locked, so the copy
    // runs in stream order after the call returns, and the op holding
    // both buffers keeps them alive until its event shows it ran.
    unsafe { cudarc::driver::result::memcpy_htod_async(ptr, src.as_slice(), stream.cu_stream()) }
        .map_err(fault("cuMemcpyHtoDAsync"))
}

pub(crate) fn dtoh<T: super::GpuElement>(
    stream: &Arc<CudaStream>,
    src: &cudarc::driver::CudaSlice<T>,
    dst: &mut Pinned<T>,
) -> Result<(), GpuFault> {
    use cudarc::driver::DevicePtr;
    bind_raw(stream.context())?;
    let (ptr, _) = src.device_ptr(stream);
    // SAFETY: as for `htod`, the other way.
    unsafe { cudarc::driver::result::memcpy_dtoh_async(dst.as_mut_slice(), ptr, stream.cu_stream()) }
        .map_err(fault("cuMemcpyDtoHAsync"))
}

pub(crate) fn dtod<T: super::GpuElement>(
    stream: &Arc<CudaStream>,
    src: &cudarc::driver::CudaSlice<T>,
    dst: &mut cudarc::driver::CudaSlice<T>,
) -> Result<(), GpuFault> {
    guarded("cuMemcpyDtoDAsync", || stream.memcpy_dtod(src, dst))
}

/// The CUDA driver's version, as `cuDriverGetVersion` gives it (12080 for
/// 12.8).
pub(crate) fn driver_version() -> Result<i32, GpuFault> {
    let mut version: std::ffi::c_int = 0;
    // SAFETY: `cuDriverGetVersion` writes one int through the pointer, which
    // points at a live local; the driver library is loaded (a device was
    // opened before this is called).
    let result = catch_unwind(AssertUnwindSafe(|| unsafe {
        cudarc::driver::sys::cuDriverGetVersion(&raw mut version)
    }));
    match result {
        Ok(cudarc::driver::sys::CUresult::CUDA_SUCCESS) => Ok(version),
        Ok(err) => Err(GpuFault::Cuda { call: "cuDriverGetVersion", error: format!("{err:?}") }),
        Err(payload) => {
            Err(GpuFault::Driver { call: "cuDriverGetVersion", why: crate::error::panic_message(&*payload) })
        }
    }
}
