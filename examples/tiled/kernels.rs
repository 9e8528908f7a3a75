//! The tiled Cholesky's kernels, its matrix, the sequential reference run
//! and the checks, shared by `cholesky.rs` (one process, scoped tile
//! views) and `cholesky_mpi.rs` (tiles across ranks): both run these same
//! kernels, in the same order per tile, so their factors agree bit for
//! bit with the sequential run's.

#![allow(dead_code)] // each example uses part of this

use depengine::aligned::{self, AlignedVec};

// ---- the tile kernels: rows of tiles as slices, read and written ----

/// Σ x·y, in eight lanes (so that it vectorises without reassociating a
/// single sum).
pub fn dot(x: &[f64], y: &[f64]) -> f64 {
    let mut lanes = [0.0f64; 8];
    let (xc, yc) = (x.chunks_exact(8), y.chunks_exact(8));
    let (xr, yr) = (xc.remainder(), yc.remainder());
    for (a, b) in xc.zip(yc) {
        for l in 0..8 {
            lanes[l] += a[l] * b[l];
        }
    }
    let tail: f64 = xr.iter().zip(yr).map(|(a, b)| a * b).sum();
    lanes.iter().sum::<f64>() + tail
}

/// `a = L·Lᵀ` in place, lower part (the upper part is left as it was).
pub fn potrf(a: &mut [&mut [f64]]) -> Result<(), String> {
    for i in 0..a.len() {
        let (above, rest) = a.split_at_mut(i);
        let row = &mut *rest[0];
        for (j, lj) in above.iter().enumerate() {
            row[j] = (row[j] - dot(&row[..j], &lj[..j])) / lj[j];
        }
        let d = row[i] - dot(&row[..i], &row[..i]);
        if d <= 0.0 {
            return Err(format!("not positive definite at row {i} of a diagonal tile"));
        }
        row[i] = d.sqrt();
    }
    Ok(())
}

/// `x = x · L⁻ᵀ` (L lower, from `potrf`).
pub fn trsm(l: &[&[f64]], x: &mut [&mut [f64]]) {
    for row in x.iter_mut() {
        for (j, lj) in l.iter().enumerate() {
            row[j] = (row[j] - dot(&row[..j], &lj[..j])) / lj[j];
        }
    }
}

/// `c = c − a·aᵀ`, lower part.
pub fn syrk(a: &[&[f64]], c: &mut [&mut [f64]]) {
    for (r, row) in c.iter_mut().enumerate() {
        for col in 0..=r {
            row[col] -= dot(a[r], a[col]);
        }
    }
}

/// `c = c − a·bᵀ`.
pub fn gemm(a: &[&[f64]], b: &[&[f64]], c: &mut [&mut [f64]]) {
    for (r, row) in c.iter_mut().enumerate() {
        for (col, x) in row.iter_mut().enumerate() {
            *x -= dot(a[r], b[col]);
        }
    }
}

// ---- the matrix ----

/// A symmetric, diagonally dominant (so positive definite) matrix.
pub fn spd(n: usize) -> AlignedVec<f64> {
    let mut a = aligned::filled(n * n, 0.0);
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    for i in 0..n {
        for j in 0..i {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let x = (state >> 11) as f64 / (1u64 << 53) as f64;
            a[i * n + j] = x;
            a[j * n + i] = x;
        }
        a[i * n + i] = n as f64;
    }
    a
}

/// Tile (i, j)'s rows, moved out of the grid of tile rows while a kernel
/// has them.
pub fn take<'m>(pieces: &mut [Vec<&'m mut [f64]>], (i, j): (usize, usize), b: usize) -> Vec<&'m mut [f64]> {
    (0..b).map(|r| std::mem::take(&mut pieces[i * b + r][j])).collect()
}

pub fn put<'m>(
    pieces: &mut [Vec<&'m mut [f64]>],
    (i, j): (usize, usize),
    b: usize,
    rows: Vec<&'m mut [f64]>,
) {
    for (r, row) in rows.into_iter().enumerate() {
        pieces[i * b + r][j] = row;
    }
}

pub fn shared<'a>(rows: &'a [&mut [f64]]) -> Vec<&'a [f64]> {
    rows.iter().map(|r| &**r).collect()
}

/// A set of the four tile kernels, so that one sequential run serves every
/// implementation of them (these in Rust, `cholesky_omp`'s in C).
pub struct Kernels {
    pub potrf: fn(Written<'_, '_>) -> Result<(), String>,
    pub trsm: fn(Read<'_, '_>, Written<'_, '_>),
    pub syrk: fn(Read<'_, '_>, Written<'_, '_>),
    pub gemm: fn(Read<'_, '_>, Read<'_, '_>, Written<'_, '_>),
}

/// A tile's rows, read.
pub type Read<'a, 'r> = &'a [&'r [f64]];
/// A tile's rows, written.
pub type Written<'a, 'r> = &'a mut [&'r mut [f64]];

/// The kernels above.
pub const RUST: Kernels = Kernels { potrf, trsm, syrk, gemm };

/// The sequential run: the same kernels in the same order, on the
/// matrix's rows cut into tile rows (disjoint slices of the one matrix, so
/// the same layout as the engine's tiles).
pub fn sequential(m: &mut [f64], n: usize, b: usize) -> Result<(), String> {
    sequential_with(&RUST, m, n, b)
}

/// [`sequential`] with the kernels of `with`.
pub fn sequential_with(with: &Kernels, m: &mut [f64], n: usize, b: usize) -> Result<(), String> {
    let nt = n / b;
    let mut pieces: Vec<Vec<&mut [f64]>> = m.chunks_mut(n).map(|row| row.chunks_mut(b).collect()).collect();
    for k in 0..nt {
        let mut kk = take(&mut pieces, (k, k), b);
        (with.potrf)(&mut kk)?;
        for i in k + 1..nt {
            let mut x = take(&mut pieces, (i, k), b);
            (with.trsm)(&shared(&kk), &mut x);
            put(&mut pieces, (i, k), b, x);
        }
        put(&mut pieces, (k, k), b, kk);
        for i in k + 1..nt {
            let a = take(&mut pieces, (i, k), b);
            let mut ii = take(&mut pieces, (i, i), b);
            (with.syrk)(&shared(&a), &mut ii);
            put(&mut pieces, (i, i), b, ii);
            for j in k + 1..i {
                let bt = take(&mut pieces, (j, k), b);
                let mut ij = take(&mut pieces, (i, j), b);
                (with.gemm)(&shared(&a), &shared(&bt), &mut ij);
                put(&mut pieces, (i, j), b, ij);
                put(&mut pieces, (j, k), b, bt);
            }
            put(&mut pieces, (i, k), b, a);
        }
    }
    Ok(())
}

// ---- checks ----

/// ‖A − L·Lᵀ‖/‖A‖ over the lower triangle (L in the lower triangle of `l`).
pub fn residual(a: &[f64], l: &[f64], n: usize) -> f64 {
    let (mut err, mut norm) = (0.0f64, 0.0f64);
    for i in 0..n {
        for j in 0..=i {
            let llt = dot(&l[i * n..i * n + j + 1], &l[j * n..j * n + j + 1]);
            let d = a[i * n + j] - llt;
            err += d * d;
            norm += a[i * n + j] * a[i * n + j];
        }
    }
    (err / norm).sqrt()
}

pub fn lower_equal(x: &[f64], y: &[f64], n: usize) -> bool {
    (0..n).all(|i| {
        x[i * n..i * n + i + 1].iter().zip(&y[i * n..i * n + i + 1]).all(|(p, q)| p.to_bits() == q.to_bits())
    })
}
