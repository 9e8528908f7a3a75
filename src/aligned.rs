//! Host memory aligned to a cache line ([`ALIGN`] bytes), for data that
//! vectorised kernels read: a `Vec<f64>` is aligned to 8 bytes only (16 in
//! practice), and a kernel whose rows straddle cache lines pays for it.
//!
//! [`AlignedVec`] is `aligned_vec::AVec` (the aligned vector faer uses),
//! fixed to [`ALIGN`]: it derefs to a slice, grows like a `Vec`, and is
//! `Send`/`Sync` as a `Vec` is, so it can be a var's data (`Var<AlignedVec<f64>>`)
//! or the matrix a scope cuts into tiles (`s.tiles(&mut m, ...)`, whose
//! rows keep its alignment where the row length and the tile's first
//! column are multiples of the line).
//!
//! ```
//! let engine = depengine::Engine::new();
//! let tile = engine.var(depengine::aligned::filled(64 * 64, 0.0f64));
//! let first = engine.op("check").read(&tile).run(|(t,), ()| Ok(t.as_ptr() as usize)).blocking_wait()?;
//! assert_eq!(first % depengine::aligned::ALIGN, 0);
//! # Ok::<(), depengine::Error>(())
//! ```

/// The alignment, in bytes: a cache line on the machines the engine runs
/// on (and the width of an AVX-512 register).
pub const ALIGN: usize = 64;

/// A vector whose buffer starts on an [`ALIGN`]-byte boundary.
pub type AlignedVec<T> = aligned_vec::AVec<T, aligned_vec::ConstAlign<ALIGN>>;

/// `len` copies of `value`, aligned.
///
/// # Examples
///
/// ```
/// let zeros = depengine::aligned::filled(1024, 0.0f64);
/// assert_eq!(zeros.len(), 1024);
/// assert_eq!(zeros.as_ptr() as usize % depengine::aligned::ALIGN, 0);
/// ```
pub fn filled<T: Clone>(len: usize, value: T) -> AlignedVec<T> {
    AlignedVec::from_iter(ALIGN, std::iter::repeat_n(value, len))
}

/// A copy of `data`, aligned.
///
/// # Examples
///
/// ```
/// let v = depengine::aligned::from_slice(&[1u8, 2, 3]);
/// assert_eq!(&v[..], [1, 2, 3]);
/// assert_eq!(v.as_ptr() as usize % depengine::aligned::ALIGN, 0);
/// ```
pub fn from_slice<T: Clone>(data: &[T]) -> AlignedVec<T> {
    AlignedVec::from_slice(ALIGN, data)
}

/// The aligned-vector crate whose `AlignedVec` this module hands out, at
/// the version the engine is built with.
pub use aligned_vec;

#[cfg(test)]
mod tests;
