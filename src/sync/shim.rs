//! Synchronisation primitives, switched to loom's under `--cfg depengine_loom`
//! so that the var cells, op counters and worker parking can be model checked.

#[cfg(not(depengine_loom))]
pub(crate) use std::sync::{Condvar, Mutex, MutexGuard};

#[cfg(depengine_loom)]
pub(crate) use loom::sync::{Condvar, Mutex, MutexGuard};

#[cfg(not(depengine_loom))]
pub(crate) mod atomic {
    pub(crate) use std::sync::atomic::{
        AtomicBool, AtomicPtr, AtomicU8, AtomicU32, AtomicUsize, Ordering, fence,
    };
}

#[cfg(depengine_loom)]
pub(crate) mod atomic {
    pub(crate) use loom::sync::atomic::{
        AtomicBool, AtomicPtr, AtomicU8, AtomicU32, AtomicUsize, Ordering, fence,
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

/// Locks a mutex, ignoring poisoning: no engine code panics while holding a
/// lock, and user code never runs under one.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}
