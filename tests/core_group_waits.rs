//! Waiting for op groups: a group's blocking wait inside a body helps run
//! queued ops (fan-out and join never hangs, on one worker or many), a
//! wait that would wait for ever is refused, a dropped wait leaves no
//! waker behind; groups as shared handles (clones, `cancelled`, a
//! `CancellationToken` tie); `wait_for_all` after cancelled ops leaves
//! nothing in flight.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Wake, Waker};

use common::bounded;
use depengine::{Engine, EngineBuilder};

/// A body that fans `children` ops out into a group of its own, closes
/// it and blocks on its wait: the sum of what the children wrote.
fn fan_out_and_join(engine: &Engine, children: u64) -> Result<u64, depengine::BoxError> {
    let group = engine.group("children");
    let sum = Arc::new(AtomicUsize::new(0));
    for i in 0..children {
        let sum = sum.clone();
        engine.op("child").group(&group).run_detached(move |(), ()| {
            sum.fetch_add(i as usize + 1, Ordering::SeqCst);
            Ok(())
        })?;
    }
    group.close();
    group.wait().blocking_wait()?;
    Ok(sum.load(Ordering::SeqCst) as u64)
}

#[test]
fn a_blocking_group_wait_in_a_body_on_one_worker_runs_the_child() {
    let engine = EngineBuilder::from_env().cpu_workers(1).build().unwrap();
    let inner = engine.clone();
    let parent = engine.op("parent").run(move |(), ()| fan_out_and_join(&inner, 1));
    let got = bounded(10, "a group wait on one worker", move || parent.blocking_wait()).unwrap();
    assert_eq!(got, 1);
}

#[test]
fn parents_that_fan_out_and_join_their_groups_never_hang() {
    for (parents, pusher_runs_at) in [(200, None), (2_000, Some(1))] {
        let mut builder = EngineBuilder::from_env().cpu_workers(2);
        if let Some(at) = pusher_runs_at {
            builder = builder.pusher_runs_at(at);
        }
        let engine = builder.build().unwrap();
        let handles: Vec<_> = (0..parents)
            .map(|_| {
                let inner = engine.clone();
                engine.op("parent").run(move |(), ()| fan_out_and_join(&inner, 4))
            })
            .collect();
        let sums = bounded(30, "parents joining their children", move || {
            handles.into_iter().map(|h| h.blocking_wait().unwrap()).collect::<Vec<_>>()
        });
        assert!(sums.iter().all(|&s| s == 1 + 2 + 3 + 4), "{parents} parents");
        engine.wait_for_all().blocking_wait().unwrap();
    }
}

#[test]
fn a_group_wait_in_a_body_holding_a_var_its_ops_need_is_refused() {
    let engine = EngineBuilder::from_env().cpu_workers(2).build().unwrap();
    let v = engine.var(0u32);
    let inner = engine.clone();
    let v2 = v.clone();
    let result = engine.op("holds v").write(&v).run(move |(), _| {
        let group = inner.group("needs v");
        inner.op("reads v").group(&group).read(&v2).run_detached(|_, ()| Ok(()))?;
        group.close();
        Ok((group.wait().blocking_wait(), group))
    });
    let (waited, group) =
        bounded(10, "a wait for what the body holds", move || result.blocking_wait()).unwrap();
    let err = waited.unwrap_err();
    assert!(err.is_would_deadlock(), "{err}");
    assert!(err.to_string().contains("needs a var that the op running this body holds"), "{err}");
    // Once the body's op is done, the group's op runs.
    group.wait().blocking_wait().unwrap();
    // A body that holds nothing the group needs waits fine.
    let inner = engine.clone();
    let fine = engine.op("holds v only").write(&v).run(move |(), _| fan_out_and_join(&inner, 3));
    assert_eq!(bounded(10, "a wait for a group of other vars", move || fine.blocking_wait()).unwrap(), 6);
}

/// A waker that counts its clones alive (its `Arc`'s strong count).
struct Noop;

impl Wake for Noop {
    fn wake(self: Arc<Self>) {}
}

#[test]
fn dropped_waits_leave_no_waker_behind() {
    let engine = EngineBuilder::from_env().cpu_workers(1).build().unwrap();
    let v = engine.var(0u32);
    let (held,) = engine.acquire().write(&v).push().blocking_wait().unwrap();
    let group = engine.group("long-running");
    engine.op("queued").group(&group).write(&v).run_detached(|_, _| Ok(())).unwrap();
    group.close();
    let counted = Arc::new(Noop);
    let waker = Waker::from(counted.clone());
    let mut cx = Context::from_waker(&waker);
    for _ in 0..20_000 {
        let mut wait = std::pin::pin!(group.wait());
        assert!(wait.as_mut().poll(&mut cx).is_pending());
        let mut cancelled = std::pin::pin!(group.cancelled());
        assert!(cancelled.as_mut().poll(&mut cx).is_pending());
    }
    assert_eq!(group.waiters_kept(), 0);
    assert_eq!(Arc::strong_count(&counted), 2, "only `waker` and `counted` hold it");
    // A wait kept alive keeps one, until it resolves.
    let mut kept = Box::pin(group.wait());
    assert!(kept.as_mut().poll(&mut cx).is_pending());
    assert!(kept.as_mut().poll(&mut cx).is_pending(), "polled again, it keeps its one waker");
    assert_eq!((group.waiters_kept(), Arc::strong_count(&counted)), (1, 3));
    drop(held);
    bounded(10, "the kept wait", move || futures::executor::block_on(kept)).unwrap();
    assert_eq!((group.waiters_kept(), Arc::strong_count(&counted)), (0, 2));
}

#[test]
fn wait_for_all_after_cancelled_ops_leaves_nothing_in_flight() {
    for round in 0..50 {
        let engine = EngineBuilder::from_env().cpu_workers(2).max_in_flight(4).build().unwrap();
        let v = engine.var(0u32);
        let (held,) = engine.acquire().write(&v).push().blocking_wait().unwrap();
        if round % 2 == 0 {
            let group = engine.group("dropped");
            for _ in 0..3 {
                engine.op("queued").group(&group).write(&v).run_detached(|_, _| Ok(())).unwrap();
            }
            drop(group);
        } else {
            let handles: Vec<_> = (0..3).map(|_| engine.op("queued").write(&v).run(|_, _| Ok(()))).collect();
            handles.iter().for_each(|h| assert!(h.abort()));
        }
        drop(held);
        engine.wait_for_all().blocking_wait().unwrap();
        let m = engine.metrics();
        assert_eq!((m.in_flight, m.slots_used, m.cancelled_on_vars), (0, 0, 0), "round {round}: {m:?}");
        for _ in 0..4 {
            let pushed = engine.op("after").write(&v).run_detached(|_, _| Ok(()));
            assert!(pushed.is_ok(), "round {round}: {pushed:?}");
        }
        engine.wait_for_all().blocking_wait().unwrap();
    }
}

#[test]
fn clones_share_one_group_and_the_last_drop_cancels_it() {
    let engine = EngineBuilder::from_env().cpu_workers(1).build().unwrap();
    let v = engine.var(0u32);
    let (held,) = engine.acquire().write(&v).push().blocking_wait().unwrap();
    let group = engine.group("shared");
    let clone = group.clone();
    let queued = engine.op("queued").group(&clone).write(&v).run(|_, _| Ok(()));
    assert_eq!(group.counts().pending, 1, "an op pushed through a clone is the group's");
    let cancelled = group.cancelled();
    drop(clone);
    assert!(!group.is_cancelled(), "one clone dropped: the group lives on");
    drop(group);
    bounded(10, "the cancel", move || futures::executor::block_on(cancelled));
    assert!(queued.blocking_wait().unwrap_err().is_cancelled());
    // Detached through one clone, no clone's drop cancels it.
    let group = engine.group("detached");
    let clone = group.clone();
    let runs = engine.op("runs").group(&group).write(&v).run(|_, (mut v,)| {
        *v += 1;
        Ok(*v)
    });
    clone.detach();
    drop(group);
    drop(held);
    assert_eq!(runs.blocking_wait().unwrap(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_wakes_a_task_and_wait_waits_for_the_close() {
    let engine = EngineBuilder::from_env().cpu_workers(2).build().unwrap();
    let group = engine.group("request");
    let watcher = tokio::spawn({
        let group = group.clone();
        async move { group.cancelled().await }
    });
    let waiter = tokio::spawn({
        let group = group.clone();
        async move { group.wait().await }
    });
    for _ in 0..4 {
        engine.op("part").group(&group).run(|(), ()| Ok(())).await.unwrap();
    }
    tokio::task::yield_now().await;
    assert!(!waiter.is_finished(), "open, idle between pushes, the wait goes on");
    group.close();
    common::timed(waiter).await.unwrap().unwrap();
    assert!(!watcher.is_finished());
    group.cancel();
    common::timed(watcher).await.unwrap();
}

#[cfg(feature = "tokio-util")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tied_token_cancels_the_group_without_a_watcher() {
    use tokio_util::sync::CancellationToken;
    let engine = EngineBuilder::from_env().cpu_workers(2).build().unwrap();
    let v = engine.var(0u32);
    let (held,) = engine.acquire().write(&v).push().await.unwrap();
    let token = CancellationToken::new();
    let group = engine.group("request");
    group.tie(&token).unwrap();
    assert!(group.tie(&token).unwrap_err().is_invalid_argument());
    let queued = engine.op("queued").group(&group).write(&v).run(|_, (mut v,)| {
        *v = 1;
        Ok(())
    });
    let cancelled = tokio::spawn({
        let group = group.clone();
        async move { group.cancelled().await }
    });
    let waited = tokio::spawn({
        let group = group.clone();
        async move { group.wait().await }
    });
    token.cancel();
    // The waits wake on the token; the first to look cancels the group,
    // which resolves its queued op at once, though `v` is still held.
    common::timed(cancelled).await.unwrap();
    assert!(common::timed(waited).await.unwrap().unwrap_err().is_cancelled());
    assert!(common::timed(queued).await.unwrap_err().is_cancelled());
    assert!(!token.is_cancelled() || group.is_cancelled());
    drop(held);
    assert_eq!(*v.read().await.unwrap(), 0, "the queued op never ran");
    // The group's own cancel does not cancel a token it is tied to.
    let other = CancellationToken::new();
    let second = engine.group("second");
    second.tie(&other).unwrap();
    second.cancel();
    assert!(!other.is_cancelled());
}
