//! The lock around a var's gate, and the atomic multi-var append of `push`.
//!
//! Generic over the op token `T` so that the protocol can be unit tested and
//! model checked (under `--cfg depengine_loom`) without the rest of the
//! engine.
//!
//! Why `unsafe`: a one-var push appends through the var's inbox without its
//! lock while the var may be deleted meanwhile, and a holder is named by
//! address, not by a counted reference. Measured: PERFORMANCE.md, *An inbox
//! per var*; modelled: `var_cell/loom_tests.rs`.

#![allow(unsafe_code)]

use super::gate::{Access, Gate};
use super::inbox::{Inbox, Linked, Pushed, Then};
use crate::error::{Error, Kind};
use crate::sync::lock;
use crossbeam_utils::CachePadded;

use crate::sync::small::SmallList;
use crate::sync::{Mutex, MutexGuard};

/// What an op token does when one of its accesses is let through, while the
/// var's lock is held. Must not run user code or touch another var.
pub(crate) trait Grant: Sized {
    /// Called once per let-through with the var's error slot. Ordinary ops
    /// note the error (to be skipped); a `wait_for_var` takes it (clearing
    /// the var, in push order with the var's other ops).
    fn on_grant(&self, var: u64, error: &mut Option<Error>);

    /// Called, with the var's lock held, on the op that heads the var's
    /// queue after a completion let others through: it is the next one
    /// this var lets through, so its memory can be fetched meanwhile. (Not
    /// called when the head stays the same: it was announced already.)
    fn next_in_line(&self) {}

    /// The op's name, for a var's debug view.
    fn name(&self) -> &str;

    /// What a var keeps of an op that holds it (let through, not yet
    /// completed there): the op's address, without a reference.
    type Holder: Copy + PartialEq + Send + std::fmt::Debug;

    fn held(&self) -> Self::Holder;

    /// A new reference to the op `held` is of.
    ///
    /// # Safety
    ///
    /// The op is alive: it holds a var, whose lock the caller holds, and
    /// has not completed on it (see [`VarState::holders`]).
    unsafe fn from_held(held: Self::Holder) -> Self;
}

/// A var's label: its name and id, or its id alone.
pub(crate) fn label(name: Option<&str>, id: u64) -> String {
    match name {
        Some(name) => format!("`{name}` (#{id})"),
        None => format!("#{id}"),
    }
}

/// A var's state under its lock.
#[derive(Debug)]
pub(crate) struct VarState<T: Grant> {
    pub(crate) gate: Gate<T>,
    pub(crate) error: Option<Error>,
    pub(crate) deleted: bool,
    /// Ops let through and not yet completed here, for the hang explainer:
    /// who holds the var. Every write (a write is let through only when
    /// nothing else runs), and the first [`NAMED_HOLDERS`] reads let through
    /// while the list had room, so that a fan of a thousand reads costs
    /// each a search of a few entries; `gate` counts them all. An op is
    /// listed from its let-through to its completion here, both under the
    /// lock, and its record lives at least that long: the thread completing
    /// it holds a reference until `complete` returns.
    /// Each with the coarse clock's reading when it was let through.
    holders: SmallList<(T::Holder, u64), 2>,
    /// The most holders it names: [`NAMED_HOLDERS`], or 0 on an engine
    /// that keeps no holders (`EngineBuilder::track_holders(false)`).
    named: u8,
}

/// The most holders a var names at once (see [`VarState::holders`]).
const NAMED_HOLDERS: u8 = 4;

impl<T: Grant> VarState<T> {
    /// `op` was let through.
    #[inline]
    fn hold(holders: &mut SmallList<(T::Holder, u64), 2>, named: u8, op: &T) {
        if holders.len() < usize::from(named) {
            holders.push((op.held(), crate::sync::coarse::now_ms()));
        }
    }
}

/// A var's identity, its inbox and its locked state, the last two on lines
/// of their own: while ops queue on a var, the pushing thread writes the
/// inbox and the completing worker the state.
pub(crate) struct VarCell<T: Grant> {
    /// Ops of one-var pushes made while the inbox was closed, not yet moved
    /// to the gate. Closed only while ops are queued or a write runs, as the
    /// last holder of the lock left it (see [`settle`](Self::settle)).
    inbox: CachePadded<Inbox<T>>,
    state: CachePadded<Mutex<VarState<T>>>,
    /// Unique, ascending in creation order: the global lock order.
    id: u64,
    /// The name the var was given at creation, if any.
    name: Option<std::sync::Arc<str>>,
}

impl<T: Grant> std::fmt::Debug for VarCell<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VarCell").field("id", &self.id).finish_non_exhaustive()
    }
}

impl<T: Grant + Linked> VarCell<T> {
    #[cfg(test)]
    pub(crate) fn new(id: u64, name: Option<std::sync::Arc<str>>) -> Self {
        Self::keeping(id, name, true)
    }

    /// A cell that names its holders, or not (`holders`).
    pub(crate) fn keeping(id: u64, name: Option<std::sync::Arc<str>>, holders: bool) -> Self {
        Self {
            id,
            name,
            inbox: CachePadded::new(Inbox::new()),
            state: CachePadded::new(Mutex::new(VarState {
                gate: Gate::new(),
                error: None,
                deleted: false,
                holders: SmallList::new(),
                named: if holders { NAMED_HOLDERS } else { 0 },
            })),
        }
    }

    /// Adds `n` completed writes to the version: those of the ops a parent
    /// op ran beyond the one its own completion counts. Called while the
    /// parent holds the var's write. The one hook of bulk execution in this
    /// layer (a segment's members each count as a write, see
    /// `engine::bulk`).
    pub(crate) fn add_writes(&self, n: u64) {
        lock(&self.state).gate.add_writes(n);
    }

    pub(crate) fn id(&self) -> u64 {
        self.id
    }

    /// The var's name, if it has one.
    pub(crate) fn name(&self) -> Option<&str> {
        self.name.as_deref()
    }

    /// The var's name, shared (a profile keeps it without a copy).
    pub(crate) fn name_shared(&self) -> Option<&std::sync::Arc<str>> {
        self.name.as_ref()
    }

    /// The var's label for messages (see `handle::label`).
    pub(crate) fn label(&self) -> String {
        label(self.name(), self.id)
    }

    /// The locked state, with the inbox moved to the gate's queue (the
    /// gate is closed while the inbox holds ops, so none of them is let
    /// through and nothing needs dispatching): what a snapshot shows.
    pub(crate) fn lock(&self) -> MutexGuard<'_, VarState<T>> {
        let mut state = lock(&self.state);
        self.drain(&mut state, &mut |_| unreachable!("a closed gate lets nothing through on append"));
        state
    }

    /// Appends an op whose only var is `this` (not a deletion). Returns it
    /// if it was let through at once; else it is queued, or left in the
    /// inbox, and belongs to the var. Ops of earlier pushes that this call
    /// lets through are passed to `ready` (under the lock: collect them
    /// only).
    ///
    /// # Safety
    ///
    /// `this` points to a live cell, kept alive by `op` (a reference to a
    /// record that holds the var) and possibly by nothing else. Once the op
    /// is in the inbox it may be let through, run and completed by other
    /// threads, and its var freed, before this call returns: so the cell is
    /// reached through a raw pointer, and after the push that leaves the op
    /// in the inbox, nothing of it is read or written again.
    pub(crate) unsafe fn append_one(
        this: *const Self,
        access: Access,
        op: T,
        ready: &mut impl FnMut(T),
    ) -> Result<Option<T>, Error> {
        // SAFETY: `op` keeps the cell alive until it is pushed. The inbox is
        // atomics only, which another thread may free while this reference
        // is still in scope, as long as it is not used again: a push that
        // leaves the op in the inbox returns without touching the inbox
        // after its compare-and-swap, and this call returns at once.
        let op = match unsafe { &(*this).inbox }.push(op) {
            Pushed::Queued => return Ok(None),
            Pushed::Sealed(op) => {
                // SAFETY: `op` is ours again, and keeps the cell alive
                // until it is dropped, after the label is made.
                let var = unsafe { (*this).label() };
                drop(op);
                return Err(Error::new(Kind::VarDeleted { var }));
            }
            Pushed::Open(op) => op,
        };
        // SAFETY: `op` is ours, and keeps the cell alive while it is: until
        // it is appended to the gate, under the lock. Once it is, only a
        // holder of this lock can let it through, so the cell lives on
        // until the guard has released the lock.
        let cell = unsafe { &*this };
        let mut state = lock(&cell.state);
        if state.deleted {
            drop(state);
            let err = Error::new(Kind::VarDeleted { var: cell.label() });
            // Last: it may drop the last reference to the var.
            drop(op);
            return Err(err);
        }
        cell.drain(&mut state, ready);
        let granted = Self::append_locked(cell.id, &mut state, access, op);
        cell.settle(&mut state, ready);
        Ok(granted)
    }

    /// Calls `each` on every op queued on this var, in order, the inbox's
    /// included (moved to the gate first: ops it lets through meanwhile go
    /// to `ready`). For a cancelling shutdown, which resolves them early.
    pub(crate) fn queued_ops(&self, ready: &mut impl FnMut(T), each: &mut impl FnMut(&T)) {
        let mut state = lock(&self.state);
        self.drain(&mut state, ready);
        self.settle(&mut state, ready);
        state.gate.queued().for_each(|(_, op)| each(op));
    }

    /// The ops this var names as holding it (see [`VarState::holders`]),
    /// each with the coarse clock's reading when it was let through, and
    /// the reads and write let through, counted.
    pub(crate) fn holders(&self) -> (Vec<(T, u64)>, usize, bool) {
        let state = lock(&self.state);
        let held = state
            .holders
            .iter()
            // SAFETY: listed holders are alive while the lock is held (see
            // `VarState::holders`), and the lock is held.
            .map(|&(h, since)| (unsafe { T::from_held(h) }, since))
            .collect();
        (held, state.gate.running_reads(), state.gate.write_running())
    }

    /// Completes one access of a finished op. A write stores `carry` (the
    /// error the op passes on) before letting successors through. The ops let
    /// through are appended to `ready`, in queue order.
    ///
    /// `who` is the completing op ([`Grant::held`]). Inlined into the one
    /// completion loop, with its callback.
    #[inline(always)]
    pub(crate) fn complete(
        &self,
        who: T::Holder,
        access: Access,
        carry: Option<&Error>,
        ready: &mut impl FnMut(T),
    ) {
        let mut state = lock(&self.state);
        let id = self.id;
        if let Some(at) = state.holders.iter().position(|h| h.0 == who) {
            state.holders.swap_remove(at);
        }
        if access == Access::Write
            && let Some(err) = carry
        {
            state.error = Some(err.clone());
        }
        let mut moved = false;
        let mut pass = |op: T| {
            moved = true;
            ready(op);
        };
        {
            let VarState { gate, error, holders, named, .. } = &mut *state;
            gate.complete(access, &mut |op: T| {
                op.on_grant(id, error);
                VarState::hold(holders, *named, &op);
                pass(op);
            });
        }
        // The inbox's ops come after every queued one.
        if state.gate.nothing_queued() {
            self.drain(&mut state, &mut pass);
        }
        self.settle(&mut state, &mut pass);
        if let (true, Some((_, next))) = (moved, state.gate.queued().next()) {
            next.next_in_line();
        }
    }

    /// Appends a deleting write and marks the var deleted, atomically: every
    /// op pushed before it runs first, every push after it is refused (the
    /// inbox is sealed). Returns whether it was let through at once; ops of
    /// earlier pushes let through are passed to `ready`.
    pub(crate) fn append_delete(&self, op: T, ready: &mut impl FnMut(T)) -> Result<bool, Error> {
        let mut state = lock(&self.state);
        if state.deleted {
            return Err(Error::new(Kind::VarDeleted { var: self.label() }));
        }
        state.deleted = true;
        self.settle(&mut state, ready);
        let granted = Self::append_locked(self.id, &mut state, Access::Write, op).is_some();
        Ok(granted)
    }

    /// Appends `op` to the gate; returns it if it was let through.
    fn append_locked(id: u64, state: &mut VarState<T>, access: Access, op: T) -> Option<T> {
        let op = state.gate.append(access, op)?;
        op.on_grant(id, &mut state.error);
        VarState::hold(&mut state.holders, state.named, &op);
        Some(op)
    }

    /// Moves the inbox's ops to the gate, in push order; those let through
    /// go to `ready`.
    fn drain(&self, state: &mut VarState<T>, ready: &mut impl FnMut(T)) {
        self.move_inbox(state, Then::Closed, ready);
    }

    /// Moves the inbox's ops to the gate, in push order, leaving the inbox
    /// as `then` says; those let through go to `ready`. Returns whether
    /// there were any.
    fn move_inbox(&self, state: &mut VarState<T>, then: Then, ready: &mut impl FnMut(T)) -> bool {
        let mut moved = false;
        self.inbox.take(then, |access, op| {
            moved = true;
            if let Some(op) = Self::append_locked(self.id, state, access, op) {
                ready(op);
            }
        });
        moved
    }

    /// Leaves the inbox as the gate now is, before the lock is released:
    /// sealed if the var is deleted; closed if ops are queued; as it was
    /// while only a write runs (either is right: an op appended now would be
    /// queued, and the write's completion will look at the inbox); else
    /// open, its ops moved to the gate by the same swap that opens it (so
    /// none is left behind in an open inbox). Moving them may close the
    /// gate again.
    ///
    /// So a var whose ops are each done before the next is pushed keeps
    /// its inbox open, and neither side writes it; one that ops queue on
    /// takes its pushes without the lock.
    fn settle(&self, state: &mut VarState<T>, ready: &mut impl FnMut(T)) {
        loop {
            let then = if state.deleted {
                Then::Sealed
            } else if !state.gate.nothing_queued() {
                self.inbox.close();
                return;
            } else if state.gate.write_running() {
                return;
            } else {
                Then::Open
            };
            if !self.move_inbox(state, then, ready) {
                return;
            }
        }
    }
}

/// Appends one op to all its vars as one atomic step (docs/semantics.md §1).
///
/// `deps` must be sorted by var id with no duplicates. All locks are taken in
/// id order (so two pushers can never wait on each other in a cycle) and held
/// until every append is done (two-phase locking), so any two ops are ordered
/// the same way on every var they share. Each var's inbox is moved to its
/// gate first (the ops in it were pushed before). Nothing is appended if a
/// var has been deleted. Returns how many accesses were let through at
/// once; ops of earlier pushes let through go to `ready`.
pub(crate) fn append_all<'a, T, I>(deps: I, op: &T, ready: &mut impl FnMut(T)) -> Result<usize, Error>
where
    T: Grant + Linked + Clone + 'a,
    I: Iterator<Item = (&'a VarCell<T>, Access)> + Clone,
{
    debug_assert!(deps.clone().zip(deps.clone().skip(1)).all(|(a, b)| a.0.id < b.0.id), "deps not sorted");
    let mut guards: SmallList<MutexGuard<'a, VarState<T>>, 4> = SmallList::new();
    for (cell, _) in deps.clone() {
        let state = lock(&cell.state);
        if state.deleted {
            return Err(Error::new(Kind::VarDeleted { var: cell.label() }));
        }
        guards.push(state);
    }
    let mut granted = 0;
    for (mut state, (cell, access)) in guards.drain(..).zip(deps) {
        cell.drain(&mut state, ready);
        granted += usize::from(VarCell::append_locked(cell.id, &mut state, access, op.clone()).is_some());
        cell.settle(&mut state, ready);
    }
    Ok(granted)
}

#[cfg(all(test, not(depengine_loom)))]
mod tests;

#[cfg(all(test, depengine_loom))]
mod loom_tests;
