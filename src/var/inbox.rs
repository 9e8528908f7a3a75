//! A var's inbox: where a push of a one-var op leaves it, without the var's
//! lock, while the inbox is *closed* (ops are queued, or a write runs, so
//! the op could not be let through anyway; see `VarCell::settle`).
//!
//! A stack of op records linked through the records themselves (no
//! allocation): a push is one compare-and-swap on `top`, a take swaps the
//! whole stack out and walks it back into push order. Only whoever holds the
//! var's lock takes, so the ops move into the gate's queue in the order they
//! were pushed. Nothing ever pops a single record, so a record's link cannot
//! be read after its record was reused (no ABA).
//!
//! The compare-and-swap of a push also checks that the var is closed:
//! while it is open, `top` holds a marker and pushers take the lock
//! instead. A deleted var's inbox is *sealed* with another marker, so a
//! one-var push is refused exactly when it comes after the deletion.
//!
//! Why `unsafe`: the inbox is an intrusive lock-free stack linked through
//! the op records themselves, so a one-var push allocates nothing and takes
//! no lock. Measured: PERFORMANCE.md, *An inbox per var*; modelled:
//! `var_cell/loom_tests.rs` (the inbox under the real gate).

#![allow(unsafe_code)]

use std::ptr;

use super::gate::Access;
use crate::sync::atomic::{AtomicPtr, Ordering};
use crate::sync::cell::UnsafeCell;

/// The link a record carries for the inbox it is in (one at a time: only
/// ops with one var go through an inbox).
pub(crate) struct Link<T> {
    /// The record pushed before this one, or null.
    next: UnsafeCell<*const Link<T>>,
    /// The reference to this very record that the inbox holds.
    this: UnsafeCell<Option<T>>,
}

impl<T> Link<T> {
    pub(crate) fn new() -> Self {
        Self { next: UnsafeCell::new(ptr::null()), this: UnsafeCell::new(None) }
    }
}

impl<T> Default for Link<T> {
    fn default() -> Self {
        Self::new()
    }
}

// SAFETY: `next` and `this` are written only by the one thread that pushes
// the record (which owns it while doing so), before the compare-and-swap
// that publishes it, and read only by the one thread whose swap took the
// stack, after it; `T` itself moves between threads (`Send`).
unsafe impl<T: Send> Sync for Link<T> {}
// SAFETY: as above: a `Link` holds a `T` and a pointer used under that protocol.
unsafe impl<T: Send> Send for Link<T> {}

/// What an inbox's ops are: references to records that carry a [`Link`].
pub(crate) trait Linked: Sized {
    /// The link inside the record this refers to. The same for every
    /// reference to one record, and alive as long as any of them.
    fn link(&self) -> &Link<Self>;

    /// How the op accesses the one var whose inbox it is pushed to.
    fn sole_access(&self) -> Access;
}

/// How a push to an inbox went.
pub(crate) enum Pushed<T> {
    /// The op is in the inbox: the var was closed, and a holder of its lock
    /// will move the op to the gate.
    Queued,
    /// The var is open: append under the lock.
    Open(T),
    /// The var is deleted.
    Sealed(T),
}

/// What the inbox says once the lock holder has taken its ops.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Then {
    Closed,
    Open,
    Sealed,
}

/// A var's inbox. `top` is the last op pushed, or null (closed, nothing
/// pushed since the last take), or a marker: open or sealed (see `open`
/// and `sealed`). Pushes only ever change a null or op `top`; only the
/// holder of the var's lock moves it to or from a marker.
pub(crate) struct Inbox<T> {
    top: AtomicPtr<Link<T>>,
}

/// The markers: addresses no `Link` can have (it is aligned to 8), never
/// dereferenced.
fn open<T>() -> *mut Link<T> {
    ptr::without_provenance_mut(1)
}

fn sealed<T>() -> *mut Link<T> {
    ptr::without_provenance_mut(2)
}

fn is_op<T>(top: *mut Link<T>) -> bool {
    !top.is_null() && top != open() && top != sealed()
}

impl<T: Linked> Inbox<T> {
    /// An inbox of an open (idle) var.
    pub(crate) fn new() -> Self {
        Self { top: AtomicPtr::new(open()) }
    }

    /// Pushes `op` if the var is closed; else hands it back.
    ///
    /// The compare-and-swap that queues the op also checks that the var is
    /// closed, so an op in the inbox is one that a later holder of the lock
    /// moves to the gate (see `VarCell::settle`): after it, the
    /// pusher has nothing more to do, and does not touch the var again.
    #[inline]
    pub(crate) fn push(&self, op: T) -> Pushed<T> {
        let mut top = self.top.load(Ordering::Relaxed);
        if top == open() {
            return Pushed::Open(op);
        }
        let link: *const Link<T> = op.link();
        // SAFETY: the caller owns `op`, a reference to a record that is in
        // no inbox (a record is pushed once per op, and an op is taken out
        // of its inbox before it can finish and its record be reused), so
        // nobody else reads or writes its link now.
        unsafe { (*link).this.with_mut(|this| *this = Some(op)) };
        loop {
            if top == open() || top == sealed() {
                // SAFETY: as above: the record was not published.
                let op = unsafe { (*link).this.with_mut(|this| (*this).take()) }.expect("put there above");
                return if top == open() { Pushed::Open(op) } else { Pushed::Sealed(op) };
            }
            // SAFETY: as above.
            unsafe { (*link).next.with_mut(|next| *next = top) };
            // Release: publishes the link to the holder that takes it.
            match self.top.compare_exchange_weak(top, link.cast_mut(), Ordering::Release, Ordering::Relaxed) {
                Ok(_) => return Pushed::Queued,
                Err(now) => top = now,
            }
        }
    }

    /// Takes every op pushed since the last take, in push order, with its
    /// access, and leaves the inbox as `then` says (an open or sealed inbox
    /// has none). Only the holder of the var's lock calls it.
    pub(crate) fn take(&self, then: Then, mut each: impl FnMut(Access, T)) {
        let now = self.top.load(Ordering::Relaxed);
        let marker = match then {
            Then::Closed => ptr::null_mut(),
            Then::Open => open(),
            Then::Sealed => sealed(),
        };
        if now == marker || (then == Then::Closed && !is_op(now)) {
            // Nothing to take, and nothing to change: a pusher moves only a
            // null or op `top`, and a closed var's `OPEN` is changed by
            // `close`.
            return;
        }
        // Acquire: pairs with the pushers' release.
        let mut top = self.top.swap(marker, Ordering::Acquire);
        if !is_op(top) {
            return;
        }
        // Reverse the chain (latest first) in place, into push order.
        let mut first = ptr::null_mut();
        while is_op(top) {
            // SAFETY: the swap took the chain from `top` down: each record on
            // it was published by its pusher's release CAS after it wrote the
            // link, and is kept alive by the reference in its `this`; the
            // chain is this thread's alone now.
            let link = unsafe { &*top };
            // SAFETY: as above.
            let next = unsafe { link.next.with_mut(|next| std::mem::replace(&mut *next, first)) };
            first = top;
            top = next.cast_mut();
        }
        while !first.is_null() {
            // SAFETY: as above; the reference in `this` is taken after the
            // link is read, and keeps the record alive until then.
            let (next, op) = unsafe {
                let link = &*first;
                (link.next.with_mut(|next| *next), link.this.with_mut(|this| (*this).take()))
            };
            let op = op.expect("a pushed record holds its reference");
            each(op.sole_access(), op);
            first = next.cast_mut();
        }
    }

    /// Marks an open inbox closed: pushes queue from now on. Only the
    /// holder of the var's lock calls it.
    pub(crate) fn close(&self) {
        // A plain store: pushes leave an `OPEN` top as it is.
        if self.top.load(Ordering::Relaxed) == open() {
            self.top.store(ptr::null_mut(), Ordering::Relaxed);
        }
    }
}

impl<T> Drop for Inbox<T> {
    fn drop(&mut self) {
        let mut top = self.top.load(Ordering::Acquire);
        while is_op(top) {
            // SAFETY: as in `take`: the inbox is being dropped, so the chain
            // is this thread's, and each record is alive through its `this`
            // until that reference is dropped, after the link was read.
            let (next, op) = unsafe {
                let link = &*top;
                (link.next.with_mut(|next| *next), link.this.with_mut(|this| (*this).take()))
            };
            drop(op);
            top = next.cast_mut();
        }
    }
}
