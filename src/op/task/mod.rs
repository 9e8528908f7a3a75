//! The lean op record (`README.md` beside this file): a 64-byte header
//! that every queue, var inbox, guard, handle and token reaches through an
//! 8-byte [`TaskRef`], a static [`Vtable`] per body type, one state word
//! ([`State`]), the engine's concrete [`EngineCore`], and slab memory.
//!
//! Why `unsafe`: a `TaskRef` is a counted raw pointer to a record whose
//! typed part only its vtable knows (tokio's task, rayon's `JobRef`):
//! `Arc<dyn …>` on every op cost the crate two counts, a fat pointer and
//! a call through a trait object per step (LEAN-CORE's anatomy,
//! PERFORMANCE.md, *The lean record*). Modelled by loom (`state/`) and
//! checked by Miri (`cell/tests.rs`, `../../sync/slab/tests.rs`).

#![allow(unsafe_code)]

use std::ptr::NonNull;

use crate::sync::atomic::AtomicPtr;
use crate::sync::cell::UnsafeCell;
use crate::sync::epoch::EpochRef;

pub(crate) mod cell;
mod cold;
pub(crate) mod state;

pub(crate) use crate::op::record::EngineCore;
pub(crate) use cold::ColdPtr;
pub(crate) use state::State;

/// What the engine knows of an op's placement and kind, on the header's
/// line: 16 bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C)]
pub(crate) struct Meta {
    /// The device: its ordinal, the top bit set for a GPU.
    pub(crate) device: u32,
    pub(crate) priority: i32,
    pub(crate) lane: u8,
    pub(crate) exec: u8,
    /// Fixed at push: what kind of op it is.
    pub(crate) flags: u16,
    /// Declared vars, after normalisation.
    pub(crate) deps: u32,
}

/// The erased part of every op: one cache line.
#[repr(C, align(64))]
pub(crate) struct Header {
    /// Flags and the three counts (see `state.rs`).
    pub(crate) state: State,
    /// The body type's functions.
    pub(crate) vtable: &'static Vtable,
    /// The engine that pushed the op: outlives every record of it.
    pub(crate) core: NonNull<EngineCore>,
    /// The intrusive link of a var's inbox (the pointer holds a reference).
    pub(crate) next: AtomicPtr<Header>,
    /// Its count in a `wait_for_all` epoch, released once as it completes.
    pub(crate) epoch: UnsafeCell<Option<EpochRef>>,
    /// What only some ops need, made on first need.
    pub(crate) cold: ColdPtr,
    pub(crate) meta: Meta,
}

// SAFETY: the header's cells are reached under the state word's rules
// (`README.md`): `epoch` by the one completion, `cold` through its own
// atomic pointer; `core` points to a `Sync` engine that outlives the op.
unsafe impl Send for Header {}
// SAFETY: as above.
unsafe impl Sync for Header {}

/// The functions of one body type: what a `TaskRef` calls without knowing
/// it (tokio's task vtable).
pub(crate) struct Vtable {
    /// Runs the body (the caller holds a reference).
    pub(crate) run: unsafe fn(NonNull<Header>),
    /// Writes the output into `*dst` (a `Poll<Result<R, Error>>` of the
    /// body's `R`) if the op has completed, else keeps `waker` to wake.
    pub(crate) read_output: unsafe fn(NonNull<Header>, dst: *mut (), waker: &std::task::Waker),
    /// Stores `*src` (an `Option<Result<R, Error>>`, taken) as the output:
    /// a completion token's signal.
    pub(crate) store_output: unsafe fn(NonNull<Header>, src: *mut ()),
    /// Completes the op once its body has ended and its guards are gone.
    pub(crate) complete: unsafe fn(NonNull<Header>),
    /// Drops the body or output in place (nobody will read it).
    pub(crate) drop_stage: unsafe fn(NonNull<Header>),
    /// Drops the record and gives its memory back (its last reference).
    pub(crate) dealloc: unsafe fn(NonNull<Header>),
}

/// A counted reference to an op record: the only handle to it, 8 bytes,
/// in every queue.
pub(crate) struct TaskRef(NonNull<Header>);

// SAFETY: a record is shared through its state word's counts and rules;
// its body and output are `Send` (the cell's bound).
unsafe impl Send for TaskRef {}
// SAFETY: as above.
unsafe impl Sync for TaskRef {}

impl TaskRef {
    /// Takes over a reference counted in `header`'s `refs`.
    ///
    /// # Safety
    ///
    /// `header` is a live record's, and the caller owns one of its counted
    /// references, which this value now holds.
    pub(crate) unsafe fn from_raw(header: NonNull<Header>) -> Self {
        Self(header)
    }

    /// Gives up the value without dropping the reference it holds.
    pub(crate) fn into_raw(self) -> NonNull<Header> {
        let raw = self.0;
        std::mem::forget(self);
        raw
    }

    #[inline]
    pub(crate) fn header(&self) -> &Header {
        // SAFETY: a `TaskRef` holds a counted reference: the record lives.
        unsafe { self.0.as_ref() }
    }

    /// The record's address (for keys and comparisons).
    pub(crate) fn as_ptr(&self) -> NonNull<Header> {
        self.0
    }

    /// Runs the body, once the op is ready.
    pub(crate) fn run(&self) {
        // SAFETY: the record lives (a reference is held), and `run` is its
        // vtable's for this very record.
        unsafe { (self.header().vtable.run)(self.0) }
    }
}

impl Clone for TaskRef {
    fn clone(&self) -> Self {
        self.header().state.ref_inc();
        Self(self.0)
    }
}

impl Drop for TaskRef {
    fn drop(&mut self) {
        if self.header().state.ref_dec() {
            // SAFETY: that was the last reference: nothing reaches the
            // record any more, and `dealloc` is its own vtable's.
            unsafe { (self.header().vtable.dealloc)(self.0) }
        }
    }
}

impl PartialEq for TaskRef {
    fn eq(&self, other: &Self) -> bool {
        self.0 == other.0
    }
}

impl std::fmt::Debug for TaskRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("TaskRef").field(&self.0).field(&self.header().state.load()).finish()
    }
}

#[cfg(all(test, not(depengine_loom)))]
mod tests;
