//! A distributed var: its owner, its length, and this rank's engine var
//! (the data on the owner, a cached copy elsewhere), which no safe code
//! outside the crate can write but through the distribution's ops.

use std::fmt;

use super::Plain;
use super::slice::DistSlice;
use crate::var::{Acquire, ReadGuard, Var};

/// A var of a [`Distribution`](super::Distribution): its data on its owner, a cached copy at
/// most elsewhere.
///
/// It is not a [`Var`]: an engine op cannot declare it, so that nothing
/// writes it behind the books (a copy written elsewhere would be read as
/// the owner's version). Only [`DistOp`](super::DistOp)s write it; this
/// rank's data can be read with [`read`](Self::read).
///
/// ```compile_fail
/// # fn f(engine: &depengine::Engine, v: &depengine::mpi::distributed::DistVar<f64>) {
/// // An engine op cannot write a distributed var…
/// engine.op("behind the books").write(v).run(|(), (_,)| Ok(()));
/// # }
/// ```
///
/// ```compile_fail
/// # fn f(v: &depengine::mpi::distributed::DistVar<f64>) {
/// // …and no handle to its engine var is given out.
/// let _ = v.local();
/// # }
/// ```
pub struct DistVar<T: Plain> {
    pub(super) id: u32,
    pub(super) owner: usize,
    pub(super) len: usize,
    pub(super) local: Var<DistSlice<T>>,
}

impl<T: Plain> DistVar<T> {
    /// The rank that owns it.
    pub fn owner(&self) -> usize {
        self.owner
    }

    /// Its elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it has no elements.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// This rank's data, once every op pushed on it before is done (a
    /// future, or [`blocking_wait`](Acquire::blocking_wait)): the var's on
    /// its owner; elsewhere the cached copy, empty until a version is
    /// received and stale once the owner writes it again.
    ///
    /// # Errors
    ///
    /// The error the last op that wrote it here left on it.
    pub fn read(&self) -> Acquire<ReadGuard<DistSlice<T>>> {
        self.local.read()
    }
}

impl<T: Plain> fmt::Debug for DistVar<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DistVar")
            .field("id", &self.id)
            .field("owner", &self.owner)
            .field("len", &self.len)
            .finish()
    }
}
