//! Modules and launches: a module's image (CUDA source or PTX) names its
//! kernels; a launch runs the host function of that name when it reaches
//! the head of its stream.

use std::ffi::{CStr, c_char, c_uint, c_void};

use crate::state::{Cmd, code};
use crate::{CuResult, as_handle, as_ptr, enqueue, kernels, with};

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuModuleLoadData(module: *mut *mut c_void, image: *const c_void) -> CuResult {
    with("cuModuleLoadData", |st| {
        let ctx = st.current("cuModuleLoadData")?;
        if image.is_null() {
            return Err(code::INVALID_VALUE);
        }
        // SAFETY: a PTX or source image is a nul-terminated string.
        let text = unsafe { CStr::from_ptr(image.cast()) }.to_string_lossy();
        let names = kernels::names(&text);
        if names.is_empty() {
            st.violation("cuModuleLoadData: an image that defines no kernel".to_owned());
            return Err(code::INVALID_IMAGE);
        }
        let h = st.handle();
        st.modules.insert(h, (ctx, names));
        // SAFETY: the caller passes a pointer to one handle.
        unsafe { *module = as_ptr(h) };
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn cuModuleUnload(module: *mut c_void) -> CuResult {
    with("cuModuleUnload", |st| st.modules.remove(&as_handle(module)).map(drop).ok_or(code::INVALID_HANDLE))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuModuleGetFunction(
    f: *mut *mut c_void,
    module: *mut c_void,
    name: *const c_char,
) -> CuResult {
    with("cuModuleGetFunction", |st| {
        // SAFETY: the caller passes a nul-terminated name.
        let name = unsafe { CStr::from_ptr(name) }.to_string_lossy().into_owned();
        let Some((_, names)) = st.modules.get(&as_handle(module)) else {
            return Err(code::INVALID_HANDLE);
        };
        if !names.contains(&name) {
            return Err(code::NOT_FOUND);
        }
        let Some(kernel) = kernels::find(&name) else {
            st.violation(format!("kernel `{name}` has no host function in the double"));
            return Err(code::NOT_FOUND);
        };
        let h = st.handle();
        st.functions.insert(h, kernel);
        // SAFETY: the caller passes a pointer to one handle.
        unsafe { *f = as_ptr(h) };
        Ok(())
    })
}

#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn cuLaunchKernel(
    f: *mut c_void,
    gx: c_uint,
    gy: c_uint,
    gz: c_uint,
    bx: c_uint,
    by: c_uint,
    bz: c_uint,
    _shared: c_uint,
    stream: *mut c_void,
    params: *mut *mut c_void,
    _extra: *mut *mut c_void,
) -> CuResult {
    enqueue(stream, "cuLaunchKernel", |st| {
        let name = *st.functions.get(&as_handle(f)).ok_or(code::INVALID_HANDLE)?;
        // SAFETY: the driver's contract: one pointer per kernel parameter.
        let args = unsafe { kernels::args(name, params) }.ok_or(code::INVALID_VALUE)?;
        let threads = [gx, gy, gz, bx, by, bz].iter().map(|&d| u64::from(d.max(1))).product();
        Ok(Cmd::Kernel { name, args, threads })
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGetErrorName(error: u32, out: *mut *const c_char) -> CuResult {
    let name: &'static CStr = match error {
        0 => c"CUDA_SUCCESS",
        1 => c"CUDA_ERROR_INVALID_VALUE",
        3 => c"CUDA_ERROR_NOT_INITIALIZED",
        201 => c"CUDA_ERROR_INVALID_CONTEXT",
        400 => c"CUDA_ERROR_INVALID_HANDLE",
        600 => c"CUDA_ERROR_NOT_READY",
        700 => c"CUDA_ERROR_ILLEGAL_ADDRESS",
        _ => c"CUDA_ERROR_UNKNOWN",
    };
    // SAFETY: the caller passes a pointer to one string pointer.
    unsafe { *out = name.as_ptr() };
    code::SUCCESS
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGetErrorString(error: u32, out: *mut *const c_char) -> CuResult {
    // SAFETY: as for `cuGetErrorName`.
    unsafe { cuGetErrorName(error, out) }
}
