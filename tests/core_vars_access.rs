//! Vars as async gates (read, write, acquire, ordered by call time), deletion,
//! the debug view, and the life of a var's data.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::{Counted, timed};
use depengine::Engine;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquire_is_ordered_by_call_time() {
    timed(async {
        let engine = Engine::from_env();
        let x = engine.var(vec![1.0f32, 2.0, 3.0]);
        let s = engine.var(0.0f32);
        let w = s.write(); // appended now, before the op below
        let op = engine.op("read s").read(&s).run(|(s,), ()| Ok(*s));
        let mut g = w.await.unwrap();
        *g = 10.0;
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert!(!op.is_finished(), "op waits for the held write guard");
        drop(g);
        assert_eq!(op.await.unwrap(), 10.0);
        let (xg, mut sg) = engine.acquire().read(&x).write(&s).push().await.unwrap();
        *sg = xg.iter().sum();
        drop((xg, sg));
        assert_eq!(*s.read().await.unwrap(), 6.0);
        assert_eq!(s.version(), 2);
        let (xs, ss) = engine.acquire().read_all([&x]).write_all([&s]).push().await.unwrap();
        assert_eq!((xs.len(), ss.len()), (1, 1));
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_acquire_gives_up_its_place() {
    timed(async {
        let engine = Engine::from_env();
        let v = engine.var(0u32);
        let held = v.write().await.unwrap();
        let abandoned = v.write();
        let later = engine.op("later").write(&v).run(|(), (mut v,)| {
            *v += 1;
            Ok(*v)
        });
        drop(abandoned);
        drop(held);
        assert_eq!(later.await.unwrap(), 1);
        // Granted but never polled, then dropped: released too.
        let granted = v.read();
        tokio::time::sleep(Duration::from_millis(5)).await;
        drop(granted);
        assert_eq!(
            engine
                .op("w")
                .write(&v)
                .run(|(), (mut v,)| Ok({
                    *v += 1;
                    *v
                }))
                .await
                .unwrap(),
            2
        );
    })
    .await
}

#[test]
fn acquire_future_wakes_exactly_when_granted() {
    use tokio_test::{assert_pending, assert_ready, task};
    let engine = Engine::from_env();
    let v = engine.var(1u32);
    let mut w1 = task::spawn(v.write());
    let g1 = assert_ready!(w1.poll()).unwrap();
    let mut r = task::spawn(v.read());
    let mut w2 = task::spawn(v.write());
    assert_pending!(r.poll());
    assert_pending!(w2.poll());
    drop(g1);
    assert!(r.is_woken(), "read woken by the write's release");
    assert!(!w2.is_woken());
    let rg = assert_ready!(r.poll()).unwrap();
    assert_pending!(w2.poll());
    drop(rg);
    assert!(w2.is_woken());
    let mut w2g = assert_ready!(w2.poll()).unwrap();
    *w2g = 3;
    drop(w2g);
    assert_eq!(v.version(), 2);
}

#[test]
fn delete_var_returns_data_after_pending_ops() {
    let engine = Engine::from_env();
    let v = engine.var(vec![1, 2]);
    for i in 3..6 {
        engine.op("push").write(&v).run(move |(), (mut v,)| {
            v.push(i);
            Ok(())
        });
    }
    let data = engine.delete_var(&v).blocking_wait().unwrap();
    assert_eq!(data, [1, 2, 3, 4, 5]);
    assert!(v.is_deleted());
}

#[test]
fn debug_state_shows_who_waits() {
    // Bulk execution off: the view shows engine ops, which fusing merges.
    let engine = depengine::EngineBuilder::from_env().bulk_size(1).build().unwrap();
    let v = engine.var(0u32);
    let g = v.write().blocking_wait().unwrap();
    let _queued = engine.op("queued-reader").read(&v).run(|(_v,), ()| Ok(()));
    let state = v.any().debug_state();
    assert!(state.write_running);
    assert_eq!(state.queued, [(false, "queued-reader".to_owned())]);
    drop(g);
    engine.wait_for_all().blocking_wait().unwrap();
    let state = v.any().debug_state();
    assert!(state.queued.is_empty() && state.running_reads == 0 && state.version == 1);
}

/// A var's data lives as long as any handle to it, typed or untyped, on
/// whatever thread the last one is dropped, and is dropped exactly once:
/// both kinds of handle share one reference count.
#[test]
fn a_var_s_data_is_dropped_once_with_its_last_handle_of_either_kind() {
    let engine = depengine::EngineBuilder::from_env().cpu_workers(2).build().unwrap();
    let dropped = Arc::new(AtomicUsize::new(0));
    let v = engine.var(Counted(dropped.clone()));
    let tags: Vec<depengine::AnyVar> = (0..3).map(|_| v.any()).collect();
    let tag = tags[0].clone();
    // Ops declaring the var both ways hold references of both kinds.
    engine.op("typed").read(&v).run_detached(|(_r,), ()| Ok(())).unwrap();
    drop(engine.op("untyped").read_any(&tag).run(|(), ()| Ok(())).pushed().unwrap());
    engine.wait_for_all().blocking_wait().unwrap();
    drop(v);
    drop(tags);
    assert_eq!(dropped.load(Ordering::SeqCst), 0, "an untyped handle still holds the var");
    assert_eq!(tag.version(), 0);
    let other = tag.clone();
    std::thread::spawn(move || drop(other)).join().unwrap();
    assert_eq!(dropped.load(Ordering::SeqCst), 0);
    std::thread::spawn(move || drop(tag)).join().unwrap();
    // A worker may still be giving back the record of an op it ran (its
    // completion came first): the data goes with it then.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while dropped.load(Ordering::SeqCst) == 0 {
        assert!(std::time::Instant::now() < deadline, "the data was never dropped");
        std::thread::yield_now();
    }
    assert_eq!(dropped.load(Ordering::SeqCst), 1, "the last handle drops the data, once");
    engine.blocking_shutdown(depengine::ShutdownMode::Drain).unwrap();
    assert_eq!(dropped.load(Ordering::SeqCst), 1);
}
