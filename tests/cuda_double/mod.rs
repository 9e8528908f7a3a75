//! The CUDA driver double (`tools/cuda-double`) for tests of the `cuda`
//! backend on a machine without a GPU. With `DEPENGINE_CUDA_DOUBLE=1` the
//! first call of [`load`] opens the double by its path; it answers to
//! `libcuda.so`, so cudarc's later request for that library finds it
//! instead of a driver. The double is a test tool: real GPUs remain the
//! truth.

#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::OnceLock;

/// Whether the tests run on the double.
pub fn active() -> bool {
    std::env::var("DEPENGINE_CUDA_DOUBLE").is_ok_and(|v| v == "1")
}

static LIB: OnceLock<libloading::Library> = OnceLock::new();

/// Loads the double if the tests run on it; its library.
pub fn load() -> Option<&'static libloading::Library> {
    if !active() {
        return None;
    }
    Some(LIB.get_or_init(|| {
        let path = path();
        assert!(
            path.exists(),
            "DEPENGINE_CUDA_DOUBLE=1, but {} is missing: run `cargo build -p depengine-cuda-double` first",
            path.display()
        );
        // SAFETY: the double's initialisers only set up its own state.
        unsafe { libloading::Library::new(&path) }.expect("the CUDA driver double loads")
    }))
}

/// The double beside this test's build: `target/<profile>/`.
fn path() -> PathBuf {
    let exe = std::env::current_exe().expect("the test's path");
    let profile = exe.parent().and_then(|deps| deps.parent()).expect("target/<profile>/deps");
    profile.join("libdepengine_cuda_double.so")
}

fn lib() -> &'static libloading::Library {
    load().expect("the double is loaded (DEPENGINE_CUDA_DOUBLE=1)")
}

/// The violations of the driver's rules seen since the last call.
pub fn violations() -> Vec<String> {
    // SAFETY: the double's control functions have these signatures.
    unsafe {
        let f = lib()
            .get::<unsafe extern "C" fn(*mut u8, usize) -> usize>(b"depengine_cuda_double_violations")
            .expect("the double's control API");
        let mut buf = vec![0u8; 1 << 16];
        let n = f(buf.as_mut_ptr(), buf.len()).min(buf.len());
        let text = String::from_utf8_lossy(&buf[..n]).into_owned();
        text.lines().map(str::to_owned).collect()
    }
}

/// Fails the test with every violation seen, if any.
pub fn assert_clean() {
    if active() {
        let seen = violations();
        assert!(seen.is_empty(), "the CUDA driver double saw violations:\n{}", seen.join("\n"));
    }
}

/// Makes `call` fail with `code` after `skip` more calls (see the
/// double's `depengine_cuda_double_inject`).
pub fn inject(call: &str, code: u32, sticky: bool, skip: u32) {
    let name = std::ffi::CString::new(call).expect("a call's name");
    // SAFETY: the double's control functions have these signatures.
    unsafe {
        let f = lib()
            .get::<unsafe extern "C" fn(*const std::ffi::c_char, u32, u32, u32)>(
                b"depengine_cuda_double_inject",
            )
            .expect("the double's control API");
        f(name.as_ptr(), code, u32::from(sticky), skip);
    }
}

/// Bytes of device memory allocated and not freed.
pub fn live_device_bytes() -> usize {
    // SAFETY: the double's control functions have these signatures.
    unsafe {
        let f = lib()
            .get::<unsafe extern "C" fn() -> usize>(b"depengine_cuda_double_live_device_bytes")
            .expect("the double's control API");
        f()
    }
}

/// Every copy, memset and kernel takes `us` microseconds.
pub fn set_delay_us(us: u64) {
    // SAFETY: the double's control functions have these signatures.
    unsafe {
        let f = lib()
            .get::<unsafe extern "C" fn(u64)>(b"depengine_cuda_double_set_delay_us")
            .expect("the double's control API");
        f(us);
    }
}

/// How many times the driver function `call` was called so far.
pub fn calls(call: &str) -> u64 {
    let name = std::ffi::CString::new(call).expect("a call's name");
    // SAFETY: the double's control functions have these signatures.
    unsafe {
        let f = lib()
            .get::<unsafe extern "C" fn(*const std::ffi::c_char) -> u64>(b"depengine_cuda_double_calls")
            .expect("the double's control API");
        f(name.as_ptr())
    }
}

/// The priorities of the streams alive now (their number is its length).
pub fn stream_priorities() -> Vec<i32> {
    // SAFETY: the double's control functions have these signatures.
    unsafe {
        let f = lib()
            .get::<unsafe extern "C" fn(*mut i32, usize) -> usize>(b"depengine_cuda_double_stream_priorities")
            .expect("the double's control API");
        let mut out = vec![0i32; 4096];
        let n = f(out.as_mut_ptr(), out.len());
        out.truncate(n);
        out
    }
}

/// The module of CUDA source `src` on `ctx`: on the double, the source
/// itself (its kernels run by name); on a GPU, NVRTC's PTX. Why it cannot
/// be had, as text, where NVRTC cannot be loaded (cudarc built for CUDA
/// 12 looks for `libnvrtc.so` and `.so.12`, never CUDA 13's `.so.13`; it
/// panics then) or the driver rejects the PTX (an NVRTC newer than the
/// driver).
#[cfg(feature = "cuda")]
pub fn module(
    ctx: &std::sync::Arc<cudarc::driver::CudaContext>,
    src: &str,
) -> Result<std::sync::Arc<cudarc::driver::CudaModule>, String> {
    let ptx = if active() {
        cudarc::nvrtc::Ptx::from_src(src)
    } else {
        let compiled = std::panic::catch_unwind(|| cudarc::nvrtc::compile_ptx(src));
        match compiled {
            Ok(Ok(ptx)) => ptx,
            Ok(Err(err)) => return Err(format!("NVRTC cannot compile the kernels: {err:?}")),
            Err(payload) => {
                let why = payload
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| payload.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                    .unwrap_or_default();
                return Err(format!("NVRTC cannot be loaded: {why}"));
            }
        }
    };
    ctx.load_module(ptx).map_err(|err| {
        let (mut major, mut minor) = (0, 0);
        // SAFETY: NVRTC is loaded (it compiled the PTX) and writes two
        // ints through the pointers, which point at live locals.
        unsafe { cudarc::nvrtc::sys::nvrtcVersion(&raw mut major, &raw mut minor) };
        format!("the driver rejects NVRTC {major}.{minor}'s PTX ({err:?}): an NVRTC newer than the driver?")
    })
}
