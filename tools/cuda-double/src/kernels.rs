//! The kernels the double knows, by name: host functions that do what the
//! tests' CUDA kernels do, run when a launch reaches the head of its
//! stream. A module "loads" the names its source or PTX defines; a name
//! with no host function here is not found.

/// A kernel's parameters, as the launch passes them.
#[derive(Clone, Copy)]
enum Param {
    Ptr,
    F32,
    I32,
    U64,
}

struct Kernel {
    name: &'static str,
    params: &'static [Param],
}

const KERNELS: &[Kernel] = &[
    // scale(float* out, const float* in, float k, int n): out = in * k
    Kernel { name: "scale", params: &[Param::Ptr, Param::Ptr, Param::F32, Param::I32] },
    // add(float* out, const float* a, const float* b, int n): out = a + b
    Kernel { name: "add", params: &[Param::Ptr, Param::Ptr, Param::Ptr, Param::I32] },
    // inc(float* x): x[0] += 1, by one thread
    Kernel { name: "inc", params: &[Param::Ptr] },
    // mix_op(u64* w0, u64* w1, const u64* r0, r1, r2, int nreads, int
    // nwrites, u64 id), by one thread: the differential test's op (below)
    Kernel {
        name: "mix_op",
        params: &[
            Param::Ptr,
            Param::Ptr,
            Param::Ptr,
            Param::Ptr,
            Param::Ptr,
            Param::I32,
            Param::I32,
            Param::U64,
        ],
    },
];

/// The differential test's mixing function (tests/common's `mix`).
fn mix(a: u64, b: u64) -> u64 {
    let mut z = a ^ b.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// `mix_op`'s buffers: the writes it makes, then the reads, as addresses.
fn mix_op_buffers(args: &[u64]) -> (Vec<u64>, Vec<u64>) {
    let (reads, writes) = (n(args[5]).min(3), n(args[6]).min(2));
    (args[..writes].to_vec(), args[2..2 + reads].to_vec())
}

/// The kernel called `name`, with its name as a `'static` string.
pub fn find(name: &str) -> Option<&'static str> {
    KERNELS.iter().find(|k| k.name == name).map(|k| k.name)
}

/// The kernel names a module image defines: `__global__ void NAME(` in
/// CUDA source, `.entry NAME(` in PTX.
pub fn names(image: &str) -> Vec<String> {
    let mut out = Vec::new();
    for marker in ["__global__ void ", ".entry "] {
        let mut rest = image;
        while let Some(at) = rest.find(marker) {
            rest = &rest[at + marker.len()..];
            let name: String = rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
            if !name.is_empty() {
                out.push(name);
            }
        }
    }
    out
}

/// The launch's arguments as words, read through `params` as the kernel
/// `name` declares them.
///
/// # Safety
///
/// `params` holds one valid pointer per parameter of the kernel, to a
/// value of the parameter's type (the driver's contract for a launch).
pub unsafe fn args(name: &str, params: *mut *mut std::ffi::c_void) -> Option<Vec<u64>> {
    let kernel = KERNELS.iter().find(|k| k.name == name)?;
    if params.is_null() {
        return None;
    }
    let mut out = Vec::with_capacity(kernel.params.len());
    for (i, p) in kernel.params.iter().enumerate() {
        // SAFETY: the caller's contract: slot `i` points at parameter `i`.
        let slot = unsafe { *params.add(i) };
        if slot.is_null() {
            return None;
        }
        // SAFETY: as above, the pointee has the parameter's type.
        let word = unsafe {
            match p {
                Param::Ptr => *(slot as *const u64),
                Param::F32 => u64::from((*(slot as *const f32)).to_bits()),
                Param::I32 => u64::from(*(slot as *const i32) as u32),
                Param::U64 => *(slot as *const u64),
            }
        };
        out.push(word);
    }
    Some(out)
}

fn n(word: u64) -> usize {
    usize::try_from(word as u32 as i32).unwrap_or(0)
}

/// The device memory a launch touches.
pub fn ranges(name: &str, args: &[u64]) -> Vec<(usize, usize)> {
    let f = std::mem::size_of::<f32>();
    match name {
        "scale" => vec![(args[0] as usize, n(args[3]) * f), (args[1] as usize, n(args[3]) * f)],
        "add" => (0..3).map(|i| (args[i] as usize, n(args[3]) * f)).collect(),
        "inc" => vec![(args[0] as usize, f)],
        "mix_op" => {
            let (writes, reads) = mix_op_buffers(args);
            writes.iter().chain(&reads).map(|&p| (p as usize, std::mem::size_of::<u64>())).collect()
        }
        _ => Vec::new(),
    }
}

/// Runs a launch over checked memory; a problem with it, if any.
pub fn run(name: &str, args: &[u64], threads: u64) -> Option<String> {
    let len = args.get(3).map_or(0, |w| n(*w));
    if matches!(name, "scale" | "add") && threads < len as u64 {
        return Some(format!("{threads} threads for {len} elements: some are never computed"));
    }
    // SAFETY: `ranges` gave every address and length touched below, and
    // the stream checked each against a live device block before this.
    unsafe {
        match name {
            "scale" => {
                let (out, input, k) =
                    (args[0] as *mut f32, args[1] as *const f32, f32::from_bits(args[2] as u32));
                (0..len).for_each(|i| *out.add(i) = *input.add(i) * k);
            }
            "add" => {
                let (out, a, b) = (args[0] as *mut f32, args[1] as *const f32, args[2] as *const f32);
                (0..len).for_each(|i| *out.add(i) = *a.add(i) + *b.add(i));
            }
            "inc" => {
                if threads != 1 {
                    return Some(format!("{threads} threads increment x[0] at once: a data race"));
                }
                *(args[0] as *mut f32) += 1.0;
            }
            "mix_op" => {
                let (writes, reads) = mix_op_buffers(args);
                let x = reads.iter().fold(mix(args[7], 1), |x, &r| mix(x, *(r as *const u64)));
                writes.iter().for_each(|&w| *(w as *mut u64) = mix(x, *(w as *const u64)));
            }
            _ => return Some("no host function".to_owned()),
        }
    }
    None
}
