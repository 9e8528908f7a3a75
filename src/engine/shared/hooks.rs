//! The engine's hooks for its ops (`op::engine_core`): what an op
//! calls up the layers, given its engine's core.
//!
//! Why `unsafe`: a record holds its engine as a pointer to the core, which
//! is the first field of the `repr(C)` `Shared` in the engine's `Arc`, and
//! counted in that `Arc` through these hooks (instead of an
//! `Arc<dyn …>` trait object: a fat pointer and a dynamic call per
//! completion).
//! Every hook is given a core that one of those counts keeps alive.

#![allow(unsafe_code)]

use std::ptr::NonNull;
use std::sync::Arc;

use super::Shared;
use crate::op::ReadyList;
use crate::op::engine_core::arc_counts;
use crate::op::{EngineCore, EngineRef, Hooks};

/// The engine's core at the start of its `Arc`'s value (`repr(C)`, the
/// core first): the engine behind `core`.
///
/// # Safety
///
/// `core` is the core of a `Shared` that lives.
unsafe fn shared<'a>(core: NonNull<EngineCore>) -> &'a Shared {
    // SAFETY: the core is the first field of its `Shared` (the contract).
    unsafe { core.cast::<Shared>().as_ref() }
}

/// The engine's hooks for its ops (`op::Hooks`): each is given the
/// core of a `Shared` held in an `Arc`, whose pointer (`Arc::as_ptr`) is
/// the core's address.
pub(super) static HOOKS: Hooks = Hooks {
    retain: arc_counts::retain::<Shared>,
    release: arc_counts::release::<Shared>,
    dispatch_ready: hook_dispatch_ready,
    flush_nested: hook_flush_nested,
    help: crate::exec::help,
    profiled: hook_profiled,
};

unsafe fn hook_dispatch_ready(core: NonNull<EngineCore>, ready: &mut ReadyList) {
    // SAFETY: the caller holds a count: the engine lives.
    unsafe { shared(core) }.dispatcher.dispatch_ready(ready);
}

unsafe fn hook_flush_nested(core: NonNull<EngineCore>) {
    // SAFETY: as above.
    unsafe { shared(core) }.bulk.flush();
}

unsafe fn hook_profiled(core: NonNull<EngineCore>, op: crate::profile::OpRecord) {
    // SAFETY: as above.
    unsafe { shared(core) }.recorder.record(op);
}

impl Shared {
    /// A counted reference to this engine, for a record.
    pub(in crate::engine) fn engine_ref(self: &Arc<Self>) -> EngineRef {
        // The pointer of the whole value, not of a borrow of its first
        // field: the hooks reach the rest of the engine through it.
        let whole = Arc::as_ptr(self);
        // SAFETY: `repr(C)`, the core first: the value's address is the
        // core's. The count taken here is the reference's.
        unsafe {
            Arc::increment_strong_count(whole);
            EngineRef::from_raw(NonNull::new_unchecked(whole.cast_mut()).cast())
        }
    }
}
