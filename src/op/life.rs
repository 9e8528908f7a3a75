//! An op's life after it is built: appended to its vars (submit), kept
//! from completing by its guards ([`LiveRef`]), and completed on its vars:
//! once the body has stored its outcome (`OpCell::store`, `op_cell.rs`)
//! and every guard is gone, the op releases each var, dispatches what
//! became ready and publishes its result (`OpCell::complete`, which calls
//! [`release_vars`] here). `README.md` beside this file has the states and
//! who owns the record in each.
//!
//! Why `unsafe`: a guard's live count keeps its op's record alive without a
//! reference of its own, and the body's reference passes to the last guard
//! by `TaskRef::into_raw`; and a one-var push appends through the var's inbox.
//! Measured: PERFORMANCE.md, *Guards hold no reference to their op*
//! (alternated against a plain `Arc` per guard: `w2_chain` faster in 48 of
//! 81 pairs, p ≈ 0.03), and *An inbox per var*.

#![allow(unsafe_code)]

use std::ptr::NonNull;

use super::task_ref::VARS_GONE;
use super::{Header, LeftOnVars, ReadyList, TaskRef, prefetch_hot};
use crate::error::Error;
use crate::sync::atomic::Ordering;
use crate::sync::small::{self, SmallList};
use crate::var::{Grant, VarCell};

/// Appends a built op to all its vars at once; passes it to `dispatch` if
/// every dep was let through, with the ops of earlier pushes that this one
/// let through (found in an inbox). On error nothing was appended.
///
/// `pending` starts at the number of deps; each let-through releases one.
/// Those let through at once are released here, after every append: if all
/// were, nothing else can reach the count, and it is left alone. An op with
/// one var may be left in its inbox: the reference moves there, and this
/// call does not touch the op again.
#[inline]
pub(crate) fn submit(task: TaskRef, mut dispatch: impl FnMut(TaskRef)) -> Result<(), Error> {
    let header = task.header();
    header.in_span(|| tracing::trace!(target: "depengine::op", "pushed"));
    let deps = header.deps.len();
    if deps == 0 {
        if let Some(profile) = header.meta.profiled().then(|| header.profile()).flatten() {
            profile.ready();
        }
        dispatch(task);
        return Ok(());
    }
    // Ops of earlier pushes that this one let through, found in an inbox.
    let mut others: SmallList<TaskRef, 4> = SmallList::new();
    let mut collect = |op| others.push(op);
    let ready = match deps {
        1 if !header.meta.deletes() => {
            let dep = header.deps.first().expect("one var");
            let (cell, access): (*const _, _) = (dep.var.cell(), dep.access);
            // SAFETY: the record `task` refers to holds the var, so the cell
            // lives as long as `task` does; the call does not need it to
            // live any longer.
            unsafe { VarCell::append_one(cell, access, task, &mut collect)? }
        }
        _ => {
            let granted = if header.meta.deletes() {
                let dep = header.deps.first().expect("a deletion has its var");
                dep.var.cell().append_delete(task.clone(), &mut collect).map(usize::from)
            } else {
                let cells = header.deps.iter().map(|d| (d.var.cell(), d.access));
                crate::var::append_all(cells, &task, &mut collect)
            }?;
            (granted == deps || header.state.let_through(granted)).then_some(task)
        }
    };
    if others.is_empty() {
        small::discard(others);
    } else {
        for op in others {
            if op.header().state.let_through(1) {
                if let Some(profile) = op.header().profile() {
                    profile.ready();
                }
                dispatch(op);
            }
        }
    }
    if let Some(task) = ready {
        if let Some(profile) = task.header().meta.profiled().then(|| task.header().profile()).flatten() {
            profile.ready();
        }
        dispatch(task);
    }
    Ok(())
}

/// Keeps an op from completing until dropped: the op completes only once
/// its body has finished and every `LiveRef` is gone. Held by guards.
///
/// It holds no reference count of its own, and needs none: while the body
/// has not stored its result, whoever will store it holds a reference (the
/// job's slot, a `Completion`); after that, the body's reference belongs to
/// the live count (`OpCell::release_body`), and the `LiveRef` whose drop brings
/// the count to zero takes it back. Either way the record outlives every
/// `LiveRef`.
pub(crate) struct LiveRef(NonNull<Header>);

// SAFETY: a `LiveRef` only reads the record's header (`Sync`) and, once,
// takes back a `TaskRef` (`Send`): what a `TaskRef` may do on any thread.
unsafe impl Send for LiveRef {}
// SAFETY: `&LiveRef` gives access to nothing but `Debug`, which reads the
// header (`Sync`).
unsafe impl Sync for LiveRef {}

impl LiveRef {
    /// Takes one more live count on `task`; its holder must keep the op
    /// from completing meanwhile (the body has not stored its result).
    pub(crate) fn new(task: &TaskRef) -> Self {
        task.header().state.acquire_live();
        Self(task.as_ptr())
    }

    /// A write guard of var `var` was dropped while its thread panicked:
    /// the var is to carry an error when the op completes (unless the op
    /// leaves one of its own there).
    pub(crate) fn poison(&self, var: u64) {
        self.header().poison(var);
    }

    /// The error a var carried when the op was let through, if any (an op
    /// that runs whatever its vars carry: `no_skip`).
    pub(crate) fn seen_error(&self) -> Option<Error> {
        self.header().seen_error()
    }

    fn header(&self) -> &Header {
        // SAFETY: this live count keeps the record alive (see the type's
        // doc), and the reference borrows `self`.
        unsafe { self.0.as_ref() }
    }
}

impl Drop for LiveRef {
    fn drop(&mut self) {
        if self.header().state.release_live() {
            // SAFETY: the count reached zero here, so the body had released
            // its own count: `release_body` made its reference the live
            // count's (`TaskRef::into_raw` of a reference to this record,
            // whose pointer this `LiveRef` holds), and only the release
            // that reaches zero takes it back.
            let task = unsafe { TaskRef::from_raw(self.0) };
            task.complete();
        }
    }
}

impl std::fmt::Debug for LiveRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "LiveRef({})", self.header().meta.name)
    }
}

/// What a var keeps of an op that holds it (see `var::cell`'s
/// `VarState::holders`): the record's address, without a reference.
#[derive(Clone, Copy, Debug)]
pub(crate) struct OpHolder(NonNull<Header>);

// SAFETY: a `OpHolder` is an address; it is turned back into a reference only
// by `Grant::from_held`, whose caller guarantees the record is alive, and a
// `TaskRef` may move between threads.
unsafe impl Send for OpHolder {}

impl PartialEq for OpHolder {
    fn eq(&self, other: &Self) -> bool {
        self.0 == other.0
    }
}

impl Grant for TaskRef {
    #[inline]
    fn on_grant(&self, var: u64, error: &mut Option<Error>) {
        // A var without an error, the common case, asks nothing of the op.
        if error.is_some() {
            self.header().on_grant(var, error);
        }
    }

    #[inline]
    fn next_in_line(&self) {
        prefetch_hot(self);
    }

    fn name(&self) -> &str {
        &self.header().meta.name
    }

    type Holder = OpHolder;

    #[inline]
    fn held(&self) -> OpHolder {
        OpHolder(self.as_ptr())
    }

    unsafe fn from_held(held: OpHolder) -> Self {
        // SAFETY: the caller guarantees the record is alive, and `held`
        // came from a `TaskRef`'s pointer.
        unsafe { TaskRef::clone_from_raw(held.0) }
    }
}

/// [`release_vars`] for an op that saw or holds an error, which it may
/// leave on the vars it writes; whether it completes with none to pass on.
#[cold]
#[inline(never)]
pub(super) fn release_vars_with_errors(task: &TaskRef) -> bool {
    let header = task.header();
    let left_on_vars = header.left_on_vars();
    if !header.deps.is_empty() && !header.vars_gone() {
        release_vars(task, left_on_vars.as_deref());
    }
    left_on_vars.as_ref().is_none_or(|left| left.is_ok())
}

/// Lets a running GPU op's vars go before it completes (early release, see
/// `gpu/README.md`): each var completed in turn, as [`OpCell::complete`]
/// would, and the ops that became ready dispatched; the op itself completes
/// later, and then leaves the vars alone (`vars_gone`: read by whoever
/// completes the op, after the poller saw the event that this thread
/// registered after setting it). Refused (false) for an op that carries an
/// error to its vars: it releases them at completion, with the error.
pub(crate) fn release_vars_early(task: &TaskRef) -> bool {
    let header = task.header();
    if header.meta.nested() || header.left_on_vars().is_some() {
        return false;
    }
    header.state.set(VARS_GONE, Ordering::Relaxed);
    release_vars(task, None);
    true
}

/// Completes the op on each of its vars in turn (one lock at a time),
/// leaving on each what `left_on_vars` says, and dispatches the ops that
/// became ready: let through on a var here, and on every other var already.
/// Not generic: one copy for every kind of op.
#[inline(never)]
pub(super) fn release_vars(task: &TaskRef, left_on_vars: Option<&LeftOnVars>) {
    let header = task.header();
    let who = task.held();
    let mut ready = ReadyList::new();
    for dep in header.deps.iter() {
        let carry = left_on_vars.and_then(|c| c.on(dep.var.id()));
        dep.var.cell().complete(who, dep.access, carry, &mut |op: TaskRef| {
            if op.header().state.let_through(1) {
                ready.push(op);
            }
        });
    }
    // What a profiled op released (an op released by one that is not
    // profiled counts as ready when it starts).
    if header.meta.profiled() && !ready.is_empty() {
        profile_released(header, &ready);
    }
    if !ready.is_empty() {
        header.engine.dispatch_ready(&mut ready);
    }
    small::discard(ready);
}

/// Profiled ops in `ready` are ready: their last dependency was released
/// by `by`.
#[cold]
fn profile_released(by: &Header, ready: &ReadyList) {
    for op in ready {
        let Some(profile) = op.header().profile() else { continue };
        profile.ready();
        if let Some(by) = by.profile() {
            by.released(profile.seq);
        }
    }
}

/// Completes a nested op: its parent holds its vars and publishes it (see
/// `engine_core.rs`); a parent waiting for its guards goes on.
pub(super) fn complete_nested(header: &Header, after_guards: bool) {
    header.in_span(|| tracing::trace!(target: "depengine::op", ok = header.carry().is_none(), "finished"));
    if let Some(then) = after_guards.then(|| header.nested_finished()).flatten() {
        then();
    }
}
