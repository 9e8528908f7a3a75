//! Backpressure: a bound on the user ops in flight (pushed and not yet
//! completed), counted by a Tokio semaphore. A push at the bound is refused
//! ([`Error::is_full`]); [`Engine::reserve`](crate::Engine::reserve) waits
//! for room instead, cancel safe (a dropped wait or reservation gives its
//! place back). An op gives its slot back when it completes (when its
//! handle resolves: the op's publication, through the engine's core,
//! `EngineCore::done`), or, if it was resolved early (cancelled before its
//! vars let it through), once it has left its vars (`EngineCore::gone`):
//! its record is kept until then.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::sync::{OwnedSemaphorePermit, Semaphore, TryAcquireError};

use crate::error::Error;

/// The bound and its count.
pub(crate) struct Limit {
    slots: Arc<Semaphore>,
    max: usize,
    /// Pushes refused at the bound (for metrics).
    refused: AtomicU64,
}

impl Limit {
    pub(crate) fn new(max: usize) -> Self {
        Self { slots: Arc::new(Semaphore::new(max)), max, refused: AtomicU64::new(0) }
    }

    /// Pushes refused at the bound so far.
    pub(crate) fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }

    /// Takes a slot for an op about to be pushed.
    ///
    /// # Errors
    ///
    /// [`Error::is_full`]: `max` ops are in flight.
    pub(crate) fn take(&self) -> Result<(), Error> {
        match self.slots.try_acquire() {
            Ok(permit) => {
                permit.forget();
                Ok(())
            }
            Err(TryAcquireError::NoPermits | TryAcquireError::Closed) => {
                self.refused.fetch_add(1, Ordering::Relaxed);
                Err(Error::full(self.max))
            }
        }
    }

    /// Gives back the slot of an op that completed, or whose push was
    /// refused after it took one.
    pub(crate) fn give(&self) {
        self.slots.add_permits(1);
    }

    /// Slots free now.
    pub(crate) fn free(&self) -> usize {
        self.slots.available_permits()
    }

    pub(crate) fn max(&self) -> usize {
        self.max
    }

    pub(crate) async fn wait(&self) -> OwnedSemaphorePermit {
        self.slots.clone().acquire_owned().await.expect("the in-flight semaphore is never closed")
    }
}
