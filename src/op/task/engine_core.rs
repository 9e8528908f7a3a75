//! What an op reaches of its engine: one concrete struct, no trait object.
//! The one way up to the exec layer is a function pointer and a data
//! pointer (rayon's `JobRef` shape), set by the engine as it starts, so
//! that the layers still point one way.

#![allow(unsafe_code)]

use super::TaskRef;
use crate::sync::atomic::{AtomicBool, Ordering};
use crate::sync::tally::Tally;

/// Dispatches a ready op: the exec layer's, behind a data pointer.
pub(crate) type DispatchFn = unsafe fn(data: *const (), task: TaskRef);

pub(crate) struct EngineCore {
    dispatch: DispatchFn,
    /// What `dispatch` is given: the exec layer's dispatcher, which
    /// outlives every op of the engine.
    data: *const (),
    /// A cancelling shutdown has begun: ops not started are cancelled.
    cancelling: AtomicBool,
    /// Ops completed, whatever their outcome.
    pub(crate) completed: Tally,
}

// SAFETY: `data` is the engine's dispatcher, which is `Sync` and outlives
// every op (the engine that owns both says so as it builds this).
unsafe impl Send for EngineCore {}
// SAFETY: as above.
unsafe impl Sync for EngineCore {}

impl EngineCore {
    /// The core of an engine whose ready ops `dispatch(data, op)` sends
    /// to their pools.
    ///
    /// # Safety
    ///
    /// `data` stays valid, and `dispatch` sound to call with it from any
    /// thread, for as long as any record of the engine lives.
    pub(crate) unsafe fn new(dispatch: DispatchFn, data: *const ()) -> Self {
        Self { dispatch, data, cancelling: AtomicBool::new(false), completed: Tally::default() }
    }

    /// Sends a ready op to where it runs.
    #[inline]
    pub(crate) fn dispatch(&self, task: TaskRef) {
        // SAFETY: `new`'s contract.
        unsafe { (self.dispatch)(self.data, task) }
    }

    pub(crate) fn is_cancelling(&self) -> bool {
        self.cancelling.load(Ordering::Acquire)
    }

    pub(crate) fn cancel(&self) {
        self.cancelling.store(true, Ordering::Release);
    }
}
