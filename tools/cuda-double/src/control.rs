//! What a test asks of the double, beyond the driver's API: the rule
//! violations seen so far, faults to inject, a delay per command.

use std::ffi::{CStr, c_char};

use crate::state::{Injection, Kind, lock};

/// Copies the violations seen since the last call, one per line, into
/// `out` (at most `cap` bytes) and forgets them; returns the bytes of the
/// whole text.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn depengine_cuda_double_violations(out: *mut u8, cap: usize) -> usize {
    let text = std::mem::take(&mut lock().violations).join("\n");
    let n = text.len().min(cap);
    if !out.is_null() {
        // SAFETY: the caller's buffer holds `cap` bytes.
        unsafe { std::ptr::copy_nonoverlapping(text.as_ptr(), out, n) };
    }
    text.len()
}

/// Makes call `call` (a driver function's name, or `kernel:NAME` for a
/// launch of NAME reaching its stream's head) fail with `code` after
/// `skip` more calls; a sticky fault also poisons its context, as a
/// device fault does, and a kernel's fault is always sticky.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn depengine_cuda_double_inject(
    call: *const c_char,
    code: u32,
    sticky: u32,
    skip: u32,
) {
    // SAFETY: the caller passes a nul-terminated name.
    let call = unsafe { CStr::from_ptr(call) }.to_string_lossy().into_owned();
    lock().injections.push(Injection { call, code, sticky: sticky != 0, skip });
}

/// Every copy, memset and kernel takes `us` microseconds from now on.
#[unsafe(no_mangle)]
pub extern "C" fn depengine_cuda_double_set_delay_us(us: u64) {
    lock().delay_us = us;
}

/// Bytes of device memory allocated and not freed.
#[unsafe(no_mangle)]
pub extern "C" fn depengine_cuda_double_live_device_bytes() -> usize {
    lock().memory.values().filter(|b| b.kind == Kind::Device && !b.freed).map(|b| b.len).sum()
}

/// The priorities of the streams alive now, into `out` (at most `cap`);
/// returns how many there are.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn depengine_cuda_double_stream_priorities(out: *mut i32, cap: usize) -> usize {
    let st = lock();
    let all: Vec<i32> = st.streams.values().filter(|s| !s.destroyed).map(|s| s.priority).collect();
    for (i, p) in all.iter().take(cap).enumerate() {
        // SAFETY: the caller's buffer holds `cap` ints.
        unsafe { *out.add(i) = *p };
    }
    all.len()
}

/// How many times the driver function `call` was called so far.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn depengine_cuda_double_calls(call: *const c_char) -> u64 {
    // SAFETY: the caller passes a nul-terminated name.
    let call = unsafe { CStr::from_ptr(call) }.to_string_lossy();
    lock().calls.get(call.as_ref()).copied().unwrap_or(0)
}
