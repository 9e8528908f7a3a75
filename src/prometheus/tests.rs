use std::collections::HashMap;

use prometheus_client::registry::Registry;

use super::EngineCollector;
use crate::Engine;

/// The registry's text, as a scraper reads it: each sample's name with its
/// labels, and its value.
fn scrape(registry: &Registry) -> HashMap<String, f64> {
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, registry).unwrap();
    text.lines()
        .filter(|line| !line.starts_with('#'))
        .map(|line| {
            let (name, value) = line.rsplit_once(' ').unwrap();
            (name.to_owned(), value.parse().unwrap())
        })
        .collect()
}

fn engine() -> Engine {
    Engine::builder().cpu_workers(1).bulk_size(1).metrics_timing(true).build().unwrap()
}

#[test]
fn a_scrape_reads_what_the_engine_counted() {
    let engine = engine();
    let mut registry = Registry::with_prefix("app");
    registry.register_collector(Box::new(EngineCollector::new(&engine)));
    let v = engine.var(0u64);
    for _ in 0..5 {
        engine
            .op("add")
            .write(&v)
            .run_detached(|(), (mut v,)| {
                *v += 1;
                Ok(())
            })
            .unwrap();
    }
    engine.op("fails").write(&v).run_detached(|(), _| Err("bad input".into())).unwrap();
    assert!(engine.wait_for_all().blocking_wait().is_err());
    let m = engine.metrics();
    let s = scrape(&registry);
    assert_eq!(s["app_engine_ops_pushed_total"], m.pushed as f64);
    assert_eq!(s["app_engine_ops_completed_total"], m.completed as f64);
    assert_eq!(s["app_engine_ops_failed_total"], 1.0);
    assert_eq!(s["app_engine_ops_in_flight"], 0.0);
    let pool = &m.pools[0].name;
    let ran = s[&format!("app_engine_pool_ops_run_total{{pool=\"{pool}\"}}")];
    assert_eq!(ran, m.pools[0].ops_run as f64);
    assert!(ran >= 6.0, "ran {ran}");
    // The run-time histogram: cumulative, ending at the count.
    let count = s[&format!("app_engine_run_seconds_count{{pool=\"{pool}\"}}")];
    assert_eq!(count, m.pools[0].run_time.count() as f64);
    let mut buckets: Vec<(f64, f64)> = s
        .iter()
        .filter_map(|(k, &v)| {
            let le = k.strip_prefix("app_engine_run_seconds_bucket{le=\"")?;
            let le = le.strip_suffix(&format!("\",pool=\"{pool}\"}}"))?;
            Some((if le == "+Inf" { f64::INFINITY } else { le.parse().unwrap() }, v))
        })
        .collect();
    assert_eq!(buckets.len(), crate::metrics::HISTOGRAM_BUCKETS);
    buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
    assert!(buckets.windows(2).all(|w| w[0].1 <= w[1].1), "not cumulative: {buckets:?}");
    assert_eq!(buckets.last().unwrap(), &(f64::INFINITY, count));
}

#[test]
fn the_collector_does_not_keep_the_engine_open() {
    let engine = engine();
    let collector = EngineCollector::new(&engine);
    let mut registry = Registry::default();
    registry.register_collector(Box::new(collector.clone()));
    assert!(scrape(&registry).contains_key("engine_ops_pushed_total"));
    let weak = engine.downgrade();
    drop(engine);
    assert!(weak.upgrade().is_none(), "the collector kept the engine");
    assert!(scrape(&registry).is_empty(), "a gone engine's metrics were exported");
}
