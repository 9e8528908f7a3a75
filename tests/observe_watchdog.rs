//! The watchdog warns, once, about an op that waits on vars past its
//! threshold, naming the chain down to the holder; and not about an op
//! that waits less.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tracing::field::{Field, Visit};
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};

/// The watchdog's warnings, as messages.
#[derive(Clone, Default)]
struct Warnings(Arc<Mutex<Vec<String>>>);

struct Message(String);

impl Visit for Message {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            self.0 = format!("{value:?}");
        }
    }
}

impl<S: tracing::Subscriber> Layer<S> for Warnings {
    fn on_event(&self, event: &tracing::Event<'_>, _: Context<'_, S>) {
        if event.metadata().target() == "depengine::watchdog" {
            let mut m = Message(String::new());
            event.record(&mut m);
            self.0.lock().unwrap().push(m.0);
        }
    }
}

#[test]
fn the_watchdog_names_the_chain_of_an_op_waiting_too_long() {
    let warnings = Warnings::default();
    tracing::subscriber::set_global_default(tracing_subscriber::registry().with(warnings.clone())).unwrap();
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    runtime.block_on(async {
        let engine = depengine::EngineBuilder::from_env()
            .cpu_workers(2)
            // Ops by their own names: a bulk segment is named `bulk`.
            .bulk_size(1)
            .thread_name("wd")
            // Far above the short hold below, even on a loaded machine.
            .watchdog(Duration::from_millis(150))
            .build()
            .unwrap();
        let v = engine.var_named("ledger", 0u64);
        // A short hold: no warning.
        let guard = v.write().await.unwrap();
        let quick = engine.op("quick").read(&v).run(|(_v,), ()| Ok(()));
        tokio::time::sleep(Duration::from_millis(5)).await;
        drop(guard);
        quick.await.unwrap();
        // A long one: one warning, naming the chain. (After a look of the
        // watchdog: its clock runs, so the warning says how long.)
        tokio::time::sleep(Duration::from_millis(60)).await;
        let guard = v.write().await.unwrap();
        let stuck = engine.op("audit").read(&v).run(|(_v,), ()| Ok(()));
        let start = std::time::Instant::now();
        while warnings.0.lock().unwrap().is_empty() {
            assert!(start.elapsed() < Duration::from_secs(10), "no warning");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        // Longer than another look: still one warning for the op.
        tokio::time::sleep(Duration::from_millis(200)).await;
        drop(guard);
        stuck.await.unwrap();
        engine.shutdown(depengine::ShutdownMode::Drain).await.unwrap();
    });
    let warnings = warnings.0.lock().unwrap().clone();
    assert_eq!(warnings.len(), 1, "one warning per op that waits too long: {warnings:?}");
    assert!(warnings[0].contains("`audit` waits for `ledger`"), "{warnings:?}");
    assert!(warnings[0].contains("held (write) by `acquire` (for "), "since when: {warnings:?}");
    assert!(!warnings[0].contains("quick"), "{warnings:?}");
}
