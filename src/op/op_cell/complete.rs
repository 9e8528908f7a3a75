//! An op's completion, in one place: once the body has stored its outcome
//! (`OpCell::store`, in `../op_cell.rs`) and every guard is gone, the op
//! releases its vars, dispatches what became ready and publishes its
//! result ([`OpCell::complete`]); nothing of it returns to another file.
//! The live count that decides who completes, and how the body's reference
//! passes to the last guard: `../README.md`, *States and owners*, and
//! `../life.rs` ([`LiveRef`]).
//!
//! Why `unsafe`: the body's reference passes to the live count by
//! `TaskRef::into_raw`, so that a guard holds no reference of its own.
//! Measured: PERFORMANCE.md, *Guards hold no reference to their op*.

#![allow(unsafe_code)]

#[cfg(doc)]
use super::super::LiveRef;
use super::super::job::Job;
use super::super::record::state::VARS_GONE;
use super::super::record::{Header, LeftOnVars, ReadyList, TaskRef};
use super::OpCell;
use crate::sync::atomic::Ordering;
use crate::sync::small;
use crate::var::Grant as _;

impl<J: Job> OpCell<J> {
    /// Releases the body's live count, once its result is stored: the call
    /// that reaches zero completes the op. `this` is a reference to this
    /// very record, held by the caller until this returns. `late`: the op
    /// was resolved early and its resolution ended after its vars let it
    /// through (for a nested op, as if a guard had outlived its body, since
    /// its parent saw it unfinished and waits to be told).
    ///
    /// If guards are still alive, one of them completes the op: the live
    /// count then owns a reference to the record, which the [`LiveRef`]
    /// whose drop reaches zero takes back (so a guard holds no reference of
    /// its own). It is taken here before the release, so that the guard
    /// cannot take back one not yet given. Without guards, nothing but this
    /// call can reach the count (no guard can be made once the body has
    /// returned), so its release is sure to reach zero.
    #[inline]
    pub(super) fn release_body(&self, this: &TaskRef, late: bool) {
        let state = &self.header.state;
        // Acquire: the writes made through guards already dropped happen
        // before the completion below.
        if state.live() > 1 {
            let passed = this.clone().into_raw();
            if !state.release_live() {
                return;
            }
            // SAFETY: the guards were dropped meanwhile, and this call
            // reached zero, so no `LiveRef` took back `passed` (the
            // reference made just above by `into_raw`): it is still this
            // call's to drop.
            drop(unsafe { TaskRef::from_raw(passed) });
            self.complete(this, true);
        } else {
            let last = state.release_live();
            debug_assert!(last, "no guard can be made once the body has returned");
            self.complete(this, late);
        }
    }

    /// Completes the op, whose body has finished and whose guards are gone:
    /// each var completed in turn (one lock at a time), the ops that became
    /// ready dispatched, the result published. `after_guards`: a guard
    /// outlived the body. A nested op's parent holds its vars and publishes
    /// it (`../record/nest.rs`).
    pub(super) fn complete(&self, this: &TaskRef, after_guards: bool) {
        let header = &self.header;
        if header.meta.nested() {
            complete_nested(header, after_guards);
            return;
        }
        // An error-free op reads one bit of the error path.
        let ok = if header.has_errors() {
            release_vars_with_errors(this)
        } else {
            // A GPU op whose vars went early (`release_vars_early`) has
            // them no more.
            if !header.deps.is_empty() && !header.vars_gone() {
                release_vars(this, None);
            }
            true
        };
        // Most ops have no span: the event is logged without a closure then.
        match header.span() {
            Some(span) => span.in_scope(|| tracing::trace!(target: "depengine::op", ok, "finished")),
            None => tracing::trace!(target: "depengine::op", ok, "finished"),
        }
        self.publish_now();
    }
}

/// [`release_vars`] for an op that saw or holds an error, which it may
/// leave on the vars it writes; whether it completes with none to pass on.
#[cold]
#[inline(never)]
fn release_vars_with_errors(task: &TaskRef) -> bool {
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
fn release_vars(task: &TaskRef, left_on_vars: Option<&LeftOnVars>) {
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
/// `../record/nest.rs`); a parent waiting for its guards goes on.
fn complete_nested(header: &Header, after_guards: bool) {
    header.in_span(|| tracing::trace!(target: "depengine::op", ok = header.carry().is_none(), "finished"));
    if let Some(then) = after_guards.then(|| header.nested_finished()).flatten() {
        then();
    }
}
