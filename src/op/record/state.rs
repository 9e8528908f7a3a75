//! An op's state word: every flag of its life and its three counts in one
//! `AtomicU64`, the record's first field. The table, and why each step
//! happens once, are in `../README.md`, *The state word*.
//!
//! | bits | what |
//! |---|---|
//! | 0–10 | flags: the result slot's (`STARTED` … `RESOLVING`, their protocol in `../slot.rs`), `SAW_ERROR`, `VARS_GONE` |
//! | 16–31 | `pending`: deps not yet let through |
//! | 32–47 | `live`: one for the body until it stores its result, one per live guard |
//! | 48–63 | `refs`: the [`TaskRef`](super::TaskRef)s to the record |
//!
//! No `unsafe` here: the word decides who owns the record's cells, and the
//! files that touch them (`../slot.rs`, `../op_cell.rs`, `task_ref.rs`)
//! say which transition gave them the right.

use crate::sync::atomic::{AtomicU64, Ordering};

/// The body's start is claimed (by a runner, or with `RESOLVING` by an
/// early resolution).
pub(crate) const STARTED: u64 = 1;
/// The result is claimed by the one store that writes it.
pub(crate) const STORED: u64 = 1 << 1;
/// The result may be read.
pub(crate) const PUBLISHED: u64 = 1 << 2;
/// The result was taken by the handle.
pub(crate) const TAKEN: u64 = 1 << 3;
/// A waker is registered for the publication.
pub(crate) const WAKER: u64 = 1 << 4;
/// A poll is writing the waker.
pub(crate) const REGISTERING: u64 = 1 << 5;
/// An early resolution has ended.
pub(crate) const EARLY: u64 = 1 << 6;
/// The vars let through an op whose start was claimed already.
pub(crate) const THROUGH: u64 = 1 << 7;
/// Set with `STARTED`, in one step, by an early resolution's claim: from
/// then on anyone can tell the op will not run.
pub(crate) const RESOLVING: u64 = 1 << 8;
/// The op saw or holds an error (the details are in its cold box): the
/// error-free path reads only this bit.
pub(crate) const SAW_ERROR: u64 = 1 << 9;
/// A GPU op let its vars go at enqueue: its completion leaves them alone.
pub(crate) const VARS_GONE: u64 = 1 << 10;

const PENDING_SHIFT: u32 = 16;
const LIVE_SHIFT: u32 = 32;
const REFS_SHIFT: u32 = 48;
const ONE_PENDING: u64 = 1 << PENDING_SHIFT;
const ONE_LIVE: u64 = 1 << LIVE_SHIFT;
const ONE_REF: u64 = 1 << REFS_SHIFT;
const COUNT: u64 = 0xFFFF;

/// The most declarations an op may make: a push of more is refused
/// (`access::normalize`). Each count has 16 bits; a dep holds at most one
/// reference (its var's queue) and one guard, so this leaves room in
/// `refs` and `live` for every other holder (handle, group, runner, a
/// thread's passing reference).
pub(crate) const MAX_DECLS: usize = 1 << 15;

/// Past this many references or guards, a count is about to overflow into
/// its neighbour: the process aborts, as `Arc` does past `isize::MAX`.
/// The bound on declarations keeps a correct engine far below it.
const ABORT_AT: usize = 0xFF00;

/// The counts in a snapshot of the word.
#[inline]
fn pending(word: u64) -> usize {
    ((word >> PENDING_SHIFT) & COUNT) as usize
}

#[inline]
pub(crate) fn live(word: u64) -> usize {
    ((word >> LIVE_SHIFT) & COUNT) as usize
}

#[inline]
fn refs(word: u64) -> usize {
    ((word >> REFS_SHIFT) & COUNT) as usize
}

/// The state word.
pub(crate) struct State(AtomicU64);

impl State {
    /// A new record's word: `pending` deps, the body's live count, and the
    /// one reference its placement returns.
    ///
    /// # Panics
    ///
    /// If `pending` exceeds [`MAX_DECLS`] (a push refuses such an op
    /// before it builds one).
    #[inline]
    pub(crate) fn new(pending: usize) -> Self {
        assert!(pending <= MAX_DECLS, "an op with more than {MAX_DECLS} deps");
        Self(AtomicU64::new(((pending as u64) << PENDING_SHIFT) | ONE_LIVE | ONE_REF))
    }

    /// The word now.
    #[inline]
    pub(crate) fn load(&self, order: Ordering) -> u64 {
        self.0.load(order)
    }

    /// Whether `flag` is set (`Acquire`: what its setter wrote before is
    /// visible).
    #[inline]
    pub(crate) fn has(&self, flag: u64) -> bool {
        self.0.load(Ordering::Acquire) & flag != 0
    }

    /// Sets `flags`; the word before.
    #[inline]
    pub(crate) fn set(&self, flags: u64, order: Ordering) -> u64 {
        debug_assert!(flags & !0x7FF == 0, "only flags are set");
        self.0.fetch_or(flags, order)
    }

    /// Replaces the flags by `f`'s, if it gives any (a compare-and-swap
    /// loop that leaves the counts as they are); the word before, or the
    /// word `f` refused.
    #[inline]
    pub(crate) fn update(&self, order: Ordering, f: impl Fn(u64) -> Option<u64>) -> Result<u64, u64> {
        self.0.fetch_update(order, Ordering::Acquire, |w| {
            f(w).inspect(|&n| debug_assert_eq!(n & !0x7FF, w & !0x7FF, "only flags change"))
        })
    }

    /// Deps not yet let through (`Acquire`: a reader that sees none sees
    /// what each gate wrote).
    #[inline]
    pub(crate) fn pending(&self) -> usize {
        pending(self.0.load(Ordering::Acquire))
    }

    /// `n` deps let the op through: true for the call that leaves none
    /// pending, which dispatches it (false for `n == 0`). `AcqRel`: each
    /// gate's writes (a var's state, the error it left) happen-before the
    /// runner's reads.
    #[inline]
    pub(crate) fn let_through(&self, n: usize) -> bool {
        if n == 0 {
            return false;
        }
        let prev = self.0.fetch_sub(ONE_PENDING * n as u64, Ordering::AcqRel);
        assert!(pending(prev) >= n, "an op let through more often than it has deps");
        pending(prev) == n
    }

    /// The body's and the guards' live counts (`Acquire`: the writes made
    /// through guards already dropped are visible).
    #[inline]
    pub(crate) fn live(&self) -> usize {
        live(self.0.load(Ordering::Acquire))
    }

    /// A guard is made: one more live count. The caller holds one (the
    /// body's), so the count cannot reach zero meanwhile (`Relaxed`).
    #[inline]
    pub(crate) fn acquire_live(&self) {
        let prev = self.0.fetch_add(ONE_LIVE, Ordering::Relaxed);
        if live(prev) >= ABORT_AT {
            std::process::abort();
        }
        debug_assert!(live(prev) > 0, "a guard made without a live count");
    }

    /// A live count released: true for the one that leaves none, which
    /// completes the op. `AcqRel`: the writes through every guard
    /// happen-before the completion.
    #[inline]
    pub(crate) fn release_live(&self) -> bool {
        let prev = self.0.fetch_sub(ONE_LIVE, Ordering::AcqRel);
        assert!(live(prev) > 0, "a live count released twice");
        live(prev) == 1
    }

    /// One more reference. The caller holds one, so the record cannot go
    /// meanwhile (`Relaxed`, as `Arc::clone`).
    #[inline]
    pub(crate) fn ref_inc(&self) {
        let prev = self.0.fetch_add(ONE_REF, Ordering::Relaxed);
        if refs(prev) >= ABORT_AT {
            std::process::abort();
        }
    }

    /// A reference dropped: true for the last, whose caller frees the
    /// record after an `Acquire` fence (`Release` here, as `Arc::drop`:
    /// every holder's use happens-before the free).
    #[inline]
    pub(crate) fn ref_dec(&self) -> bool {
        let prev = self.0.fetch_sub(ONE_REF, Ordering::Release);
        debug_assert!(refs(prev) > 0, "a reference dropped twice");
        refs(prev) == 1
    }

    /// References held (tests).
    #[cfg(test)]
    pub(crate) fn refs(&self) -> usize {
        refs(self.0.load(Ordering::Acquire))
    }
}

impl std::fmt::Debug for State {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let w = self.0.load(Ordering::Relaxed);
        f.debug_struct("State")
            .field("flags", &format_args!("{:#05x}", w & 0x7FF))
            .field("pending", &pending(w))
            .field("live", &live(w))
            .field("refs", &refs(w))
            .finish()
    }
}

#[cfg(all(test, depengine_loom))]
mod loom_tests;
#[cfg(all(test, not(depengine_loom)))]
mod tests;
