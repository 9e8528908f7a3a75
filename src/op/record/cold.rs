//! The cold box: what only some ops carry (their errors, a nested op's
//! handoff with its parent, their span, their profile, their group), in one allocation
//! made only when an op has one of them. An op that has none carries one
//! empty cell in its header and runs no instruction of any of them: the
//! error path is entered on the header's `has_errors` bit, the span and the
//! profile on the flags read at push.
//!
//! The cell is filled at push (span, profile: the pusher holds the record
//! alone) or later by whichever thread first needs the errors (a var's
//! completion granting it with an error, the op's own failure, a nested
//! op's handoff): one `compare_exchange` on a null pointer publishes the
//! box, and the loser of a race drops its own. It is freed only with the
//! record.
//!
//! Why `unsafe`: the cell is one pointer, 8 bytes, where a `OnceLock` of
//! the box took 16; those 8 take a one-var op's record from 200 bytes to
//! 192, a slab slot of three cache lines instead of four (PERFORMANCE.md,
//! *The lean record*). Checked by Miri (`op::` unit tests, which fill and
//! race it through the error paths).

#![allow(unsafe_code)]

use std::ptr::NonNull;
use std::sync::OnceLock;

use super::group::GroupLink;
use super::nest::Handoff;
use super::profile::OpProfile;
use super::{Header, Meta};
use crate::error::Error;
use crate::sync::Mutex;
use crate::sync::atomic::{AtomicPtr, Ordering};

/// The header's cell for the cold box: null, or the box it owns.
pub(crate) struct ColdCell(AtomicPtr<Cold>);

impl ColdCell {
    fn empty() -> Self {
        Self(AtomicPtr::new(std::ptr::null_mut()))
    }

    fn holding(cold: Box<Cold>) -> Self {
        Self(AtomicPtr::new(Box::into_raw(cold)))
    }

    /// The box, if one was made. `Acquire`: what was written into it before
    /// it was published is visible.
    #[inline]
    pub(super) fn get(&self) -> Option<&Cold> {
        let cold = NonNull::new(self.0.load(Ordering::Acquire))?;
        // SAFETY: a published box lives as long as the cell (freed only by
        // its drop, with the record's), and is only read through it.
        Some(unsafe { cold.as_ref() })
    }

    /// The box, made by `make` now if there is none yet.
    pub(super) fn get_or_init(&self, make: impl FnOnce() -> Box<Cold>) -> &Cold {
        if let Some(cold) = self.get() {
            return cold;
        }
        let mine = Box::into_raw(make());
        let null = std::ptr::null_mut();
        let published = match self.0.compare_exchange(null, mine, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => mine,
            Err(theirs) => {
                // SAFETY: `mine` was never published: still this call's.
                drop(unsafe { Box::from_raw(mine) });
                theirs
            }
        };
        // SAFETY: published, it lives as long as the cell (see `get`).
        unsafe { &*published }
    }
}

impl Drop for ColdCell {
    fn drop(&mut self) {
        // `&mut self`: the record's drop, ordered after every use of it by
        // its count's last release (a plain load, on loom's atomics too).
        let cold = self.0.load(Ordering::Relaxed);
        if !cold.is_null() {
            // SAFETY: the cell owns its box, and nothing else reaches it.
            drop(unsafe { Box::from_raw(cold) });
        }
    }
}

/// What only some ops carry.
pub(crate) struct Cold {
    /// The op's span, while a subscriber wants it (set at push).
    span: Option<tracing::Span>,
    /// Its profile, while the profiler records it (set at push).
    profile: Option<OpProfile>,
    /// The errors it saw on its vars and the one it passes on
    /// (`errors.rs`), and a nested op's handoff (`nest.rs`).
    pub(super) errors: Mutex<OpErrors>,
    /// Its group, if it joined one at push (`group.rs`).
    pub(super) group: OnceLock<GroupLink>,
}

impl Default for Cold {
    fn default() -> Self {
        Self { span: None, profile: None, errors: Mutex::new(OpErrors::default()), group: OnceLock::new() }
    }
}

impl Header {
    /// The op's cold box, made now if it has none yet. Out of the hot
    /// path: only the error path and nesting call it.
    pub(super) fn cold(&self) -> &Cold {
        self.cold.get_or_init(Box::default)
    }

    /// The op's span, if a subscriber wants it.
    #[inline]
    pub(crate) fn span(&self) -> Option<&tracing::Span> {
        self.cold.get().and_then(|c| c.span.as_ref())
    }

    /// The op's profile, if the profiler records it.
    #[inline]
    pub(crate) fn profile(&self) -> Option<&OpProfile> {
        self.cold.get().and_then(|c| c.profile.as_ref())
    }

    /// Runs `f` inside the op's span, if it has one. Inlined, with `f`,
    /// into each step of an op's life: most ops have no span.
    #[inline(always)]
    pub(crate) fn in_span<R>(&self, f: impl FnOnce() -> R) -> R {
        match self.span() {
            Some(span) => span.in_scope(f),
            None => f(),
        }
    }
}

/// The cold box of a new op: its span if a subscriber wants it, its
/// profile if its push chose to profile it (`Meta::profiled`); empty for
/// neither. A group joins after the record is built (`group.rs`).
#[inline(always)]
pub(super) fn at_push(meta: &Meta) -> ColdCell {
    // Asked first: with tracing's `log` feature on (axum's default
    // features turn it on), a span that no subscriber wants is still built
    // and its fields formatted for the `log` crate, on every push.
    let span = tracing::enabled!(target: "depengine::op", tracing::Level::TRACE);
    if !span && !meta.profiled() {
        return ColdCell::empty();
    }
    watched(meta, span)
}

#[cold]
#[inline(never)]
fn watched(meta: &Meta, span: bool) -> ColdCell {
    let span = if span { op_span(meta) } else { None };
    let profile = meta.profiled().then(OpProfile::new);
    if span.is_none() && profile.is_none() {
        return ColdCell::empty();
    }
    ColdCell::holding(Box::new(Cold { span, profile, ..Cold::default() }))
}

/// The op's span, if a subscriber wants it.
fn op_span(meta: &Meta) -> Option<tracing::Span> {
    let span = tracing::trace_span!(
        target: "depengine::op",
        "op",
        name = %meta.name,
        device = %meta.device(),
        lane = ?meta.lane,
    );
    if span.is_disabled() { None } else { Some(span) }
}

/// An op's errors, in its cold box (`cold.rs`): the first it saw on a var,
/// and, boxed again, the rest, which only ops that fail or see an error
/// fill (a nested op's box, made for its handoff, stays small).
#[derive(Default)]
pub(crate) struct OpErrors {
    pub(super) seen: Option<Error>,
    pub(super) rare: Option<Box<ErrorDetail>>,
    /// Of a nested op: its handoff with its parent (`nest.rs`).
    pub(in crate::op) handoff: Handoff,
}

impl OpErrors {
    pub(in crate::op) fn rare(&mut self) -> &mut ErrorDetail {
        self.rare.get_or_insert_with(Box::default)
    }
}

/// The rarely used part of an op's error state.
#[derive(Default)]
pub(crate) struct ErrorDetail {
    /// The error the op passes on to the vars it writes.
    pub(super) carry: Option<Error>,
    /// Each var's error when the op was let through on it.
    pub(super) seen_on: Vec<(u64, Error)>,
    /// The error each var it writes is left with, where the op decided it
    /// var by var (an op that runs others: a bulk segment).
    pub(super) carry_on: Vec<(u64, Error)>,
    /// Vars whose write guard was dropped during a panic, with the error
    /// each carries unless the op leaves another there.
    pub(super) poisoned: Vec<(u64, Error)>,
}
