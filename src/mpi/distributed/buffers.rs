//! Byte buffers for staged transfers, kept for the next ones: a fresh
//! buffer of tens of kilobytes costs its zeroing and its pages' first
//! faults on every transfer (PERFORMANCE.md, *Tiles across ranks*).

use std::sync::{Mutex, PoisonError};

/// The most buffers kept.
const KEPT: usize = 64;

/// Kept buffers, each as long as its capacity (zeroed once, when it was
/// kept first), so that taking one back zeroes nothing.
static SPARE: Mutex<Vec<Vec<u8>>> = Mutex::new(Vec::new());

/// A buffer of `len` bytes, of unspecified contents (what a transfer
/// before left there, or zeros).
pub(super) fn take(len: usize) -> Vec<u8> {
    let found = {
        let mut spare = SPARE.lock().unwrap_or_else(PoisonError::into_inner);
        // The most recently kept that is large enough.
        spare.iter().rposition(|b| b.len() >= len).map(|at| spare.swap_remove(at))
    };
    match found {
        Some(mut buffer) => {
            buffer.truncate(len);
            buffer
        }
        None => vec![0; len],
    }
}

/// Keeps `buffer` for a later transfer, if there is room.
pub(super) fn give(mut buffer: Vec<u8>) {
    if buffer.capacity() == 0 {
        return;
    }
    buffer.resize(buffer.capacity(), 0);
    let mut spare = SPARE.lock().unwrap_or_else(PoisonError::into_inner);
    if spare.len() < KEPT {
        spare.push(buffer);
    }
}
