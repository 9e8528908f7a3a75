//! Tracing spans and events for each op's life cycle.

use std::sync::{Arc, Mutex};

use depengine::{Engine, Lane};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Metadata, Subscriber};

/// Records span fields and the events emitted inside each span.
#[derive(Clone, Default)]
struct Recorder {
    spans: Arc<Mutex<Vec<String>>>,
    events: Arc<Mutex<Vec<(u64, String)>>>,
    current: Arc<Mutex<Vec<u64>>>,
}

struct Fields(String);

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.push_str(&format!("{}={:?} ", field.name(), value));
    }
}

impl Subscriber for Recorder {
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
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
    let engine = Engine::builder().kind(depengine::engine::EngineKind::Naive).build().unwrap();
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
    let events: Vec<String> =
        recorder.events.lock().unwrap().iter().filter(|(p, _)| *p == idx).map(|(_, e)| e.clone()).collect();
    let kinds: Vec<&str> = ["pushed", "started", "finished"]
        .into_iter()
        .filter(|k| events.iter().any(|e| e.contains(k)))
        .collect();
    assert_eq!(kinds, ["pushed", "started", "finished"], "{events:?}");
    assert!(events.iter().any(|e| e.contains("ok=true")), "{events:?}");
}
