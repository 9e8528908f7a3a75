//! What an op declares: typed items (a var read, a var written, a run-time
//! list of either) and tuples of them, each turning into guards when the op
//! runs; and the list the declarations make, which after normalisation
//! holds the op's deps: up to four in the record itself, more on the heap.
//!
//! The traits are sealed: their methods take crate-private tokens, so only
//! this crate implements or calls them.
//!
//! The list is a structure of arrays: four var handles (8 bytes each) and
//! one bit per var for the access and one for the typed API, 40 bytes
//! where an inline vector of four `Decl`s (16 bytes each, with its
//! padding) took 72, so that a one-var op's record fits three cache lines.
//! Written by hand: `smallvec`'s checks of its spill on every access cost
//! an op's push and completion about 80 instructions (PERFORMANCE.md, *The
//! lean record*).

use std::sync::Arc;

use super::task_ref::MAX_DECLS;
use super::{LiveRef, TaskRef};
use crate::error::Error;
use crate::var::{Access, AnyVar, ReadGuard, Var, WriteGuard};

/// The declarations an item adds (opaque outside the crate).
#[allow(unreachable_pub, missing_debug_implementations)] // sealed
#[doc(hidden)]
pub struct Decls(pub(crate) DepList);

/// The op an item's guards belong to (opaque outside the crate).
#[allow(unreachable_pub, missing_debug_implementations)] // sealed
#[doc(hidden)]
pub struct OpToken<'a>(pub(crate) &'a TaskRef);

pub(crate) mod sealed {
    pub trait Sealed {}
}

/// A handle whose var an op or an acquire may declare: a [`Var`], or a
/// var of a scope (`depengine::scope`), whose handles cannot leave it.
/// Sealed.
pub trait AsVar: sealed::Sealed + Send + Sync {
    /// The data the var holds.
    type Data: Send + Sync + 'static;

    /// The handle as the op keeps it, which decides the guard its body
    /// receives: a [`Var`] gives [`ReadGuard`]/[`WriteGuard`] (to the data),
    /// a scope's var gives guards to the borrowed elements only.
    #[doc(hidden)]
    type Held: Held<Data = Self::Data>;

    /// The var, to the crate only (the token cannot be made outside it).
    #[doc(hidden)]
    fn as_var(&self, token: VarToken) -> &Var<Self::Data>;

    /// A new handle to the var, as the op keeps it.
    #[doc(hidden)]
    fn held(&self, token: VarToken) -> Self::Held;
}

/// A var's handle as a declared op or acquire keeps it until it runs, and
/// the guards it turns into. Sealed.
pub trait Held: sealed::Sealed + Send + Sync + 'static {
    /// The data the var holds.
    type Data: Send + Sync + 'static;
    /// The guard for a read.
    type ReadGuard: Send + 'static;
    /// The guard for a write.
    type WriteGuard: Send + 'static;

    /// The var.
    #[doc(hidden)]
    fn var(&self, token: VarToken) -> &Var<Self::Data>;
    /// The read guard for the op `op`, made of this handle.
    #[doc(hidden)]
    fn read_guard(self, op: OpToken<'_>) -> Self::ReadGuard;
    /// The write guard for the op `op`, made of this handle.
    #[doc(hidden)]
    fn write_guard(self, op: OpToken<'_>) -> Self::WriteGuard;
}

/// Opens [`AsVar::as_var`] to this crate only.
#[allow(unreachable_pub, missing_debug_implementations)] // sealed
#[doc(hidden)]
pub struct VarToken(pub(crate) ());

impl<T: Send + Sync + 'static> sealed::Sealed for Var<T> {}
impl<T: Send + Sync + 'static> AsVar for Var<T> {
    type Data = T;
    type Held = Var<T>;

    fn as_var(&self, _: VarToken) -> &Var<T> {
        self
    }

    fn held(&self, _: VarToken) -> Var<T> {
        self.clone()
    }
}

impl<T: Send + Sync + 'static> Held for Var<T> {
    type Data = T;
    type ReadGuard = ReadGuard<T>;
    type WriteGuard = WriteGuard<T>;

    fn var(&self, _: VarToken) -> &Var<T> {
        self
    }

    fn read_guard(self, op: OpToken<'_>) -> ReadGuard<T> {
        self.into_read_guard(LiveRef::new(op.0))
    }

    fn write_guard(self, op: OpToken<'_>) -> WriteGuard<T> {
        self.into_write_guard(LiveRef::new(op.0))
    }
}

/// The var of a declared handle.
pub(crate) fn var_of<V: AsVar>(v: &V) -> &Var<V::Data> {
    v.as_var(VarToken(()))
}

/// A new handle to a declared var, as an op keeps it.
pub(crate) fn held_of<V: AsVar>(v: &V) -> V::Held {
    v.held(VarToken(()))
}

/// Something an op or an acquire declares, and the guard it receives for it.
///
/// Implemented for [`Reading`] and [`Writing`] of a var or a `Vec` of
/// vars, and for tuples of up to twelve items. Sealed.
pub trait Item: sealed::Sealed + Send + 'static {
    /// What the op's body receives for this item.
    type Guard: Send + 'static;

    #[doc(hidden)]
    fn declare(&self, decls: &mut Decls);

    /// Turns the item's var handles into guards (no reference is cloned).
    #[doc(hidden)]
    fn guard(self, op: OpToken<'_>) -> Self::Guard;
}

/// A read of a var, or of each var of a list.
#[derive(Debug)]
pub struct Reading<X>(pub(crate) X);

/// A write of a var, or of each var of a list.
#[derive(Debug)]
pub struct Writing<X>(pub(crate) X);

fn declare_one<H: Held>(held: &H, access: Access, decls: &mut Decls) {
    decls.0.push(Decl { var: held.var(VarToken(())).any(), access, typed: true });
}

impl<H: Held> sealed::Sealed for Reading<H> {}
impl<H: Held> Item for Reading<H> {
    type Guard = H::ReadGuard;

    fn declare(&self, decls: &mut Decls) {
        declare_one(&self.0, Access::Read, decls);
    }

    fn guard(self, op: OpToken<'_>) -> H::ReadGuard {
        self.0.read_guard(op)
    }
}

impl<H: Held> sealed::Sealed for Writing<H> {}
impl<H: Held> Item for Writing<H> {
    type Guard = H::WriteGuard;

    fn declare(&self, decls: &mut Decls) {
        declare_one(&self.0, Access::Write, decls);
    }

    fn guard(self, op: OpToken<'_>) -> H::WriteGuard {
        self.0.write_guard(op)
    }
}

impl<H: Held> sealed::Sealed for Reading<Vec<H>> {}
impl<H: Held> Item for Reading<Vec<H>> {
    type Guard = Vec<H::ReadGuard>;

    fn declare(&self, decls: &mut Decls) {
        self.0.iter().for_each(|v| declare_one(v, Access::Read, decls));
    }

    fn guard(self, op: OpToken<'_>) -> Vec<H::ReadGuard> {
        self.0.into_iter().map(|v| v.read_guard(OpToken(op.0))).collect()
    }
}

impl<H: Held> sealed::Sealed for Writing<Vec<H>> {}
impl<H: Held> Item for Writing<Vec<H>> {
    type Guard = Vec<H::WriteGuard>;

    fn declare(&self, decls: &mut Decls) {
        self.0.iter().for_each(|v| declare_one(v, Access::Write, decls));
    }

    fn guard(self, op: OpToken<'_>) -> Vec<H::WriteGuard> {
        self.0.into_iter().map(|v| v.write_guard(OpToken(op.0))).collect()
    }
}

macro_rules! tuple_item {
    ($($T:ident)*) => {
        impl<$($T: Item),*> sealed::Sealed for ($($T,)*) {}

        #[allow(non_snake_case, unused_variables, clippy::unused_unit)]
        impl<$($T: Item),*> Item for ($($T,)*) {
            type Guard = ($($T::Guard,)*);

            fn declare(&self, decls: &mut Decls) {
                let ($($T,)*) = self;
                $($T.declare(decls);)*
            }

            fn guard(self, op: OpToken<'_>) -> Self::Guard {
                let ($($T,)*) = self;
                ($($T.guard(OpToken(op.0)),)*)
            }
        }
    };
}

tuple_item!();
tuple_item!(A);
tuple_item!(A B);
tuple_item!(A B C);
tuple_item!(A B C D);
tuple_item!(A B C D E);
tuple_item!(A B C D E F);
tuple_item!(A B C D E F G);
tuple_item!(A B C D E F G H);
tuple_item!(A B C D E F G H I);
tuple_item!(A B C D E F G H I J);
tuple_item!(A B C D E F G H I J K);
tuple_item!(A B C D E F G H I J K L);

/// A tuple that can grow by one element: how builders collect items of
/// different types.
pub trait Append<X> {
    /// The tuple with `X` added at the end.
    type Output;

    #[doc(hidden)]
    fn append(self, x: X) -> Self::Output;
}

macro_rules! tuple_append {
    ($($T:ident)*) => {
        #[allow(non_snake_case)]
        impl<$($T,)* X> Append<X> for ($($T,)*) {
            type Output = ($($T,)* X,);

            fn append(self, x: X) -> Self::Output {
                let ($($T,)*) = self;
                ($($T,)* x,)
            }
        }
    };
}

tuple_append!();
tuple_append!(A);
tuple_append!(A B);
tuple_append!(A B C);
tuple_append!(A B C D);
tuple_append!(A B C D E);
tuple_append!(A B C D E F);
tuple_append!(A B C D E F G);
tuple_append!(A B C D E F G H);
tuple_append!(A B C D E F G H I);
tuple_append!(A B C D E F G H I J);
tuple_append!(A B C D E F G H I J K);

/// Sorts an op's declarations by var id, in place, and merges duplicates:
/// repeated reads become one read, a read and a write become a write. Vars
/// of another engine than `owner` are refused, as are more than
/// [`MAX_DECLS`] declarations (each count of the op's state word has 16
/// bits), and so is a typed op that
/// declares one var twice with a write: it would receive two guards on the
/// var, one of them exclusive.
#[inline]
pub(crate) fn normalize(decls: &mut DepList, name: &str, owner: *const ()) -> Result<(), Error> {
    // One var of this engine, the common case: nothing to sort or merge.
    if decls.len() == 1
        && let Some(only) = decls.first()
        && std::ptr::addr_eq(Arc::as_ptr(only.var.owner()), owner)
    {
        return Ok(());
    }
    normalize_many(decls, name, owner)
}

/// [`normalize`], but for one var of this engine.
#[inline(never)]
fn normalize_many(decls: &mut DepList, name: &str, owner: *const ()) -> Result<(), Error> {
    if let Some(d) = decls.iter().find(|d| !std::ptr::addr_eq(Arc::as_ptr(d.var.owner()), owner)) {
        return Err(Error::invalid(format!("op `{name}` uses var {} of another engine", d.var.label())));
    }
    if decls.len() == 1 {
        return Ok(());
    }
    if decls.len() > MAX_DECLS {
        return Err(Error::invalid(format!(
            "op `{name}` makes {} declarations; an op makes at most {MAX_DECLS}",
            decls.len()
        )));
    }
    decls.sort_by_var_id();
    if !decls.any_repeated() {
        return Ok(());
    }
    merge_repeated(decls, name)
}

/// Merges the repeated declarations of a sorted list (see [`normalize`]).
#[cold]
fn merge_repeated(decls: &mut DepList, name: &str) -> Result<(), Error> {
    let all = std::mem::take(decls).into_vec();
    let mut deps: Vec<Decl> = Vec::with_capacity(all.len());
    let mut typed = (0usize, false); // typed declarations of the current var, any a write
    for d in all {
        let is_write = d.access == Access::Write;
        match deps.last_mut() {
            Some(last) if last.var.id() == d.var.id() => {
                if d.typed {
                    typed = (typed.0 + 1, typed.1 || is_write);
                }
                if typed.0 >= 2 && typed.1 {
                    return Err(Error::invalid(format!(
                        "op `{name}` declares var {} more than once with a write; \
                         a typed op gets one guard per declaration, so declare it once",
                        d.var.label()
                    )));
                }
                if is_write {
                    last.access = Access::Write;
                }
            }
            _ => {
                typed = (usize::from(d.typed), d.typed && is_write);
                deps.push(d);
            }
        }
    }
    *decls = DepList::from_vec(deps);
    Ok(())
}

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
