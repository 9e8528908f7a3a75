//! The hang explainer, as the engine's handle shows it
//! (`engine/watchdog.rs` looks; `crate::explain` renders).

use super::Engine;
use crate::explain::Pending;

impl Engine {
    /// What is pending and on what: every op queued on a var, the vars it
    /// waits on, and who holds each (an op let through and not yet
    /// completed: running, or with its guards or completion token still
    /// out, an acquire's guards included), with the chain from each
    /// waiting op down to the holder at its end. `Display` gives it as
    /// text, [`Pending::dot`] as Graphviz DOT.
    ///
    /// A var names every write holding it and the first four reads (it
    /// counts them all). Push and start times are known for ops the
    /// profiler records. While a watchdog runs
    /// ([`EngineBuilder::watchdog`](crate::EngineBuilder::watchdog)), holders
    /// note its coarse clock when they are let through, so the report says
    /// how long each has held its var (to the watchdog's period), and the
    /// watchdog's own reports say how long each op has waited at least. The look visits every
    /// live var under its lock, briefly.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> depengine::Result<()> {
    /// let engine = depengine::Engine::new();
    /// let v = engine.var_named("v", 0u32);
    /// let guard = v.write().await?; // held by this task…
    /// let reader = engine.op("reader").read(&v).run(|(v,), ()| Ok(*v));
    /// let pending = engine.debug_pending();
    /// let text = pending.to_string();
    /// assert!(text.contains("`reader` waits for `v`"), "{text}");
    /// assert!(text.contains("held (write) by `acquire`"), "{text}");
    /// drop(guard); // …until it lets go
    /// assert_eq!(reader.await?, 0);
    /// # Ok(()) }
    /// ```
    pub fn debug_pending(&self) -> Pending {
        super::super::watchdog::pending(self.shared())
    }
}
