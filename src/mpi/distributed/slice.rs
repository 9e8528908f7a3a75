//! What a distributed var holds: its elements, at the length it was made
//! with.

use std::fmt;
use std::ops::{Deref, DerefMut};

/// A distributed var's elements, as an op's guards give them: a slice
/// (read, or written in place) whose length is the var's. No safe code
/// outside the crate can make one, so none can be put in a var's place:
/// an op can change elements, never the length that every rank's books
/// and every transfer count on. (An op that writes two vars can swap
/// their slices; a slice whose length then differs from its var's is sent
/// as an error, not as elements, which the reading op fails with.)
pub struct DistSlice<T>(pub(super) Vec<T>);

impl<T> Deref for DistSlice<T> {
    type Target = [T];

    fn deref(&self) -> &[T] {
        &self.0
    }
}

impl<T> DerefMut for DistSlice<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        &mut self.0
    }
}

impl<T: fmt::Debug> fmt::Debug for DistSlice<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}
