//! The library answers to `libcuda.so`: a process that loads it by path
//! first then finds it when cudarc asks the dynamic loader for that name.

fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libcuda.so");
}
