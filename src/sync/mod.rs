//! The lowest layer: synchronisation primitives that know nothing of vars,
//! ops or threads of the engine. Everything above imports its atomics,
//! locks and cells from here, so that the whole crate switches to loom's
//! under `--cfg depengine_loom` (see `shim.rs`).

mod shim;

pub(crate) mod barrier;
pub(crate) mod block_on;
pub(crate) mod coarse;
pub(crate) mod countdown;
pub(crate) mod drain;
pub(crate) mod epoch;
pub(crate) mod latch;
pub(crate) mod limit;
pub(crate) mod prefetch;
pub(crate) mod slab;
pub(crate) mod small;
pub(crate) mod spin;
pub(crate) mod tally;
pub(crate) mod wakers;

pub(crate) use shim::{Condvar, Mutex, MutexGuard, atomic, cell, lock, wait_timeout};
