//! A distributed var: its owner, its length, and this rank's engine var
//! (the data on the owner, a cached copy elsewhere).

use std::fmt;

use super::Plain;
use crate::var::Var;

/// A var of a [`Distribution`](super::Distribution): its data on its owner, a cached copy at
/// most elsewhere.
pub struct DistVar<T: Plain> {
    pub(super) id: u32,
    pub(super) owner: usize,
    pub(super) len: usize,
    pub(super) local: Var<Vec<T>>,
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

    /// This rank's var: the data on the owner, the cached copy elsewhere
    /// (empty until a version is received, and stale once the owner writes
    /// it again). Read it with the engine's ops, or after
    /// [`Distribution::wait`](super::Distribution::wait). Write it only
    /// through the distribution's ops: the books do not see other writes,
    /// so a copy written elsewhere would be read as the owner's version.
    pub fn local(&self) -> &Var<Vec<T>> {
        &self.local
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
