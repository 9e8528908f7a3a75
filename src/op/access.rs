//! What an op declares: typed items (a var read, a var written, a run-time
//! list of either) and tuples of them, each turning into guards when the op
//! runs.
//!
//! The traits are sealed: their methods take crate-private tokens, so only
//! this crate implements or calls them.

use std::sync::Arc;

use super::{DepList, LiveRef, TaskRef};
use crate::error::Error;
use crate::var::{Access, AnyVar, ReadGuard, Var, WriteGuard};

/// One declared access, before normalisation.
#[derive(Clone)]
pub(crate) struct Decl {
    pub(crate) var: AnyVar,
    pub(crate) access: Access,
    /// Declared through the typed API: the op receives a guard for it.
    pub(crate) typed: bool,
}

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
/// var of a scope (`Engine::scope`), whose handles cannot leave it. Sealed.
pub trait AsVar: sealed::Sealed + Send + Sync {
    /// The data the op's guard reaches.
    type Data: Send + Sync + 'static;

    /// The var, to the crate only (the token cannot be made outside it).
    #[doc(hidden)]
    fn as_var(&self, token: VarToken) -> &Var<Self::Data>;
}

/// Opens [`AsVar::as_var`] to this crate only.
#[allow(unreachable_pub, missing_debug_implementations)] // sealed
#[doc(hidden)]
pub struct VarToken(pub(crate) ());

impl<T: Send + Sync + 'static> sealed::Sealed for Var<T> {}
impl<T: Send + Sync + 'static> AsVar for Var<T> {
    type Data = T;

    fn as_var(&self, _: VarToken) -> &Var<T> {
        self
    }
}

/// The var of a declared handle.
pub(crate) fn var_of<V: AsVar>(v: &V) -> &Var<V::Data> {
    v.as_var(VarToken(()))
}

/// Something an op or an acquire declares, and the guard it receives for it.
///
/// Implemented for [`Reading`] and [`Writing`] of a [`Var`] or a `Vec` of
/// vars, and for tuples of up to twelve items. Sealed.
pub trait Item: sealed::Sealed + Send + 'static {
    /// What the op's body receives for this item.
    type Guard: Send + 'static;

    #[doc(hidden)]
    fn declare(&self, decls: &mut Decls);

    /// Turns the item's var handles into guards (no reference is cloned).
    #[doc(hidden)]
    fn guard(self, op: OpToken<'_>) -> Self::Guard;

    /// The same item, its var handles cloned (a prepared op's each push).
    #[doc(hidden)]
    fn duplicate(&self) -> Self;
}

/// A read of a var, or of each var of a list.
#[derive(Debug)]
pub struct Reading<X>(pub(crate) X);

/// A write of a var, or of each var of a list.
#[derive(Debug)]
pub struct Writing<X>(pub(crate) X);

fn declare_one<T>(var: &Var<T>, access: Access, decls: &mut Decls)
where
    T: Send + Sync + 'static,
{
    decls.0.push(Decl { var: var.any(), access, typed: true });
}

impl<T: Send + Sync + 'static> sealed::Sealed for Reading<Var<T>> {}
impl<T: Send + Sync + 'static> Item for Reading<Var<T>> {
    type Guard = ReadGuard<T>;

    fn declare(&self, decls: &mut Decls) {
        declare_one(&self.0, Access::Read, decls);
    }

    fn guard(self, op: OpToken<'_>) -> ReadGuard<T> {
        self.0.into_read_guard(LiveRef::new(op.0))
    }
    fn duplicate(&self) -> Self {
        Reading(self.0.clone())
    }
}

impl<T: Send + Sync + 'static> sealed::Sealed for Writing<Var<T>> {}
impl<T: Send + Sync + 'static> Item for Writing<Var<T>> {
    type Guard = WriteGuard<T>;

    fn declare(&self, decls: &mut Decls) {
        declare_one(&self.0, Access::Write, decls);
    }

    fn guard(self, op: OpToken<'_>) -> WriteGuard<T> {
        self.0.into_write_guard(LiveRef::new(op.0))
    }
    fn duplicate(&self) -> Self {
        Writing(self.0.clone())
    }
}

impl<T: Send + Sync + 'static> sealed::Sealed for Reading<Vec<Var<T>>> {}
impl<T: Send + Sync + 'static> Item for Reading<Vec<Var<T>>> {
    type Guard = Vec<ReadGuard<T>>;

    fn declare(&self, decls: &mut Decls) {
        self.0.iter().for_each(|v| declare_one(v, Access::Read, decls));
    }

    fn guard(self, op: OpToken<'_>) -> Vec<ReadGuard<T>> {
        self.0.into_iter().map(|v| v.into_read_guard(LiveRef::new(op.0))).collect()
    }
    fn duplicate(&self) -> Self {
        Reading(self.0.clone())
    }
}

impl<T: Send + Sync + 'static> sealed::Sealed for Writing<Vec<Var<T>>> {}
impl<T: Send + Sync + 'static> Item for Writing<Vec<Var<T>>> {
    type Guard = Vec<WriteGuard<T>>;

    fn declare(&self, decls: &mut Decls) {
        self.0.iter().for_each(|v| declare_one(v, Access::Write, decls));
    }

    fn guard(self, op: OpToken<'_>) -> Vec<WriteGuard<T>> {
        self.0.into_iter().map(|v| v.into_write_guard(LiveRef::new(op.0))).collect()
    }
    fn duplicate(&self) -> Self {
        Writing(self.0.clone())
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

            fn duplicate(&self) -> Self {
                let ($($T,)*) = self;
                ($($T.duplicate(),)*)
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
/// of another engine than `owner` are refused, and so is a typed op that
/// declares one var twice with a write: it would receive two guards on the
/// var, one of them exclusive.
pub(crate) fn normalize(decls: &mut DepList, name: &str, owner: *const ()) -> Result<(), Error> {
    if let Some(d) = decls.iter().find(|d| !std::ptr::addr_eq(Arc::as_ptr(d.var.owner()), owner)) {
        return Err(Error::invalid(format!("op `{name}` uses var {} of another engine", d.var.label())));
    }
    if decls.len() == 1 {
        return Ok(());
    }
    decls.sort_by_key(|d| d.var.id());
    if !decls.windows(2).any(|w| w[0].var.id() == w[1].var.id()) {
        return Ok(());
    }
    let mut deps = DepList::new();
    let mut typed = (0usize, false); // typed declarations of the current var, any a write
    for d in decls.drain(..) {
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
    *decls = deps;
    Ok(())
}
