//! An op's state word: every flag of its life and its three counts in one
//! `AtomicU64`, so that each step of an op is one read-modify-write of one
//! word (the table and the argument: `README.md` beside this file).
//!
//! | bits | what |
//! |---|---|
//! | 0–15 | lifecycle flags (`STARTED` … `VARS_GONE`) |
//! | 16–31 | `pending`: gates still to pass (+1 held by the push) |
//! | 32–47 | `live`: one for the body until it stores, one per live guard |
//! | 48–63 | `refs`: references to the record (queues, handle, token, runner) |
//!
//! No `unsafe` here: the word decides who owns the record's cells, and the
//! files that touch them (`cell.rs`, `slab.rs`) say which transition gave
//! them the right.

use crate::sync::atomic::{AtomicU64, Ordering};

/// The body's start is claimed (by a runner, or by an early resolution
/// with `RESOLVING`).
pub(crate) const STARTED: u64 = 1;
/// The output (or an error) is stored in the stage.
pub(crate) const STORED: u64 = 1 << 1;
/// The op has completed: its vars are released, its output may be read.
pub(crate) const COMPLETE: u64 = 1 << 2;
/// The output was taken by the handle.
pub(crate) const TAKEN: u64 = 1 << 3;
/// A waker is in the record's waker cell, which the handle leaves alone
/// while this is set.
pub(crate) const JOIN_WAKER: u64 = 1 << 4;
/// A handle cares for the output: cleared by the handle's drop.
pub(crate) const JOIN_INTEREST: u64 = 1 << 5;
/// The early resolution has ended (see `mark_early`).
pub(crate) const EARLY: u64 = 1 << 6;
/// The vars let the op through after it was claimed (see `mark_through`).
pub(crate) const THROUGH: u64 = 1 << 7;
/// Set with `STARTED` in one step by an early resolution: from then on
/// anyone can tell the op will not run.
pub(crate) const RESOLVING: u64 = 1 << 8;
/// A var the op uses carried an error when it let the op through (the
/// details are in the cold box).
pub(crate) const SAW_ERROR: u64 = 1 << 9;
/// A GPU op let its vars go at enqueue: its completion leaves them alone.
pub(crate) const VARS_GONE: u64 = 1 << 10;

const FLAGS: u64 = 0xFFFF;
const PENDING_SHIFT: u32 = 16;
const LIVE_SHIFT: u32 = 32;
const REFS_SHIFT: u32 = 48;
const ONE_PENDING: u64 = 1 << PENDING_SHIFT;
const ONE_LIVE: u64 = 1 << LIVE_SHIFT;
const ONE_REF: u64 = 1 << REFS_SHIFT;
const COUNT: u64 = 0xFFFF;

/// The most gates (or references, or guards) an op may hold at once: each
/// count has 16 bits. A push of an op with more deps is refused.
pub(crate) const MAX_COUNT: usize = COUNT as usize;

/// A snapshot of the word.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) struct Snapshot(u64);

impl Snapshot {
    pub(crate) fn has(self, flag: u64) -> bool {
        self.0 & flag != 0
    }

    pub(crate) fn pending(self) -> usize {
        ((self.0 >> PENDING_SHIFT) & COUNT) as usize
    }

    pub(crate) fn live(self) -> usize {
        ((self.0 >> LIVE_SHIFT) & COUNT) as usize
    }

    pub(crate) fn refs(self) -> usize {
        ((self.0 >> REFS_SHIFT) & COUNT) as usize
    }
}

impl std::fmt::Debug for Snapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("State")
            .field("flags", &format_args!("{:#06x}", self.0 & FLAGS))
            .field("pending", &self.pending())
            .field("live", &self.live())
            .field("refs", &self.refs())
            .finish()
    }
}

/// What the end of a body found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum BodyEnd {
    /// No guard outlives the body: the caller completes the op.
    Last,
    /// A guard is alive: its drop completes the op.
    GuardsLeft,
}

/// What a completion found of the handle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Completed {
    /// A waker is registered: the completer takes it and wakes it.
    pub(crate) wake: bool,
    /// Nobody will read the output: the completer drops it.
    pub(crate) drop_output: bool,
}

/// What a handle's drop found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum HandleDrop {
    /// The op had completed with the output untaken: the handle drops it.
    DropOutput,
    /// Not complete (the completion drops the output), or taken already.
    Nothing,
}

/// What a claim of the start found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Claim {
    /// This call claimed it.
    Won,
    /// An early resolution had claimed it: the op will not run.
    Resolved,
    /// A runner had claimed it.
    Started,
}

/// The state word.
pub(crate) struct State(AtomicU64);

impl State {
    /// A new op's word: `pending` gates (the push holds one more, released
    /// as it ends), the body's live count, `refs` references, and
    /// `JOIN_INTEREST` if a handle will read the output.
    pub(crate) fn new(pending: usize, refs: usize, handle: bool) -> Self {
        assert!(pending < MAX_COUNT && refs <= MAX_COUNT, "an op's counts exceed 16 bits");
        let interest = if handle { JOIN_INTEREST } else { 0 };
        let word =
            interest | ((pending as u64 + 1) << PENDING_SHIFT) | ONE_LIVE | ((refs as u64) << REFS_SHIFT);
        Self(AtomicU64::new(word))
    }

    /// The word now, for reading flags (`Acquire`: what the setter of a
    /// flag wrote before setting it is visible).
    pub(crate) fn load(&self) -> Snapshot {
        Snapshot(self.0.load(Ordering::Acquire))
    }

    /// A gate let the op through (or the push released its own hold):
    /// true for the one call that leaves none pending, which dispatches the
    /// op. `AcqRel`: each gate's writes (a var's state, the error it left)
    /// happen-before the runner's reads.
    pub(crate) fn let_through(&self) -> bool {
        let prev = Snapshot(self.0.fetch_sub(ONE_PENDING, Ordering::AcqRel));
        debug_assert!(prev.pending() > 0, "let through with nothing pending: {prev:?}");
        prev.pending() == 1
    }

    /// Claims the body's start for a runner.
    pub(crate) fn claim_start(&self) -> Claim {
        let prev = Snapshot(self.0.fetch_or(STARTED, Ordering::AcqRel));
        match (prev.has(STARTED), prev.has(RESOLVING)) {
            (false, _) => Claim::Won,
            (true, true) => Claim::Resolved,
            (true, false) => Claim::Started,
        }
    }

    /// Claims the start for an early resolution (`STARTED | RESOLVING` in
    /// one step): true if the op had not started.
    pub(crate) fn claim_resolution(&self) -> bool {
        let prev = Snapshot(self.0.fetch_or(STARTED | RESOLVING, Ordering::AcqRel));
        !prev.has(STARTED)
    }

    /// Claims the right to store the output (for a completion token, which
    /// may race a body's unwinding): true for the first call only.
    pub(crate) fn claim_store(&self) -> bool {
        !Snapshot(self.0.fetch_or(STORED, Ordering::AcqRel)).has(STORED)
    }

    /// The body has ended, its output stored (`STORED`, unless a token
    /// claimed it already) and its live count released, in one step.
    /// `AcqRel`: the stored output happens-before the completer's read.
    pub(crate) fn end_body(&self) -> BodyEnd {
        let prev = Snapshot(self.0.fetch_add(STORED.wrapping_sub(ONE_LIVE), Ordering::AcqRel));
        debug_assert!(!prev.has(STORED) && prev.live() > 0, "a body ended twice: {prev:?}");
        if prev.live() == 1 { BodyEnd::Last } else { BodyEnd::GuardsLeft }
    }

    /// [`end_body`](Self::end_body) where the output was stored by a
    /// claim (`claim_store`) already: the live count alone.
    pub(crate) fn end_body_stored(&self) -> BodyEnd {
        if self.release_live() { BodyEnd::Last } else { BodyEnd::GuardsLeft }
    }

    /// A guard is made: one more live count. The caller holds one (the
    /// body's, or another guard's), so the count cannot reach zero meanwhile.
    pub(crate) fn acquire_live(&self) {
        let prev = Snapshot(self.0.fetch_add(ONE_LIVE, Ordering::Relaxed));
        assert!(prev.live() > 0 && prev.live() < MAX_COUNT, "a guard made without a live count: {prev:?}");
    }

    /// A guard is dropped: true for the one that leaves no live count,
    /// which completes the op. `AcqRel`: the writes through every guard
    /// happen-before the completion.
    pub(crate) fn release_live(&self) -> bool {
        let prev = Snapshot(self.0.fetch_sub(ONE_LIVE, Ordering::AcqRel));
        debug_assert!(prev.live() > 0, "a live count released twice: {prev:?}");
        prev.live() == 1
    }

    /// The op has completed (its vars released, its successors
    /// dispatched). `AcqRel`: all of that, and the output, happen-before a
    /// handle that sees `COMPLETE`.
    pub(crate) fn complete(&self) -> Completed {
        let prev = Snapshot(self.0.fetch_or(COMPLETE, Ordering::AcqRel));
        debug_assert!(!prev.has(COMPLETE), "completed twice: {prev:?}");
        Completed {
            wake: prev.has(JOIN_INTEREST) && prev.has(JOIN_WAKER),
            drop_output: !prev.has(JOIN_INTEREST),
        }
    }

    /// The handle takes the output: true if the op has completed and the
    /// output is still there (this call owns it then).
    pub(crate) fn take_output(&self) -> bool {
        let mut cur = self.load();
        loop {
            if !cur.has(COMPLETE) || cur.has(TAKEN) {
                return false;
            }
            match self.0.compare_exchange_weak(cur.0, cur.0 | TAKEN, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return true,
                Err(now) => cur = Snapshot(now),
            }
        }
    }

    /// Before the handle writes its waker: clears `JOIN_WAKER` so that the
    /// completion leaves the cell alone. False if the op completed first
    /// (the handle then reads the output instead).
    pub(crate) fn unset_waker(&self) -> bool {
        self.update_unless_complete(|w| w & !JOIN_WAKER)
    }

    /// After the handle wrote its waker (with `JOIN_WAKER` clear): hands it
    /// to the completion. False if the op completed first: the waker stays
    /// the handle's, which then reads the output.
    pub(crate) fn set_waker(&self) -> bool {
        self.update_unless_complete(|w| w | JOIN_WAKER)
    }

    fn update_unless_complete(&self, f: impl Fn(u64) -> u64) -> bool {
        let mut cur = self.0.load(Ordering::Acquire);
        loop {
            if cur & COMPLETE != 0 {
                return false;
            }
            match self.0.compare_exchange_weak(cur, f(cur), Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return true,
                Err(now) => cur = now,
            }
        }
    }

    /// The handle is dropped: it no longer cares for the output (or the
    /// waker, which the record drops with its memory).
    pub(crate) fn drop_interest(&self) -> HandleDrop {
        let prev = Snapshot(self.0.fetch_and(!JOIN_INTEREST, Ordering::AcqRel));
        debug_assert!(prev.has(JOIN_INTEREST), "a handle dropped twice: {prev:?}");
        if prev.has(COMPLETE) && !prev.has(TAKEN) { HandleDrop::DropOutput } else { HandleDrop::Nothing }
    }

    /// One more reference. The caller holds one, so the record cannot go
    /// meanwhile (`Relaxed`, as `Arc::clone`).
    pub(crate) fn ref_inc(&self) {
        let prev = Snapshot(self.0.fetch_add(ONE_REF, Ordering::Relaxed));
        assert!(prev.refs() > 0 && prev.refs() < MAX_COUNT, "a reference made from none: {prev:?}");
    }

    /// A reference dropped: true for the last, which frees the record.
    /// `AcqRel`, as `Arc::drop`: every holder's use happens-before the free.
    pub(crate) fn ref_dec(&self) -> bool {
        let prev = Snapshot(self.0.fetch_sub(ONE_REF, Ordering::AcqRel));
        debug_assert!(prev.refs() > 0, "a reference dropped twice: {prev:?}");
        prev.refs() == 1
    }

    /// An early resolution has ended: true if the vars had let the op
    /// through already (this call then completes it on them).
    pub(crate) fn mark_early(&self) -> bool {
        Snapshot(self.0.fetch_or(EARLY, Ordering::AcqRel)).has(THROUGH)
    }

    /// The vars let through an op claimed by an early resolution: true if
    /// the resolution had ended (this call then completes it).
    pub(crate) fn mark_through(&self) -> bool {
        Snapshot(self.0.fetch_or(THROUGH, Ordering::AcqRel)).has(EARLY)
    }

    /// Sets a flag that only grows (`SAW_ERROR`, `VARS_GONE`). `Release`:
    /// what the setter wrote before (the cold box's error) is visible to a
    /// reader that sees it.
    pub(crate) fn set(&self, flag: u64) {
        debug_assert!(flag == SAW_ERROR || flag == VARS_GONE, "not a flag that only grows");
        self.0.fetch_or(flag, Ordering::Release);
    }
}

#[cfg(all(test, not(depengine_loom)))]
mod tests;

#[cfg(all(test, depengine_loom))]
mod loom_tests;
