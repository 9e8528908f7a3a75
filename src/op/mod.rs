//! Ops: what an op is, whatever its body, and its life from push to
//! completion. `README.md` beside this file has the states, who owns the
//! record in each, and when it may be reused.
//!
//! Files, each naming only files listed above it (no circle,
//! `tests/check_architecture.rs` keeps it so):
//!
//! * `record/`: the erased header every var queue holds ([`Header`],
//!   [`Task`]), where the body runs ([`Exec`]), and everything the header
//!   embeds, each in its own file: `errors.rs` (how errors pass through an
//!   op), `profile.rs` (what an op records while the profiler is on),
//!   `nest.rs` (ops run by a parent op, bulk execution's hook), `host.rs`
//!   (the one way up, to the engine that pushed the op) and `spares.rs`
//!   (stripped records kept for later pushes, and the header's strip and
//!   rebuild);
//! * `access.rs`: what an op declares; `body.rs`: the op whose body runs on
//!   this thread;
//! * `op_handle.rs`: the result slot's shared part and what the pusher holds;
//! * `slot.rs`, `job.rs`, `gpu_job.rs`: the result slot and the typed bodies;
//! * `op_cell.rs`: the typed record; `life.rs`: submit, completion, and the
//!   guards' [`LiveRef`]; `recycle.rs`: a typed record rebuilt for a push.

pub(crate) mod access;
pub(crate) mod body;
pub(crate) mod gpu_job;
pub(crate) mod job;
mod life;
pub(crate) mod op_cell;
pub(crate) mod op_handle;
pub(crate) mod record;
pub(crate) mod recycle;
mod slot;

pub(crate) use life::{LiveRef, submit};
pub(crate) use record::{Decl, DepList, Exec, Flags, HandleKind, Header, Meta, PackedDevice, Task, TaskRef};
pub(crate) use record::{Help, Host, Note, ReadyList, Wait};
