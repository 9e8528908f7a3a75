//! Ops: what an op is, whatever its body, and its life from push to
//! completion. `README.md` beside this file has the states, who owns the
//! record in each, and when it may be reused.
//!
//! * `record.rs`: the erased header every var queue holds ([`Header`],
//!   [`Task`]), and where the body runs ([`Exec`]);
//! * `op_cell.rs`, `job.rs`, `slot.rs`: the typed record, its body and its
//!   result slot;
//! * `life.rs`: submit, completion, and the guards' [`LiveRef`];
//! * `errors.rs`: how errors pass through an op;
//! * `recycle.rs`: records reused for later pushes;
//! * `nest.rs`: ops run by a parent op (bulk execution's hook);
//! * `profile.rs`: what an op records while the profiler is on;
//! * `op_handle.rs`: what the pusher holds; `access.rs`: what an op declares;
//! * `host.rs`: the one way up, to the engine that pushed the op.

pub(crate) mod access;
mod errors;
pub(crate) mod gpu_job;
mod host;
pub(crate) mod job;
mod life;
mod nest;
pub(crate) mod op_cell;
pub(crate) mod op_handle;
pub(crate) mod profile;
mod record;
pub(crate) mod recycle;
mod slot;

pub(crate) use host::{Help, Host, Note, ReadyList, Wait};
pub(crate) use life::{LiveRef, submit};
pub(crate) use record::{DepList, Exec, Flags, HandleKind, Header, Meta, PackedDevice, Task, TaskRef};
