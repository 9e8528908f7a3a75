//! What a var is doing, for debugging apparent hangs: a snapshot of its
//! gate ([`VarDebug`]).

use super::gate::Access;
use super::handle::{AnyVar, Var};
use super::var_cell::Grant;

/// What a var is doing, as [`AnyVar::debug_state`] saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct VarDebug {
    /// The var's id.
    pub id: u64,
    /// Its name, if it was given one.
    pub name: Option<String>,
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

impl<T: Send + Sync + 'static> Var<T> {
    /// A snapshot of the var's gate, for debugging (see
    /// [`AnyVar::debug_state`]).
    ///
    /// ```
    /// let engine = depengine::Engine::new();
    /// let v = engine.var_named("counter", 0u32);
    /// let state = v.debug_state();
    /// assert_eq!((state.version, state.queued.len()), (0, 0));
    /// assert_eq!(state.name.as_deref(), Some("counter"));
    /// ```
    pub fn debug_state(&self) -> VarDebug {
        self.any().debug_state()
    }
}

impl AnyVar {
    /// A snapshot of the var's queue, for debugging apparent hangs: how
    /// many reads run and whether a write runs (not which ops they are),
    /// the ops queued in order by name (a bulk segment as one op named
    /// `bulk`), the version and the error.
    ///
    /// # Examples
    ///
    /// ```
    /// let engine = depengine::Engine::builder().cpu_workers(1).build()?;
    /// let v = engine.var_named("model", 0);
    /// let (tx, rx) = std::sync::mpsc::channel::<()>();
    /// let slow = engine.op("slow").write(&v).run(move |(), _| { rx.recv().ok(); Ok(()) });
    /// let next = engine.op("next").read(&v).run(|_, ()| Ok(()));
    /// while v.any().debug_state().queued.is_empty() {
    ///     std::thread::yield_now();
    /// }
    /// assert_eq!(v.any().debug_state().queued, [(false, "next".to_owned())]);
    /// tx.send(()).unwrap();
    /// slow.blocking_wait()?;
    /// next.blocking_wait()?;
    /// # Ok::<(), depengine::Error>(())
    /// ```
    pub fn debug_state(&self) -> VarDebug {
        let state = self.cell().lock();
        VarDebug {
            id: self.id(),
            name: self.name().map(str::to_owned),
            version: state.gate.version(),
            running_reads: state.gate.running_reads(),
            write_running: state.gate.write_running(),
            queued: state.gate.queued().map(|(a, t)| (*a == Access::Write, t.name().to_string())).collect(),
            error: state.error.as_ref().map(ToString::to_string),
            deleted: state.deleted,
        }
    }
}
