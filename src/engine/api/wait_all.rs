//! The future of [`Engine::wait_for_all`](super::Engine::wait_for_all).

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use crate::engine::shared::Shared;
use crate::error::Error;
use crate::may_block::{Instead, refuse_blocking};
use crate::sync::latch::LatchWait;

/// The future of [`Engine::wait_for_all`](crate::Engine::wait_for_all).
#[must_use = "futures do nothing unless awaited"]
pub struct WaitForAll {
    /// The wait, or why it was refused.
    pub(super) wait: Result<LatchWait, Option<Error>>,
    pub(super) shared: Arc<Shared>,
}

impl WaitForAll {
    /// Blocks the current thread until the wait resolves, for non-async
    /// callers.
    ///
    /// # Errors
    ///
    /// As for the future, and [`Error::is_blocking_in_runtime`] in an async
    /// task (`.await` it there); [`Error::is_would_deadlock`] in a waker the
    /// engine wakes (see [`OpHandle::blocking_wait`](crate::OpHandle::blocking_wait)).
    ///
    /// # Examples
    ///
    /// ```
    /// let engine = depengine::Engine::new();
    /// let v = engine.var(0u8);
    /// engine.op("fails").write(&v).run_detached(|(), _| Err("bad input".into()))?;
    /// let err = engine.wait_for_all().blocking_wait().unwrap_err();
    /// assert_eq!(err.root().op_name(), Some("fails"));
    /// # Ok::<(), depengine::Error>(())
    /// ```
    pub fn blocking_wait(self) -> Result<(), Error> {
        refuse_blocking("WaitForAll::blocking_wait", Instead::Await)?;
        crate::sync::block_on::block_on(self)
    }
}

impl Future for WaitForAll {
    type Output = Result<(), Error>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = &mut *self;
        match &mut this.wait {
            Ok(wait) => Pin::new(wait).poll(cx).map(|()| this.shared.take_error()),
            Err(refused) => Poll::Ready(Err(refused.take().expect("WaitForAll polled after it resolved"))),
        }
    }
}

impl fmt::Debug for WaitForAll {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WaitForAll").finish_non_exhaustive()
    }
}
