//! An op's declarations, and after normalisation its deps: up to four in
//! the record itself, more on the heap.
//!
//! Held as a structure of arrays: four var handles (8 bytes each) and one
//! bit per var for the access and one for the typed API, 40 bytes where an
//! inline vector of four `Decl`s (16 bytes each, with its padding) took 72,
//! so that a one-var op's record fits three cache lines. Written by hand:
//! `smallvec`'s checks of its spill on every access cost an op's push and
//! completion about 120 instructions (PERFORMANCE.md, *The lean record*).

use crate::var::{Access, AnyVar};

/// One declared access.
#[derive(Clone)]
pub(crate) struct Decl {
    pub(crate) var: AnyVar,
    pub(crate) access: Access,
    /// Declared through the typed API: the op receives a guard for it.
    pub(crate) typed: bool,
}

/// One declared access, borrowed from its list.
#[derive(Clone, Copy)]
pub(crate) struct DeclRef<'a> {
    pub(crate) var: &'a AnyVar,
    pub(crate) access: Access,
}

/// How many of the inline handles are set; its unused values let the
/// heap variant go without a tag of its own.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[repr(u8)]
enum Len {
    Zero,
    One,
    Two,
    Three,
    Four,
}

const INLINE: usize = 4;
const LENS: [Len; INLINE + 1] = [Len::Zero, Len::One, Len::Two, Len::Three, Len::Four];

/// An op's declarations.
pub(crate) struct DepList(Repr);

enum Repr {
    /// Up to four: the first `len` handles are set; bit `i` of `writes`
    /// (of `typed`) says the `i`th is a write (declared typed).
    Inline { vars: [Option<AnyVar>; INLINE], len: Len, writes: u8, typed: u8 },
    /// More than four.
    Heap(Vec<Decl>),
}

impl Default for DepList {
    fn default() -> Self {
        Self::new()
    }
}

impl DepList {
    #[inline]
    pub(crate) const fn new() -> Self {
        Self(Repr::Inline { vars: [None, None, None, None], len: Len::Zero, writes: 0, typed: 0 })
    }

    #[inline]
    pub(crate) fn len(&self) -> usize {
        match &self.0 {
            Repr::Inline { len, .. } => *len as usize,
            Repr::Heap(all) => all.len(),
        }
    }

    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The `i`th declaration.
    #[inline]
    pub(crate) fn get(&self, i: usize) -> Option<DeclRef<'_>> {
        match &self.0 {
            Repr::Inline { vars, writes, .. } => {
                let var = vars.get(i)?.as_ref()?;
                let access = if writes >> i & 1 != 0 { Access::Write } else { Access::Read };
                Some(DeclRef { var, access })
            }
            Repr::Heap(all) => all.get(i).map(|d| DeclRef { var: &d.var, access: d.access }),
        }
    }

    /// The first declaration.
    #[inline]
    pub(crate) fn first(&self) -> Option<DeclRef<'_>> {
        self.get(0)
    }

    #[inline]
    pub(crate) fn iter(&self) -> Iter<'_> {
        match &self.0 {
            Repr::Inline { vars, len, writes, .. } => {
                Iter::Inline { vars: vars[..*len as usize].iter(), writes: *writes }
            }
            Repr::Heap(all) => Iter::Heap(all.iter()),
        }
    }

    /// Adds a declaration at the end.
    #[inline]
    pub(crate) fn push(&mut self, decl: Decl) {
        match &mut self.0 {
            Repr::Inline { vars, len, writes, typed } if (*len as usize) < INLINE => {
                let i = *len as usize;
                vars[i] = Some(decl.var);
                *writes |= u8::from(decl.access == Access::Write) << i;
                *typed |= u8::from(decl.typed) << i;
                *len = LENS[i + 1];
            }
            Repr::Inline { .. } => self.spill(decl),
            Repr::Heap(all) => all.push(decl),
        }
    }

    /// Moves four inline declarations to the heap, with a fifth.
    #[cold]
    fn spill(&mut self, fifth: Decl) {
        let mut all = Vec::with_capacity(2 * INLINE);
        all.extend(std::mem::take(self).into_vec());
        all.push(fifth);
        self.0 = Repr::Heap(all);
    }

    /// Sorts the declarations by var id, in place (stable): no allocation
    /// for an inline list.
    pub(crate) fn sort_by_var_id(&mut self) {
        match &mut self.0 {
            Repr::Heap(all) => all.sort_by_key(|d| d.var.id()),
            Repr::Inline { vars, len, writes, typed } => {
                let id = |v: &Option<AnyVar>| v.as_ref().map_or(u64::MAX, AnyVar::id);
                for i in 1..*len as usize {
                    let mut j = i;
                    while j > 0 && id(&vars[j - 1]) > id(&vars[j]) {
                        vars.swap(j - 1, j);
                        swap_bits(writes, j - 1);
                        swap_bits(typed, j - 1);
                        j -= 1;
                    }
                }
            }
        }
    }

    /// Whether two neighbours declare the same var.
    pub(crate) fn any_repeated(&self) -> bool {
        (1..self.len()).any(|i| self.get(i - 1).map(|d| d.var.id()) == self.get(i).map(|d| d.var.id()))
    }

    /// The declarations, owned, in order.
    pub(crate) fn into_vec(self) -> Vec<Decl> {
        match self.0 {
            Repr::Inline { vars, writes, typed, .. } => vars
                .into_iter()
                .enumerate()
                .filter_map(|(i, var)| {
                    let access = if writes >> i & 1 != 0 { Access::Write } else { Access::Read };
                    var.map(|var| Decl { var, access, typed: typed >> i & 1 != 0 })
                })
                .collect(),
            Repr::Heap(all) => all,
        }
    }

    /// A list of `all`, inline if they fit.
    pub(crate) fn from_vec(all: Vec<Decl>) -> Self {
        if all.len() > INLINE {
            return Self(Repr::Heap(all));
        }
        let mut list = Self::new();
        for decl in all {
            list.push(decl);
        }
        list
    }
}

/// Swaps bits `i` and `i + 1` of `bits`.
fn swap_bits(bits: &mut u8, i: usize) {
    let (a, b) = (*bits >> i & 1, *bits >> (i + 1) & 1);
    *bits = (*bits & !(0b11 << i)) | (a << (i + 1)) | (b << i);
}

/// The declarations of a list, in order.
#[derive(Clone)]
pub(crate) enum Iter<'a> {
    Inline { vars: std::slice::Iter<'a, Option<AnyVar>>, writes: u8 },
    Heap(std::slice::Iter<'a, Decl>),
}

impl<'a> Iterator for Iter<'a> {
    type Item = DeclRef<'a>;

    #[inline]
    fn next(&mut self) -> Option<DeclRef<'a>> {
        match self {
            Self::Inline { vars, writes } => {
                let var = vars.next()?.as_ref()?;
                let access = if *writes & 1 != 0 { Access::Write } else { Access::Read };
                *writes >>= 1;
                Some(DeclRef { var, access })
            }
            Self::Heap(all) => all.next().map(|d| DeclRef { var: &d.var, access: d.access }),
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let left = match self {
            Self::Inline { vars, .. } => vars.len(),
            Self::Heap(all) => all.len(),
        };
        (left, Some(left))
    }
}

impl ExactSizeIterator for Iter<'_> {}

impl<'a> IntoIterator for &'a DepList {
    type Item = DeclRef<'a>;
    type IntoIter = Iter<'a>;

    fn into_iter(self) -> Iter<'a> {
        self.iter()
    }
}

impl Extend<Decl> for DepList {
    fn extend<I: IntoIterator<Item = Decl>>(&mut self, decls: I) {
        for decl in decls {
            self.push(decl);
        }
    }
}

#[cfg(all(test, not(depengine_loom)))]
mod tests;
