//! A var's data and the check that its accesses never overlap.
//!
//! The var gate already guarantees that a write is never let through while
//! any other access is, so the data needs no lock: a guard only *checks*
//! that guarantee with one atomic borrow count (like `RefCell`, but usable
//! across threads), and panics instead of allowing an aliasing access if the
//! engine ever broke it. Both checks are one uncontended atomic operation.
//!
//! Why `unsafe`: the data is reached through an `UnsafeCell` that one atomic
//! borrow count checks, since the gate already excludes conflicting guards
//! (a lock would repeat it). Measured: PERFORMANCE.md, *Data access*; the
//! borrow count panics rather than alias if the gate were ever wrong
//! (`data/tests.rs`).

#![allow(unsafe_code)]

use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The borrow count's value while a write guard exists.
const WRITING: usize = usize::MAX;

pub(crate) struct DataCell<T> {
    /// Read guards alive, or `WRITING`.
    borrow: AtomicUsize,
    value: UnsafeCell<Option<T>>,
}

// SAFETY: the cell hands out `&T` to several threads at once only while the
// borrow count holds readers (needs `T: Sync`), and `&mut T` to one thread at
// a time while it holds `WRITING`, which may move the value between threads
// (needs `T: Send`). This is exactly `RwLock<T>`'s contract.
unsafe impl<T: Send + Sync> Sync for DataCell<T> {}

impl<T> DataCell<T> {
    pub(crate) fn new(value: T) -> Self {
        Self { borrow: AtomicUsize::new(0), value: UnsafeCell::new(Some(value)) }
    }

    /// Registers a reader; false if a writer holds the cell.
    pub(crate) fn try_read(&self) -> bool {
        let mut cur = self.borrow.load(Ordering::Relaxed);
        loop {
            if cur >= WRITING - 1 {
                return false;
            }
            // Acquire: the last writer's changes are visible to this reader.
            match self.borrow.compare_exchange_weak(cur, cur + 1, Ordering::Acquire, Ordering::Relaxed) {
                Ok(_) => return true,
                Err(actual) => cur = actual,
            }
        }
    }

    /// Registers the writer; false if any guard holds the cell.
    pub(crate) fn try_write(&self) -> bool {
        self.borrow.compare_exchange(0, WRITING, Ordering::Acquire, Ordering::Relaxed).is_ok()
    }

    /// Ends a read registered by `try_read`.
    pub(crate) fn end_read(&self) {
        self.borrow.fetch_sub(1, Ordering::Release);
    }

    /// Ends the write registered by `try_write`.
    pub(crate) fn end_write(&self) {
        self.borrow.store(0, Ordering::Release);
    }

    /// The data, shared.
    ///
    /// # Safety
    ///
    /// The caller holds a registration (a read, or the write) not yet ended,
    /// the returned reference does not outlive it, and no reference from
    /// `get_mut` is used while it lives.
    pub(crate) unsafe fn get(&self) -> &Option<T> {
        // SAFETY: a read registration excludes any writer (the count is not
        // `WRITING`); the write holder promises no `&mut` is live. Either
        // way no `&mut` to the value exists while this reference lives.
        unsafe { &*self.value.get() }
    }

    /// The data, for the holder of the write registration.
    ///
    /// # Safety
    ///
    /// The caller holds the write registered by `try_write`, not yet ended,
    /// uses no other reference obtained from this cell meanwhile, and the
    /// returned reference does not outlive the registration.
    #[allow(clippy::mut_from_ref)]
    pub(crate) unsafe fn get_mut(&self) -> &mut Option<T> {
        // SAFETY: the write registration is exclusive: no reader and no other
        // writer can register while it holds the count at `WRITING`.
        unsafe { &mut *self.value.get() }
    }
}

#[cfg(all(test, not(depengine_loom)))]
mod tests;
