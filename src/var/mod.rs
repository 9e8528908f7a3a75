//! Vars: the data an engine orders access to, and the guards that reach it.

mod acquire;
pub(crate) mod cell;
mod data;
pub(crate) mod gate;
mod guard;
pub(crate) mod inbox;

use std::fmt;
use std::sync::Arc;

use crate::engine::Shared;
use crate::op::access::{Reading, Writing};
use crate::op::{LiveRef, TaskRef};
use cell::VarCell;
use data::DataCell;

pub use acquire::{Acquire, AcquireBuilder};
pub(crate) use gate::Access;
pub use guard::{ReadGuard, WriteGuard};

/// The engine-side state of a var, whatever its data type.
pub(crate) struct VarCore {
    cell: VarCell<TaskRef>,
    shared: Arc<Shared>,
}

/// A var's engine-side state and its data: what `Var` handles and guards
/// hold (a guard takes the handle its op declared, so running an op clones
/// no reference).
struct VarInner<T> {
    core: Arc<VarCore>,
    /// The data. The gate guarantees that no two guards conflict; the cell
    /// checks it.
    data: DataCell<T>,
}

/// A piece of state owned by an engine, reachable only through the accesses
/// an op or an acquire declares.
///
/// Cloning a `Var` gives another handle to the same var. Create one with
/// [`Engine::var`](crate::Engine::var); a bare tag for state kept outside
/// the engine is a `Var<()>` ([`Engine::new_var`](crate::Engine::new_var)).
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
    pub(crate) fn new(shared: Arc<Shared>, id: u64, value: T) -> Self {
        let core = Arc::new(VarCore { cell: VarCell::new(id), shared });
        Self { inner: Arc::new(VarInner { core, data: DataCell::new(value) }) }
    }

    /// This var as an untyped handle, for low-level pushes that declare it
    /// without reaching its data.
    pub fn any(&self) -> AnyVar {
        AnyVar(self.inner.core.clone())
    }

    /// The var's unique id (also the order in which vars are locked).
    pub fn id(&self) -> u64 {
        self.inner.core.cell.id()
    }

    /// The number of writes that have completed on this var.
    pub fn version(&self) -> u64 {
        self.any().version()
    }

    /// Whether [`Engine::delete_var`](crate::Engine::delete_var) was called on it.
    pub fn is_deleted(&self) -> bool {
        self.any().is_deleted()
    }

    /// Waits, in push order, for shared access: resolves once every write
    /// pushed before this call has completed.
    ///
    /// The read is appended to the var when `read` is called, not when the
    /// future is first polled. Dropping the future gives up the access.
    ///
    /// # Errors
    ///
    /// The future resolves to an error if the var carries one from a failed
    /// write ([`Error::is_skipped`](crate::Error::is_skipped)), was deleted, or
    /// the engine is shut down.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a dropped future releases its place in the var's queue.
    pub fn read(&self) -> Acquire<ReadGuard<T>> {
        acquire::push(&self.inner.core.shared, Reading(self.clone()))
    }

    /// Waits, in push order, for exclusive access: resolves once every op
    /// pushed on this var before this call has completed. See [`read`](Var::read).
    ///
    /// # Errors
    ///
    /// As for [`read`](Var::read).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`read`](Var::read).
    pub fn write(&self) -> Acquire<WriteGuard<T>> {
        acquire::push(&self.inner.core.shared, Writing(self.clone()))
    }

    /// A read guard for the op `live` keeps running, made of this handle.
    pub(crate) fn into_read_guard(self, live: LiveRef) -> ReadGuard<T> {
        assert!(self.inner.data.try_read(), "{CONFLICT}");
        ReadGuard::new(self.inner, live)
    }

    /// The write guard for the op `live` keeps running, made of this handle.
    pub(crate) fn into_write_guard(self, live: LiveRef) -> WriteGuard<T> {
        assert!(self.inner.data.try_write(), "{CONFLICT}");
        WriteGuard::new(self.inner, live)
    }
}

const CONFLICT: &str = "depengine bug: the var gate let two conflicting accesses through";

impl<T> fmt::Debug for Var<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Var").field("id", &self.inner.core.cell.id()).finish_non_exhaustive()
    }
}

/// An untyped handle to a var: enough to declare it in an op, not to reach
/// its data.
#[derive(Clone)]
pub struct AnyVar(Arc<VarCore>);

impl AnyVar {
    pub(crate) fn cell(&self) -> &VarCell<TaskRef> {
        &self.0.cell
    }

    pub(crate) fn shared(&self) -> &Arc<Shared> {
        &self.0.shared
    }

    /// The var's unique id.
    pub fn id(&self) -> u64 {
        self.cell().id()
    }

    /// The number of writes that have completed on this var.
    pub fn version(&self) -> u64 {
        self.cell().lock().gate.version()
    }

    /// Whether the var has been deleted.
    pub fn is_deleted(&self) -> bool {
        self.cell().lock().deleted
    }

    /// A snapshot of the var's queue, for debugging apparent hangs.
    pub fn debug_state(&self) -> VarDebug {
        let state = self.cell().lock();
        VarDebug {
            id: self.id(),
            version: state.gate.version(),
            running_reads: state.gate.running_reads(),
            write_running: state.gate.write_running(),
            queued: state
                .gate
                .queued()
                .map(|(a, t)| (*a == Access::Write, t.header().meta.name.to_string()))
                .collect(),
            error: state.error.as_ref().map(ToString::to_string),
            deleted: state.deleted,
        }
    }
}

impl fmt::Debug for AnyVar {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("AnyVar").field(&self.id()).finish()
    }
}

/// What a var is doing, as [`AnyVar::debug_state`] saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct VarDebug {
    /// The var's id.
    pub id: u64,
    /// Completed writes.
    pub version: u64,
    /// Reads let through and not yet completed.
    pub running_reads: usize,
    /// Whether a write is let through and not yet completed.
    pub write_running: bool,
    /// Ops waiting in the var's queue, in order: (is a write, op name).
    pub queued: Vec<(bool, String)>,
    /// The error the var carries, if any.
    pub error: Option<String>,
    /// Whether the var has been deleted.
    pub deleted: bool,
}
