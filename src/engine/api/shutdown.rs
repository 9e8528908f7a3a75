//! Closing an engine: [`ShutdownMode`], and the shutdown, awaited or
//! blocking.

use std::future::Future;

use super::Engine;
use crate::error::Error;
use crate::may_block::{Instead, refuse_blocking};

/// How [`Engine::shutdown`] treats ops that have not started.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum ShutdownMode {
    /// Run everything already pushed.
    #[default]
    Drain,
    /// Resolve every op that has not started with
    /// [`Error::is_cancelled`] at once, wherever it waits (queued on a var
    /// behind a running op, or on a pool behind busy workers); running ops
    /// finish, and the shutdown waits for them. Deletions and
    /// `wait_for_var`s still run, in order; ops of a bulk segment already
    /// running are cancelled when the segment reaches them.
    Cancel,
}

impl Engine {
    /// Stops taking work and waits until every pushed op has completed (or,
    /// with [`ShutdownMode::Cancel`], been cancelled) and every worker thread
    /// has exited. Later pushes are refused with [`Error::is_shutdown`].
    ///
    /// # Errors
    ///
    /// The first op failure recorded since the last `wait_for_all` that no
    /// handle has returned already (a `wait_for_var`'s included): a
    /// failure the caller has seen is not reported twice. Inside a body of
    /// one of this engine's ops, [`Error::is_would_deadlock`] (it would
    /// wait for that op), and the engine is not closed.
    ///
    /// # Examples
    ///
    /// ```
    /// # futures::executor::block_on(async {
    /// use depengine::{Engine, ShutdownMode};
    /// let engine = Engine::new();
    /// let v = engine.var(0u32);
    /// let last = engine.op("last").write(&v).run(|(), (mut v,)| {
    ///     *v += 1;
    ///     Ok(*v)
    /// });
    /// engine.shutdown(ShutdownMode::Drain).await?;
    /// assert_eq!(last.await?, 1); // drained: everything pushed ran
    /// assert!(engine.op("after").run(|(), ()| Ok(())).await.unwrap_err().is_shutdown());
    /// # Ok::<(), depengine::Error>(())
    /// # }).unwrap();
    /// ```
    pub fn shutdown(&self, mode: ShutdownMode) -> impl Future<Output = Result<(), Error>> + Send + 'static {
        self.close_and_wait(mode, "Engine::shutdown")
    }

    /// `shutdown`, refused as `what` inside an op of this engine.
    fn close_and_wait(
        &self,
        mode: ShutdownMode,
        what: &'static str,
    ) -> impl Future<Output = Result<(), Error>> + Send + 'static {
        let refused = self.refuse_inside_op(what);
        let closing =
            refused.map(|()| (self.shared().close(mode == ShutdownMode::Cancel), self.shared().clone()));
        async move {
            let (latch, shared) = closing?;
            tracing::debug!(target: "depengine", ?mode, in_flight = shared.in_flight(), "shutdown begun");
            latch.wait().await;
            shared.lingering().wait().await;
            shared.dispatcher.stop_and_join();
            shared.stop_watchdog();
            shared.recorder.autosave();
            let result = shared.take_unseen_error();
            tracing::debug!(target: "depengine", ?mode, ok = result.is_ok(), "shutdown ended: the pools have stopped");
            result
        }
    }

    /// Blocking [`shutdown`](Engine::shutdown).
    ///
    /// # Errors
    ///
    /// As for `shutdown`, and [`Error::is_blocking_in_runtime`] in an async
    /// task (`.await` `shutdown` there).
    ///
    /// # Examples
    ///
    /// ```
    /// use depengine::{Engine, ShutdownMode};
    /// let engine = Engine::new();
    /// let v = engine.var(0u32);
    /// let guard = v.write().blocking_wait()?; // holds the var
    /// let queued = engine.op("queued").read(&v).run(|(v,), ()| Ok(*v));
    /// let closer = {
    ///     let engine = engine.clone();
    ///     std::thread::spawn(move || engine.blocking_shutdown(ShutdownMode::Cancel))
    /// };
    /// // Cancelled at once, though the var it waits on is still held...
    /// assert!(queued.blocking_wait().unwrap_err().is_cancelled());
    /// // ...while the shutdown waits for the holder.
    /// drop(guard);
    /// let _ = closer.join().unwrap();
    /// assert!(engine.is_closed());
    /// # Ok::<(), depengine::Error>(())
    /// ```
    pub fn blocking_shutdown(&self, mode: ShutdownMode) -> Result<(), Error> {
        const WHAT: &str = "Engine::blocking_shutdown";
        refuse_blocking(WHAT, Instead::Await)?;
        crate::sync::block_on::block_on(self.close_and_wait(mode, WHAT))
    }
}
