//! A ring's slots: memory mapped from the system where it can be, zeroed,
//! so that an idle ring costs no resident memory and goes back to the
//! system when it is freed.
//!
//! Why `unsafe`: the mapping is made and given back by hand, and viewed as
//! slots (`Slot`'s first state is all bits clear). Measured: PERFORMANCE.md,
//! *A queue of its own for each pushing thread* (4,000 threads that each
//! pushed once kept 250 MB of allocator memory after their feeds retired);
//! Miri runs the ring's tests over it.

#![allow(unsafe_code)]

#[cfg(not(depengine_loom))]
use std::ptr::NonNull;

use super::{SLOTS, Slot};
#[cfg(depengine_loom)]
use crate::sync::{atomic::AtomicUsize, cell::UnsafeCell};
#[cfg(depengine_loom)]
use std::mem::MaybeUninit;

/// A ring's slots, in memory that is all zero when it arrives (every
/// slot's first state) and that goes back to the operating system when the
/// ring is freed.
///
/// A ring is 64 KiB, and a service may have thousands of threads that
/// each pushed once, each with a ring until its feed is retired. From the
/// allocator, freed rings stay resident in its arenas (measured: 4,000
/// such threads kept 250 MB after every feed was retired); and a ring
/// initialised slot by slot is resident whole even if its thread queued
/// one op. Mapped from the system, a ring holds only the pages its ops
/// touched, and none once it is freed.
#[cfg(not(depengine_loom))]
pub(super) struct Slots<T> {
    first: NonNull<Slot<T>>,
    /// Whether `first` was mapped from the system (else allocated).
    mapped: bool,
}

/// Under loom, whose atomics are not plain memory: built slot by slot, in
/// the state zeroed memory stands for.
#[cfg(depengine_loom)]
pub(super) type Slots<T> = Box<[Slot<T>]>;

#[cfg(depengine_loom)]
pub(super) fn new_slots<T>() -> Slots<T> {
    (0..SLOTS)
        .map(|_| Slot { seq: AtomicUsize::new(0), task: UnsafeCell::new(MaybeUninit::uninit()) })
        .collect()
}

#[cfg(not(depengine_loom))]
pub(super) fn new_slots<T>() -> Slots<T> {
    Slots::new()
}

#[cfg(not(depengine_loom))]
impl<T> Slots<T> {
    const LAYOUT: std::alloc::Layout = std::alloc::Layout::new::<[Slot<T>; SLOTS]>();

    fn new() -> Self {
        if let Some(first) = Self::map() {
            return Self { first, mapped: true };
        }
        // SAFETY: the layout has a non-zero size (SLOTS slots of 64 bytes).
        let raw = unsafe { std::alloc::alloc_zeroed(Self::LAYOUT) };
        let first = NonNull::new(raw.cast()).unwrap_or_else(|| std::alloc::handle_alloc_error(Self::LAYOUT));
        Self { first, mapped: false }
    }

    /// Fresh pages from the system, if it gives them.
    #[cfg(target_os = "linux")]
    fn map() -> Option<NonNull<Slot<T>>> {
        use rustix::mm::{MapFlags, ProtFlags, mmap_anonymous};
        // SAFETY: a new private anonymous mapping, at an address the system
        // chooses, replaces nothing; it is page-aligned (slots need 64
        // bytes) and zero-filled.
        let raw = unsafe {
            mmap_anonymous(
                std::ptr::null_mut(),
                Self::LAYOUT.size(),
                ProtFlags::READ | ProtFlags::WRITE,
                MapFlags::PRIVATE,
            )
        };
        raw.ok().and_then(|raw| NonNull::new(raw.cast()))
    }

    #[cfg(not(target_os = "linux"))]
    fn map() -> Option<NonNull<Slot<T>>> {
        None
    }

    /// Gives back a mapping made by [`map`](Self::map).
    #[cfg(target_os = "linux")]
    fn unmap(&mut self) {
        // SAFETY: `first` is the start of a mapping of this length, made in
        // `map`, and nothing refers to it any more.
        let _ = unsafe { rustix::mm::munmap(self.first.as_ptr().cast(), Self::LAYOUT.size()) };
    }

    #[cfg(not(target_os = "linux"))]
    fn unmap(&mut self) {
        unreachable!("nothing is mapped here")
    }
}

#[cfg(not(depengine_loom))]
impl<T> std::ops::Deref for Slots<T> {
    type Target = [Slot<T>];

    fn deref(&self) -> &[Slot<T>] {
        // SAFETY: `first` starts `SLOTS` slots that live as long as `self`,
        // in memory that was zero when it arrived: a valid slot (an atomic
        // at zero, a task not yet written).
        unsafe { std::slice::from_raw_parts(self.first.as_ptr(), SLOTS) }
    }
}

#[cfg(not(depengine_loom))]
impl<T> Drop for Slots<T> {
    /// The slots own nothing to drop: their tasks are dropped by the ring
    /// (`FeedShared::drop`), and their atomics need no drop.
    fn drop(&mut self) {
        if self.mapped {
            self.unmap();
        } else {
            // SAFETY: `first` was allocated in `new` with this layout.
            unsafe { std::alloc::dealloc(self.first.as_ptr().cast(), Self::LAYOUT) };
        }
    }
}

// SAFETY: the slots are plain memory the ring owns, shared as the ring
// shares them (`FeedShared`'s own `Sync` says how).
#[cfg(not(depengine_loom))]
unsafe impl<T: Send> Send for Slots<T> {}
// SAFETY: as above.
#[cfg(not(depengine_loom))]
unsafe impl<T: Send> Sync for Slots<T> {}
