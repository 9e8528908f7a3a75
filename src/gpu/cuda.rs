//! The CUDA backend, through cudarc (feature `cuda`): probing the driver
//! without letting its panics out, the context, streams and events.

#![allow(unsafe_code)]

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

use cudarc::driver::{CudaContext, CudaEvent, CudaStream, DriverError};

/// The name of a CUDA error, as the driver spells it.
pub(crate) fn name(err: &DriverError) -> String {
    format!("{:?}", err.0)
}

/// Runs a driver call that may panic (cudarc panics when libcuda cannot be
/// loaded, or lacks a symbol its bindings need), turning the panic into text.
fn guarded<T>(what: &str, f: impl FnOnce() -> Result<T, DriverError>) -> Result<T, String> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(err)) => Err(format!("{what}: {}", name(&err))),
        Err(payload) => Err(format!(
            "{what}: the CUDA driver could not be used ({})",
            crate::error::panic_message(&*payload)
        )),
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
    let count = guarded("cuDeviceGetCount", CudaContext::device_count)?;
    if ordinal >= usize::try_from(count).unwrap_or(0) {
        return Err(format!("the machine has {count} CUDA device(s), so gpu({ordinal}) does not exist"));
    }
    let ctx = guarded("cuDevicePrimaryCtxRetain", || CudaContext::new(ordinal))?;
    // SAFETY: called before this context has any stream or buffer, as
    // cudarc requires; the engine orders cross-stream work with its own events.
    unsafe { ctx.disable_event_tracking() };
    Ok(ctx)
}

pub(crate) fn new_stream(ctx: &Arc<CudaContext>) -> Result<Arc<CudaStream>, String> {
    guarded("cuStreamCreate", || ctx.new_stream())
}

pub(crate) fn new_event(ctx: &Arc<CudaContext>) -> Result<CudaEvent, String> {
    guarded("cuEventCreate", || ctx.new_event(None))
}

pub(crate) fn bind(ctx: &Arc<CudaContext>) -> Result<(), String> {
    guarded("cuCtxSetCurrent", || ctx.bind_to_thread())
}

/// Makes `ctx` current on this thread. cudarc's `bind_to_thread` also
/// hands back an error that an earlier drop on any thread parked (one no
/// op owns); the engine's own calls bind without taking it, so that such
/// an error never fails an unrelated op.
fn bind_raw(ctx: &CudaContext) -> Result<(), String> {
    use cudarc::driver::result::ctx;
    match ctx::get_current() {
        Ok(Some(current)) if current == ctx.cu_ctx() => Ok(()),
        // SAFETY: the context is alive (`ctx` holds it) and was retained
        // by cudarc, so it may be made current on any thread.
        Ok(_) => unsafe { ctx::set_current(ctx.cu_ctx()) }.map_err(|e| name(&e)),
        Err(e) => Err(name(&e)),
    }
}

/// Frees a buffer's device memory with its context current, and takes
/// back the error a failed free parked in cudarc, so that it is reported
/// as the free's rather than handed to an unrelated call.
pub(crate) fn drop_buffer<T>(slot: &mut std::mem::ManuallyDrop<cudarc::driver::CudaSlice<T>>) {
    let ctx = slot.context().clone();
    if let Err(err) = bind_raw(&ctx) {
        tracing::error!(target: "depengine", "gpu({}): a buffer's drop cannot bind its context: {err}", ctx.ordinal());
    }
    // SAFETY: called once, from `GpuBuffer`'s drop, which never touches
    // the slot again.
    drop(unsafe { std::mem::ManuallyDrop::take(slot) });
    if let Err(err) = ctx.check_err() {
        tracing::error!(target: "depengine", "gpu({}): freeing a buffer failed: {}", ctx.ordinal(), name(&err));
    }
}

/// `cuEventRecord`, without cudarc's check of parked errors.
pub(crate) fn record(event: &CudaEvent, stream: &CudaStream) -> Result<(), String> {
    bind_raw(stream.context())?;
    // SAFETY: both handles are alive (the arguments own them) and belong
    // to one context: the engine makes a device's events and streams from
    // its one context.
    unsafe { cudarc::driver::result::event::record(event.cu_event(), stream.cu_stream()) }
        .map_err(|e| name(&e))
}

/// `cuStreamWaitEvent`, without cudarc's check of parked errors.
pub(crate) fn wait(stream: &CudaStream, event: &CudaEvent) -> Result<(), String> {
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
    .map_err(|e| name(&e))
}

/// `cuStreamSynchronize`: blocks until the stream's work has run. Only
/// for a thread that may block (see `drain.rs`).
pub(crate) fn synchronize(stream: &CudaStream) -> Result<(), String> {
    bind_raw(stream.context())?;
    // SAFETY: the stream is alive (the argument owns it) and its context
    // is current.
    unsafe { cudarc::driver::result::stream::synchronize(stream.cu_stream()) }.map_err(|e| name(&e))
}

/// `cuEventQuery`: not ready is `Ok(false)`, a device fault an error.
pub(crate) fn query(event: &CudaEvent) -> Result<bool, String> {
    event.try_is_complete().map_err(|e| name(&e))
}

/// A buffer on device `ctx` holding `data`, copied in on a stream of its
/// own and waited for (setup work, on the caller's thread).
pub(crate) fn buffer<T: super::GpuElement>(
    ctx: &Arc<CudaContext>,
    data: &[T],
) -> Result<cudarc::driver::CudaSlice<T>, String> {
    let stream = new_stream(ctx)?;
    let buffer = guarded("cuMemcpyHtoDAsync", || stream.clone_htod(data))?;
    guarded("cuStreamSynchronize", || stream.synchronize())?;
    Ok(buffer)
}

/// Page-locked host memory holding `data`, so that copies to and from
/// the device never block the enqueueing thread.
pub(crate) fn pinned<T: super::GpuElement>(
    ctx: &Arc<CudaContext>,
    data: &[T],
) -> Result<cudarc::driver::PinnedHostSlice<T>, String> {
    // SAFETY: the memory is uninitialised until the copy just below, which
    // writes all `data.len()` elements before anything reads it; `T` is
    // plain data (`DeviceRepr`, valid as zero bits).
    let mut host = guarded("cuMemHostAlloc", || unsafe { ctx.alloc_pinned_with_flags::<T>(data.len(), 0) })?;
    host.as_mut_slice().map_err(|e| name(&e))?.clone_from_slice(data);
    Ok(host)
}

pub(crate) fn htod<T: super::GpuElement>(
    stream: &Arc<CudaStream>,
    src: &cudarc::driver::PinnedHostSlice<T>,
    dst: &mut cudarc::driver::CudaSlice<T>,
) -> Result<(), String> {
    guarded("cuMemcpyHtoDAsync", || stream.memcpy_htod(src, dst))
}

pub(crate) fn dtoh<T: super::GpuElement>(
    stream: &Arc<CudaStream>,
    src: &cudarc::driver::CudaSlice<T>,
    dst: &mut cudarc::driver::PinnedHostSlice<T>,
) -> Result<(), String> {
    guarded("cuMemcpyDtoHAsync", || stream.memcpy_dtoh(src, dst))
}

pub(crate) fn dtod<T: super::GpuElement>(
    stream: &Arc<CudaStream>,
    src: &cudarc::driver::CudaSlice<T>,
    dst: &mut cudarc::driver::CudaSlice<T>,
) -> Result<(), String> {
    guarded("cuMemcpyDtoDAsync", || stream.memcpy_dtod(src, dst))
}

/// The CUDA driver's version, as `cuDriverGetVersion` gives it (12080 for
/// 12.8).
pub(crate) fn driver_version() -> Result<i32, String> {
    let mut version: std::ffi::c_int = 0;
    // SAFETY: `cuDriverGetVersion` writes one int through the pointer, which
    // points at a live local; the driver library is loaded (a device was
    // opened before this is called).
    let result = catch_unwind(AssertUnwindSafe(|| unsafe {
        cudarc::driver::sys::cuDriverGetVersion(&raw mut version)
    }));
    match result {
        Ok(cudarc::driver::sys::CUresult::CUDA_SUCCESS) => Ok(version),
        Ok(err) => Err(format!("cuDriverGetVersion: {err:?}")),
        Err(_) => Err("cuDriverGetVersion: the CUDA driver could not be used".to_owned()),
    }
}
