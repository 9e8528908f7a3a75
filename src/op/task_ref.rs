//! The one handle to an op record: [`TaskRef`], a counted pointer to its
//! [`Header`], 8 bytes, in every queue, var inbox, group and runner. The
//! record lives in a slot of the slab (`sync/slab.rs`); its type is known
//! only to its static [`TaskVtable`], one per record type (an op's,
//! `op_cell.rs`; a continuation's, below), which the header points to.
//!
//! Why `unsafe`: the count lives in the header and the record's memory
//! is the slab's, so the pointer is raw, as tokio's task and rayon's
//! `JobRef` are. It replaced `Arc<dyn Task>` (a 16-byte fat pointer, the
//! `Arc`'s two counts before the header, and spare records rebuilt through
//! a downcast): PERFORMANCE.md, *The lean record*. The counts follow
//! `Arc`'s orderings: modelled by loom (`task_ref/loom_tests.rs`, which
//! fails with a relaxed decrement, and the op's completion,
//! `op_cell/loom_tests.rs`) and checked by Miri (`task_ref/tests.rs`).
//!
//! The record's count is one of the three counts of its state word
//! ([`State`]: every flag of the op's life and `pending`, `live` and
//! `refs`, 16 bits each, in one `AtomicU64`, the header's first field; the
//! bit table and why each step happens once: `README.md`, *States and
//! owners*). The word itself needs no `unsafe`: it decides who owns the
//! record's cells, and the code that touches them says which transition
//! gave it the right.

#![allow(unsafe_code)]

use std::alloc::Layout;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::ptr::NonNull;

use super::Header;
use crate::error::{Error, panic_message};
use crate::sync::atomic::{AtomicU64, Ordering, fence};
use crate::sync::{Mutex, lock, slab};

/// The functions of one record type, reached from its header. Each is
/// given a reference to a record of that type, held for the call.
pub(crate) struct TaskVtable {
    /// Runs the body, or stores the veto as its result. Called once, when
    /// the op is ready, on the thread its `Exec` chose: a sync body runs
    /// on the caller's reference, so running an op takes none of its own.
    pub(crate) execute: unsafe fn(&TaskRef),
    /// Runs the body here if the op has not started (nor been resolved):
    /// true then. For a ready op taken out of turn by a wait for its group
    /// (`engine::group`), while its queue entry still holds it: that
    /// entry's later `execute` finds it started and does nothing.
    pub(crate) try_execute: unsafe fn(&TaskRef) -> bool,
    /// Whether the op has started, or been resolved (its start claimed).
    pub(crate) is_started: unsafe fn(&TaskRef) -> bool,
    /// Makes the stored result visible to the handle and wakes it, then
    /// releases the op's count in its epoch. Called once, after the op's
    /// vars are released.
    pub(crate) publish: unsafe fn(&TaskRef),
    /// Completes the op once its last guard is gone (the `LiveRef` whose
    /// drop released the live count to zero): its vars released, the ops
    /// that became ready dispatched, its result published. The reference
    /// is the one the live count owned.
    pub(crate) complete: unsafe fn(&TaskRef),
    /// Completes an op that will not run with the error, instead of
    /// `execute` (its body is dropped unrun).
    pub(crate) abandon: unsafe fn(&TaskRef, Error),
    /// Resolves an op that has not started, before its vars let it through
    /// (a cancelling shutdown, an abort through its handle): its body is
    /// dropped unrun, its handle resolves with the error and it leaves its
    /// `wait_for_all` epoch now; it stays queued on its vars, and completes
    /// on them once they let it through. With `pass_on` (the flag), as a
    /// vetoed op: the error is recorded for `wait_for_all` and left on the
    /// vars it writes; without, the op leaves no trace on its vars, as if
    /// never pushed. False if it had started.
    pub(crate) resolve_early: unsafe fn(&TaskRef, Error, bool) -> bool,
    /// Whether it was resolved early (it waits only to leave its vars).
    pub(crate) is_resolved_early: unsafe fn(&TaskRef) -> bool,
    /// Drops the record in place and gives its slot back (its last
    /// reference went): [`dealloc`] of its type.
    pub(crate) dealloc: unsafe fn(NonNull<Header>),
}

/// The vtable a header holds until [`TaskRef::new`] places its record:
/// nothing calls through a header before that.
pub(super) static UNPLACED: TaskVtable = TaskVtable {
    execute: unplaced,
    try_execute: unplaced,
    is_started: unplaced,
    publish: unplaced,
    complete: unplaced,
    abandon: unplaced_with,
    resolve_early: unplaced_resolve,
    is_resolved_early: unplaced,
    dealloc: unplaced_dealloc,
};

fn unplaced<R>(_: &TaskRef) -> R {
    unreachable!("a record is placed before it is used")
}

fn unplaced_with(_: &TaskRef, _: Error) {
    unreachable!("a record is placed before it is used")
}

fn unplaced_resolve(_: &TaskRef, _: Error, _: bool) -> bool {
    unreachable!("a record is placed before it is used")
}

fn unplaced_dealloc(_: NonNull<Header>) {
    unreachable!("a record is placed before it is freed")
}

/// Drops a `T` record in place and gives its slot back, even if a
/// destructor of what it held panics.
///
/// # Safety
///
/// `header` is a `T` record's, placed by [`TaskRef::new::<T>`], whose last
/// reference went: nothing reaches it any more.
pub(crate) unsafe fn dealloc<T>(header: NonNull<Header>) {
    struct Free(NonNull<u8>, Layout);
    impl Drop for Free {
        fn drop(&mut self) {
            // SAFETY: the slot came from `slab::alloc` with this layout,
            // and its record has been dropped (or its drop unwound).
            unsafe { slab::free(self.0, self.1) }
        }
    }
    let _free = Free(header.cast(), Layout::new::<T>());
    // SAFETY: the record is a `T` and nothing reaches it (the contract).
    unsafe { header.cast::<T>().drop_in_place() };
}

/// A counted reference to an op record.
pub(crate) struct TaskRef(NonNull<Header>);

// SAFETY: a record is shared through its counts, and every record type is
// `Send + Sync` (`TaskRef::new`'s bound).
unsafe impl Send for TaskRef {}
// SAFETY: as above.
unsafe impl Sync for TaskRef {}

impl TaskRef {
    /// Places the record `make` makes in a slab slot: its first reference.
    /// The slot is taken first, so that the record is written straight
    /// into it (`make` inlined), not built on the stack and copied.
    ///
    /// # Safety
    ///
    /// `vtable`'s functions are `T`'s: each may be called with a reference
    /// to a `T` record.
    ///
    /// # Panics
    ///
    /// If `T`'s header is not at its start (a `repr(C)` record with its
    /// header first, `header` giving it): checked here, at no cost once
    /// inlined.
    #[inline]
    pub(crate) unsafe fn new<T: Send + Sync + 'static>(
        make: impl FnOnce() -> T,
        header: impl FnOnce(&T) -> &Header,
        vtable: &'static TaskVtable,
    ) -> Self {
        let slot = slab::alloc(Layout::new::<T>()).cast::<T>();
        // A panic in `make` gives the slot back.
        struct Unwritten(NonNull<u8>, Layout);
        impl Drop for Unwritten {
            fn drop(&mut self) {
                // SAFETY: the slot from `slab::alloc` with this layout,
                // never written.
                unsafe { slab::free(self.0, self.1) }
            }
        }
        let unwritten = Unwritten(slot.cast(), Layout::new::<T>());
        let record = make();
        std::mem::forget(unwritten);
        // SAFETY: a fresh slot of `T`'s layout, ours alone.
        unsafe { slot.as_ptr().write(record) };
        // The header's address, for the check only: the reference carries
        // the slot's own pointer, which may write the whole record.
        // SAFETY: just written.
        let at = std::ptr::from_ref(header(unsafe { slot.as_ref() }));
        assert!(std::ptr::addr_eq(at, slot.as_ptr()), "a record's header is at its start");
        let header = slot.cast::<Header>();
        // SAFETY: the header is ours alone until this returns; its vtable
        // is set before anyone reads it (its word holds this one reference
        // from the start).
        unsafe { (*header.as_ptr()).vtable = vtable };
        Self(header)
    }

    /// Gives up the value without dropping its count (to be taken back by
    /// [`from_raw`](Self::from_raw)).
    #[inline]
    pub(crate) fn into_raw(self) -> NonNull<Header> {
        let raw = self.0;
        std::mem::forget(self);
        raw
    }

    /// Takes back a count given up by [`into_raw`](Self::into_raw).
    ///
    /// # Safety
    ///
    /// `header` came from `into_raw`, whose count this value now holds
    /// (each count taken back once).
    #[inline]
    pub(crate) unsafe fn from_raw(header: NonNull<Header>) -> Self {
        Self(header)
    }

    /// One more count on a record known to live.
    ///
    /// # Safety
    ///
    /// `header` is a placed record's, and a count on it is held
    /// elsewhere for the length of this call.
    #[inline]
    pub(crate) unsafe fn clone_from_raw(header: NonNull<Header>) -> Self {
        // SAFETY: the record lives (the contract).
        unsafe { header.as_ref() }.state.ref_inc();
        Self(header)
    }

    #[inline]
    pub(crate) fn header(&self) -> &Header {
        // SAFETY: this value holds a count: the record lives.
        unsafe { self.0.as_ref() }
    }

    /// The record's address, for keys and comparisons.
    #[inline]
    pub(crate) fn as_ptr(&self) -> NonNull<Header> {
        self.0
    }

    /// Counts held on the record (tests).
    #[cfg(test)]
    pub(crate) fn count(&self) -> usize {
        self.header().state.refs()
    }

    #[inline]
    fn vtable(&self) -> &'static TaskVtable {
        self.header().vtable
    }

    /// See [`TaskVtable::execute`].
    #[inline]
    pub(crate) fn execute(&self) {
        // SAFETY: the vtable is this record's own (the type's invariant).
        unsafe { (self.vtable().execute)(self) }
    }

    /// See [`TaskVtable::try_execute`].
    pub(crate) fn try_execute(&self) -> bool {
        // SAFETY: as above.
        unsafe { (self.vtable().try_execute)(self) }
    }

    /// See [`TaskVtable::is_started`].
    pub(crate) fn is_started(&self) -> bool {
        // SAFETY: as above.
        unsafe { (self.vtable().is_started)(self) }
    }

    /// See [`TaskVtable::publish`].
    pub(crate) fn publish(&self) {
        // SAFETY: as above.
        unsafe { (self.vtable().publish)(self) }
    }

    /// See [`TaskVtable::complete`].
    pub(crate) fn complete(&self) {
        // SAFETY: as above.
        unsafe { (self.vtable().complete)(self) }
    }

    /// See [`TaskVtable::abandon`].
    pub(crate) fn abandon(&self, err: Error) {
        // SAFETY: as above.
        unsafe { (self.vtable().abandon)(self, err) }
    }

    /// See [`TaskVtable::resolve_early`].
    pub(crate) fn resolve_early(&self, err: Error, pass_on: bool) -> bool {
        // SAFETY: as above.
        unsafe { (self.vtable().resolve_early)(self, err, pass_on) }
    }

    /// See [`TaskVtable::is_resolved_early`].
    pub(crate) fn is_resolved_early(&self) -> bool {
        // SAFETY: as above.
        unsafe { (self.vtable().is_resolved_early)(self) }
    }
}

impl Clone for TaskRef {
    #[inline]
    fn clone(&self) -> Self {
        // Relaxed, as `Arc`'s: a count can be taken only by a holder of
        // one, which keeps the record alive meanwhile.
        self.header().state.ref_inc();
        Self(self.0)
    }
}

impl Drop for TaskRef {
    #[inline]
    fn drop(&mut self) {
        // Release, then an acquire fence before the drop, as `Arc`'s: every
        // use through another reference happens before the record's drop.
        if !self.header().state.ref_dec() {
            return;
        }
        fence(Ordering::Acquire);
        // SAFETY: that was the last count: nothing reaches the record, and
        // `dealloc` is its own type's.
        unsafe { (self.vtable().dealloc)(self.0) }
    }
}

impl std::fmt::Debug for TaskRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("TaskRef").field(&self.header().meta.name).finish()
    }
}

/// A record that runs a closure once on a worker: the rest of a bulk
/// segment, resumed once a member's guards are gone (`engine::bulk`). It is
/// never queued on a var, hands out no guard and is in no group.
#[repr(C)]
struct Continuation {
    header: Header,
    run: Mutex<Option<Box<dyn FnOnce() + Send>>>,
}

impl Continuation {
    fn take(&self) -> Option<Box<dyn FnOnce() + Send>> {
        lock(&self.run).take()
    }
}

/// The continuation behind `task`.
///
/// # Safety
///
/// `task`'s record is a `Continuation`.
unsafe fn continuation_of(task: &TaskRef) -> &Continuation {
    // SAFETY: the header is its first field (`repr(C)`), and the record is
    // one (the contract), alive while `task` is.
    unsafe { task.0.cast::<Continuation>().as_ref() }
}

// A continuation's functions. Safety (of each): `task`'s record is a
// `Continuation` (its own vtable).
static CONTINUATION: TaskVtable = TaskVtable {
    execute: |task| {
        // SAFETY: the functions' contract, above.
        if let Some(run) = unsafe { continuation_of(task) }.take() {
            run();
        }
    },
    try_execute: |_| false,
    is_started: |_| false,
    publish: |_| {},
    complete: |_| unreachable!("a continuation has no guard to outlive it"),
    abandon: |task, _| {
        // SAFETY: as above.
        drop(unsafe { continuation_of(task) }.take());
    },
    resolve_early: |_, _, _| false,
    is_resolved_early: |_| false,
    dealloc: dealloc::<Continuation>,
};

impl TaskRef {
    /// A record of `header` (its placement) that runs `run` once where it
    /// is dispatched; dropped unrun if it is abandoned.
    pub(crate) fn continuation(header: Header, run: Box<dyn FnOnce() + Send>) -> Self {
        // SAFETY: `CONTINUATION` holds a continuation's functions.
        unsafe {
            Self::new(|| Continuation { header, run: Mutex::new(Some(run)) }, |c| &c.header, &CONTINUATION)
        }
    }
}

/// Drops a reference to a record, containing a panic of a destructor it
/// runs (its last reference: a result nobody took, a user's error): the
/// thread that lets it go lives on.
pub(crate) fn let_go(task: TaskRef) {
    if let Err(payload) = catch_unwind(AssertUnwindSafe(move || drop(task))) {
        tracing::error!(target: "depengine", "a panic escaped an op's destructor: {}", panic_message(&*payload));
    }
}

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

/// The flag bits, below the counts.
const FLAGS: u64 = 0x7FF;
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
fn live(word: u64) -> usize {
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
        debug_assert!(flags & !FLAGS == 0, "only flags are set");
        self.0.fetch_or(flags, order)
    }

    /// Replaces the flags by `f`'s, if it gives any (a compare-and-swap
    /// loop that leaves the counts as they are); the word before, or the
    /// word `f` refused.
    #[inline]
    pub(crate) fn update(&self, order: Ordering, f: impl Fn(u64) -> Option<u64>) -> Result<u64, u64> {
        self.0.fetch_update(order, Ordering::Acquire, |w| {
            f(w).inspect(|&n| debug_assert_eq!(n & !FLAGS, w & !FLAGS, "only flags change"))
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
            .field("flags", &format_args!("{:#05x}", w & FLAGS))
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
