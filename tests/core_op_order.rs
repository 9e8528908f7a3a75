//! Order of effect: push order on a var, reads in parallel between writes,
//! priorities, per-thread FIFO order and fairness between queues, detached ops
//! among the others.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::{hold_worker, timed};
use depengine::engine::EngineKind;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chain_in_push_order_threaded_and_naive() {
    for kind in [EngineKind::Threaded, EngineKind::Naive] {
        timed(async {
            let engine = depengine::EngineBuilder::from_env().kind(kind).cpu_workers(4).build().unwrap();
            let v = engine.var(Vec::new());
            for i in 0..1000 {
                engine.op("push").write(&v).run(move |(), (mut v,)| {
                    v.push(i);
                    Ok(())
                });
            }
            engine.wait_for_all().await.unwrap();
            let got = v.read().await.unwrap().clone();
            assert_eq!(got, (0..1000).collect::<Vec<_>>());
            assert_eq!(v.version(), 1000);
        })
        .await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_between_writes_run_in_parallel() {
    timed(async {
        // Bulk execution off: fused ops never run in parallel.
        let engine = depengine::EngineBuilder::from_env().cpu_workers(4).bulk_size(1).build().unwrap();
        let x = engine.var(1u64);
        let arrived = Arc::new(AtomicUsize::new(0));
        let handles: Vec<_> = (0..4)
            .map(|_| {
                let arrived = arrived.clone();
                engine.op("read").read(&x).run(move |(_x,), ()| {
                    arrived.fetch_add(1, Ordering::SeqCst);
                    // Each reader stays until all four are inside at once.
                    let start = std::time::Instant::now();
                    while arrived.load(Ordering::SeqCst) < 4 {
                        if start.elapsed() > Duration::from_secs(10) {
                            return Err("readers did not overlap".into());
                        }
                        std::thread::yield_now();
                    }
                    Ok(())
                })
            })
            .collect();
        for h in handles {
            h.await.unwrap();
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn write_waits_for_earlier_reads_and_later_reads_wait_for_it() {
    timed(async {
        let engine = depengine::EngineBuilder::from_env().cpu_workers(4).build().unwrap();
        let x = engine.var(0u64);
        let log = engine.var(Vec::<&'static str>::new());
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let r1 = engine.op("r1").read(&x).run(move |(x,), ()| {
            rx.recv_timeout(Duration::from_secs(10)).unwrap();
            Ok(*x)
        });
        let w = engine.op("w").write(&x).write(&log).run(|(), (mut x, mut log)| {
            *x = 7;
            log.push("w");
            Ok(())
        });
        let r2 = engine.op("r2").read(&x).run(|(x,), ()| Ok(*x));
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!w.is_finished() && !r2.is_finished(), "write held back by a running read");
        tx.send(()).unwrap();
        assert_eq!(r1.await.unwrap(), 0);
        w.await.unwrap();
        assert_eq!(r2.await.unwrap(), 7);
    })
    .await
}

#[test]
fn higher_priority_first_fifo_among_equals() {
    let engine = depengine::EngineBuilder::from_env().cpu_workers(1).build().unwrap();
    let order = Arc::new(std::sync::Mutex::new(Vec::new()));
    // Hold the single worker so the rest queue up.
    let (tx, blocker) = hold_worker(&engine);
    std::thread::sleep(Duration::from_millis(20));
    let prios = [0, 5, 0, 9, 5, -1];
    let hs: Vec<_> = prios
        .iter()
        .enumerate()
        .map(|(i, &p)| {
            let order = order.clone();
            engine.op("p").priority(p).run(move |(), ()| {
                order.lock().unwrap().push(i);
                Ok(())
            })
        })
        .collect();
    tx.send(()).unwrap();
    blocker.blocking_wait().unwrap();
    for h in hs {
        h.blocking_wait().unwrap();
    }
    assert_eq!(*order.lock().unwrap(), [3, 1, 4, 0, 2, 5]);
}

/// Ops a thread queued, ready at push, are run after the thread has
/// exited, in the order it pushed them.
#[test]
fn ops_queued_by_a_thread_that_exits_run_in_its_order() {
    // Bulk execution off: queue order is counted in engine ops, which fusing merges.
    let engine = depengine::EngineBuilder::from_env().cpu_workers(1).bulk_size(1).build().unwrap();
    let order = Arc::new(std::sync::Mutex::new(Vec::new()));
    let (tx, blocker) = hold_worker(&engine);
    let pusher = {
        let (engine, order) = (engine.clone(), order.clone());
        std::thread::spawn(move || {
            for i in 0..200 {
                let order = order.clone();
                engine.op("queued").run_detached(move |(), ()| {
                    order.lock().unwrap().push(i);
                    Ok(())
                })?;
            }
            Ok::<(), depengine::Error>(())
        })
    };
    pusher.join().unwrap().unwrap();
    assert!(order.lock().unwrap().is_empty(), "the one worker is held");
    tx.send(()).unwrap();
    blocker.blocking_wait().unwrap();
    let (done_tx, done) = std::sync::mpsc::channel();
    let waiter = engine.clone();
    std::thread::spawn(move || done_tx.send(waiter.wait_for_all().blocking_wait()));
    done.recv_timeout(Duration::from_secs(10)).expect("the exited thread's ops never ran").unwrap();
    assert_eq!(*order.lock().unwrap(), (0..200).collect::<Vec<_>>());
}

/// A thread that keeps pushing ready ops does not starve the ops queued by
/// the workers themselves: the workers take from both in turn.
#[test]
fn a_pushing_thread_does_not_starve_ops_queued_by_workers() {
    // Bulk execution off: fairness is counted in engine ops, which fusing merges.
    let engine = depengine::EngineBuilder::from_env().cpu_workers(1).bulk_size(1).build().unwrap();
    let ran = Arc::new(AtomicUsize::new(0));
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    // Held until 1,000 ops are queued behind it by this thread; it then
    // pushes one op from the worker.
    let inner = {
        let (pusher, ran) = (engine.clone(), ran.clone());
        engine.op("block").run(move |(), ()| {
            rx.recv_timeout(Duration::from_secs(10)).unwrap();
            let ran = ran.clone();
            let handle = pusher.op("from-worker").run(move |(), ()| Ok(ran.load(Ordering::SeqCst)));
            Ok(handle)
        })
    };
    let all = Arc::new(AtomicUsize::new(0));
    for _ in 0..1000 {
        let (ran, all) = (ran.clone(), all.clone());
        engine
            .op("from-thread")
            .run_detached(move |(), ()| {
                all.fetch_add(1, Ordering::SeqCst);
                // Counted where the worker takes them: once its queue is
                // crowded, the pushing thread runs the later ones itself.
                if std::thread::current().name().is_some_and(|n| n.starts_with("depengine-cpu0")) {
                    ran.fetch_add(1, Ordering::SeqCst);
                }
                Ok(())
            })
            .unwrap();
    }
    tx.send(()).unwrap();
    let ran_before = inner.blocking_wait().unwrap().blocking_wait().unwrap();
    // Workers take at most 64 ops in a row from one queue while another
    // holds ops.
    assert!(ran_before <= 65, "the worker's op waited for {ran_before} ops queued by the pushing thread");
    engine.wait_for_all().blocking_wait().unwrap();
    assert_eq!(all.load(Ordering::SeqCst), 1000);
}

/// Detached ops take effect in push order with handle-returning ops on the
/// same var, on both engines.
#[test]
fn detached_ops_keep_push_order_with_the_others() {
    for kind in [EngineKind::Threaded, EngineKind::Naive] {
        let engine = depengine::EngineBuilder::from_env().kind(kind).cpu_workers(2).build().unwrap();
        let log = engine.var(Vec::new());
        let mut handles = Vec::new();
        for i in 0..2_000u32 {
            if i % 3 == 0 {
                handles.push(engine.op("kept").write(&log).run(move |(), (mut l,)| {
                    l.push(i);
                    Ok(i)
                }));
            } else {
                engine
                    .op("detached")
                    .write(&log)
                    .run_detached(move |(), (mut l,)| {
                        l.push(i);
                        Ok(())
                    })
                    .unwrap();
            }
        }
        engine.wait_for_all().blocking_wait().unwrap();
        let got = futures::executor::block_on(log.read()).unwrap().clone();
        assert_eq!(got, (0..2_000).collect::<Vec<_>>(), "{kind:?}");
        for (k, h) in handles.into_iter().enumerate() {
            assert_eq!(h.blocking_wait().unwrap(), 3 * k as u32);
        }
    }
}
