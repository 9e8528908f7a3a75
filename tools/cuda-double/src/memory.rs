//! Memory: device blocks and pinned host blocks are real host memory,
//! never given back, so that a late use of a freed block is seen (its
//! record says freed) instead of reaching another allocation's data.

use std::ffi::c_void;

use crate::state::{self, Block, Cmd, Kind, State, code, lock};
use crate::{CuResult, as_handle, block_until, enqueue, with};

fn allocate(st: &mut State, len: usize, kind: Kind) -> usize {
    let layout = std::alloc::Layout::from_size_align(len.max(1), 256).expect("a layout");
    // SAFETY: the layout has a non-zero size.
    let p = unsafe { std::alloc::alloc_zeroed(layout) } as usize;
    assert!(p != 0, "the double is out of memory");
    st.memory.insert(p, Block { len, kind, freed: false });
    p
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemAlloc_v2(ptr: *mut u64, len: usize) -> CuResult {
    with("cuMemAlloc", |st| {
        st.current("cuMemAlloc")?;
        let p = allocate(st, len, Kind::Device);
        // SAFETY: the caller passes a pointer to one device pointer.
        unsafe { *ptr = p as u64 };
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemAllocAsync(ptr: *mut u64, len: usize, stream: *mut c_void) -> CuResult {
    with("cuMemAllocAsync", |st| {
        st.stream(as_handle(stream), "cuMemAllocAsync")?;
        let p = allocate(st, len, Kind::Device);
        // SAFETY: the caller passes a pointer to one device pointer.
        unsafe { *ptr = p as u64 };
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn cuMemFreeAsync(ptr: u64, stream: *mut c_void) -> CuResult {
    enqueue(stream, "cuMemFreeAsync", |st| {
        st.check_range(ptr as usize, 0, Some(Kind::Device)).map_err(|why| {
            st.violation(format!("cuMemFreeAsync: {why}"));
            code::INVALID_VALUE
        })?;
        Ok(Cmd::Free { ptr: ptr as usize })
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn cuMemFree_v2(ptr: u64) -> CuResult {
    let mut st = lock();
    if let Err(code) = st.current("cuMemFree") {
        return code;
    }
    st.free(ptr as usize, None, "cuMemFree");
    code::SUCCESS
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemHostAlloc(ptr: *mut *mut c_void, len: usize, _flags: u32) -> CuResult {
    let mut st = lock();
    let ctx = match st.current("cuMemHostAlloc") {
        Ok(ctx) => ctx,
        Err(code) => return code,
    };
    // Pinning memory is widely reported to synchronize the device.
    st.blocking("cuMemHostAlloc (synchronizes the device)");
    let p = allocate(&mut st, len, Kind::Pinned);
    // SAFETY: the caller passes a pointer to one host pointer.
    unsafe { *ptr = p as *mut c_void };
    block_until(st, |s| s.idle(Some(ctx)));
    code::SUCCESS
}

#[unsafe(no_mangle)]
pub extern "C" fn cuMemFreeHost(ptr: *mut c_void) -> CuResult {
    let mut st = lock();
    let ctx = match st.current("cuMemFreeHost") {
        Ok(ctx) => ctx,
        Err(code) => return code,
    };
    st.blocking("cuMemFreeHost (synchronizes the device)");
    let p = ptr as usize;
    match st.memory.get(&p) {
        Some(b) if b.kind == Kind::Pinned && !b.freed => {
            if let Some(stream) = st.touched_elsewhere(p, b.len, None) {
                st.violation(format!(
                    "cuMemFreeHost of {p:#x} while stream {stream:#x} still has work on it"
                ));
            }
            st.memory.get_mut(&p).expect("present").freed = true;
        }
        _ => st.violation(format!("cuMemFreeHost of {p:#x}, not live pinned memory")),
    }
    block_until(st, |s| s.idle(Some(ctx)));
    code::SUCCESS
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemGetInfo_v2(free: *mut usize, total: *mut usize) -> CuResult {
    // SAFETY: the caller passes pointers to two size_t.
    unsafe {
        *free = 64 << 30;
        *total = 80 << 30;
    }
    code::SUCCESS
}

/// A copy between host memory at `host` and the device: queued where the
/// host side is pinned, run at the call (blocking it until the stream is
/// idle, as the driver's pageable copies do) otherwise.
fn copy(stream: *mut c_void, call: &str, dst: usize, src: usize, len: usize, to_device: bool) -> CuResult {
    let host = if to_device { src } else { dst };
    let pinned = lock().pinned(host, len);
    if pinned {
        return enqueue(stream, call, |_| {
            Ok(Cmd::Copy { dst, src, len, dst_device: to_device, src_device: !to_device })
        });
    }
    let h = as_handle(stream);
    let mut st = lock();
    if let Err(code) = st.stream(h, call) {
        return code;
    }
    st.blocking(&format!("{call} with pageable host memory"));
    while st.streams.get(&h).is_some_and(|s| !s.queue.is_empty() || !s.running.is_empty()) {
        st = state::wait(st);
    }
    let device = if to_device { dst } else { src };
    if let Err(why) = st.check_range(device, len, Some(Kind::Device)) {
        st.violation(format!("{call}: {why}"));
        return code::INVALID_VALUE;
    }
    // SAFETY: the device side was checked just above; the host side is
    // the caller's memory of `len` bytes, as the call's contract says.
    unsafe { std::ptr::copy(src as *const u8, dst as *mut u8, len) };
    code::SUCCESS
}

#[unsafe(no_mangle)]
pub extern "C" fn cuMemcpyHtoDAsync_v2(
    dst: u64,
    src: *const c_void,
    len: usize,
    stream: *mut c_void,
) -> CuResult {
    copy(stream, "cuMemcpyHtoDAsync", dst as usize, src as usize, len, true)
}

#[unsafe(no_mangle)]
pub extern "C" fn cuMemcpyDtoHAsync_v2(
    dst: *mut c_void,
    src: u64,
    len: usize,
    stream: *mut c_void,
) -> CuResult {
    copy(stream, "cuMemcpyDtoHAsync", dst as usize, src as usize, len, false)
}

#[unsafe(no_mangle)]
pub extern "C" fn cuMemcpyDtoDAsync_v2(dst: u64, src: u64, len: usize, stream: *mut c_void) -> CuResult {
    enqueue(stream, "cuMemcpyDtoDAsync", |_| {
        Ok(Cmd::Copy { dst: dst as usize, src: src as usize, len, dst_device: true, src_device: true })
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn cuMemsetD8Async(dst: u64, value: u8, len: usize, stream: *mut c_void) -> CuResult {
    enqueue(stream, "cuMemsetD8Async", |_| Ok(Cmd::Memset { dst: dst as usize, value, len }))
}
