//! Events a body logs are attributed to its op's span by a standard
//! subscriber (tracing-subscriber's registry, which tracks the current span
//! per thread): a sync body on a worker, an async body, and a future op
//! after it awaited.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id};
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};
use tracing_subscriber::registry::Registry;

/// An event: the op name of the span it was logged in, and its message.
type Logged = (Option<String>, String);

/// Op names by span id, and the events logged.
#[derive(Clone, Default)]
struct Attribution {
    ops: Arc<Mutex<HashMap<u64, String>>>,
    events: Arc<Mutex<Vec<Logged>>>,
}

struct Grab<'a>(&'a str, Option<String>);

impl Visit for Grab<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == self.0 {
            self.1 = Some(format!("{value:?}").trim_matches('"').to_owned());
        }
    }
}

impl<S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>> Layer<S> for Attribution {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, _: Context<'_, S>) {
        if attrs.metadata().name() == "op" {
            let mut name = Grab("name", None);
            attrs.record(&mut name);
            self.ops.lock().unwrap().insert(id.into_u64(), name.1.unwrap_or_default());
        }
    }

    fn on_event(&self, event: &tracing::Event<'_>, ctx: Context<'_, S>) {
        let mut message = Grab("message", None);
        event.record(&mut message);
        let op = ctx
            .event_span(event)
            .and_then(|span| self.ops.lock().unwrap().get(&span.id().into_u64()).cloned());
        self.events.lock().unwrap().push((op, message.1.unwrap_or_default()));
    }
}

#[test]
fn what_a_body_logs_is_attributed_to_its_op() {
    let seen = Attribution::default();
    let subscriber = Registry::default().with(seen.clone());
    let _default = tracing::subscriber::set_global_default(subscriber);
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    runtime.block_on(async {
        let engine = depengine::Engine::builder().cpu_workers(2).bulk_size(1).build().unwrap();
        let v = engine.var(0u32);
        engine
            .op("sync-op")
            .write(&v)
            .run(|(), (mut v,)| {
                tracing::info!("inside the sync body");
                *v += 1;
                Ok(())
            })
            .await
            .unwrap();
        engine
            .op("async-op")
            .read(&v)
            .run_async(|(_v,), (), done| {
                tracing::info!("inside the async body");
                done.succeed(());
            })
            .await
            .unwrap();
        engine
            .op("future-op")
            .read(&v)
            .spawn(|(_v,), ()| async move {
                tokio::task::yield_now().await;
                tracing::info!("after an await in the future op");
                Ok(())
            })
            .await
            .unwrap();
        engine.shutdown(depengine::ShutdownMode::Drain).await.unwrap();
    });
    let events = seen.events.lock().unwrap().clone();
    for (op, message) in [
        ("sync-op", "inside the sync body"),
        ("async-op", "inside the async body"),
        ("future-op", "after an await in the future op"),
    ] {
        let got = events
            .iter()
            .find(|(_, m)| m == message)
            .unwrap_or_else(|| panic!("no event {message:?}: {events:?}"));
        assert_eq!(got.0.as_deref(), Some(op), "{message:?} attributed to {:?}", got.0);
    }
}
