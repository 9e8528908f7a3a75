//! A list that keeps up to `N` items inline and spills to the heap beyond:
//! an op's declarations live in its record without an allocation of their
//! own in the common case (a few vars per op).

/// Up to `N` items inline, more on the heap.
pub(crate) enum SmallList<T, const N: usize> {
    Inline { len: usize, items: [Option<T>; N] },
    Heap(Vec<T>),
}

impl<T, const N: usize> Default for SmallList<T, N> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T, const N: usize> SmallList<T, N> {
    pub(crate) const fn new() -> Self {
        Self::Inline { len: 0, items: [const { None }; N] }
    }

    pub(crate) fn len(&self) -> usize {
        match self {
            Self::Inline { len, .. } => *len,
            Self::Heap(v) => v.len(),
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub(crate) fn push(&mut self, item: T) {
        match self {
            Self::Inline { len, items } if *len < N => {
                items[*len] = Some(item);
                *len += 1;
            }
            Self::Inline { len, items } => {
                let mut v = Vec::with_capacity(*len * 2 + 1);
                v.extend(items.iter_mut().filter_map(Option::take));
                v.push(item);
                *self = Self::Heap(v);
            }
            Self::Heap(v) => v.push(item),
        }
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = &T> + Clone {
        let (inline, heap) = match self {
            Self::Inline { len, items } => (&items[..*len], &[][..]),
            Self::Heap(v) => (&[][..], &v[..]),
        };
        inline.iter().map(|x| x.as_ref().expect("inline item present")).chain(heap)
    }

    pub(crate) fn first(&self) -> Option<&T> {
        self.iter().next()
    }

    pub(crate) fn last_mut(&mut self) -> Option<&mut T> {
        match self {
            Self::Inline { len: 0, .. } => None,
            Self::Inline { len, items } => items[*len - 1].as_mut(),
            Self::Heap(v) => v.last_mut(),
        }
    }

    /// Sorts by a key, stably.
    pub(crate) fn sort_by_key<K: Ord>(&mut self, mut key: impl FnMut(&T) -> K) {
        match self {
            Self::Inline { len, items } => {
                items[..*len].sort_by_key(|x| key(x.as_ref().expect("inline item present")));
            }
            Self::Heap(v) => v.sort_by_key(key),
        }
    }

    /// Moves the items out, in order.
    pub(crate) fn drain(&mut self) -> Drain<T, N> {
        match std::mem::take(self) {
            Self::Inline { len, items } => Drain::Inline(items.into_iter().take(len)),
            Self::Heap(v) => Drain::Heap(v.into_iter()),
        }
    }

    /// Whether two adjacent items satisfy `same`.
    pub(crate) fn any_adjacent(&self, mut same: impl FnMut(&T, &T) -> bool) -> bool {
        let mut prev = None;
        for x in self.iter() {
            if prev.is_some_and(|p| same(p, x)) {
                return true;
            }
            prev = Some(x);
        }
        false
    }
}

/// The items of a [`SmallList`], moved out.
pub(crate) enum Drain<T, const N: usize> {
    Inline(std::iter::Take<std::array::IntoIter<Option<T>, N>>),
    Heap(std::vec::IntoIter<T>),
}

impl<T, const N: usize> Iterator for Drain<T, N> {
    type Item = T;

    fn next(&mut self) -> Option<T> {
        match self {
            Self::Inline(it) => it.next().map(|x| x.expect("inline item present")),
            Self::Heap(it) => it.next(),
        }
    }
}

impl<T, const N: usize> Extend<T> for SmallList<T, N> {
    fn extend<I: IntoIterator<Item = T>>(&mut self, iter: I) {
        iter.into_iter().for_each(|x| self.push(x));
    }
}

#[cfg(test)]
mod tests {
    use super::SmallList;

    #[test]
    fn spills_to_the_heap_and_keeps_order() {
        let mut l: SmallList<String, 2> = SmallList::new();
        assert!(l.is_empty() && l.first().is_none() && l.last_mut().is_none());
        for i in 0..5 {
            l.push(i.to_string());
            assert_eq!(l.len(), i + 1);
            assert_eq!(
                l.iter().cloned().collect::<Vec<_>>(),
                (0..=i).map(|k| k.to_string()).collect::<Vec<_>>()
            );
        }
        assert!(matches!(l, SmallList::Heap(_)));
        l.last_mut().unwrap().push('!');
        assert_eq!(l.drain().collect::<Vec<_>>(), ["0", "1", "2", "3", "4!"]);
        assert!(l.is_empty());
    }

    #[test]
    fn sorts_inline_and_on_the_heap() {
        for n in [3, 9] {
            let mut l: SmallList<(u32, u32), 4> = SmallList::new();
            l.extend((0..n).map(|i| ((i * 7) % 3, i)));
            l.sort_by_key(|x| x.0);
            let got: Vec<_> = l.iter().copied().collect();
            let mut want: Vec<_> = (0..n).map(|i| ((i * 7) % 3, i)).collect();
            want.sort_by_key(|x| x.0);
            assert_eq!(got, want, "n = {n}");
        }
    }
}

/// A value alone on its cache lines (128 bytes: two lines, for adjacent-line
/// prefetch), so that writes to it do not slow down readers of its
/// neighbours, and the other way round.
#[derive(Debug, Default)]
#[repr(align(128))]
pub(crate) struct Padded<T>(pub(crate) T);

impl<T> std::ops::Deref for Padded<T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.0
    }
}
