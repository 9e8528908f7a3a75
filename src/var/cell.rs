//! The lock around a var's gate, and the atomic multi-var append of `push`.
//!
//! Generic over the op token `T` so that the protocol can be unit tested and
//! model checked (under `--cfg depengine_loom`) without the rest of the
//! engine.

use super::gate::{Access, Gate};
use crate::error::{Error, Kind};
use crate::loom::lock;
use crate::loom::sync::{Mutex, MutexGuard};
use crate::small::SmallList;

/// What an op token does when one of its accesses is let through, while the
/// var's lock is held. Must not run user code or touch another var.
pub(crate) trait Grant {
    /// Called once per let-through with the var's error slot. Ordinary ops
    /// note the error (to be skipped); a `wait_for_var` takes it (clearing
    /// the var, in push order with the var's other ops).
    fn on_grant(&self, error: &mut Option<Error>);

    /// Called, with the var's lock held, on the op that heads the var's
    /// queue after a completion let others through: it is the next one
    /// this var lets through, so its memory can be fetched meanwhile. (Not
    /// called when the head stays the same: it was announced already.)
    fn next_in_line(&self) {}
}

/// A var's state under its lock.
#[derive(Debug)]
pub(crate) struct VarState<T> {
    pub(crate) gate: Gate<T>,
    pub(crate) error: Option<Error>,
    pub(crate) deleted: bool,
}

/// A var's identity and locked state.
#[derive(Debug)]
pub(crate) struct VarCell<T> {
    /// Unique, ascending in creation order: the global lock order.
    id: u64,
    state: Mutex<VarState<T>>,
}

impl<T: Grant> VarCell<T> {
    pub(crate) fn new(id: u64) -> Self {
        Self { id, state: Mutex::new(VarState { gate: Gate::new(), error: None, deleted: false }) }
    }

    pub(crate) fn id(&self) -> u64 {
        self.id
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, VarState<T>> {
        lock(&self.state)
    }

    /// Completes one access of a finished op. A write stores `carry` (the
    /// error the op passes on) before letting successors through. The ops let
    /// through are appended to `ready`, in queue order.
    pub(crate) fn complete(&self, access: Access, carry: Option<&Error>, ready: &mut impl FnMut(T)) {
        let mut state = self.lock();
        let VarState { gate, error, .. } = &mut *state;
        if access == Access::Write {
            if let Some(err) = carry {
                *error = Some(err.clone());
            }
        }
        let mut moved = false;
        gate.complete(access, &mut |op: T| {
            op.on_grant(error);
            ready(op);
            moved = true;
        });
        if let (true, Some((_, next))) = (moved, gate.queued().next()) {
            next.next_in_line();
        }
    }

    /// Appends a deleting write and marks the var deleted, atomically: every
    /// op pushed before it runs first, every push after it is refused.
    pub(crate) fn append_delete(&self, op: T) -> Result<bool, Error> {
        let mut state = self.lock();
        if state.deleted {
            return Err(Error::new(Kind::VarDeleted { var: self.id }));
        }
        state.deleted = true;
        Ok(Self::append_locked(&mut state, Access::Write, op))
    }

    fn append_locked(state: &mut VarState<T>, access: Access, op: T) -> bool {
        match state.gate.append(access, op) {
            Some(op) => {
                op.on_grant(&mut state.error);
                true
            }
            None => false,
        }
    }
}

/// Appends one op to all its vars as one atomic step (SPEC §1).
///
/// `deps` must be sorted by var id with no duplicates. All locks are taken in
/// id order (so two pushers can never wait on each other in a cycle) and held
/// until every append is done (two-phase locking), so any two ops are ordered
/// the same way on every var they share. Nothing is appended if a var has
/// been deleted. Returns how many accesses were let through at once.
pub(crate) fn append_all<'a, T, I>(deps: I, op: &T) -> Result<usize, Error>
where
    T: Grant + Clone + 'a,
    I: Iterator<Item = (&'a VarCell<T>, Access)> + Clone,
{
    debug_assert!(deps.clone().zip(deps.clone().skip(1)).all(|(a, b)| a.0.id < b.0.id), "deps not sorted");
    let mut iter = deps.clone();
    if let (Some((cell, access)), None) = (iter.next(), iter.next()) {
        // One var: nothing to order.
        let mut state = cell.lock();
        if state.deleted {
            return Err(Error::new(Kind::VarDeleted { var: cell.id }));
        }
        return Ok(usize::from(VarCell::append_locked(&mut state, access, op.clone())));
    }
    let mut guards: SmallList<MutexGuard<'a, VarState<T>>, 4> = SmallList::new();
    for (cell, _) in deps.clone() {
        let state = cell.lock();
        if state.deleted {
            return Err(Error::new(Kind::VarDeleted { var: cell.id }));
        }
        guards.push(state);
    }
    let mut granted = 0;
    for (mut state, (_, access)) in guards.drain(..).zip(deps) {
        granted += usize::from(VarCell::append_locked(&mut state, access, op.clone()));
    }
    Ok(granted)
}

#[cfg(all(test, not(depengine_loom)))]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::Mutex as StdMutex;

    /// A token that records the error it saw and whether it clears errors.
    #[derive(Clone)]
    struct Tok {
        name: &'static str,
        clears: bool,
        seen: Arc<StdMutex<Option<Error>>>,
        /// Times it was announced next in line.
        announced: Arc<std::sync::atomic::AtomicUsize>,
    }

    impl Tok {
        fn new(name: &'static str, clears: bool) -> Self {
            Self { name, clears, seen: Arc::default(), announced: Arc::default() }
        }
        fn announced(&self) -> usize {
            self.announced.load(std::sync::atomic::Ordering::Relaxed)
        }
        fn seen(&self) -> Option<String> {
            self.seen.lock().unwrap().as_ref().map(|e| e.to_string())
        }
    }

    impl Grant for Tok {
        fn on_grant(&self, error: &mut Option<Error>) {
            let e = if self.clears { error.take() } else { error.clone() };
            *self.seen.lock().unwrap() = e;
        }

        fn next_in_line(&self) {
            self.announced.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }

    fn names(ready: &[Tok]) -> Vec<&'static str> {
        ready.iter().map(|t| t.name).collect()
    }

    #[test]
    fn write_error_is_seen_by_successors_until_a_wait_clears_it() {
        let cell = VarCell::new(1);
        let w = Tok::new("w", false);
        let r1 = Tok::new("r1", false);
        let wait = Tok::new("wait", true);
        let r2 = Tok::new("r2", false);
        for t in [&w, &r1, &wait, &r2] {
            let access = if t.name == "w" { Access::Write } else { Access::Read };
            append_all([(&cell, access)].into_iter(), t).unwrap();
        }
        let boom = Error::invalid("boom");
        let mut ready = Vec::new();
        cell.complete(Access::Write, Some(&boom), &mut |op| ready.push(op));
        assert_eq!(names(&ready), ["r1", "wait", "r2"]);
        assert_eq!(r1.seen().as_deref(), Some("invalid argument: boom"));
        assert_eq!(wait.seen().as_deref(), Some("invalid argument: boom"));
        assert_eq!(r2.seen(), None, "the wait cleared the error in push order");
        assert!(cell.lock().error.is_none());
    }

    /// A completion that lets ops through announces the op that then heads
    /// the queue (the next to be let through), and only that one.
    #[test]
    fn completion_announces_the_next_in_line() {
        let cell = VarCell::new(1);
        let toks = ["w1", "w2", "r1", "r2", "w3"].map(|name| Tok::new(name, false));
        for t in &toks {
            let access = if t.name.starts_with('w') { Access::Write } else { Access::Read };
            append_all([(&cell, access)].into_iter(), t).unwrap();
        }
        let counts = || toks.iter().map(Tok::announced).collect::<Vec<_>>();
        let mut ready = Vec::new();
        cell.complete(Access::Write, None, &mut |op| ready.push(op));
        assert_eq!(names(&ready), ["w2"]);
        assert_eq!(counts(), [0, 0, 1, 0, 0], "r1 heads the queue");
        cell.complete(Access::Write, None, &mut |op| ready.push(op));
        assert_eq!(names(&ready), ["w2", "r1", "r2"]);
        assert_eq!(counts(), [0, 0, 1, 0, 1], "w3 heads the queue");
        cell.complete(Access::Read, None, &mut |op| ready.push(op));
        cell.complete(Access::Read, None, &mut |op| ready.push(op));
        assert_eq!(names(&ready), ["w2", "r1", "r2", "w3"]);
        assert_eq!(counts(), [0, 0, 1, 0, 1], "completions that let nothing through announce nobody");
        cell.complete(Access::Write, None, &mut |op| ready.push(op));
        assert_eq!(counts(), [0, 0, 1, 0, 1], "an empty queue announces nobody");
    }

    #[test]
    fn append_all_is_all_or_nothing_on_deleted_var() {
        let a = VarCell::new(1);
        let b = VarCell::new(2);
        assert!(a.append_delete(Tok::new("del", false)).unwrap());
        let t = Tok::new("t", false);
        let err = append_all([(&a, Access::Read), (&b, Access::Write)].into_iter(), &t).unwrap_err();
        assert!(err.is_var_deleted());
        assert!(b.lock().gate.is_idle(), "nothing appended to b");
        assert!(a.append_delete(Tok::new("again", false)).unwrap_err().is_var_deleted());
    }

    #[test]
    fn append_all_counts_grants() {
        let a = VarCell::new(1);
        let b = VarCell::new(2);
        let t1 = Tok::new("t1", false);
        assert_eq!(append_all([(&a, Access::Write), (&b, Access::Read)].into_iter(), &t1).unwrap(), 2);
        let t2 = Tok::new("t2", false);
        // a is written by t1: queued; b is only read: granted.
        assert_eq!(append_all([(&a, Access::Read), (&b, Access::Read)].into_iter(), &t2).unwrap(), 1);
    }
}

#[cfg(all(test, depengine_loom))]
mod loom_tests;
