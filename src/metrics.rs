//! What [`Engine::metrics`](crate::Engine::metrics) returns: a snapshot of
//! the engine's counters, its pools and, when timing is on, distributions
//! of queue waits and run times, in the spirit of Tokio's `RuntimeMetrics`.
//!
//! Counters only grow; gauges (ops queued, running, waiting on vars) are
//! what each was as it was read. The parts are read one after the other
//! while ops go on, so a snapshot taken under load is not one instant:
//! `completed` may be read after an op counted in no gauge completed.

use std::fmt;
use std::time::Duration;

use crate::device::{Device, Lane};

/// Sub-buckets per power of two: a bucket's upper bound is at most 1/8
/// (12.5%) above any duration it holds.
const SUB: usize = 8;

/// Powers of two from 256 ns (2^8) up to 2^31 ns (about 2.1 s) that the
/// buckets divide.
const OCTAVES: usize = 23;

/// Buckets of a [`Histogram`], log-linear as Tokio's: bucket 0 holds
/// durations under 256 ns; then each power of two from 256 ns to about
/// 2.1 s is cut into 8 equal buckets (so a bucket spans 1/8 of its lower
/// bound: 32 ns wide from 256 ns, 125 µs wide from 1 ms); the last holds
/// everything from 2^31 ns (about 2.1 s) up.
pub const HISTOGRAM_BUCKETS: usize = 1 + OCTAVES * SUB + 1;

/// The bucket of a duration of `ns` nanoseconds: the power of two below it
/// and the next three bits.
#[inline]
pub(crate) fn bucket_of(ns: u64) -> usize {
    if ns < 256 {
        return 0;
    }
    let e = 63 - ns.leading_zeros() as usize;
    if e >= 8 + OCTAVES {
        return HISTOGRAM_BUCKETS - 1;
    }
    let m = ((ns >> (e - 3)) & 7) as usize;
    1 + (e - 8) * SUB + m
}

/// A distribution of durations in fixed log-linear buckets (see
/// [`HISTOGRAM_BUCKETS`]); quantiles are read as the upper bound of the
/// bucket they fall in, so they are at most 12.5% above the true value
/// (fine enough for a p99 objective).
///
/// # Examples
///
/// ```
/// let engine = depengine::Engine::builder().metrics_timing(true).build()?;
/// for _ in 0..10 {
///     engine.op("work").run(|(), ()| Ok(())).blocking_wait()?;
/// }
/// // A worker records an op's times just after the op completes; a
/// // draining shutdown waits for that too.
/// engine.blocking_shutdown(depengine::ShutdownMode::Drain)?;
/// let run_time = engine.metrics().run_time();
/// assert_eq!(run_time.count(), 10);
/// assert!(run_time.p50() <= run_time.p99());
/// # Ok::<(), depengine::Error>(())
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct Histogram {
    counts: [u64; HISTOGRAM_BUCKETS],
    sum: Duration,
}

/// A summary: how many, their sum and mean, the median and the 99th
/// percentile (its bucket counts, one per bucket, are in
/// [`counts`](Histogram::counts)).
impl fmt::Debug for Histogram {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("Histogram");
        d.field("count", &self.count()).field("sum", &self.sum);
        if self.count() > 0 {
            let (mean, p50, p99) = (self.mean(), self.p50(), self.p99());
            d.field("mean", &mean.unwrap_or_default());
            d.field("p50", &p50.unwrap_or_default()).field("p99", &p99.unwrap_or_default());
        }
        d.finish_non_exhaustive()
    }
}

impl Default for Histogram {
    fn default() -> Self {
        Self { counts: [0; HISTOGRAM_BUCKETS], sum: Duration::ZERO }
    }
}

impl Histogram {
    /// A histogram of these bucket counts, whose durations add up to `sum`.
    pub(crate) fn from_counts(counts: [u64; HISTOGRAM_BUCKETS], sum: Duration) -> Self {
        Self { counts, sum }
    }

    /// Adds `other`'s counts to these.
    pub(crate) fn merge(&mut self, other: &Histogram) {
        for (mine, theirs) in self.counts.iter_mut().zip(other.counts.iter()) {
            *mine += theirs;
        }
        self.sum += other.sum;
    }

    /// The durations recorded, added up.
    ///
    /// # Examples
    ///
    /// ```
    /// let engine = depengine::Engine::builder().metrics_timing(true).build()?;
    /// for _ in 0..10 {
    ///     engine.op("work").run(|(), ()| Ok(())).blocking_wait()?;
    /// }
    /// // A worker records an op's times just after the op completes; a
    /// // draining shutdown waits for that too.
    /// engine.blocking_shutdown(depengine::ShutdownMode::Drain)?;
    /// let h = engine.metrics().run_time();
    /// assert!(h.sum() >= h.mean().unwrap());
    /// # Ok::<(), depengine::Error>(())
    /// ```
    pub fn sum(&self) -> Duration {
        self.sum
    }

    /// Their mean; `None` if nothing was recorded.
    ///
    /// # Examples
    ///
    /// ```
    /// let engine = depengine::Engine::builder().metrics_timing(true).build()?;
    /// for _ in 0..10 {
    ///     engine.op("work").run(|(), ()| Ok(())).blocking_wait()?;
    /// }
    /// // A worker records an op's times just after the op completes; a
    /// // draining shutdown waits for that too.
    /// engine.blocking_shutdown(depengine::ShutdownMode::Drain)?;
    /// let h = engine.metrics().run_time();
    /// assert_eq!(h.mean(), Some(h.sum() / 10));
    /// # Ok::<(), depengine::Error>(())
    /// ```
    pub fn mean(&self) -> Option<Duration> {
        let n = self.count();
        (n > 0).then(|| self.sum / u32::try_from(n).unwrap_or(u32::MAX))
    }

    /// The count in each bucket.
    ///
    /// # Examples
    ///
    /// ```
    /// let engine = depengine::Engine::builder().metrics_timing(true).build()?;
    /// for _ in 0..10 {
    ///     engine.op("work").run(|(), ()| Ok(())).blocking_wait()?;
    /// }
    /// // A worker records an op's times just after the op completes; a
    /// // draining shutdown waits for that too.
    /// engine.blocking_shutdown(depengine::ShutdownMode::Drain)?;
    /// let h = engine.metrics().run_time();
    /// assert_eq!(h.counts().iter().sum::<u64>(), h.count());
    /// # Ok::<(), depengine::Error>(())
    /// ```
    pub fn counts(&self) -> &[u64; HISTOGRAM_BUCKETS] {
        &self.counts
    }

    /// The durations recorded.
    ///
    /// # Examples
    ///
    /// ```
    /// let engine = depengine::Engine::builder().metrics_timing(true).build()?;
    /// for _ in 0..10 {
    ///     engine.op("work").run(|(), ()| Ok(())).blocking_wait()?;
    /// }
    /// // A worker records an op's times just after the op completes; a
    /// // draining shutdown waits for that too.
    /// engine.blocking_shutdown(depengine::ShutdownMode::Drain)?;
    /// assert_eq!(engine.metrics().run_time().count(), 10);
    /// # Ok::<(), depengine::Error>(())
    /// ```
    pub fn count(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// The upper bound of bucket `k` (`None` for the last, which has none).
    ///
    /// # Examples
    ///
    /// ```
    /// use depengine::metrics::{Histogram, HISTOGRAM_BUCKETS};
    /// use std::time::Duration;
    /// assert_eq!(Histogram::bucket_upper_bound(0), Some(Duration::from_nanos(256)));
    /// assert_eq!(Histogram::bucket_upper_bound(1), Some(Duration::from_nanos(288)));
    /// assert_eq!(Histogram::bucket_upper_bound(8), Some(Duration::from_nanos(512)));
    /// assert_eq!(Histogram::bucket_upper_bound(HISTOGRAM_BUCKETS - 1), None);
    /// ```
    pub fn bucket_upper_bound(k: usize) -> Option<Duration> {
        match k {
            0 => Some(Duration::from_nanos(256)),
            _ if k + 1 < HISTOGRAM_BUCKETS => {
                let (e, m) = (8 + (k - 1) / SUB, (k - 1) % SUB);
                Some(Duration::from_nanos((1u64 << e) + ((m as u64 + 1) << (e - 3))))
            }
            _ => None,
        }
    }

    /// The upper bound of the bucket that holds quantile `q` (0 to 1) of the
    /// durations; `None` if nothing was recorded, or if the quantile falls in
    /// the last bucket. A `q` outside 0 to 1 is clamped.
    ///
    /// # Examples
    ///
    /// ```
    /// let engine = depengine::Engine::builder().metrics_timing(true).build()?;
    /// for _ in 0..10 {
    ///     engine.op("work").run(|(), ()| Ok(())).blocking_wait()?;
    /// }
    /// // A worker records an op's times just after the op completes; a
    /// // draining shutdown waits for that too.
    /// engine.blocking_shutdown(depengine::ShutdownMode::Drain)?;
    /// let h = engine.metrics().run_time();
    /// assert!(h.quantile(0.9) >= h.quantile(0.1));
    /// assert_eq!(h.quantile(2.0), h.quantile(1.0)); // clamped
    /// # Ok::<(), depengine::Error>(())
    /// ```
    pub fn quantile(&self, q: f64) -> Option<Duration> {
        let total = self.count();
        if total == 0 {
            return None;
        }
        // The rank of the quantile, 1-based: the smallest count of
        // durations that covers a fraction `q` of them.
        let rank = ((q.clamp(0.0, 1.0) * total as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (k, &n) in self.counts.iter().enumerate() {
            seen += n;
            if seen >= rank {
                return Self::bucket_upper_bound(k);
            }
        }
        None
    }

    /// [`quantile`](Self::quantile) 0.5.
    ///
    /// # Examples
    ///
    /// ```
    /// let engine = depengine::Engine::builder().metrics_timing(true).build()?;
    /// for _ in 0..10 {
    ///     engine.op("work").run(|(), ()| Ok(())).blocking_wait()?;
    /// }
    /// // A worker records an op's times just after the op completes; a
    /// // draining shutdown waits for that too.
    /// engine.blocking_shutdown(depengine::ShutdownMode::Drain)?;
    /// assert_eq!(engine.metrics().queue_wait().p50(), engine.metrics().queue_wait().quantile(0.5));
    /// # Ok::<(), depengine::Error>(())
    /// ```
    pub fn p50(&self) -> Option<Duration> {
        self.quantile(0.5)
    }

    /// [`quantile`](Self::quantile) 0.99.
    ///
    /// # Examples
    ///
    /// ```
    /// let engine = depengine::Engine::builder().metrics_timing(true).build()?;
    /// for _ in 0..10 {
    ///     engine.op("work").run(|(), ()| Ok(())).blocking_wait()?;
    /// }
    /// // A worker records an op's times just after the op completes; a
    /// // draining shutdown waits for that too.
    /// engine.blocking_shutdown(depengine::ShutdownMode::Drain)?;
    /// let h = engine.metrics().run_time();
    /// assert!(h.p99() >= h.p50());
    /// # Ok::<(), depengine::Error>(())
    /// ```
    pub fn p99(&self) -> Option<Duration> {
        self.quantile(0.99)
    }
}

/// One worker pool: a CPU device's, a GPU device's lane, or the
/// prioritized lane's.
///
/// # Examples
///
/// ```
/// use depengine::{Device, Lane};
/// let engine = depengine::Engine::builder().cpu_workers(2).build()?;
/// engine.op("first").run(|(), ()| Ok(())).blocking_wait()?;
/// engine.blocking_shutdown(depengine::ShutdownMode::Drain)?; // the worker's counts are in
/// let metrics = engine.metrics();
/// let pool = metrics.pools.iter().find(|p| p.device == Device::Cpu(0) && p.lane == Lane::Normal).unwrap();
/// assert_eq!((pool.workers, pool.ops_run), (2, 1));
/// # Ok::<(), depengine::Error>(())
/// ```
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct PoolMetrics {
    /// The device its ops target (`Cpu(0)` for the prioritized lane).
    pub device: Device,
    /// Its lane: `Normal`, `Prioritized`, or a GPU's copy lane.
    pub lane: Lane,
    /// The pool's threads' name prefix (each thread adds `-k`).
    pub name: String,
    /// Its worker threads.
    pub workers: usize,
    /// Ready ops queued, not yet taken by a worker (an op a worker keeps to
    /// run next is not counted).
    pub queued: usize,
    /// Workers running an op now (counted until the worker's run returns,
    /// which may be just after the op completed).
    pub running: usize,
    /// Ops its workers took and ran, since the pool started. An op resolved
    /// before it started (aborted, cancelled) passes through a worker
    /// without running its body, and is counted too.
    pub ops_run: u64,
    /// The time its workers spent on ops (neither watching the queues nor
    /// parked), summed over the workers: compare with `workers` times the
    /// pool's age for its load.
    pub busy: Duration,
    /// How long its ops waited, ready, before a worker started them (only
    /// with timing on: [`EngineBuilder::metrics_timing`](crate::EngineBuilder::metrics_timing)).
    pub queue_wait: Histogram,
    /// How long its workers spent in each op's body (for an async op, the
    /// part of the body that ran on the worker; only with timing on).
    /// Recorded when the run returns, which may be just after the op
    /// completed.
    pub run_time: Histogram,
}

/// A snapshot of an engine's work (see the module docs for what a
/// snapshot taken under load means).
///
/// # Examples
///
/// ```
/// let engine = depengine::Engine::new();
/// let v = engine.var(0);
/// engine.op("a").write(&v).run(|(), _| Ok(())).blocking_wait()?;
/// let _ = engine.op("b").write(&v).run(|(), _| -> depengine::Result<(), _> { Err("no".into()) }).blocking_wait();
/// engine.blocking_shutdown(depengine::ShutdownMode::Drain)?; // every count is in
/// let m = engine.metrics();
/// assert_eq!((m.failed, m.in_flight), (1, 0));
/// assert!(m.completed >= 2);
/// # Ok::<(), depengine::Error>(())
/// ```
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Metrics {
    /// Ops pushed: user ops, and the engine's own (each `wait_for_var`,
    /// acquire, deletion, and bulk segment).
    pub pushed: u64,
    /// Ops completed, whatever their outcome (counted as `pushed` is).
    pub completed: u64,
    /// Ops that failed: their body returned an error or panicked, or
    /// dropped its completion token.
    pub failed: u64,
    /// Ops skipped for an error on a var they use.
    pub skipped: u64,
    /// Ops cancelled before they started: aborted, their handle dropped
    /// (with `cancel_on_drop`), or a cancelling shutdown.
    pub cancelled: u64,
    /// Ops pushed and not completed: `pushed - completed`.
    pub in_flight: u64,
    /// Ops queued on a var behind another op: they wait for their vars.
    /// Ops cancelled while queued are not counted here, but in
    /// `cancelled_on_vars`.
    pub waiting_on_vars: usize,
    /// Ops cancelled while queued on a var (aborted, their handle dropped
    /// with `cancel_on_drop`, a cancelling shutdown): their handles have
    /// resolved, and each leaves its queue, and gives its slot among the
    /// ops in flight back, as the var reaches it.
    pub cancelled_on_vars: usize,
    /// The bound on user ops in flight
    /// ([`EngineBuilder::max_in_flight`](crate::EngineBuilder::max_in_flight)),
    /// if the engine has one.
    pub max_in_flight: Option<usize>,
    /// Slots of that bound in use: user ops pushed or reserved and not
    /// yet gone (0 without a bound).
    pub slots_used: usize,
    /// Pushes refused because the bound was reached ([`Error::is_full`](crate::Error::is_full)).
    pub refused_full: u64,
    /// Times a pushing thread past the soft bound on ops in flight
    /// ([`EngineBuilder::throttle_at`](crate::EngineBuilder::throttle_at))
    /// waited for the workers to drain.
    pub throttle_waits: u64,
    /// Times a pushing thread past that bound went on, or stopped waiting,
    /// because the workers had completed nothing meanwhile (they were held
    /// by long ops, or by something outside the engine).
    pub throttle_passes: u64,
    /// Whether queue waits and run times are measured.
    pub timing: bool,
    /// The pools started so far.
    pub pools: Vec<PoolMetrics>,
}

impl Metrics {
    /// Ready ops queued on all pools.
    ///
    /// # Examples
    ///
    /// ```
    /// let engine = depengine::Engine::new();
    /// engine.wait_for_all().blocking_wait()?;
    /// assert_eq!(engine.metrics().queued(), 0);
    /// # Ok::<(), depengine::Error>(())
    /// ```
    pub fn queued(&self) -> usize {
        self.pools.iter().map(|p| p.queued).sum()
    }

    /// Workers running an op now, on all pools.
    ///
    /// # Examples
    ///
    /// ```
    /// let engine = depengine::Engine::new();
    /// let (tx, rx) = std::sync::mpsc::channel::<()>();
    /// let h = engine.op("long").run(move |(), ()| { rx.recv().ok(); Ok(()) });
    /// while engine.metrics().running() == 0 {
    ///     std::thread::yield_now();
    /// }
    /// tx.send(()).unwrap();
    /// h.blocking_wait()?;
    /// # Ok::<(), depengine::Error>(())
    /// ```
    pub fn running(&self) -> usize {
        self.pools.iter().map(|p| p.running).sum()
    }

    /// Queue waits over all pools.
    ///
    /// # Examples
    ///
    /// ```
    /// let engine = depengine::Engine::builder().metrics_timing(true).build()?;
    /// for _ in 0..10 {
    ///     engine.op("work").run(|(), ()| Ok(())).blocking_wait()?;
    /// }
    /// // A worker records an op's times just after the op completes; a
    /// // draining shutdown waits for that too.
    /// engine.blocking_shutdown(depengine::ShutdownMode::Drain)?;
    /// assert_eq!(engine.metrics().queue_wait().count(), 10);
    /// # Ok::<(), depengine::Error>(())
    /// ```
    pub fn queue_wait(&self) -> Histogram {
        let mut all = Histogram::default();
        self.pools.iter().for_each(|p| all.merge(&p.queue_wait));
        all
    }

    /// Run times over all pools.
    ///
    /// # Examples
    ///
    /// ```
    /// let engine = depengine::Engine::builder().metrics_timing(true).build()?;
    /// for _ in 0..10 {
    ///     engine.op("work").run(|(), ()| Ok(())).blocking_wait()?;
    /// }
    /// // A worker records an op's times just after the op completes; a
    /// // draining shutdown waits for that too.
    /// engine.blocking_shutdown(depengine::ShutdownMode::Drain)?;
    /// let slowest = engine.metrics().run_time().quantile(1.0);
    /// assert!(slowest.is_some());
    /// # Ok::<(), depengine::Error>(())
    /// ```
    pub fn run_time(&self) -> Histogram {
        let mut all = Histogram::default();
        self.pools.iter().for_each(|p| all.merge(&p.run_time));
        all
    }
}

#[cfg(all(test, not(depengine_loom)))]
mod tests;
