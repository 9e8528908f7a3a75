//! The cold pointer: what only some ops carry, in one allocation made on
//! first need and set with one `compare_exchange` (null: none). An op that
//! needs nothing of it pays one null pointer in its header.
//!
//! It is filled by whichever thread first needs it (the push, a var's
//! completion granting the op with an error, the op's own failure); the
//! loser of a race drops its own box. It is freed only with the record
//! (`ColdPtr::drop`, called by the record's dealloc).

#![allow(unsafe_code)]

use std::ptr::NonNull;

use crate::error::Error;
use crate::sync::Mutex;
use crate::sync::atomic::{AtomicPtr, Ordering};

/// What only some ops carry.
#[derive(Default)]
pub(crate) struct Cold {
    /// The first error the op saw on its vars, or its own.
    pub(crate) error: Mutex<Option<Error>>,
    /// The op's span, while a subscriber wants it (set at push).
    pub(crate) span: Option<tracing::Span>,
}

/// The header's pointer to its cold box.
pub(crate) struct ColdPtr(AtomicPtr<Cold>);

impl ColdPtr {
    pub(crate) fn none() -> Self {
        Self(AtomicPtr::new(std::ptr::null_mut()))
    }

    /// The box, if one was made. `Acquire`: its contents, written before
    /// it was published, are visible.
    pub(crate) fn get(&self) -> Option<&Cold> {
        let p = NonNull::new(self.0.load(Ordering::Acquire))?;
        // SAFETY: a published box lives as long as the pointer (freed only
        // by `drop`, with the record held alone).
        Some(unsafe { p.as_ref() })
    }

    /// The box, made by `make` now if there is none yet.
    pub(crate) fn get_or_init(&self, make: impl FnOnce() -> Cold) -> &Cold {
        if let Some(cold) = self.get() {
            return cold;
        }
        let mine = Box::into_raw(Box::new(make()));
        let published =
            match self.0.compare_exchange(std::ptr::null_mut(), mine, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => mine,
                Err(theirs) => {
                    // SAFETY: `mine` was never published: still this call's.
                    drop(unsafe { Box::from_raw(mine) });
                    theirs
                }
            };
        // SAFETY: published, it lives as long as the pointer (see `get`).
        unsafe { &*published }
    }
}

impl Drop for ColdPtr {
    fn drop(&mut self) {
        let p = self.0.swap(std::ptr::null_mut(), Ordering::Acquire);
        if !p.is_null() {
            // SAFETY: the record is dropped: nothing else reaches the box.
            drop(unsafe { Box::from_raw(p) });
        }
    }
}
