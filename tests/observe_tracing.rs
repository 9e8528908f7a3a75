//! Tracing: each op's span and its life-cycle events, and what a body
//! logs attributed to its op's span by a standard subscriber.
//!
//! The two checks install their subscribers differently (one for the test
//! thread only, one for the whole process, since the engine's workers log
//! too), so neither sees the other's ops.

/// Each op has a span `op` with its name, device and lane, and events when
/// it is pushed, started and finished.
mod spans {
    use std::sync::{Arc, Mutex};

    use depengine::Lane;
    use tracing::field::{Field, Visit};
    use tracing::span::{Attributes, Id, Record};
    use tracing::{Event, Metadata, Subscriber};

    /// Records span fields and the events emitted inside each span.
    #[derive(Clone, Default)]
    struct Recorder {
        spans: Arc<Mutex<Vec<String>>>,
        events: Arc<Mutex<Vec<(u64, String)>>>,
        current: Arc<Mutex<Vec<u64>>>,
        /// The most verbose level it records (`None`: every level).
        max: Option<tracing::Level>,
    }

    struct Fields(String);

    impl Visit for Fields {
        fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
            self.0.push_str(&format!("{}={:?} ", field.name(), value));
        }
    }

    impl Subscriber for Recorder {
        fn enabled(&self, metadata: &Metadata<'_>) -> bool {
            self.max.is_none_or(|max| *metadata.level() <= max)
        }
        fn new_span(&self, span: &Attributes<'_>) -> Id {
            let mut f = Fields(format!("{} ", span.metadata().name()));
            span.record(&mut f);
            let mut spans = self.spans.lock().unwrap();
            spans.push(f.0);
            Id::from_u64(spans.len() as u64)
        }
        fn record(&self, _: &Id, _: &Record<'_>) {}
        fn record_follows_from(&self, _: &Id, _: &Id) {}
        fn event(&self, event: &Event<'_>) {
            let mut f = Fields(String::new());
            event.record(&mut f);
            let parent =
                event.parent().map(Id::into_u64).or_else(|| self.current.lock().unwrap().last().copied());
            self.events.lock().unwrap().push((parent.unwrap_or(0), f.0));
        }
        fn enter(&self, span: &Id) {
            self.current.lock().unwrap().push(span.into_u64());
        }
        fn exit(&self, _: &Id) {
            self.current.lock().unwrap().pop();
        }
    }

    #[test]
    fn each_op_has_a_span_with_pushed_started_finished() {
        let recorder = Recorder::default();
        let _default = tracing::subscriber::set_default(recorder.clone());
        let engine =
            depengine::EngineBuilder::from_env().kind(depengine::engine::EngineKind::Naive).build().unwrap();
        let v = engine.var(1u32);
        engine
            .op("traced")
            .lane(Lane::Inline)
            .write(&v)
            .run(|(), (mut v,)| {
                *v += 1;
                Ok(())
            })
            .blocking_wait()
            .unwrap();
        let spans = recorder.spans.lock().unwrap().clone();
        let idx = spans.iter().position(|s| s.contains("traced")).expect("span for the op") as u64 + 1;
        let span = &spans[idx as usize - 1];
        assert!(span.starts_with("op "), "{span}");
        assert!(span.contains("device=cpu(0)") && span.contains("lane=Inline"), "{span}");
        let events: Vec<String> = recorder
            .events
            .lock()
            .unwrap()
            .iter()
            .filter(|(p, _)| *p == idx)
            .map(|(_, e)| e.clone())
            .collect();
        let kinds: Vec<&str> = ["pushed", "started", "finished"]
            .into_iter()
            .filter(|k| events.iter().any(|e| e.contains(k)))
            .collect();
        assert_eq!(kinds, ["pushed", "started", "finished"], "{events:?}");
        assert!(events.iter().any(|e| e.contains("ok=true")), "{events:?}");
    }
}

/// Per-op spans and events are at TRACE: a subscriber at DEBUG sees none
/// of them (an engine's pools and shutdown, once each, are at DEBUG).
mod levels {
    use std::sync::{Arc, Mutex};

    use tracing::field::{Field, Visit};
    use tracing::span::{Attributes, Id, Record};
    use tracing::{Event, Level, Metadata, Subscriber};

    #[derive(Clone, Default)]
    struct AtDebug {
        events: Arc<Mutex<Vec<String>>>,
        spans: Arc<Mutex<usize>>,
    }

    struct Message(String);

    impl Visit for Message {
        fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
            self.0.push_str(&format!("{}={:?} ", field.name(), value));
        }
    }

    impl Subscriber for AtDebug {
        fn enabled(&self, metadata: &Metadata<'_>) -> bool {
            *metadata.level() <= Level::DEBUG
        }
        fn new_span(&self, _: &Attributes<'_>) -> Id {
            let mut spans = self.spans.lock().unwrap();
            *spans += 1;
            Id::from_u64(*spans as u64)
        }
        fn record(&self, _: &Id, _: &Record<'_>) {}
        fn record_follows_from(&self, _: &Id, _: &Id) {}
        fn event(&self, event: &Event<'_>) {
            let mut m = Message(String::new());
            event.record(&mut m);
            self.events.lock().unwrap().push(m.0);
        }
        fn enter(&self, _: &Id) {}
        fn exit(&self, _: &Id) {}
    }

    #[test]
    fn a_debug_subscriber_sees_the_engine_and_not_each_op() {
        let recorder = AtDebug::default();
        let _default = tracing::subscriber::set_default(recorder.clone());
        let engine =
            depengine::EngineBuilder::from_env().kind(depengine::engine::EngineKind::Naive).build().unwrap();
        for _ in 0..44 {
            engine.op("quiet").lane(depengine::Lane::Inline).run(|(), ()| Ok(())).blocking_wait().unwrap();
        }
        engine.blocking_shutdown(depengine::ShutdownMode::Drain).unwrap();
        let events = recorder.events.lock().unwrap().clone();
        assert_eq!(*recorder.spans.lock().unwrap(), 0, "no op span at DEBUG");
        assert!(!events.iter().any(|e| e.contains("pushed") || e.contains("finished")), "{events:?}");
        assert!(events.iter().any(|e| e.contains("shutdown begun")), "{events:?}");
        assert!(events.iter().any(|e| e.contains("shutdown ended")), "{events:?}");
        assert!(events.len() <= 4, "{events:?}");
    }
}

/// Events a body logs are attributed to its op's span by
/// tracing-subscriber's registry, which tracks the current span per thread:
/// a sync body on a worker, an async body, and a future op after it awaited.
mod attribution {
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
        let runtime =
            tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        runtime.block_on(async {
            let engine = depengine::EngineBuilder::from_env().cpu_workers(2).bulk_size(1).build().unwrap();
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
}
