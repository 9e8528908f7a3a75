//! Synchronisation primitives, switched to loom's under `--cfg depengine_loom`
//! so that the var cells and op counters can be model checked.

#[cfg(not(depengine_loom))]
pub(crate) mod sync {
    pub(crate) use std::sync::{Mutex, MutexGuard};
    pub(crate) mod atomic {
        pub(crate) use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
    }
}

#[cfg(depengine_loom)]
pub(crate) mod sync {
    pub(crate) use loom::sync::{Mutex, MutexGuard};
    pub(crate) mod atomic {
        pub(crate) use loom::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
    }
}

/// Locks a mutex, ignoring poisoning: no engine code panics while holding a
/// lock, and user code never runs under one.
pub(crate) fn lock<T>(m: &sync::Mutex<T>) -> sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}
