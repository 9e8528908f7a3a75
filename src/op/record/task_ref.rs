//! The one handle to an op record: [`TaskRef`], a counted pointer to its
//! [`Header`], 8 bytes, in every queue, var inbox, group and runner. The
//! record lives in a slot of the slab (`sync/slab.rs`); its type is known
//! only to its static [`TaskVtable`], made per record type from its
//! [`Task`] implementation, which the header points to.
//!
//! Why `unsafe`: the count lives in the header and the record's memory
//! is the slab's, so the pointer is raw, as tokio's task and rayon's
//! `JobRef` are. It replaced `Arc<dyn Task>` (a 16-byte fat pointer, the
//! `Arc`'s two counts before the header, and spare records rebuilt through
//! a downcast): PERFORMANCE.md, *The lean record*. The counts follow
//! `Arc`'s orderings; checked by Miri (`task_ref/tests.rs`) and by the
//! loom models of the op's completion (`../op_cell/loom_tests.rs`).

#![allow(unsafe_code)]

use std::alloc::Layout;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::ptr::NonNull;

use super::{Header, Task};
use crate::error::{Error, panic_message};
use crate::sync::atomic::{Ordering, fence};
use crate::sync::slab;

/// The functions of one record type, reached from its header.
pub(crate) struct TaskVtable {
    execute: unsafe fn(&TaskRef),
    try_execute: unsafe fn(&TaskRef) -> bool,
    is_started: unsafe fn(&TaskRef) -> bool,
    publish: unsafe fn(&TaskRef),
    complete: unsafe fn(&TaskRef),
    abandon: unsafe fn(&TaskRef, Error),
    resolve_early: unsafe fn(&TaskRef, Error, bool) -> bool,
    is_resolved_early: unsafe fn(&TaskRef) -> bool,
    /// Drops the record in place and gives its slot back (its last
    /// reference went).
    dealloc: unsafe fn(NonNull<Header>),
}

/// The record of type `T` behind `task`.
///
/// # Safety
///
/// `task`'s record was placed by [`TaskRef::new::<T>`] (its vtable is
/// `T`'s, so this is how every vtable function reaches its record).
unsafe fn typed<T: Task>(task: &TaskRef) -> &T {
    // SAFETY: the record is a `T` whose header is at its start (checked
    // by `TaskRef::new`), alive while `task` holds its count.
    unsafe { task.0.cast::<T>().as_ref() }
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

/// `T`'s vtable: a static, promoted from the constant.
fn vtable<T: Task>() -> &'static TaskVtable {
    &TaskVtable {
        execute: execute::<T>,
        try_execute: try_execute::<T>,
        is_started: is_started::<T>,
        publish: publish::<T>,
        complete: complete::<T>,
        abandon: abandon::<T>,
        resolve_early: resolve_early::<T>,
        is_resolved_early: is_resolved_early::<T>,
        dealloc: dealloc::<T>,
    }
}

// The vtable's functions. Safety (of each): `task`'s record was placed by
// `TaskRef::new::<T>` (a vtable is reached only through its own record).

unsafe fn execute<T: Task>(task: &TaskRef) {
    // SAFETY: the functions' contract, above.
    unsafe { typed::<T>(task) }.execute(task);
}

unsafe fn try_execute<T: Task>(task: &TaskRef) -> bool {
    // SAFETY: as above.
    unsafe { typed::<T>(task) }.try_execute(task)
}

unsafe fn is_started<T: Task>(task: &TaskRef) -> bool {
    // SAFETY: as above.
    unsafe { typed::<T>(task) }.is_started()
}

unsafe fn publish<T: Task>(task: &TaskRef) {
    // SAFETY: as above.
    unsafe { typed::<T>(task) }.publish();
}

unsafe fn complete<T: Task>(task: &TaskRef) {
    // SAFETY: as above.
    unsafe { typed::<T>(task) }.complete(task);
}

unsafe fn abandon<T: Task>(task: &TaskRef, err: Error) {
    // SAFETY: as above.
    unsafe { typed::<T>(task) }.abandon(task, err);
}

unsafe fn resolve_early<T: Task>(task: &TaskRef, err: Error, pass_on: bool) -> bool {
    // SAFETY: as above.
    unsafe { typed::<T>(task) }.resolve_early(task, err, pass_on)
}

unsafe fn is_resolved_early<T: Task>(task: &TaskRef) -> bool {
    // SAFETY: as above.
    unsafe { typed::<T>(task) }.is_resolved_early()
}

/// Drops a `T` record in place and gives its slot back, even if a
/// destructor of what it held panics.
///
/// # Safety
///
/// `header` is a `T` record's, placed by [`TaskRef::new::<T>`], whose last
/// reference went: nothing reaches it any more.
unsafe fn dealloc<T: Task>(header: NonNull<Header>) {
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
// `Task`, hence `Send + Sync`.
unsafe impl Send for TaskRef {}
// SAFETY: as above.
unsafe impl Sync for TaskRef {}

impl TaskRef {
    /// Places `record` in a slab slot: its first reference.
    ///
    /// # Panics
    ///
    /// If `T`'s header is not at its start (a `repr(C)` record with its
    /// header first): checked here, at no cost once inlined.
    #[inline]
    pub(crate) fn new<T: Task>(record: T) -> Self {
        let slot = slab::alloc(Layout::new::<T>()).cast::<T>();
        // SAFETY: a fresh slot of `T`'s layout, ours alone.
        unsafe { slot.as_ptr().write(record) };
        // The header's address, for the check only: the reference carries
        // the slot's own pointer, which may write the whole record.
        // SAFETY: just written.
        let at = std::ptr::from_ref(unsafe { slot.as_ref() }.header());
        assert!(std::ptr::addr_eq(at, slot.as_ptr()), "a record's header is at its start");
        let header = slot.cast::<Header>();
        // SAFETY: the header is ours alone until this returns; its
        // vtable and count are set before anyone reads them.
        unsafe {
            let h = header.as_ptr();
            (*h).vtable = vtable::<T>();
            (*h).refs.store(1, Ordering::Relaxed);
        }
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
        unsafe { header.as_ref() }.refs.fetch_add(1, Ordering::Relaxed);
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
        self.header().refs.load(Ordering::Acquire)
    }

    #[inline]
    fn vtable(&self) -> &'static TaskVtable {
        self.header().vtable
    }

    /// See [`Task::execute`].
    #[inline]
    pub(crate) fn execute(&self) {
        // SAFETY: the vtable is this record's own (the type's invariant).
        unsafe { (self.vtable().execute)(self) }
    }

    /// See [`Task::try_execute`].
    pub(crate) fn try_execute(&self) -> bool {
        // SAFETY: as above.
        unsafe { (self.vtable().try_execute)(self) }
    }

    /// See [`Task::is_started`].
    pub(crate) fn is_started(&self) -> bool {
        // SAFETY: as above.
        unsafe { (self.vtable().is_started)(self) }
    }

    /// See [`Task::publish`].
    pub(crate) fn publish(&self) {
        // SAFETY: as above.
        unsafe { (self.vtable().publish)(self) }
    }

    /// See [`Task::complete`].
    pub(crate) fn complete(&self) {
        // SAFETY: as above.
        unsafe { (self.vtable().complete)(self) }
    }

    /// See [`Task::abandon`].
    pub(crate) fn abandon(&self, err: Error) {
        // SAFETY: as above.
        unsafe { (self.vtable().abandon)(self, err) }
    }

    /// See [`Task::resolve_early`].
    pub(crate) fn resolve_early(&self, err: Error, pass_on: bool) -> bool {
        // SAFETY: as above.
        unsafe { (self.vtable().resolve_early)(self, err, pass_on) }
    }

    /// See [`Task::is_resolved_early`].
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
        self.header().refs.fetch_add(1, Ordering::Relaxed);
        Self(self.0)
    }
}

impl Drop for TaskRef {
    #[inline]
    fn drop(&mut self) {
        // Release, then an acquire fence before the drop, as `Arc`'s: every
        // use through another reference happens before the record's drop.
        if self.header().refs.fetch_sub(1, Ordering::Release) != 1 {
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

/// Drops a reference to a record, containing a panic of a destructor it
/// runs (its last reference: a result nobody took, a user's error): the
/// thread that lets it go lives on.
pub(crate) fn let_go(task: TaskRef) {
    if let Err(payload) = catch_unwind(AssertUnwindSafe(move || drop(task))) {
        tracing::error!(target: "depengine", "a panic escaped an op's destructor: {}", panic_message(&*payload));
    }
}

#[cfg(all(test, not(depengine_loom)))]
mod tests;
