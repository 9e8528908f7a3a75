//! Small containers: a list that keeps up to `N` items inline and spills to
//! the heap beyond (an op's declarations live in its record without an
//! allocation of their own in the common case), and a value padded to its
//! own cache lines.

/// Up to `N` items inline, more on the heap.
pub(crate) type SmallList<T, const N: usize> = smallvec::SmallVec<[T; N]>;

/// Drops `list`, without a call when it holds nothing (neither items nor
/// heap memory): the list's own drop is an out-of-line call even then, and
/// hot paths drop lists that are almost always empty.
#[inline]
pub(crate) fn discard<T, const N: usize>(list: SmallList<T, N>) {
    if list.is_empty() && !list.spilled() {
        std::mem::forget(list);
    } else {
        drop(list);
    }
}

#[cfg(all(test, not(depengine_loom), target_pointer_width = "64"))]
mod tests;
