//! Byte buffers for staged transfers, kept for the next ones: a fresh
//! buffer of tens of kilobytes costs its zeroing and its pages' first
//! faults on every transfer (PERFORMANCE.md, *Transfers*).

use std::sync::{Mutex, PoisonError};

/// The most buffers kept.
const KEPT: usize = 64;

static SPARE: Mutex<Vec<Vec<u8>>> = Mutex::new(Vec::new());

/// A buffer of `len` bytes, of unspecified contents (what a transfer
/// before left there, or zeros).
pub(super) fn take(len: usize) -> Vec<u8> {
    let spare = SPARE.lock().unwrap_or_else(PoisonError::into_inner).pop();
    let mut buffer = spare.unwrap_or_default();
    if buffer.capacity() < len {
        // Grown, not zeroed twice: the old bytes need not be kept.
        buffer.clear();
    }
    buffer.resize(len, 0);
    buffer
}

/// Keeps `buffer` for a later transfer, if there is room.
pub(super) fn give(buffer: Vec<u8>) {
    let mut spare = SPARE.lock().unwrap_or_else(PoisonError::into_inner);
    if spare.len() < KEPT && buffer.capacity() > 0 {
        spare.push(buffer);
    }
}
