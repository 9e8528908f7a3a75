//! Guards: the only way to reach a var's data, given for exactly the
//! accesses an op declared.
//!
//! Why `unsafe`: a guard reaches the data through the cell's unchecked
//! accessors (`data.rs`), its access registered with the borrow count for as
//! long as the guard lives. Measured with the cell: PERFORMANCE.md, *Data
//! access*.

#![allow(unsafe_code)]

use std::fmt;
use std::ops::{Deref, DerefMut};
use std::sync::Arc;

use super::handle::{Var, VarInner};
use crate::op::LiveRef;

const DELETED: &str = "depengine bug: a deleted var's data was reached";

/// Shared access to a var's data, for an op that declared a read.
///
/// The op completes, and the var is released to later writers, once its body
/// has returned and every guard it received is dropped.
pub struct ReadGuard<T> {
    /// Holds a read registration on the var's data cell, ended on drop.
    var: Arc<VarInner<T>>,
    // Dropped after the registration ends (`Drop` runs before the fields),
    // so the next op never finds the cell registered.
    _live: LiveRef,
}

/// Exclusive access to a var's data, for an op that declared a write.
///
/// The write completes (the var's version advances and later ops are let
/// through) once the op's body has returned and every guard is dropped.
pub struct WriteGuard<T> {
    /// Holds the write registration on the var's data cell, ended on drop.
    var: Arc<VarInner<T>>,
    _live: LiveRef,
}

const CONFLICT: &str = "depengine bug: the var gate let two conflicting accesses through";

impl<T: Send + Sync + 'static> Var<T> {
    /// A read guard for the op `live` keeps running, made of this handle.
    pub(crate) fn into_read_guard(self, live: LiveRef) -> ReadGuard<T> {
        let var = self.into_inner();
        assert!(var.data.try_read(), "{CONFLICT}");
        ReadGuard { var, _live: live }
    }

    /// The write guard for the op `live` keeps running, made of this handle.
    pub(crate) fn into_write_guard(self, live: LiveRef) -> WriteGuard<T> {
        let var = self.into_inner();
        assert!(var.data.try_write(), "{CONFLICT}");
        WriteGuard { var, _live: live }
    }
}

impl<T> ReadGuard<T> {
    /// The error one of the op's vars carried when it was let through
    /// (seen by ops that run regardless: `no_skip`).
    #[cfg_attr(not(feature = "mpi"), allow(dead_code))]
    pub(crate) fn op_seen_error(&self) -> Option<crate::error::Error> {
        self._live.seen_error()
    }
}

impl<T> WriteGuard<T> {
    /// As [`ReadGuard::op_seen_error`].
    #[cfg_attr(not(feature = "mpi"), allow(dead_code))]
    pub(crate) fn op_seen_error(&self) -> Option<crate::error::Error> {
        self._live.seen_error()
    }

    /// Takes the data out, leaving the var empty: only for deletion.
    pub(crate) fn take(mut self) -> T {
        self.slot().take().expect(DELETED)
    }

    fn slot(&mut self) -> &mut Option<T> {
        // SAFETY: this guard holds the write registration until it is
        // dropped, and the reference borrows the guard mutably, so it is the
        // only reference into the cell and cannot outlive the registration.
        unsafe { self.var.data.get_mut() }
    }
}

impl<T> Drop for ReadGuard<T> {
    fn drop(&mut self) {
        self.var.data.end_read();
    }
}

impl<T> Drop for WriteGuard<T> {
    /// Ends the write. A write guard dropped while its thread unwinds from
    /// a panic may leave a half-written value: it poisons the var as a
    /// failed op does (the var carries the error, the ops after it are
    /// skipped until `wait_for_var` clears it), before its op can complete.
    fn drop(&mut self) {
        self.var.data.end_write();
        if std::thread::panicking() {
            self._live.poison(self.var.core.cell.id());
        }
    }
}

impl<T> Deref for ReadGuard<T> {
    type Target = T;

    fn deref(&self) -> &T {
        // SAFETY: this guard holds a read registration until it is dropped,
        // and the reference borrows the guard, so it cannot outlive it.
        unsafe { self.var.data.get() }.as_ref().expect(DELETED)
    }
}

impl<T> Deref for WriteGuard<T> {
    type Target = T;

    fn deref(&self) -> &T {
        // SAFETY: this guard holds the write registration; the reference
        // borrows the guard shared, so no `&mut` from `slot` (which borrows
        // it mutably) coexists with it, and it cannot outlive the guard.
        unsafe { self.var.data.get() }.as_ref().expect(DELETED)
    }
}

impl<T> DerefMut for WriteGuard<T> {
    fn deref_mut(&mut self) -> &mut T {
        self.slot().as_mut().expect(DELETED)
    }
}

impl<T: fmt::Debug> fmt::Debug for ReadGuard<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&**self, f)
    }
}

impl<T: fmt::Debug> fmt::Debug for WriteGuard<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&**self, f)
    }
}
