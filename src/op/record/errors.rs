//! How errors pass through an op (docs/semantics.md §3): the error a var carried when
//! the op was let through on it, whether that vetoes its body, and the
//! error it leaves on the vars it writes.
//!
//! Only ops on an error path take the lock: `has_errors` says whether the
//! state holds anything, and the error-free path reads only that flag. The
//! state itself lives in the op's cold box (`cold.rs`).

use super::Header;
use super::state::SAW_ERROR;
use crate::error::{Error, Kind};
use crate::sync::atomic::Ordering;
use crate::sync::lock;

impl Header {
    /// Notes the error slot of `var` as the op is let through on it
    /// (called under the var's lock): a `wait_for_var` takes the error, any
    /// other op sees it.
    pub(in crate::op) fn on_grant(&self, var: u64, error: &mut Option<Error>) {
        if error.is_some() && self.meta.repairs() && self.writes(var) {
            // A repair takes the error; it runs whatever it was.
            *error = None;
            return;
        }
        let seen = if self.meta.clears_error() { error.take() } else { error.clone() };
        if let Some(err) = seen {
            let mut errors = lock(&self.cold().errors);
            errors.rare().seen_on.push((var, err.clone()));
            errors.seen.get_or_insert(err);
            self.state.set(SAW_ERROR, Ordering::Release);
        }
    }

    /// Whether the op writes `var`.
    #[cold]
    fn writes(&self, var: u64) -> bool {
        self.deps.iter().any(|d| d.var.id() == var && d.access == crate::var::Access::Write)
    }

    /// Why the body must not run, if it must not: on the common path, no
    /// engine of the process cancelling and no error seen, two loads.
    #[inline]
    pub(crate) fn veto(&self) -> Option<Error> {
        let maybe_cancelled = self.meta.cancellable() && super::host::any_cancelling();
        if !maybe_cancelled && !self.state.has(SAW_ERROR) {
            return None;
        }
        self.veto_checked()
    }

    /// [`veto`](Self::veto), every case asked.
    #[cold]
    #[inline(never)]
    fn veto_checked(&self) -> Option<Error> {
        if self.meta.cancellable() && self.engine.is_cancelling() {
            let reason = "the engine was shut down in cancel mode";
            return Some(Error::new(Kind::Cancelled { op: self.meta.name.clone(), reason }));
        }
        if self.meta.no_skip() || self.meta.clears_error() || !self.state.has(SAW_ERROR) {
            return None;
        }
        let seen = lock(&self.cold().errors).seen.clone()?;
        Some(Error::new(Kind::Skipped { op: self.meta.name.clone(), root: seen }))
    }

    /// The error a var carried when this op was let through (for
    /// `wait_for_var`: the error it took).
    pub(crate) fn seen_error(&self) -> Option<Error> {
        if !self.state.has(SAW_ERROR) {
            return None;
        }
        lock(&self.cold().errors).seen.clone()
    }

    /// Takes the errors its vars carried when it was let through, var by
    /// var (for an op that runs others: a bulk segment).
    pub(crate) fn take_seen_on_vars(&self) -> Vec<(u64, Error)> {
        if !self.state.has(SAW_ERROR) {
            return Vec::new();
        }
        lock(&self.cold().errors)
            .rare
            .as_mut()
            .map(|rare| std::mem::take(&mut rare.seen_on))
            .unwrap_or_default()
    }

    /// Notes `err` as if a var it uses had carried it when it was let
    /// through (for an op run by another, which holds its vars).
    pub(crate) fn see(&self, err: Error) {
        lock(&self.cold().errors).seen.get_or_insert(err);
        self.state.set(SAW_ERROR, Ordering::Release);
    }

    /// The error this op passes on to the vars it writes.
    pub(crate) fn carry(&self) -> Option<Error> {
        if !self.state.has(SAW_ERROR) {
            return None;
        }
        lock(&self.cold().errors).rare.as_ref().and_then(|rare| rare.carry.clone())
    }

    /// The error this op leaves on var `var` (one it writes): what it
    /// passes on, else the poison of a write guard dropped in a panic.
    pub(crate) fn leaves_on(&self, var: u64) -> Option<Error> {
        self.left_on_vars().and_then(|left_on_vars| left_on_vars.on(var).cloned())
    }

    /// Sets the error each var it writes is left with, var by var, instead
    /// of one for all (set before its result is stored).
    pub(crate) fn carry_on_vars(&self, carry: Vec<(u64, Error)>) {
        if carry.is_empty() {
            return;
        }
        lock(&self.cold().errors).rare().carry_on = carry;
        self.state.set(SAW_ERROR, Ordering::Release);
    }

    /// What its completion leaves on the vars it writes: `None` if nothing,
    /// else the error for each var.
    /// A write guard of `var` was dropped while its thread panicked (see
    /// `LiveRef::poison`); recorded for `wait_for_all` too.
    pub(in crate::op) fn poison(&self, var: u64) {
        let label =
            self.deps.iter().find(|d| d.var.id() == var).map_or_else(|| format!("#{var}"), |d| d.var.label());
        let message = format!("a write guard of var {label} was dropped while its thread panicked");
        let err = Error::panicked_without_payload(self.meta.name.clone(), message);
        self.engine.keep_failure(&err);
        lock(&self.cold().errors).rare().poisoned.push((var, err));
        self.state.set(SAW_ERROR, Ordering::Release);
    }

    /// Whether the op saw or holds an error: the one bit the error-free
    /// path reads.
    #[inline]
    pub(in crate::op) fn has_errors(&self) -> bool {
        self.state.has(SAW_ERROR)
    }

    #[inline]
    pub(in crate::op) fn left_on_vars(&self) -> Option<Box<LeftOnVars>> {
        if !self.state.has(SAW_ERROR) {
            return None;
        }
        self.left_on_vars_locked()
    }

    #[cold]
    fn left_on_vars_locked(&self) -> Option<Box<LeftOnVars>> {
        let errors = lock(&self.cold().errors);
        let rare = errors.rare.as_ref()?;
        Some(Box::new(LeftOnVars {
            carry: rare.carry.clone(),
            each: rare.carry_on.clone(),
            poisoned: rare.poisoned.clone(),
        }))
    }

    /// Records the op's outcome for propagation: the error it passes to the
    /// vars it writes is the one it saw (but for a repair, which passes on
    /// none), else its own failure (unless it does not poison: then its own
    /// failure stays with its handle and `wait_for_all`).
    pub(crate) fn record_outcome(&self, result: Result<(), &Error>) {
        if result.is_ok() && !self.state.has(SAW_ERROR) {
            return;
        }
        let mut errors = lock(&self.cold().errors);
        let carry = match (&errors.seen, result) {
            (Some(seen), _) if !self.meta.clears_error() && !self.meta.repairs() => seen.clone(),
            (_, Err(own)) if self.meta.poisons() => own.clone(),
            _ => return,
        };
        errors.rare().carry.get_or_insert(carry);
        self.state.set(SAW_ERROR, Ordering::Release);
    }
}

/// The errors a completing op leaves on its vars.
pub(in crate::op) struct LeftOnVars {
    carry: Option<Error>,
    each: Vec<(u64, Error)>,
    poisoned: Vec<(u64, Error)>,
}

impl LeftOnVars {
    /// The error var `id` is left with.
    pub(in crate::op) fn on(&self, id: u64) -> Option<&Error> {
        let own = if self.each.is_empty() {
            self.carry.as_ref()
        } else {
            self.each.iter().find(|(var, _)| *var == id).map(|(_, err)| err)
        };
        own.or_else(|| self.poisoned.iter().find(|(var, _)| *var == id).map(|(_, err)| err))
    }

    /// Whether the op completes with no error to pass on.
    pub(in crate::op) fn is_ok(&self) -> bool {
        self.carry.is_none() && self.poisoned.is_empty()
    }
}
