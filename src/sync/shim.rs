//! Synchronisation primitives, switched to loom's under `--cfg depengine_loom`
//! so that the var cells, op counters and worker parking can be model checked.

#[cfg(not(depengine_loom))]
pub(crate) use std::sync::{Condvar, Mutex, MutexGuard};

#[cfg(depengine_loom)]
pub(crate) use loom::sync::{Condvar, Mutex, MutexGuard};

#[cfg(not(depengine_loom))]
pub(crate) mod atomic {
    pub(crate) use std::sync::atomic::{
        AtomicBool, AtomicPtr, AtomicU8, AtomicU32, AtomicU64, AtomicUsize, Ordering, fence,
    };
}

#[cfg(depengine_loom)]
pub(crate) mod atomic {
    pub(crate) use loom::sync::atomic::{
        AtomicBool, AtomicPtr, AtomicU8, AtomicU32, AtomicU64, AtomicUsize, Ordering, fence,
    };
}

/// A cell whose accesses the caller synchronizes; loom's checks them.
#[cfg(not(depengine_loom))]
pub(crate) mod cell {
    /// `std`'s `UnsafeCell` with loom's closure-based accessor.
    #[derive(Debug, Default)]
    pub(crate) struct UnsafeCell<T>(std::cell::UnsafeCell<T>);

    impl<T> UnsafeCell<T> {
        pub(crate) const fn new(value: T) -> Self {
            Self(std::cell::UnsafeCell::new(value))
        }

        /// Calls `f` with a pointer to the value; dereferencing it is the
        /// caller's (unsafe) business.
        pub(crate) fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
            f(self.0.get())
        }
    }
}

#[cfg(depengine_loom)]
pub(crate) mod cell {
    pub(crate) use loom::cell::UnsafeCell;
}

/// Waits on `condvar` for at most `timeout`; whether it timed out.
#[cfg(not(depengine_loom))]
pub(crate) fn wait_timeout<'a, T>(
    condvar: &Condvar,
    guard: MutexGuard<'a, T>,
    timeout: std::time::Duration,
) -> (MutexGuard<'a, T>, bool) {
    let (guard, wait) = condvar.wait_timeout(guard, timeout).unwrap_or_else(|e| e.into_inner());
    (guard, wait.timed_out())
}

/// Under loom, which has no time, a timed wait times out at once: the
/// models take the path that any timed wait may take (loom's own
/// `wait_timeout` never times out).
#[cfg(depengine_loom)]
pub(crate) fn wait_timeout<'a, T>(
    _condvar: &Condvar,
    guard: MutexGuard<'a, T>,
    _timeout: std::time::Duration,
) -> (MutexGuard<'a, T>, bool) {
    (guard, true)
}

/// Locks a mutex, ignoring poisoning: no engine code panics while holding a
/// lock, and user code never runs under one.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}
