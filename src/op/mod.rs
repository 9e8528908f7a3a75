//! Ops: what an op is, whatever its body, and its life from push to
//! completion. `README.md` beside this file has the states, who owns the
//! record in each, and when it may be reused.
//!
//! Files, each naming only files listed above it (no circle,
//! `tests/check_architecture.rs` keeps it so):
//!
//! * `record/`: the erased header every var queue holds ([`Header`]) and
//!   the one reference to a record ([`TaskRef`], in `task_ref.rs`, with
//!   its type's static vtable and the record's memory in the slab), where the body
//!   runs ([`Exec`]), and everything the header embeds, each in its own
//!   file: `cold.rs` (the box for what only some ops carry), `errors.rs`
//!   (how errors pass through an op), `profile.rs` (what an op records
//!   while the profiler is on), `nest.rs` (ops run by a parent op, bulk
//!   execution's hook), `engine_core.rs` and `host.rs` (the one way up, to
//!   the engine that pushed the op);
//! * `life.rs`: submit, and the guards' [`LiveRef`]; `slot.rs`: the result
//!   slot's state word; `body.rs`: the op whose body runs on this thread;
//! * `access.rs`: what an op declares;
//! * `op_handle.rs`: the result slot's shared part and what the pusher holds;
//! * `job.rs`: the typed body;
//! * `op_cell.rs`: the typed record, with its completion
//!   (`op_cell/complete.rs`: vars released, ready ops dispatched, result
//!   published, in one function) and its early resolution
//!   (`op_cell/early.rs`);
//! * `gpu_job.rs`: a GPU op's body.

pub(crate) mod access;
pub(crate) mod body;
pub(crate) mod gpu_job;
pub(crate) mod job;
mod life;
pub(crate) mod op_cell;
pub(crate) mod op_handle;
pub(crate) mod record;
mod slot;

pub(crate) use life::{LiveRef, submit};
pub(crate) use record::state::MAX_DECLS;
pub(crate) use record::{Decl, DepList, Exec, Flags, HandleKind, Header, Meta, PackedDevice, TaskRef};
pub(crate) use record::{Help, ReadyList, let_go, note_cancelling};
