//! The engine's metrics, as its handle shows them (`crate::metrics` has
//! the snapshot's types).

use std::collections::HashSet;

use super::Engine;
use crate::metrics::Metrics;

impl Engine {
    /// A snapshot of what the engine has done and is doing: ops pushed,
    /// completed, failed, skipped and cancelled; ops in flight and waiting
    /// on vars; per pool, its workers, ops queued and running, ops run and
    /// busy time; and, with timing on
    /// ([`EngineBuilder::metrics_timing`](crate::EngineBuilder::metrics_timing)),
    /// queue-wait and run-time distributions.
    ///
    /// The counters cost the hot path a few stores per op and are always
    /// kept. Taking a snapshot visits every live var (each under its lock,
    /// briefly), to count the ops that wait on them: meant for a scrape
    /// every few seconds, not for every op.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> depengine::Result<()> {
    /// let engine = depengine::Engine::builder().metrics_timing(true).build()?;
    /// let v = engine.var(0u64);
    /// for _ in 0..10 {
    ///     engine.op("add").write(&v).run(|(), (mut v,)| {
    ///         *v += 1;
    ///         Ok(())
    ///     });
    /// }
    /// engine.wait_for_all().await?;
    /// let m = engine.metrics();
    /// assert_eq!(m.completed, m.pushed);
    /// assert_eq!(m.in_flight, 0);
    /// assert_eq!(m.pools.iter().map(|p| p.ops_run).sum::<u64>(), 10);
    /// assert!(m.run_time().p50().is_some());
    /// # Ok(()) }
    /// ```
    pub fn metrics(&self) -> Metrics {
        let shared = self.shared();
        let pools = shared.dispatcher.pool_metrics();
        let (waiting_on_vars, cancelled_on_vars) = self.waiting_on_vars();
        let (failed, skipped, cancelled) = shared.core.counts.failures();
        // Completions are read before pushes: an op is pushed before it
        // completes, so the difference never goes below zero.
        let completed = shared.core.counts.completed.get();
        let pushed = shared.tracker.with_side(|intake| intake.pushed);
        let (throttle_waits, throttle_passes) = shared.throttle_looks.get();
        Metrics {
            pushed,
            completed,
            failed,
            skipped,
            cancelled,
            in_flight: pushed.saturating_sub(completed),
            waiting_on_vars,
            cancelled_on_vars,
            max_in_flight: shared.limit().map(|limit| limit.max()),
            slots_used: shared.limit().map_or(0, |limit| limit.max() - limit.free()),
            refused_full: shared.limit().map_or(0, |limit| limit.refused()),
            throttle_waits,
            throttle_passes,
            timing: shared.config.topology.timing,
            pools,
        }
    }

    /// Ops queued on the engine's vars, each counted once: those that
    /// will run, and those cancelled while queued.
    fn waiting_on_vars(&self) -> (usize, usize) {
        let (mut waiting, mut cancelled) = (HashSet::new(), HashSet::new());
        self.shared().visit_vars(|_, queued| {
            for (op, _) in queued {
                let key = op.as_ptr().as_ptr() as usize;
                if op.is_resolved_early() {
                    cancelled.insert(key)
                } else {
                    waiting.insert(key)
                };
            }
        });
        (waiting.len(), cancelled.len())
    }
}
