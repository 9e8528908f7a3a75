//! Synchronisation primitives, switched to loom's under `--cfg depengine_loom`
//! so that the var cells, op counters and worker parking can be model checked.

#[cfg(not(depengine_loom))]
pub(crate) mod sync {
    pub(crate) use std::sync::{Condvar, Mutex, MutexGuard};
    pub(crate) mod atomic {
        pub(crate) use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering, fence};
    }
}

#[cfg(depengine_loom)]
pub(crate) mod sync {
    pub(crate) use loom::sync::{Condvar, Mutex, MutexGuard};
    pub(crate) mod atomic {
        pub(crate) use loom::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering, fence};
    }
}

/// Locks a mutex, ignoring poisoning: no engine code panics while holding a
/// lock, and user code never runs under one.
pub(crate) fn lock<T>(m: &sync::Mutex<T>) -> sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}
