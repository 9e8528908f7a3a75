//! The engine and its builders: [`Engine`] and its waits, [`EngineBuilder`]
//! and the [`Settings`] it settles on, [`OpBuilder`] (what an op declares,
//! how it runs), [`AcquireBuilder`] (guards handed to async code),
//! [`Reservation`] (slots among the ops in flight, taken ahead),
//! [`OpGroup`] (ops waited for, cancelled and counted as one) and
//! [`ShutdownMode`]. The common ones are re-exported at the crate's root.

// For maintainers:
// The engine: the public handle and its waits (`api.rs`), the builders of
// ops and acquires (`op_builder.rs`, `acquire.rs`), configuration
// (`engine_builder.rs`), op groups' public face (`group.rs`; their books
// are the op layer's), what the builders hand a push (`options.rs`), the
// bookkeeping every push and completion goes through (`shared.rs`), the
// bodies of the engine's own ops (`jobs.rs`), the bound on ops in flight
// and its reservations (`limit.rs`, `reserve.rs`), and bulk execution
// (`bulk/`).
//
// The top layer: its allocation starts with the op layer's `EngineCore`,
// what every record holds of its engine, and it gives the core the hooks
// (`shared/hooks.rs`), the one way up from an op; it owns the dispatcher
// of the exec layer.

mod acquire;
mod api;
mod bulk;
mod config;
mod engine_builder;
mod group;
mod jobs;
mod op_builder;
mod op_handle;
mod op_set;
mod options;
mod queues;
mod recorder;
mod reserve;
mod settle;
mod shared;
mod throttle;
mod watchdog;

/// The completion token of an async op ([`OpBuilder::run_async`]).
pub use crate::op::slot::Completion;
pub use acquire::AcquireBuilder;
pub use api::{Engine, Profiler, ShutdownMode, WaitForAll, WeakEngine};
pub use config::{EngineKind, Settings};
pub use engine_builder::EngineBuilder;
pub use group::{GroupCancelled, GroupCounts, GroupWait, OpGroup, is_cancelled};
pub use op_builder::{GroupSlot, InGroup, OpBuilder};
pub use op_handle::OpHandle;
pub(crate) use op_handle::block_helping;
pub use op_set::{JoinNext, OpSet};
#[cfg(feature = "mpi")]
pub(crate) use recorder::name_profiles_by_rank;
pub use reserve::Reservation;
