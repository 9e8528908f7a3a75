//! Where the tiles of a matrix go: 2D block-cyclic over a grid of ranks.

/// The rank that owns tile `(i, j)` of a matrix of tiles spread 2D
/// block-cyclically over a `p × q` grid of ranks (ScaLAPACK's layout):
/// rank `(i mod p) · q + (j mod q)`.
///
/// # Panics
///
/// If `p` or `q` is zero.
pub fn block_cyclic(i: usize, j: usize, p: usize, q: usize) -> usize {
    assert!(p > 0 && q > 0, "a grid of ranks has at least one row and one column");
    (i % p) * q + (j % q)
}

/// The grid `p × q` closest to square for `size` ranks (`p ≤ q`).
pub fn grid(size: usize) -> (usize, usize) {
    let mut p = (size as f64).sqrt() as usize;
    while p > 1 && !size.is_multiple_of(p) {
        p -= 1;
    }
    let p = p.max(1);
    (p, size / p)
}
