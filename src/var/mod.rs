//! Vars: the data an engine orders access to. A [`Var<T>`](Var) holds its
//! data; ops reach it only through the guards they receive for what they
//! declared ([`ReadGuard`], [`WriteGuard`]), and async code through the
//! var's own [`read`](Var::read) and [`write`](Var::write) ([`Acquire`]),
//! ordered with the ops by call time. [`AnyVar`] names a var whatever its
//! type (for `wait_for_var` and declarations without a guard);
//! [`VarDebug`] is a snapshot of who waits on a var and who holds it.

// For maintainers:
// Vars: the data an engine orders access to, the gate that orders it, and
// the guards that reach it. `README.md` beside this file has the gate's
// protocol and its proof sketch.
//
// * `gate.rs`: the pure state machine of docs/semantics.md §1;
// * `var_cell.rs`: its lock, the multi-var append, error slots; `inbox.rs`:
//   one-var pushes without the lock;
// * `data.rs`: the data and its borrow check; `guard.rs`: the guards;
// * `handle.rs`: [`Var`] and [`AnyVar`], and the way up to the engine
//   that made a var (`Owner`, `Acquirer`); `acquire.rs`: a var's own
//   acquires (`Var::read`, `Var::write`) and their future, [`Acquire`];
//   `debug.rs`: a snapshot of a var's gate ([`VarDebug`]).
//
// The var layer sits below the op layer but names two of its types: the
// queues hold op records (`op::TaskRef`) and guards keep their op running
// (`op::LiveRef`). That is the one cycle of the crate, inherent to what a
// var and an op are: records hold vars, guards hold records.

mod acquire;
mod data;
mod debug;
mod gate;
mod guard;
mod handle;
pub(crate) mod inbox;
mod var_cell;

pub use acquire::Acquire;
pub(crate) use acquire::AcquireSlot;
pub use debug::VarDebug;
pub(crate) use gate::Access;
pub use guard::{ReadGuard, WriteGuard};
pub(crate) use handle::{Acquirer, OneAcquire, Owner, Queue};
pub use handle::{AnyVar, Var};
pub(crate) use var_cell::{Grant, VarCell, append_all};
