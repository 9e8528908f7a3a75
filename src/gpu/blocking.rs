//! The guard that no engine thread blocks on the GPU: GPU workers and
//! pollers mark themselves, and every blocking call of the device layer
//! checks the mark first. In debug builds a marked thread that would block
//! panics (an op body doing it fails with that panic); release builds do
//! not check.

use std::cell::Cell;

thread_local! {
    static ENGINE_GPU_THREAD: Cell<bool> = const { Cell::new(false) };
}

/// Marks this thread as one that must never block on the GPU.
pub(crate) fn mark_engine_thread() {
    ENGINE_GPU_THREAD.with(|m| m.set(true));
}

/// Whether this thread is marked.
pub(crate) fn is_engine_thread() -> bool {
    ENGINE_GPU_THREAD.with(Cell::get)
}

/// Panics, in a debug build, if this thread is marked: `what` would block
/// it on the GPU.
pub(crate) fn check(what: &str) {
    if cfg!(debug_assertions) && is_engine_thread() {
        panic!("{what} would block an engine thread on the GPU: GPU work completes by polled events");
    }
}
