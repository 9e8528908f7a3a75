//! Safe calls into the C tile kernels (`kernels.c`) and the OpenMP peer
//! (`omp.c`): each checks that a tile is `b` rows of at least `b`
//! elements before it hands C the rows' pointers.
//!
//! Why `unsafe`: these are foreign functions, the point of the bench
//! (every runtime runs the same compiled kernels).

#![allow(unsafe_code)]

use std::ffi::c_int;
use std::mem::MaybeUninit;

unsafe extern "C" {
    fn tile_potrf(a: *const *mut f64, b: c_int) -> c_int;
    fn tile_trsm(l: *const *const f64, x: *const *mut f64, b: c_int);
    fn tile_syrk(a: *const *const f64, c: *const *mut f64, b: c_int);
    fn tile_gemm(a: *const *const f64, bt: *const *const f64, c: *const *mut f64, b: c_int);
    #[cfg(omp)]
    fn omp_tiled_cholesky(m: *mut f64, n: c_int, b: c_int, threads: c_int) -> c_int;
}

/// Whether the OpenMP peer was built.
pub const HAS_OMP: bool = cfg!(omp);

/// The most rows a tile passed to C has (the OpenMP peer's bound too).
pub const MAX_B: usize = 512;

/// A tile's row pointers, on the stack as the OpenMP peer keeps them (no
/// allocation per kernel call), and its size.
struct Rows<P> {
    ptrs: [MaybeUninit<P>; MAX_B],
    b: c_int,
}

impl<P: Copy> Rows<P> {
    /// The rows' pointers, each row checked to hold at least as many
    /// elements as there are rows.
    fn new<R>(rows: impl Iterator<Item = R>, ptr: impl Fn(R) -> (P, usize)) -> Self {
        let mut ptrs = [const { MaybeUninit::uninit() }; MAX_B];
        let (mut b, mut shortest) = (0, usize::MAX);
        for row in rows {
            assert!(b < MAX_B, "a tile of more than {MAX_B} rows");
            let (p, len) = ptr(row);
            ptrs[b] = MaybeUninit::new(p);
            shortest = shortest.min(len);
            b += 1;
        }
        assert!(b == 0 || shortest >= b, "a tile's row shorter than its count of rows");
        Self { ptrs, b: c_int::try_from(b).expect("at most MAX_B rows") }
    }

    /// The pointers, of which the first `b` are written.
    fn as_ptr(&self) -> *const P {
        self.ptrs.as_ptr().cast()
    }
}

fn read<'a>(rows: impl Iterator<Item = &'a [f64]>) -> Rows<*const f64> {
    Rows::new(rows, |r| (r.as_ptr(), r.len()))
}

fn write<'a>(rows: impl Iterator<Item = &'a mut [f64]>) -> Rows<*mut f64> {
    Rows::new(rows, |r| (r.as_mut_ptr(), r.len()))
}

/// `a = L·Lᵀ` in place, lower part.
pub fn potrf<'a>(a: impl Iterator<Item = &'a mut [f64]>) -> Result<(), String> {
    let a = write(a);
    // SAFETY: `a.b` rows of at least `a.b` elements each, their pointers
    // written, the rows borrowed mutably for the call.
    match unsafe { tile_potrf(a.as_ptr(), a.b) } {
        0 => Ok(()),
        row => Err(format!("not positive definite at row {} of a diagonal tile", row - 1)),
    }
}

/// `x = x · L⁻ᵀ`.
pub fn trsm<'a, 'b>(l: impl Iterator<Item = &'a [f64]>, x: impl Iterator<Item = &'b mut [f64]>) {
    let (l, x) = (read(l), write(x));
    assert_eq!(l.b, x.b, "tiles of one kernel call differ in size");
    // SAFETY: both tiles `b` rows of at least `b` elements, `x`'s borrowed
    // mutably (so apart from `l`'s) for the call.
    unsafe { tile_trsm(l.as_ptr(), x.as_ptr(), x.b) }
}

/// `c = c − a·aᵀ`, lower part.
pub fn syrk<'a, 'b>(a: impl Iterator<Item = &'a [f64]>, c: impl Iterator<Item = &'b mut [f64]>) {
    let (a, c) = (read(a), write(c));
    assert_eq!(a.b, c.b, "tiles of one kernel call differ in size");
    // SAFETY: as in `trsm`.
    unsafe { tile_syrk(a.as_ptr(), c.as_ptr(), c.b) }
}

/// `c = c − a·btᵀ`.
pub fn gemm<'a, 'b, 'c>(
    a: impl Iterator<Item = &'a [f64]>,
    bt: impl Iterator<Item = &'b [f64]>,
    c: impl Iterator<Item = &'c mut [f64]>,
) {
    let (a, bt, c) = (read(a), read(bt), write(c));
    assert!(a.b == c.b && bt.b == c.b, "tiles of one kernel call differ in size");
    // SAFETY: as in `trsm`, for three tiles.
    unsafe { tile_gemm(a.as_ptr(), bt.as_ptr(), c.as_ptr(), c.b) }
}

/// The whole factorisation on OpenMP tasks, in place (`m` is `n × n`,
/// row-major, in tiles of `b`).
pub fn omp_cholesky(m: &mut [f64], n: usize, b: usize, threads: usize) -> Result<(), String> {
    assert!(b > 0 && n.is_multiple_of(b) && m.len() >= n * n, "an n × n matrix in whole tiles");
    let int = |x: usize| c_int::try_from(x).map_err(|_| format!("{x} is past C's int"));
    let (cn, cb, ct) = (int(n)?, int(b)?, int(threads)?);
    #[cfg(omp)]
    // SAFETY: `m` holds the n × n matrix, borrowed mutably for the call,
    // which returns once every task is done.
    let code = unsafe { omp_tiled_cholesky(m.as_mut_ptr(), cn, cb, ct) };
    #[cfg(not(omp))]
    let code = {
        let _ = (m, cn, cb, ct);
        -3
    };
    match code {
        0 => Ok(()),
        -1 => Err("not positive definite in a diagonal tile".into()),
        -2 => Err(format!("tiles of {b}: the OpenMP peer takes at most {MAX_B}")),
        _ => Err("the OpenMP peer was not built".into()),
    }
}
