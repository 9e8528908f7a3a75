//! Guards: the only way to reach a var's data, given for exactly the
//! accesses an op declared.

use std::fmt;
use std::ops::{Deref, DerefMut};

use tokio::sync::{OwnedRwLockReadGuard, OwnedRwLockWriteGuard};

use crate::op::LiveRef;

const DELETED: &str = "depengine bug: a deleted var's data was reached";

/// Shared access to a var's data, for an op that declared a read.
///
/// The op completes, and the var is released to later writers, once its body
/// has returned and every guard it received is dropped.
pub struct ReadGuard<T> {
    // Field order matters: the data lock is released before the op's live
    // count, so the next op never finds the lock held.
    data: OwnedRwLockReadGuard<Option<T>>,
    _live: LiveRef,
}

/// Exclusive access to a var's data, for an op that declared a write.
///
/// The write completes (the var's version advances and later ops are let
/// through) once the op's body has returned and every guard is dropped.
pub struct WriteGuard<T> {
    data: OwnedRwLockWriteGuard<Option<T>>,
    _live: LiveRef,
}

impl<T> ReadGuard<T> {
    pub(crate) fn new(data: OwnedRwLockReadGuard<Option<T>>, live: LiveRef) -> Self {
        Self { data, _live: live }
    }
}

impl<T> WriteGuard<T> {
    pub(crate) fn new(data: OwnedRwLockWriteGuard<Option<T>>, live: LiveRef) -> Self {
        Self { data, _live: live }
    }

    /// Takes the data out, leaving the var empty: only for deletion.
    pub(crate) fn take(mut self) -> T {
        self.data.take().expect(DELETED)
    }
}

impl<T> Deref for ReadGuard<T> {
    type Target = T;

    fn deref(&self) -> &T {
        self.data.as_ref().expect(DELETED)
    }
}

impl<T> Deref for WriteGuard<T> {
    type Target = T;

    fn deref(&self) -> &T {
        self.data.as_ref().expect(DELETED)
    }
}

impl<T> DerefMut for WriteGuard<T> {
    fn deref_mut(&mut self) -> &mut T {
        self.data.as_mut().expect(DELETED)
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
