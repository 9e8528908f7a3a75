//! A lock for short critical sections on the path of pushes: the epoch
//! tracker's count of pushed ops (`epoch.rs`), which every push enters,
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
//! take other locks only as briefly held (the tracker takes an epoch's
//! link): a thread preempted while
//! holding it makes the others yield until it runs again. Var locks stay
//! `std` mutexes: a pushing thread holds them across a multi-var append,
//! and when it is preempted there (three threads on two cores), workers
//! that yield in a loop instead of sleeping only take the core it needs.
//!
//! The lock is the `spin` crate's `SpinMutex` (its release is a plain
//! store too), which waits by yielding its core: measured as fast as the
//! hand-made lock it replaced, which spun 64 times before it yielded
//! (PERFORMANCE.md, *Hand-made parts against the crates*).

/// The `spin` crate's lock, released with a plain store, yielding its
/// core while it finds the lock held.
#[cfg(not(depengine_loom))]
mod imp {
    pub(crate) type SpinLock<T> = spin::mutex::SpinMutex<T, spin::relax::Yield>;
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
