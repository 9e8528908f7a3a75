//! Where and on what thread ops run: placement and dispatch (`place.rs`),
//! the pools and their queues (`pool.rs`, `feed_list.rs`, `feed.rs`, `heap.rs`),
//! the workers' loop (`worker.rs`) and what workers count for metrics
//! (`stats.rs`), parking (`park.rs`), and what each thread is
//! to the engine (`this_thread.rs`). `README.md` has the thread roles, the
//! queues and the parking handshake with its proof sketch.
//!
//! Above the op layer: a worker runs an op through `op::Task`, and nothing
//! here knows the engine's bookkeeping.

mod feed;
mod feed_list;
mod gpu_pools;
mod heap;
mod lazy;
mod park;
mod place;
mod pool;
mod stats;
mod this_thread;
mod worker;

pub(crate) use gpu_pools::GpuSettings;
pub(crate) use place::{Dispatcher, Runs, Topology};
#[cfg(all(test, not(depengine_loom)))]
pub(crate) use pool::{FAIL_SPAWN_AT, SPAWNS_REFUSED};
pub(crate) use pool::{HeldBack, Hook, ThreadHooks};
pub(crate) use this_thread::help;
