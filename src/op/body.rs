//! The op whose user body runs on this thread, if one does: the op layer
//! is the one that knows when user code runs on a thread. [`in_user_body`]
//! tells the workers (`exec`) not to keep an op made ready from inside a
//! body in their next slot, since the body may block until that op has
//! run; a wait inside a body that could never end is refused
//! ([`waits_for_current_body`], [`inside_op_of`]).
//!
//! Why `unsafe`: the op whose body runs on this thread is kept in a
//! thread-local by address (a thread-local cannot hold a borrow), set only for the
//! body's call, while the running thread holds the record; a counted
//! reference there would cost every op two atomic operations, the cost
//! PERFORMANCE.md's *An op runs on its worker's reference* took out of the
//! run.

#![allow(unsafe_code)]

use std::cell::Cell;
use std::sync::Arc;

use super::record::{GroupCore, Header};
use crate::var::Access;

use crate::may_block::BODY;

thread_local! {
    /// Whether that body dropped its own [`Completion`] unsignalled.
    static TOKEN_LEFT: Cell<bool> = const { Cell::new(false) };
}

/// Whether user code of an op body is running on this thread: an op it
/// makes ready (by signalling a completion, dropping a guard) must not wait
/// for it to return.
#[inline]
pub(crate) fn in_user_body() -> bool {
    !BODY.with(Cell::get).is_null()
}

/// The op whose user body runs on this thread (the innermost one, if
/// bodies nest), for checks that would otherwise wait for it.
pub(crate) fn current_body<T>(look: impl FnOnce(Option<&Header>) -> T) -> T {
    let header = BODY.with(Cell::get).cast::<Header>();
    // SAFETY: a non-null pointer is set by `in_body` (to a `Header`) for
    // the duration of the body's call, during which the thread running it
    // holds a reference to the record (`Running::task`).
    look(unsafe { header.as_ref() })
}

tokio::task_local! {
    /// The engine (its host's address) whose future op this task runs.
    pub(super) static FUTURE_OP_OF: usize;
}

tokio::task_local! {
    /// The group of the future op this task runs, if it is in one.
    pub(super) static FUTURE_OP_GROUP: Arc<GroupCore>;
}

/// The group of the op whose body runs here (on this thread, or as this
/// future op's task), if it is in one: `look` is asked with it.
fn current_group<T>(look: impl Fn(Option<&GroupCore>) -> T) -> T {
    let on_thread = current_body(|body| body.and_then(Header::group).map(|link| look(Some(&link.core))));
    match on_thread {
        Some(seen) => seen,
        None => FUTURE_OP_GROUP.try_with(|core| look(Some(core))).unwrap_or_else(|_| look(None)),
    }
}

/// Whether the op whose body runs here belongs to a cancelled group.
pub(crate) fn in_cancelled_group() -> bool {
    current_group(|group| group.is_some_and(GroupCore::is_cancelled))
}

/// Whether the op whose body runs here belongs to `group`: waiting for the
/// group there would wait for that very op.
pub(crate) fn inside_group(group: &GroupCore) -> bool {
    current_group(|current| current.is_some_and(|c| std::ptr::eq(c, group)))
}

/// Whether the caller runs inside a body of an op of the engine `host`: a
/// body on this thread (the innermost one), or a future op's task. An
/// engine-wide wait there would wait for that very op.
pub(crate) fn inside_op_of(host: *const ()) -> bool {
    let on_thread = current_body(|body| body.is_some_and(|b| std::ptr::addr_eq(b.engine.as_ptr(), host)));
    on_thread || FUTURE_OP_OF.try_with(|&of| of == host as usize).unwrap_or(false)
}

/// Whether waiting, inside the body running on this thread, for `other`
/// (not complete) could never end: it is that op, or it needs a var that op
/// holds, with a write on either side, so it waits for that op to complete.
pub(crate) fn waits_for_current_body(other: &Header) -> bool {
    current_body(|body| body.is_some_and(|body| std::ptr::eq(body, other) || conflict(body, other)))
}

/// Whether two ops share a var that one of them writes (deps are sorted by
/// var id, one per var).
fn conflict(a: &Header, b: &Header) -> bool {
    let (mut a, mut b) = (a.deps.iter().peekable(), b.deps.iter().peekable());
    while let (Some(x), Some(y)) = (a.peek(), b.peek()) {
        match x.var.id().cmp(&y.var.id()) {
            std::cmp::Ordering::Less => drop(a.next()),
            std::cmp::Ordering::Greater => drop(b.next()),
            std::cmp::Ordering::Equal => {
                if x.access == Access::Write || y.access == Access::Write {
                    return true;
                }
                a.next();
                b.next();
            }
        }
    }
    false
}

/// Whether the body running on this thread holds `var` (declared it).
pub(crate) fn current_body_holds(var: u64) -> bool {
    current_body(|body| body.is_some_and(|body| body.deps.iter().any(|d| d.var.id() == var)))
}

/// Called by a [`Completion`] dropped unsignalled: if it is dropped by its
/// own op's body, on the thread running it, the body's end decides what
/// the op's result is (a panic, or a dropped token), and this returns true.
pub(super) fn token_left_by_own_body(header: &Header) -> bool {
    let own = std::ptr::eq(BODY.with(Cell::get).cast::<Header>(), header);
    if own {
        TOKEN_LEFT.with(|left| left.set(true));
    }
    own
}

/// Runs the user body of `header`'s op, marking this thread as busy with
/// it.
#[inline]
pub(super) fn in_body<R>(header: &Header, body: impl FnOnce() -> R) -> R {
    struct Leave(*const ());
    impl Drop for Leave {
        fn drop(&mut self) {
            BODY.with(|b| b.set(self.0));
        }
    }
    let _leave = Leave(BODY.with(|b| b.replace(std::ptr::from_ref(header).cast())));
    body()
}

/// [`in_body`] for a body that receives a token: also returns whether it
/// dropped its own token unsignalled.
pub(super) fn in_body_with_token(header: &Header, body: impl FnOnce()) -> bool {
    struct Leave(bool);
    impl Drop for Leave {
        fn drop(&mut self) {
            TOKEN_LEFT.with(|left| left.set(self.0));
        }
    }
    let _leave = Leave(TOKEN_LEFT.with(|left| left.replace(false)));
    in_body(header, body);
    TOKEN_LEFT.with(Cell::get)
}
