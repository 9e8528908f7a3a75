//! Var handles: the typed [`Var`] that owns its data, and the untyped
//! [`AnyVar`] that only declares it; both reach the var's engine-side state
//! (its cell) and its owner, the engine that made it.
//!
//! Why `unsafe`: an untyped handle shares its var's one `Arc` count through
//! two functions of the data type, and stays one pointer wide. Measured:
//! PERFORMANCE.md, *One reference count per var* (two `Arc`s were slower in
//! 22 of 29 alternated pairs of `w2_chain`, median ratio 1.07); a safe
//! `Arc<dyn …>` handle is two pointers wide, which makes each declaration 24
//! bytes instead of 16 and the record of a one-var op miss its 288-byte
//! allocator chunk (`op/op_cell/tests.rs`).

#![allow(unsafe_code)]

use std::fmt;
use std::ptr::NonNull;
use std::sync::{Arc, Weak};

use super::data::DataCell;
use super::gate::Access;
use super::var_cell::{VarCell, label};
use crate::error::Error;
use crate::op::{LiveRef, TaskRef};

/// The engine a var belongs to, opaque at this layer but for the way up of
/// the var's own acquires (a push refuses vars of another engine, and
/// `Var::read` pushes on the var's own).
pub(crate) type Owner = Arc<dyn Acquirer>;

/// The way up from a var to the engine that made it, for the var's own
/// acquires (the engine layer implements it).
pub(crate) trait Acquirer: std::any::Any + Send + Sync {
    /// Pushes `one`, an acquire of one var, in push order on it: the
    /// engine calls its `grant` once the var lets it through, or its
    /// `refuse` with the error that skips it. A refused push is returned.
    fn push_acquire(self: Arc<Self>, one: Box<dyn OneAcquire>) -> Result<(), Error>;
}

/// An acquire of one var, its data type erased for the engine.
pub(crate) trait OneAcquire: Send {
    /// The var, for the op's declaration.
    fn var(&self) -> AnyVar;
    /// Its access.
    fn access(&self) -> Access;
    /// The var let it through: its guard, kept running by `live`, goes to
    /// the future. A panic making it (the gate broken) fails the acquire.
    fn grant(self: Box<Self>, live: LiveRef) -> Result<(), Error>;
    /// It was skipped or cancelled with `err`: the future resolves to it.
    fn refuse(self: Box<Self>, err: &Error);
}

/// The engine-side state of a var, whatever its data type. It lives at the
/// start of its var's [`VarInner`], so that a typed handle and an untyped
/// one share one reference count: an op that declares a typed var clones
/// the handle for its guard and the var for its declaration, and the second
/// clone then finds the count's line in the pushing core's cache (as the
/// second drop does on the worker), where two counts cost two lines per op
/// that cross between the cores.
pub(crate) struct VarCore {
    pub(super) cell: VarCell<TaskRef>,
    owner: Owner,
    /// How an untyped handle reaches the count of the `VarInner<T>` this
    /// core begins.
    count: &'static Count,
}

/// A var's queue, reached without its data type: what an engine keeps of
/// each of its vars (weakly), to find the ops queued on them.
pub(crate) trait Queue: Send + Sync {
    fn cell(&self) -> &VarCell<TaskRef>;
}

impl<T: Send + Sync> Queue for VarInner<T> {
    fn cell(&self) -> &VarCell<TaskRef> {
        &self.core.cell
    }
}

/// A var's reference count, reached without its data type.
struct Count {
    /// Adds a reference.
    clone: unsafe fn(NonNull<VarCore>),
    /// Drops a reference, freeing the var with the last one.
    release: unsafe fn(NonNull<VarCore>),
}

impl Count {
    const fn of<T: Send + Sync + 'static>() -> &'static Self {
        &Count { clone: clone_inner::<T>, release: release_inner::<T> }
    }
}

/// # Safety
///
/// `core` points to the `core` field of a live `VarInner<T>` in an `Arc`,
/// on which the caller holds a reference.
unsafe fn clone_inner<T>(core: NonNull<VarCore>) {
    // SAFETY: `VarInner` is `repr(C)` with `core` first, so the pointer is
    // the one `Arc::into_raw` gave for the var (`Var::any`), whose count the
    // caller's reference keeps above zero (this function's contract).
    unsafe { Arc::increment_strong_count(core.cast::<VarInner<T>>().as_ptr()) }
}

/// # Safety
///
/// As for [`clone_inner`]; the caller's reference is given up.
unsafe fn release_inner<T>(core: NonNull<VarCore>) {
    // SAFETY: as in `clone_inner`; the reference dropped here is the
    // caller's, which it no longer uses.
    unsafe { Arc::decrement_strong_count(core.cast::<VarInner<T>>().as_ptr()) }
}

/// A var's engine-side state and its data: what `Var` handles and guards
/// hold (a guard takes the handle its op declared, so running an op clones
/// no reference). `repr(C)`, `core` first: a pointer to a `VarInner<T>` is a
/// pointer to its [`VarCore`] (what [`AnyVar`] holds). The data comes after
/// the core's lines, so that the workers' writes to the data's borrow flag do
/// not touch a line the pushing thread reads.
#[repr(C)]
pub(super) struct VarInner<T> {
    pub(super) core: VarCore,
    /// The data. The gate guarantees that no two guards conflict; the cell
    /// checks it.
    pub(super) data: DataCell<T>,
}

/// A piece of state owned by an engine, reachable only through the accesses
/// an op or an acquire declares.
///
/// Cloning a `Var` gives another handle to the same var. Create one with
/// [`Engine::var`](crate::Engine::var); a bare tag for state kept outside
/// the engine is a `Var<()>` (`engine.var(())`).
///
/// # Examples
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> depengine::Result<()> {
/// let engine = depengine::Engine::new();
/// let v = engine.var(1u64);
/// *v.write().await? += 1;
/// assert_eq!(*v.read().await?, 2);
/// assert_eq!(v.version(), 1);
/// # Ok(()) }
/// ```
pub struct Var<T> {
    inner: Arc<VarInner<T>>,
}

impl<T> Clone for Var<T> {
    fn clone(&self) -> Self {
        Self { inner: self.inner.clone() }
    }
}

impl<T: Send + Sync + 'static> Var<T> {
    pub(crate) fn new(owner: Owner, id: u64, name: Option<Arc<str>>, holders: bool, value: T) -> Self {
        let core = VarCore { cell: VarCell::keeping(id, name, holders), owner, count: Count::of::<T>() };
        Self { inner: Arc::new(VarInner { core, data: DataCell::new(value) }) }
    }

    /// A weak reference to the var's queue, which does not keep the var
    /// alive (see [`Queue`]).
    pub(crate) fn queue(&self) -> Weak<dyn Queue> {
        let weak: Weak<VarInner<T>> = Arc::downgrade(&self.inner);
        weak
    }

    /// This var as an untyped handle, for low-level pushes that declare it
    /// without reaching its data.
    ///
    /// # Examples
    ///
    /// ```
    /// let engine = depengine::Engine::new();
    /// let (a, b) = (engine.var(1u8), engine.var("text"));
    /// let tags: Vec<depengine::AnyVar> = vec![a.any(), b.any()];
    /// assert_eq!(tags[1].id(), b.id());
    /// ```
    pub fn any(&self) -> AnyVar {
        // The clone's reference becomes the new handle's.
        let core = Arc::into_raw(self.inner.clone()).cast::<VarCore>().cast_mut();
        // SAFETY: `Arc::into_raw` never gives a null pointer. (`VarInner` is
        // `repr(C)` with `core` first, so the pointer is also the core's.)
        AnyVar(unsafe { NonNull::new_unchecked(core) })
    }

    /// The var's unique id (also the order in which vars are locked).
    ///
    /// # Examples
    ///
    /// ```
    /// let engine = depengine::Engine::new();
    /// let (a, b) = (engine.var(0), engine.var(0));
    /// assert_ne!(a.id(), b.id());
    /// assert_eq!(a.id(), a.clone().id());
    /// ```
    pub fn id(&self) -> u64 {
        self.inner.core.cell.id()
    }

    /// The number of writes that have completed on this var, whatever
    /// their outcome: failed, skipped and cancelled writes count too (the
    /// version orders writes; it does not say that the data changed).
    ///
    /// # Examples
    ///
    /// ```
    /// let engine = depengine::Engine::new();
    /// let v = engine.var(0);
    /// engine.op("w").write(&v).run(|(), _| Ok(())).blocking_wait()?;
    /// engine.op("r").read(&v).run(|_, ()| Ok(())).blocking_wait()?;
    /// assert_eq!(v.version(), 1); // completed writes only
    /// # Ok::<(), depengine::Error>(())
    /// ```
    pub fn version(&self) -> u64 {
        self.any().version()
    }

    /// The name given at creation ([`Engine::var_named`](crate::Engine::var_named)), if any.
    ///
    /// # Examples
    ///
    /// ```
    /// let engine = depengine::Engine::new();
    /// assert_eq!(engine.var_named("weights", 0).name(), Some("weights"));
    /// assert_eq!(engine.var(0).name(), None);
    /// ```
    pub fn name(&self) -> Option<&str> {
        self.inner.core.cell.name()
    }

    /// How views of the engine name this var: `` `name` (#id) ``, or
    /// `#id` for a var without a name.
    ///
    /// # Examples
    ///
    /// ```
    /// let engine = depengine::Engine::new();
    /// let v = engine.var_named("weights", 0);
    /// assert_eq!(v.label(), format!("`weights` (#{})", v.id()));
    /// ```
    pub fn label(&self) -> String {
        label(self.name(), self.id())
    }

    /// Whether [`Engine::delete_var`](crate::Engine::delete_var) was called on it.
    ///
    /// # Examples
    ///
    /// ```
    /// let engine = depengine::Engine::new();
    /// let v = engine.var(0);
    /// engine.delete_var(&v).blocking_wait()?;
    /// assert!(v.is_deleted());
    /// # Ok::<(), depengine::Error>(())
    /// ```
    pub fn is_deleted(&self) -> bool {
        self.any().is_deleted()
    }

    /// The engine the var belongs to.
    pub(crate) fn owner(&self) -> &Owner {
        &self.inner.core.owner
    }

    /// The var's data and engine-side state, for a guard.
    pub(super) fn into_inner(self) -> Arc<VarInner<T>> {
        self.inner
    }
}

impl<T> fmt::Debug for Var<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let core = &self.inner.core;
        let mut d = f.debug_struct("Var");
        d.field("id", &core.cell.id());
        if let Some(name) = core.cell.name() {
            d.field("name", &name);
        }
        d.finish_non_exhaustive()
    }
}

/// An untyped handle to a var: enough to declare it in an op, not to reach
/// its data.
pub struct AnyVar(
    /// The `core` of a `VarInner<T>` in an `Arc`, of which this handle holds
    /// one reference.
    NonNull<VarCore>,
);

// SAFETY: an `AnyVar` is a reference to a `VarInner<T>` that reaches only its
// `VarCore` (`Send + Sync`) and, with the last reference, drops it:
// `Var::new` requires `T: Send + Sync`, so the `VarInner<T>` may be shared
// and dropped on any thread, as through an `Arc<VarInner<T>>`.
unsafe impl Send for AnyVar {}
// SAFETY: as for `Send`.
unsafe impl Sync for AnyVar {}

impl AnyVar {
    fn core(&self) -> &VarCore {
        // SAFETY: the handle's reference keeps the `VarInner` that the
        // pointer points into alive while `self` is borrowed.
        unsafe { self.0.as_ref() }
    }

    pub(crate) fn cell(&self) -> &VarCell<TaskRef> {
        &self.core().cell
    }

    /// The engine the var belongs to.
    pub(crate) fn owner(&self) -> &Owner {
        &self.core().owner
    }

    /// The var's unique id.
    ///
    /// # Examples
    ///
    /// ```
    /// let engine = depengine::Engine::new();
    /// let v = engine.var(0);
    /// assert_eq!(v.any().id(), v.id());
    /// ```
    pub fn id(&self) -> u64 {
        self.cell().id()
    }

    /// The name given at creation, if any.
    ///
    /// # Examples
    ///
    /// ```
    /// let engine = depengine::Engine::new();
    /// assert_eq!(engine.var_named("cache", ()).any().name(), Some("cache"));
    /// ```
    pub fn name(&self) -> Option<&str> {
        self.cell().name()
    }

    /// The name, shared (a profile keeps it without a copy).
    pub(crate) fn name_shared(&self) -> Option<&Arc<str>> {
        self.cell().name_shared()
    }

    /// How views of the engine name this var: `` `name` (#id) ``, or `#id`.
    ///
    /// # Examples
    ///
    /// ```
    /// let engine = depengine::Engine::new();
    /// let v = engine.var_named("cache", ());
    /// assert_eq!(v.any().label(), v.label());
    /// ```
    pub fn label(&self) -> String {
        label(self.name(), self.id())
    }

    /// The number of writes that have completed on this var, whatever
    /// their outcome: failed, skipped and cancelled writes count too.
    ///
    /// # Examples
    ///
    /// ```
    /// let engine = depengine::Engine::new();
    /// let tag = engine.var(()).any();
    /// engine.op("touch").write_any(&tag).run(|(), ()| Ok(())).blocking_wait()?;
    /// assert_eq!(tag.version(), 1);
    /// # Ok::<(), depengine::Error>(())
    /// ```
    pub fn version(&self) -> u64 {
        self.cell().lock().gate.version()
    }

    /// Whether the var has been deleted.
    ///
    /// # Examples
    ///
    /// ```
    /// let engine = depengine::Engine::new();
    /// let v = engine.var(0);
    /// let tag = v.any();
    /// engine.delete_var(&v).blocking_wait()?;
    /// assert!(tag.is_deleted());
    /// # Ok::<(), depengine::Error>(())
    /// ```
    pub fn is_deleted(&self) -> bool {
        self.cell().lock().deleted
    }

    /// Whether no op is queued on the var or holds it (so none has a
    /// guard on its data), its inbox's ops counted as queued.
    pub(crate) fn is_idle(&self) -> bool {
        self.cell().lock().gate.is_idle()
    }
}

impl Clone for AnyVar {
    fn clone(&self) -> Self {
        // SAFETY: `self.0` is the core of a live `VarInner<T>` in an `Arc`,
        // with the `Count` of that `T`, and `self` holds a reference to it.
        unsafe { (self.core().count.clone)(self.0) };
        AnyVar(self.0)
    }
}

impl Drop for AnyVar {
    fn drop(&mut self) {
        // SAFETY: as in `clone`; the reference given up is this handle's,
        // not used after.
        unsafe { (self.core().count.release)(self.0) }
    }
}

impl fmt::Debug for AnyVar {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(name) => f.debug_tuple("AnyVar").field(&self.id()).field(&name).finish(),
            None => f.debug_tuple("AnyVar").field(&self.id()).finish(),
        }
    }
}
