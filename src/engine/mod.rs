//! The engine: the public handle and its waits (`api.rs`), the builders of
//! ops and acquires (`builder.rs`, `acquire.rs`), configuration
//! (`config.rs`), the bookkeeping every push and completion goes through
//! (`shared.rs`), the bound on ops in flight (`limit.rs`), and bulk
//! execution (`bulk/`).
//!
//! The top layer: it implements the op layer's `Host`, the one way up from
//! an op record, and owns the dispatcher of the exec layer.

mod acquire;
mod api;
mod builder;
mod bulk;
mod config;
mod limit;
mod shared;

pub use acquire::{Acquire, AcquireBuilder};
pub use api::{Engine, ShutdownMode, WaitForAll};
pub use builder::OpBuilder;
pub use config::{
    DEFAULT_SPIN, EngineBuilder, EngineKind, MAX_CPU_DEVICES, MAX_IN_FLIGHT, MAX_SPIN, MAX_WORKERS,
};
pub use limit::{NoSlot, Reservation, Reserved, Slot};
