//! The hang explainer names the culprit in the classic cases: a task
//! holding a write guard while it awaits an op reading the var, a
//! completion token kept and never signalled, a long write with readers
//! queued behind it, and a chain through two vars; its DOT has the same
//! edges; the watchdog warns with the chain.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::timed;
use depengine::Engine;
use depengine::engine::Completion;

fn engine() -> Engine {
    depengine::EngineBuilder::from_env().cpu_workers(2).bulk_size(1).build().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_holding_a_write_guard_while_it_awaits_a_reader() {
    timed(async {
        let engine = engine();
        let v = engine.var_named("model", 0u64);
        let guard = v.write().await.unwrap();
        let reader = engine.op("predict").read(&v).run(|(v,), ()| Ok(*v));
        // The task would now await `reader`: it never ends, and this says
        // why.
        let pending = engine.debug_pending();
        let predict = pending.waiting().find(|op| op.name == "predict").expect("predict waits");
        assert_eq!(predict.waits_on, [v.label()]);
        let chain = pending.chain(predict);
        assert!(chain.starts_with("`predict` waits for `model`"), "{chain}");
        assert!(chain.contains("held (write) by `acquire`"), "{chain}");
        assert!(
            chain.ends_with("(let through: running, or its guards or completion token are still out)"),
            "{chain}"
        );
        let var = pending.var(&v.label()).unwrap();
        assert!(var.write && var.holders.len() == 1 && var.queued.len() == 1, "{var:?}");
        drop(guard);
        assert_eq!(reader.await.unwrap(), 0);
        assert!(engine.debug_pending().is_empty(), "{}", engine.debug_pending());
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_completion_token_kept_and_never_signalled() {
    timed(async {
        let engine = engine();
        let v = engine.var_named("cache", 0u64);
        let kept: Arc<Mutex<Option<Completion<()>>>> = Arc::default();
        let keep = kept.clone();
        let fetch = engine.op("fetch").write(&v).run_async(move |(), (_v,), done| {
            // A bug: the token is stored, not signalled.
            *keep.lock().unwrap() = Some(done);
        });
        let users: Vec<_> = (0..3).map(|_| engine.op("use").read(&v).run(|(_v,), ()| Ok(()))).collect();
        tokio::time::sleep(Duration::from_millis(20)).await;
        let pending = engine.debug_pending();
        let text = pending.to_string();
        assert_eq!(pending.waiting().filter(|op| op.name == "use").count(), 3, "{text}");
        assert!(text.contains("`use` waits for `cache`"), "{text}");
        assert!(text.contains("held (write) by `fetch`"), "{text}");
        let fetch_op = pending.ops.iter().find(|op| op.name == "fetch").unwrap();
        assert!(fetch_op.waits_on.is_empty() && fetch_op.holds == [v.label()], "{fetch_op:?}");
        kept.lock().unwrap().take().unwrap().succeed(());
        fetch.await.unwrap();
        for u in users {
            u.await.unwrap();
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_write_with_readers_queued_behind_it() {
    timed(async {
        let engine = engine();
        let v = engine.var_named("table", 0u64);
        let (started_tx, started) = std::sync::mpsc::channel();
        let (release, rx) = std::sync::mpsc::channel::<()>();
        let long = engine.op("rebuild").write(&v).run(move |(), (mut v,)| {
            started_tx.send(()).unwrap();
            rx.recv_timeout(Duration::from_secs(10)).unwrap();
            *v += 1;
            Ok(())
        });
        started.recv_timeout(Duration::from_secs(10)).unwrap();
        let readers: Vec<_> = (0..8).map(|_| engine.op("lookup").read(&v).run(|(v,), ()| Ok(*v))).collect();
        let pending = engine.debug_pending();
        let var = pending.var(&v.label()).unwrap();
        assert!(var.write && var.queued.len() == 8, "{var:?}");
        for op in pending.waiting() {
            assert_eq!(op.name, "lookup");
            assert!(pending.chain(op).contains("held (write) by `rebuild`"), "{}", pending.chain(op));
        }
        release.send(()).unwrap();
        long.await.unwrap();
        for r in readers {
            assert_eq!(r.await.unwrap(), 1);
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chain_through_two_vars_ends_at_its_holder_and_dot_has_its_edges() {
    timed(async {
        let engine = engine();
        let (a, b) = (engine.var_named("a", 0u32), engine.var_named("b", 0u32));
        let guard = b.write().await.unwrap();
        // `mid` holds `a` (let through there) and waits for `b`; `top`
        // waits for `a`.
        let mid = engine.op("mid").write(&a).write(&b).run(|(), (_a, _b)| Ok(()));
        let top = engine.op("top").read(&a).run(|(_a,), ()| Ok(()));
        let pending = engine.debug_pending();
        let top_op = pending.waiting().find(|op| op.name == "top").unwrap();
        let chain = pending.chain(top_op);
        assert!(
            chain.starts_with("`top` waits for `a`")
                && chain.contains("held (write) by `mid`")
                && chain.contains(", which waits for `b`"),
            "{chain}"
        );
        assert!(chain.contains("held (write) by `acquire`"), "{chain}");
        let dot = pending.dot();
        assert!(dot.starts_with("digraph pending {") && dot.trim_end().ends_with('}'), "{dot}");
        assert_eq!(dot.matches("[style=dashed, label=\"waits\"]").count(), 2, "{dot}");
        assert_eq!(dot.matches("label=\"held (write)\"").count(), 2, "{dot}");
        drop(guard);
        mid.await.unwrap();
        top.await.unwrap();
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_holders_the_explainer_shows_queues_and_counts() {
    timed(async {
        let engine = depengine::EngineBuilder::from_env()
            .cpu_workers(2)
            .bulk_size(1)
            .track_holders(false)
            .build()
            .unwrap();
        let v = engine.var_named("model", 0u64);
        let guard = v.write().await.unwrap();
        let reader = engine.op("predict").read(&v).run(|(v,), ()| Ok(*v));
        let pending = engine.debug_pending();
        let predict = pending.waiting().find(|op| op.name == "predict").expect("predict waits");
        let chain = pending.chain(predict);
        assert!(
            chain.contains("`predict` waits for `model`")
                && chain.contains("held by a write it does not name"),
            "{chain}"
        );
        assert!(pending.var(&v.label()).unwrap().holders.is_empty());
        drop(guard);
        assert_eq!(reader.await.unwrap(), 0);
    })
    .await;
}

/// What an operator's view needs: waiters of one kind behind one holder
/// are one line with their count; ops already cancelled are not listed
/// as waiting (only counted on their var); durations are known without a
/// watchdog.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_are_grouped_cancelled_ones_set_apart_and_durations_known() {
    timed(async {
        let engine = engine();
        let v = engine.var_named("model", 0u64);
        let guard = v.write().await.unwrap();
        let waiters: Vec<_> =
            (0..128).map(|_| engine.op("predict").read(&v).run(|(v,), ()| Ok(*v))).collect();
        let dropped: Vec<_> =
            (0..5).map(|_| engine.op("gone").read(&v).cancel_on_drop(true).run(|(v,), ()| Ok(*v))).collect();
        drop(dropped);
        tokio::time::sleep(Duration::from_millis(300)).await;
        let pending = engine.debug_pending();
        assert_eq!(pending.waiting().count(), 128, "{pending}");
        assert!(pending.waiting().all(|op| op.name == "predict"), "{pending}");
        let var = pending.var(&v.label()).unwrap();
        assert_eq!((var.queued.len(), var.cancelled), (128, 5), "{var:?}");
        let holder = pending.op(var.holders[0]).unwrap();
        let held = holder.held_for[0].expect("held for a known time, without a watchdog");
        assert!(held >= Duration::from_millis(200), "{held:?}");
        let waited = pending.waiting().next().unwrap().pushed_ago.expect("pushed a known time ago");
        assert!(waited >= Duration::from_millis(200), "{waited:?}");
        let text = pending.to_string();
        assert_eq!(text.lines().count(), 3, "{text}");
        assert!(text.contains("128 × `predict` waits for `model`"), "{text}");
        assert!(text.contains("queued: [`predict` × 128]; 5 cancelled"), "{text}");
        drop(guard);
        for w in waiters {
            assert_eq!(w.await.unwrap(), 0);
        }
    })
    .await;
}
