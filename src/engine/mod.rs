//! The engine: the public handle and its waits (`api.rs`), the builders of
//! ops and acquires (`builder.rs`, `acquire.rs`), configuration
//! (`config.rs`), what the builders hand a push (`options.rs`), the
//! bookkeeping every push and completion goes through (`shared.rs`), the
//! bodies of the engine's own ops (`jobs.rs`), the bound on ops in flight
//! and its reservations (`limit.rs`, `reserve.rs`), prepared ops
//! (`prepared.rs`), and bulk execution (`bulk/`).
//!
//! The top layer: it implements the op layer's `Host`, the one way up from
//! an op record, and owns the dispatcher of the exec layer.

mod acquire;
mod api;
mod batch;
mod builder;
mod bulk;
mod config;
mod counts;
mod explain;
mod jobs;
mod limit;
mod options;
mod prepared;
mod profiler;
mod queues;
mod reserve;
mod shared;

pub use acquire::{Acquire, AcquireBuilder};
pub use api::{Engine, Profiler, ShutdownMode, WaitForAll};
pub use batch::Batch;
pub use builder::OpBuilder;
pub use config::{EngineBuilder, EngineKind, Settings};
pub use limit::{NoSlot, Reserved, Slot};
pub use prepared::PreparedOp;
pub use reserve::Reservation;
