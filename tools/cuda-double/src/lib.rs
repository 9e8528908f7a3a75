//! A stand-in for the CUDA driver library, for tests only: loaded in
//! place of `libcuda.so`, it implements the part of the driver API that
//! depengine's `cuda` backend and its tests call, and enforces the
//! driver's rules instead of just answering. `README.md` beside this
//! crate says what it checks and how a test uses it.
//!
//! Every function here is a C entry point of the driver's ABI: raw
//! pointers in and out are the ABI, hence `unsafe` throughout.

#![allow(unsafe_code, non_snake_case, clippy::missing_safety_doc)]

mod kernels;
mod state;
mod stream;

use std::ffi::{c_char, c_int, c_uint, c_void};

use state::{CURRENT, Cmd, Ctx, Event, Handle, State, Stream, code, lock};

type CuResult = u32;

/// Runs `f` on the world, or returns `NOT_INITIALIZED` before `cuInit`.
fn with(call: &str, f: impl FnOnce(&mut State) -> Result<(), u32>) -> CuResult {
    let mut st = lock();
    *st.calls.entry(call.to_owned()).or_default() += 1;
    if !st.initialized {
        st.violation(format!("{call} before cuInit"));
        return code::NOT_INITIALIZED;
    }
    match f(&mut st) {
        Ok(()) => code::SUCCESS,
        Err(code) => code,
    }
}

fn as_handle<T>(p: *mut T) -> Handle {
    p as usize
}

fn as_ptr<T>(h: Handle) -> *mut T {
    h as *mut T
}

// ---- initialisation and devices ----

#[unsafe(no_mangle)]
pub extern "C" fn cuInit(_flags: c_uint) -> CuResult {
    lock().initialized = true;
    code::SUCCESS
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDriverGetVersion(version: *mut c_int) -> CuResult {
    if version.is_null() {
        return code::INVALID_VALUE;
    }
    // SAFETY: the caller passes a pointer to one int.
    unsafe { *version = 12080 };
    code::SUCCESS
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDeviceGetCount(count: *mut c_int) -> CuResult {
    with("cuDeviceGetCount", |st| {
        // SAFETY: the caller passes a pointer to one int.
        unsafe { *count = st.devices as c_int };
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDeviceGet(device: *mut c_int, ordinal: c_int) -> CuResult {
    with("cuDeviceGet", |st| {
        if ordinal < 0 || ordinal as usize >= st.devices {
            return Err(code::INVALID_DEVICE);
        }
        // SAFETY: the caller passes a pointer to one int.
        unsafe { *device = ordinal };
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDeviceGetName(name: *mut c_char, len: c_int, device: c_int) -> CuResult {
    let text = format!("depengine CUDA double #{device}\0");
    if len <= 0 || (len as usize) < text.len() {
        return code::INVALID_VALUE;
    }
    // SAFETY: the caller's buffer holds `len` bytes, checked above.
    unsafe { std::ptr::copy_nonoverlapping(text.as_ptr(), name.cast(), text.len()) };
    code::SUCCESS
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDeviceGetAttribute(
    value: *mut c_int,
    attribute: c_int,
    _device: c_int,
) -> CuResult {
    let v = match attribute {
        115 => 1,  // memory pools: stream-ordered allocation
        75 => 9,   // compute capability major
        76 => 0,   // minor
        1 => 1024, // threads per block
        16 => 132, // multiprocessors
        _ => 0,
    };
    // SAFETY: the caller passes a pointer to one int.
    unsafe { *value = v };
    code::SUCCESS
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDeviceTotalMem_v2(bytes: *mut usize, _device: c_int) -> CuResult {
    // SAFETY: the caller passes a pointer to one size_t.
    unsafe { *bytes = 80 << 30 };
    code::SUCCESS
}

// ---- contexts ----

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDevicePrimaryCtxRetain(ctx: *mut *mut c_void, device: c_int) -> CuResult {
    with("cuDevicePrimaryCtxRetain", |st| {
        if device < 0 || device as usize >= st.devices {
            return Err(code::INVALID_DEVICE);
        }
        let device = device as usize;
        let h = match st.primary.get(&device) {
            Some(&h) => h,
            None => {
                let h = st.handle();
                st.contexts.insert(h, Ctx { retained: 0, fault: None });
                st.primary.insert(device, h);
                h
            }
        };
        st.contexts.get_mut(&h).expect("made").retained += 1;
        // SAFETY: the caller passes a pointer to one handle.
        unsafe { *ctx = as_ptr(h) };
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn cuDevicePrimaryCtxRelease_v2(device: c_int) -> CuResult {
    with("cuDevicePrimaryCtxRelease", |st| {
        let h = *st.primary.get(&(device as usize)).ok_or(code::INVALID_DEVICE)?;
        let ctx = st.contexts.get_mut(&h).expect("a primary context");
        ctx.retained = ctx.retained.saturating_sub(1);
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuCtxGetCurrent(ctx: *mut *mut c_void) -> CuResult {
    // SAFETY: the caller passes a pointer to one handle.
    unsafe { *ctx = as_ptr(CURRENT.with(std::cell::Cell::get)) };
    code::SUCCESS
}

#[unsafe(no_mangle)]
pub extern "C" fn cuCtxSetCurrent(ctx: *mut c_void) -> CuResult {
    with("cuCtxSetCurrent", |st| {
        let h = as_handle(ctx);
        if h != 0 && !st.contexts.contains_key(&h) {
            st.violation(format!("cuCtxSetCurrent of an unknown context {h:#x}"));
            return Err(code::INVALID_CONTEXT);
        }
        CURRENT.with(|c| c.set(h));
        Ok(())
    })
}

/// Waits, blocking the caller, until `done` holds.
fn block_until(mut st: std::sync::MutexGuard<'static, State>, done: impl Fn(&State) -> bool) {
    while !done(&st) {
        st = state::wait(st);
    }
}

#[unsafe(no_mangle)]
pub extern "C" fn cuCtxSynchronize() -> CuResult {
    let mut st = lock();
    let ctx = match st.current("cuCtxSynchronize") {
        Ok(ctx) => ctx,
        Err(code) => return code,
    };
    st.blocking("cuCtxSynchronize");
    block_until(st, |s| s.idle(Some(ctx)));
    fault_of(ctx)
}

fn fault_of(ctx: Handle) -> CuResult {
    lock().contexts.get(&ctx).and_then(|c| c.fault).unwrap_or(code::SUCCESS)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuCtxGetStreamPriorityRange(least: *mut c_int, greatest: *mut c_int) -> CuResult {
    // SAFETY: the caller passes pointers to two ints (either may be null).
    unsafe {
        if !least.is_null() {
            *least = 0;
        }
        if !greatest.is_null() {
            *greatest = -5;
        }
    }
    code::SUCCESS
}

// ---- streams ----

fn new_stream(stream: *mut *mut c_void, priority: i32, call: &str) -> CuResult {
    with(call, |st| {
        let ctx = st.current(call)?;
        let h = st.handle();
        st.streams.insert(
            h,
            Stream { ctx, queue: Default::default(), running: Vec::new(), priority, destroyed: false },
        );
        stream::spawn(h);
        // SAFETY: the caller passes a pointer to one handle.
        unsafe { *stream = as_ptr(h) };
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn cuStreamCreate(stream: *mut *mut c_void, _flags: c_uint) -> CuResult {
    new_stream(stream, 0, "cuStreamCreate")
}

#[unsafe(no_mangle)]
pub extern "C" fn cuStreamCreateWithPriority(
    stream: *mut *mut c_void,
    _flags: c_uint,
    priority: c_int,
) -> CuResult {
    new_stream(stream, priority.clamp(-5, 0), "cuStreamCreateWithPriority")
}

#[unsafe(no_mangle)]
pub extern "C" fn cuStreamDestroy_v2(stream: *mut c_void) -> CuResult {
    with("cuStreamDestroy", |st| {
        let h = as_handle(stream);
        st.stream(h, "cuStreamDestroy")?;
        st.streams.get_mut(&h).expect("checked").destroyed = true;
        state::notify();
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn cuStreamSynchronize(stream: *mut c_void) -> CuResult {
    let h = as_handle(stream);
    let mut st = lock();
    let ctx = match st.stream(h, "cuStreamSynchronize") {
        Ok(ctx) => ctx,
        Err(code) => return code,
    };
    st.blocking("cuStreamSynchronize");
    block_until(st, |s| s.streams.get(&h).is_none_or(|s| s.queue.is_empty() && s.running.is_empty()));
    fault_of(ctx)
}

/// Enqueues `cmd` on `stream` for `call`.
fn enqueue(stream: *mut c_void, call: &str, cmd: impl FnOnce(&mut State) -> Result<Cmd, u32>) -> CuResult {
    with(call, |st| {
        let h = as_handle(stream);
        st.stream(h, call)?;
        let cmd = cmd(st)?;
        st.streams.get_mut(&h).expect("checked").queue.push_back(cmd);
        state::notify();
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn cuStreamWaitEvent(stream: *mut c_void, event: *mut c_void, _flags: c_uint) -> CuResult {
    enqueue(stream, "cuStreamWaitEvent", |st| {
        let e = live_event(st, as_handle(event), "cuStreamWaitEvent")?;
        // The wait is for the record current now; a later record of the
        // same event does not move it.
        Ok(Cmd::Wait { event: as_handle(event), generation: e.recorded })
    })
}

// ---- events ----

fn live_event<'s>(st: &'s mut State, h: Handle, call: &str) -> Result<&'s mut Event, u32> {
    if st.events.get(&h).is_none_or(|e| e.destroyed) {
        st.violation(format!("{call} of an unknown or destroyed event {h:#x}"));
        return Err(code::INVALID_HANDLE);
    }
    Ok(st.events.get_mut(&h).expect("checked"))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuEventCreate(event: *mut *mut c_void, _flags: c_uint) -> CuResult {
    with("cuEventCreate", |st| {
        let ctx = st.current("cuEventCreate")?;
        let h = st.handle();
        st.events.insert(h, Event { ctx, recorded: 0, completed: 0, destroyed: false });
        // SAFETY: the caller passes a pointer to one handle.
        unsafe { *event = as_ptr(h) };
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn cuEventDestroy_v2(event: *mut c_void) -> CuResult {
    with("cuEventDestroy", |st| {
        live_event(st, as_handle(event), "cuEventDestroy")?.destroyed = true;
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn cuEventRecord(event: *mut c_void, stream: *mut c_void) -> CuResult {
    enqueue(stream, "cuEventRecord", |st| {
        let e = live_event(st, as_handle(event), "cuEventRecord")?;
        e.recorded += 1;
        Ok(Cmd::Record { event: as_handle(event), generation: e.recorded })
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn cuEventQuery(event: *mut c_void) -> CuResult {
    with("cuEventQuery", |st| {
        let e = live_event(st, as_handle(event), "cuEventQuery")?;
        let (ctx, done) = (e.ctx, e.completed >= e.recorded);
        st.usable(ctx, "cuEventQuery")?;
        if done { Ok(()) } else { Err(code::NOT_READY) }
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn cuEventSynchronize(event: *mut c_void) -> CuResult {
    let h = as_handle(event);
    let mut st = lock();
    let (ctx, target) = match live_event(&mut st, h, "cuEventSynchronize") {
        Ok(e) => (e.ctx, e.recorded),
        Err(code) => return code,
    };
    st.blocking("cuEventSynchronize");
    block_until(st, |s| {
        s.events.get(&h).is_none_or(|e| e.completed >= target)
            || s.contexts.get(&ctx).is_some_and(|c| c.fault.is_some())
    });
    fault_of(ctx)
}

mod control;
mod memory;
mod modules;
