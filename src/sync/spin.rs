//! A lock for short critical sections on the path of pushes: the epoch
//! tracker's count and spare record list (`epoch.rs`), which every push enters,
//! and a feed's spill (`exec/feed.rs`), which a push enters while its ring
//! is full.
//!
//! `std`'s `Mutex` releases with a read-modify-write (its unlock swaps the
//! state to learn whether a thread sleeps on it, to wake it). On x86 that
//! is a locked instruction, which waits for every earlier store of the
//! thread to leave its store buffer. This lock never sleeps, so its
//! release is a plain store; only taking it is a read-modify-write. A
//! thread that finds it held spins briefly, then yields its core until the
//! holder lets go.
//!
//! Only for sections of a few dozen instructions that run no user code and
//! take other locks only as briefly held (the tracker takes an epoch's link
//! and, once in a while, the spare records's list): a thread preempted while
//! holding it makes the others yield until it runs again. Var locks stay
//! `std` mutexes: a pushing thread holds them across a multi-var append,
//! and when it is preempted there (three threads on two cores), workers
//! that yield in a loop instead of sleeping only take the core it needs.
//!
//! Why `unsafe`: the lock's value sits in an `UnsafeCell` guarded by one
//! atomic flag, released with a plain store. Measured: PERFORMANCE.md, *A
//! spin lock whose release is a plain store*.

#![allow(unsafe_code)]

#[cfg(not(depengine_loom))]
mod imp {
    use std::cell::UnsafeCell;
    use std::ops::{Deref, DerefMut};
    use std::sync::atomic::{AtomicBool, Ordering};

    /// Spin-loop hints before a waiting thread starts yielding its core.
    const SPINS: u32 = 64;

    pub(crate) struct SpinLock<T> {
        locked: AtomicBool,
        value: UnsafeCell<T>,
    }

    // SAFETY: the lock hands out access to `value` to one thread at a time
    // (see `lock`), so sharing the lock only ever moves `T` between threads.
    unsafe impl<T: Send> Sync for SpinLock<T> {}

    impl<T> SpinLock<T> {
        pub(crate) fn new(value: T) -> Self {
            Self { locked: AtomicBool::new(false), value: UnsafeCell::new(value) }
        }

        /// Takes the lock, waiting while another thread holds it.
        pub(crate) fn lock(&self) -> SpinGuard<'_, T> {
            // Acquire: the previous holder's writes, released by its unlock,
            // are visible to this one.
            while self.locked.swap(true, Ordering::Acquire) {
                let mut spins = 0u32;
                // Wait for it to look free before trying again, without writing
                // its line meanwhile.
                while self.locked.load(Ordering::Relaxed) {
                    if spins < SPINS {
                        spins += 1;
                        std::hint::spin_loop();
                    } else {
                        std::thread::yield_now();
                    }
                }
            }
            SpinGuard::new(self)
        }
    }

    /// Access to a [`SpinLock`]'s value; releases the lock when dropped.
    pub(crate) struct SpinGuard<'a, T> {
        lock: &'a SpinLock<T>,
    }

    impl<'a, T> SpinGuard<'a, T> {
        fn new(lock: &'a SpinLock<T>) -> Self {
            Self { lock }
        }
    }

    impl<T> Deref for SpinGuard<'_, T> {
        type Target = T;

        fn deref(&self) -> &T {
            // SAFETY: the guard holds the lock: no other thread accesses the
            // value until it is dropped, and this thread only through it.
            unsafe { &*self.lock.value.get() }
        }
    }

    impl<T> DerefMut for SpinGuard<'_, T> {
        fn deref_mut(&mut self) -> &mut T {
            // SAFETY: as for `deref`; `&mut self` makes this the only access
            // through the guard.
            unsafe { &mut *self.lock.value.get() }
        }
    }

    impl<T> Drop for SpinGuard<'_, T> {
        fn drop(&mut self) {
            // Release: this holder's writes are visible to the next one, whose
            // swap acquires them.
            self.lock.locked.store(false, Ordering::Release);
        }
    }
}

/// Under loom, the lock is loom's mutex: the models check what the lock
/// protects (the tracker's epochs), and loom cannot bound a spin lock's
/// wait.
#[cfg(depengine_loom)]
mod imp {
    pub(crate) struct SpinLock<T>(loom::sync::Mutex<T>);

    pub(crate) type SpinGuard<'a, T> = loom::sync::MutexGuard<'a, T>;

    impl<T> SpinLock<T> {
        pub(crate) fn new(value: T) -> Self {
            Self(loom::sync::Mutex::new(value))
        }

        pub(crate) fn lock(&self) -> SpinGuard<'_, T> {
            crate::sync::lock(&self.0)
        }
    }
}

pub(crate) use imp::SpinLock;

#[cfg(all(test, not(depengine_loom)))]
mod tests;
