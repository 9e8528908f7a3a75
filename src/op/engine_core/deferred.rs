//! A worker's releases of its engine's count, deferred and given back
//! together: every record a worker lets go gives back one count of the
//! engine's `Arc`, which its push took on another core, so each release
//! would wait for the count's line to cross the cores. A deferred release
//! only keeps the engine alive a little longer (never shorter), so the
//! worker may hold them until it settles: after a few runs, when it finds
//! nothing to run, and before it exits.
//!
//! Why `unsafe`: the counts owed are given back through the engine's
//! release hook, as `EngineRef`'s drop would. Kept by its measurement:
//! `w1_novars` at 0.86× the wall time and 0.78–0.80× the CPU of the build
//! that released each count at once (PERFORMANCE.md, *Op records and their
//! reuse*).

#![allow(unsafe_code)]

use std::cell::Cell;
use std::ptr::NonNull;

use super::EngineCore;

/// How many records a worker lets go between two settlings at most (with
/// as many releases owed, fewer if they belong to other engines).
pub(crate) const SETTLE_EVERY: u32 = 64;

#[derive(Clone, Copy)]
struct Owed {
    /// This thread defers its releases (a worker).
    defers: bool,
    /// The engine whose counts it holds, and how many.
    core: Option<NonNull<EngineCore>>,
    count: usize,
}

thread_local! {
    static OWED: Cell<Owed> = const { Cell::new(Owed { defers: false, core: None, count: 0 }) };
}

/// This thread defers its releases from now on; it settles them itself
/// ([`settle`]) now and then, and before it ends.
pub(crate) fn defer_here() {
    OWED.with(|owed| owed.set(Owed { defers: true, ..owed.get() }));
}

/// Takes over a release of one count of `core`'s engine if this thread
/// defers its releases and owes none to another engine: then true, and the
/// count is given back at the next [`settle`].
#[inline]
pub(super) fn owe(core: NonNull<EngineCore>) -> bool {
    OWED.with(|cell| {
        let mut owed = cell.get();
        if !owed.defers || owed.core.is_some_and(|c| c != core) {
            return false;
        }
        owed.core = Some(core);
        owed.count += 1;
        cell.set(owed);
        true
    })
}

/// Gives back the counts this thread owes. The engine may go with the
/// last of them.
pub(crate) fn settle() {
    let Ok(owed) = OWED.try_with(|cell| {
        let owed = cell.get();
        cell.set(Owed { core: None, count: 0, ..owed });
        owed
    }) else {
        return;
    };
    let Some(core) = owed.core else { return };
    // SAFETY: this thread owes `count` ≥ 1 counts of the engine: it lives
    // until the last of them is given back, below, after this read.
    let release = unsafe { core.as_ref() }.hooks.release;
    for _ in 0..owed.count {
        // SAFETY: one of the counts owed, given up once (`owe` took it
        // over from a reference dropped without giving it up).
        unsafe { release(core) };
    }
}
