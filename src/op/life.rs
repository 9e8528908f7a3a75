//! An op's life after it is built: appended to its vars (submit), let
//! through, run, and completed once its body has stored its result and
//! every guard is gone (finalize). `README.md` beside this file has the
//! states and who owns the record in each.

#![allow(unsafe_code)]

use super::host::ReadyList;
use super::record::{Header, TaskRef};
use crate::error::Error;
use crate::sync::small::{self, SmallList};
use crate::var::VarCell;

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
    header.in_span(|| tracing::debug!(target: "depengine::op", "pushed"));
    let deps = header.deps.len();
    if deps == 0 {
        dispatch(task);
        return Ok(());
    }
    // Ops of earlier pushes that this one let through, found in an inbox.
    let mut others: SmallList<TaskRef, 4> = SmallList::new();
    let mut collect = |op| others.push(op);
    let ready = match deps {
        1 if !header.meta.deletes => {
            let dep = &header.deps[0];
            let (cell, access): (*const _, _) = (dep.var.cell(), dep.access);
            // SAFETY: the record `task` refers to holds the var, so the cell
            // lives as long as `task` does; the call does not need it to
            // live any longer.
            unsafe { VarCell::append_one(cell, access, task, &mut collect)? }
        }
        _ => {
            let granted = if header.meta.deletes {
                let dep = header.deps.first().expect("a deletion has its var");
                dep.var.cell().append_delete(task.clone(), &mut collect).map(usize::from)
            } else {
                let cells = header.deps.iter().map(|d| (d.var.cell(), d.access));
                crate::var::append_all(cells, &task, &mut collect)
            }?;
            (granted == deps || header.pending.release(granted)).then_some(task)
        }
    };
    if others.is_empty() {
        small::discard(others);
    } else {
        for op in others {
            if op.header().pending.release(1) {
                dispatch(op);
            }
        }
    }
    if let Some(task) = ready {
        dispatch(task);
    }
    Ok(())
}

/// Releases the body's live count, once its result is stored: the call
/// that reaches zero completes the op. `task` is a reference to the op
/// held by the caller until this returns. If guards are still alive, the
/// last one to go completes the op instead (each holds a reference).
pub(crate) fn release_body(task: &TaskRef) {
    let live = &task.header().live;
    // Acquire: the writes made through guards already dropped happen
    // before the completion below.
    if live.get() > 1 {
        if live.release(1) {
            finalize(task, true);
        }
    } else {
        live.release_sole();
        finalize(task, false);
    }
}

/// Completes an op whose body has finished and whose guards are gone: each
/// var completed in turn (one lock at a time), successors dispatched, the
/// result published. `after_guards`: a guard outlived the body.
fn finalize(task: &TaskRef, after_guards: bool) {
    let header = task.header();
    if header.meta.nested {
        finalize_nested(header, after_guards);
        return;
    }
    let carries = header.carries();
    if !header.deps.is_empty() {
        // The ops this completion made ready: let through on a var here,
        // and on every other var already.
        let mut ready = ReadyList::new();
        for dep in header.deps.iter() {
            let carry = carries.as_ref().and_then(|c| c.on(dep.var.id()));
            dep.var.cell().complete(dep.access, carry, &mut |op: TaskRef| {
                if op.header().pending.release(1) {
                    ready.push(op);
                }
            });
        }
        if !ready.is_empty() {
            header.host.dispatch_ready(&mut ready);
        }
        small::discard(ready);
    }
    let ok = match carries {
        None => true,
        Some(carries) => carries.is_ok(),
    };
    header.in_span(|| tracing::debug!(target: "depengine::op", ok, "finished"));
    task.publish();
}

/// Completes a nested op: its parent holds its vars and publishes it (see
/// `nest.rs`); a parent waiting for its guards goes on.
fn finalize_nested(header: &Header, after_guards: bool) {
    header.in_span(|| tracing::debug!(target: "depengine::op", ok = header.carry().is_none(), "finished"));
    if let Some(then) = after_guards.then(|| header.nested_finished()).flatten() {
        then();
    }
}

/// Keeps an op from completing until dropped: the op completes only once
/// its body has finished and every `LiveRef` is gone. Held by guards.
pub(crate) struct LiveRef(TaskRef);

impl LiveRef {
    /// Takes one more live count on `task`; its holder must keep the op
    /// from completing meanwhile (the body has not stored its result).
    pub(crate) fn new(task: &TaskRef) -> Self {
        task.header().live.add(1);
        Self(task.clone())
    }
}

impl Drop for LiveRef {
    fn drop(&mut self) {
        if self.0.header().live.release(1) {
            finalize(&self.0, true);
        }
    }
}

impl std::fmt::Debug for LiveRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "LiveRef({})", self.0.header().meta.name)
    }
}
