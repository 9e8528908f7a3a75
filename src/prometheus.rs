//! The engine's [`Metrics`] as a Prometheus collector (feature
//! `prometheus-client`), so that a service that embeds the engine registers
//! one value instead of writing the encoding again.
//!
//! ```
//! use depengine::prometheus::EngineCollector;
//! use prometheus_client::registry::Registry;
//!
//! let engine = depengine::Engine::builder().metrics_timing(true).build()?;
//! let mut registry = Registry::with_prefix("app");
//! registry.register_collector(Box::new(EngineCollector::new(&engine)));
//!
//! engine.op("work").run_detached(|(), ()| Ok(()))?;
//! engine.wait_for_all().blocking_wait()?;
//! let mut text = String::new();
//! prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
//! assert!(text.contains("app_engine_ops_completed_total 1"));
//! # Ok::<(), depengine::Error>(())
//! ```
//!
//! What it exports, read from one [`Engine::metrics`] snapshot per scrape
//! (a snapshot visits every live var briefly: meant for a scrape every few
//! seconds):
//!
//! | metric | type | from |
//! |---|---|---|
//! | `engine_ops_{pushed,completed,failed,skipped,cancelled}` | counter | [`Metrics::pushed`] … |
//! | `engine_pushes_refused_full` | counter | [`Metrics::refused_full`] |
//! | `engine_ops_in_flight`, `engine_ops_waiting_on_vars`, `engine_ops_cancelled_on_vars` | gauge | |
//! | `engine_slots_used`, `engine_max_in_flight` (0: no bound) | gauge | |
//! | `engine_pool_{workers,queued,running}` | gauge, label `pool` | [`PoolMetrics`] |
//! | `engine_pool_ops_run`, `engine_pool_busy_seconds` | counter, label `pool` | |
//! | `engine_queue_wait_seconds`, `engine_run_seconds` | histogram, label `pool` | [`PoolMetrics::queue_wait`], [`PoolMetrics::run_time`] |
//!
//! The histograms keep the engine's log-linear buckets (a quantile read
//! from them is at most 12.5% high): [`HISTOGRAM_BUCKETS`] series per pool
//! each, and empty (count 0) unless the engine was built with
//! [`metrics_timing`](crate::EngineBuilder::metrics_timing).
//!
//! The collector holds a [`WeakEngine`]: it does not keep the engine open,
//! and once the engine is gone it exports nothing.
//!
//! [`Metrics`]: crate::metrics::Metrics
//! [`Metrics::pushed`]: crate::metrics::Metrics::pushed
//! [`Metrics::refused_full`]: crate::metrics::Metrics::refused_full
//! [`PoolMetrics`]: crate::metrics::PoolMetrics
//! [`PoolMetrics::queue_wait`]: crate::metrics::PoolMetrics::queue_wait
//! [`PoolMetrics::run_time`]: crate::metrics::PoolMetrics::run_time
//! [`HISTOGRAM_BUCKETS`]: crate::metrics::HISTOGRAM_BUCKETS

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Unit;

use crate::engine::{Engine, WeakEngine};
use crate::metrics::{HISTOGRAM_BUCKETS, Histogram, Metrics, PoolMetrics};

/// A [`Collector`] that reads the engine's metrics at each scrape; see the
/// [module](self) for what it exports.
#[derive(Debug, Clone)]
pub struct EngineCollector {
    engine: WeakEngine,
}

impl EngineCollector {
    /// A collector of `engine`'s metrics (without keeping it open).
    pub fn new(engine: &Engine) -> Self {
        Self { engine: engine.downgrade() }
    }
}

impl Collector for EngineCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let Some(engine) = self.engine.upgrade() else { return Ok(()) };
        let m = engine.metrics();
        drop(engine);
        encode_engine(&m, &mut encoder)?;
        encode_pools(&m, &mut encoder)
    }
}

/// The engine-wide counters and gauges.
fn encode_engine(m: &Metrics, encoder: &mut DescriptorEncoder) -> Result<(), std::fmt::Error> {
    let counters = [
        ("engine_ops_pushed", "Ops pushed", m.pushed),
        ("engine_ops_completed", "Ops completed", m.completed),
        ("engine_ops_failed", "Ops that failed", m.failed),
        ("engine_ops_skipped", "Ops skipped for an error on a var", m.skipped),
        ("engine_ops_cancelled", "Ops cancelled before they started", m.cancelled),
        ("engine_pushes_refused_full", "Pushes refused at the bound on ops in flight", m.refused_full),
    ];
    for (name, help, value) in counters {
        let counter = ConstCounter::new(value);
        counter.encode(encoder.encode_descriptor(name, help, None, counter.metric_type())?)?;
    }
    let gauges = [
        ("engine_ops_in_flight", "Ops pushed and not completed", m.in_flight),
        ("engine_ops_waiting_on_vars", "Ops queued on a var", m.waiting_on_vars as u64),
        ("engine_ops_cancelled_on_vars", "Ops cancelled while queued on a var", m.cancelled_on_vars as u64),
        ("engine_slots_used", "Slots of the bound on ops in flight in use", m.slots_used as u64),
        ("engine_max_in_flight", "The bound on ops in flight (0: none)", m.max_in_flight.unwrap_or(0) as u64),
    ];
    for (name, help, value) in gauges {
        let gauge = ConstGauge::new(gauge_value(value));
        gauge.encode(encoder.encode_descriptor(name, help, None, gauge.metric_type())?)?;
    }
    Ok(())
}

/// A count as a gauge's value (counts past `i64::MAX` saturate).
fn gauge_value(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// The per-pool families: gauges, counters and the two distributions.
fn encode_pools(m: &Metrics, encoder: &mut DescriptorEncoder) -> Result<(), std::fmt::Error> {
    let labels = |p: &PoolMetrics| [("pool", p.name.clone())];
    type Count = fn(&PoolMetrics) -> usize;
    let gauges: [(&str, &str, Count); 3] = [
        ("engine_pool_workers", "Worker threads of a pool", |p| p.workers),
        ("engine_pool_queued", "Ready ops queued on a pool", |p| p.queued),
        ("engine_pool_running", "Workers running an op", |p| p.running),
    ];
    for (name, help, get) in gauges {
        let mut family = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
        for p in &m.pools {
            ConstGauge::new(gauge_value(get(p) as u64)).encode(family.encode_family(&labels(p))?)?;
        }
    }
    let mut family =
        encoder.encode_descriptor("engine_pool_ops_run", "Ops a pool ran", None, MetricType::Counter)?;
    for p in &m.pools {
        ConstCounter::new(p.ops_run).encode(family.encode_family(&labels(p))?)?;
    }
    let seconds = Unit::Seconds;
    let help = "Time workers spent on ops";
    let mut family =
        encoder.encode_descriptor("engine_pool_busy", help, Some(&seconds), MetricType::Counter)?;
    for p in &m.pools {
        ConstCounter::new(p.busy.as_secs_f64()).encode(family.encode_family(&labels(p))?)?;
    }
    type Dist = fn(&PoolMetrics) -> &Histogram;
    let histograms: [(&str, &str, Dist); 2] = [
        ("engine_queue_wait", "Time ready ops waited for a worker", |p| &p.queue_wait),
        ("engine_run", "Time workers spent in op bodies", |p| &p.run_time),
    ];
    for (name, help, get) in histograms {
        let mut family = encoder.encode_descriptor(name, help, Some(&seconds), MetricType::Histogram)?;
        for p in &m.pools {
            let h = get(p);
            family.encode_family(&labels(p))?.encode_histogram::<NoLabelSet>(
                h.sum().as_secs_f64(),
                h.count(),
                &buckets(h),
                None,
            )?;
        }
    }
    Ok(())
}

/// A histogram's buckets as (upper bound in seconds, count in the bucket):
/// the encoder makes them cumulative.
fn buckets(h: &Histogram) -> Vec<(f64, u64)> {
    (0..HISTOGRAM_BUCKETS)
        .map(|k| {
            let upper = Histogram::bucket_upper_bound(k).map_or(f64::INFINITY, |d| d.as_secs_f64());
            (upper, h.counts()[k])
        })
        .collect()
}

#[cfg(test)]
mod tests;
