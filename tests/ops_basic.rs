//! Ops, handles, guards, lanes and placement on the happy path.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use depengine::{Device, Engine, EngineKind, Lane, Var};

async fn timed<F: std::future::Future>(f: F) -> F::Output {
    tokio::time::timeout(Duration::from_secs(30), f).await.expect("test timed out")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sum_then_get() {
    timed(async {
        let engine = Engine::new();
        let x = engine.var(vec![1.0f32; 1000]);
        let s = engine.var(0.0f32);
        let h = engine.op("sum").read(&x).write(&s).run(|(x,), (mut s,)| {
            *s = x.iter().sum();
            Ok(())
        });
        assert_eq!(h.name(), Some("sum"));
        h.await.unwrap();
        let total = engine.op("get").read(&s).run(|(s,), ()| Ok(*s)).await.unwrap();
        assert_eq!(total, 1000.0);
        assert_eq!(s.version(), 1);
        assert_eq!(x.version(), 0);
        engine.wait_for_var(&s).await.unwrap();
        engine.wait_for_all().await.unwrap();
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chain_in_push_order_threaded_and_naive() {
    for kind in [EngineKind::Threaded, EngineKind::Naive] {
        timed(async {
            let engine = Engine::builder().kind(kind).cpu_workers(4).build().unwrap();
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
        let engine = Engine::builder().cpu_workers(4).bulk_size(1).build().unwrap();
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
        let engine = Engine::builder().cpu_workers(4).build().unwrap();
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_all_write_all_and_tuple_arity() {
    timed(async {
        let engine = Engine::new();
        let parts: Vec<Var<u64>> = (1..=10).map(|i| engine.var(i)).collect();
        let outs: Vec<Var<u64>> = (0..3).map(|_| engine.var(0)).collect();
        let (a, b, c) = (engine.var(1u8), engine.var(2u16), engine.var(3u32));
        let sum = engine
            .op("fan")
            .read_all(&parts)
            .read(&a)
            .read(&b)
            .write_all(&outs)
            .write(&c)
            .run(|(parts, a, b), (mut outs, mut c)| {
                let s: u64 = parts.iter().map(|p| **p).sum::<u64>() + u64::from(*a) + u64::from(*b);
                for (k, o) in outs.iter_mut().enumerate() {
                    **o = s + k as u64;
                }
                *c = 99;
                Ok(s)
            })
            .await
            .unwrap();
        assert_eq!(sum, 58);
        for (k, o) in outs.iter().enumerate() {
            assert_eq!(*o.read().await.unwrap(), 58 + k as u64);
        }
        assert_eq!(*c.read().await.unwrap(), 99);
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn async_op_completes_from_another_thread() {
    timed(async {
        let engine = Engine::new();
        let v = engine.var(1u32);
        let h = engine.op("async").write(&v).run_async(|(), (mut v,), done| {
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(10));
                *v += 1;
                drop(v);
                done.succeed("signalled");
            });
        });
        let after = engine.op("after").read(&v).run(|(v,), ()| Ok(*v));
        assert_eq!(h.await.unwrap(), "signalled");
        assert_eq!(after.await.unwrap(), 2);
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn future_op_runs_on_runtime_in_order() {
    timed(async {
        let engine = Engine::new();
        let v = engine.var(String::new());
        let a = engine.op("a").write(&v).spawn(|(), (mut v,)| async move {
            tokio::time::sleep(Duration::from_millis(10)).await;
            v.push('a');
            Ok(1)
        });
        let b = engine.op("b").write(&v).run(|(), (mut v,)| {
            v.push('b');
            Ok(2)
        });
        assert_eq!(a.await.unwrap() + b.await.unwrap(), 3);
        assert_eq!(*v.read().await.unwrap(), "ab");
    })
    .await
}

#[test]
fn future_op_without_runtime_is_refused() {
    let engine = Engine::new();
    let v = engine.var(0);
    let err = engine.op("f").write(&v).try_spawn(|(), (_v,)| async { Ok(()) }).unwrap_err();
    assert!(err.is_no_runtime(), "{err}");
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let engine = Engine::builder().runtime(rt.handle().clone()).build().unwrap();
    let v = engine.var(0);
    let h = engine.op("f").write(&v).spawn(|(), (mut v,)| async move {
        *v += 5;
        Ok(*v)
    });
    assert_eq!(rt.block_on(h).unwrap(), 5);
}

#[test]
fn inline_op_runs_on_pushing_thread_when_ready() {
    let engine = Engine::new();
    let v = engine.var(0u32);
    let me = std::thread::current().id();
    let h = engine.op("inline").lane(Lane::Inline).write(&v).run(move |(), (mut v,)| {
        *v = 1;
        Ok(std::thread::current().id() == me)
    });
    assert!(h.is_finished(), "ran during push");
    assert!(h.blocking_wait().unwrap());
    let h = engine.op("pooled").write(&v).run(move |(), (_v,)| Ok(std::thread::current().id() == me));
    assert!(!h.blocking_wait().unwrap(), "normal lane runs on a worker");
}

#[test]
fn workers_are_named_per_device_and_lane() {
    let engine = Engine::builder().cpu_devices(2).build().unwrap();
    let name = |h: depengine::OpHandle<Option<String>>| h.blocking_wait().unwrap().unwrap();
    let cur = || Ok(std::thread::current().name().map(str::to_owned));
    assert!(name(engine.op("a").run(move |(), ()| cur())).starts_with("depengine-cpu0-"));
    assert!(
        name(engine.op("b").device(Device::Cpu(1)).run(move |(), ()| cur())).starts_with("depengine-cpu1-")
    );
    assert!(
        name(engine.op("c").lane(Lane::Prioritized).run(move |(), ()| cur())).starts_with("depengine-prio-")
    );
}

/// Holds a one-worker engine's worker until the returned sender sends.
fn hold_worker(engine: &Engine) -> (std::sync::mpsc::Sender<()>, depengine::OpHandle<()>) {
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let blocker = engine.op("block").run(move |(), ()| {
        rx.recv_timeout(Duration::from_secs(10)).unwrap();
        Ok(())
    });
    (tx, blocker)
}

#[test]
fn higher_priority_first_fifo_among_equals() {
    let engine = Engine::builder().cpu_workers(1).build().unwrap();
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
    let engine = Engine::builder().cpu_workers(1).bulk_size(1).build().unwrap();
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
    std::thread::spawn(move || done_tx.send(waiter.blocking_wait_for_all()));
    done.recv_timeout(Duration::from_secs(10)).expect("the exited thread's ops never ran").unwrap();
    assert_eq!(*order.lock().unwrap(), (0..200).collect::<Vec<_>>());
}

/// A thread that keeps pushing ready ops does not starve the ops queued by
/// the workers themselves: the workers take from both in turn.
#[test]
fn a_pushing_thread_does_not_starve_ops_queued_by_workers() {
    // Bulk execution off: fairness is counted in engine ops, which fusing merges.
    let engine = Engine::builder().cpu_workers(1).bulk_size(1).build().unwrap();
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
    for _ in 0..1000 {
        let ran = ran.clone();
        engine
            .op("from-thread")
            .run_detached(move |(), ()| {
                ran.fetch_add(1, Ordering::SeqCst);
                Ok(())
            })
            .unwrap();
    }
    tx.send(()).unwrap();
    let ran_before = inner.blocking_wait().unwrap().blocking_wait().unwrap();
    // Workers take at most 64 ops in a row from one queue while another
    // holds ops.
    assert!(ran_before <= 65, "the worker's op waited for {ran_before} ops queued by the pushing thread");
    engine.blocking_wait_for_all().unwrap();
    assert_eq!(ran.load(Ordering::SeqCst), 1000);
}

#[test]
fn low_level_tags_push_sync_and_push_async() {
    let engine = Engine::new();
    let tag = engine.new_var().any();
    let data = Arc::new(std::sync::Mutex::new(Vec::new()));
    for i in 0..50 {
        let data = data.clone();
        if i % 2 == 0 {
            engine
                .push_sync("sync", &[], std::slice::from_ref(&tag), move || {
                    data.lock().unwrap().push(i);
                    Ok(())
                })
                .unwrap();
        } else {
            engine
                .push_async("async", &[], std::slice::from_ref(&tag), move |done| {
                    std::thread::spawn(move || {
                        data.lock().unwrap().push(i);
                        done.succeed(());
                    });
                })
                .unwrap();
        }
    }
    engine.blocking_wait_for_all().unwrap();
    assert_eq!(*data.lock().unwrap(), (0..50).collect::<Vec<_>>());
    assert_eq!(tag.version(), 50);
}

#[test]
fn duplicate_declarations_are_merged_or_refused() {
    let engine = Engine::new();
    let x = engine.var(3u32);
    // Duplicate typed reads: two guards, one read dependency.
    let h = engine.op("rr").read(&x).read(&x).run(|(a, b), ()| Ok(*a + *b));
    assert_eq!(h.blocking_wait().unwrap(), 6);
    // Untyped read of a var written: becomes a write.
    let h = engine.op("rw").read_any(&x.any()).write(&x).run(|(), (mut x,)| {
        *x += 1;
        Ok(())
    });
    h.blocking_wait().unwrap();
    assert_eq!(x.version(), 1);
    // Typed read and write of one var, or two typed writes: refused.
    let err = engine.op("bad").read(&x).write(&x).try_run(|_, _| Ok(())).unwrap_err();
    assert!(err.is_invalid_argument(), "{err}");
    assert!(err.to_string().contains("more than once"), "{err}");
    let err = engine.op("bad2").write(&x).write(&x).run(|_, _| Ok(())).blocking_wait().unwrap_err();
    assert!(err.is_invalid_argument(), "{err}");
    assert_eq!(x.version(), 1, "a refused push changes nothing");
}

#[test]
fn placement_is_checked_at_push() {
    let engine = Engine::new();
    let err = engine.op("g").device(Device::Gpu(0)).try_run(|(), ()| Ok(())).unwrap_err();
    assert!(err.is_unsupported(), "{err}");
    let err = engine.op("c").device(Device::Cpu(3)).try_run(|(), ()| Ok(())).unwrap_err();
    assert!(err.is_invalid_argument() && err.to_string().contains("cpu(3)"), "{err}");
    let err = engine.op("l").lane(Lane::CopyToGpu).try_run(|(), ()| Ok(())).unwrap_err();
    assert!(err.is_invalid_argument(), "{err}");
    let other = Engine::new();
    let foreign = other.var(0);
    let err = engine.op("x").read(&foreign).try_run(|_, ()| Ok(())).unwrap_err();
    assert!(err.is_invalid_argument() && err.to_string().contains("another engine"), "{err}");
}

#[test]
fn bad_configuration_is_an_error() {
    assert!(Engine::builder().cpu_workers(0).build().unwrap_err().is_invalid_argument());
    assert!(Engine::builder().cpu_devices(0).build().unwrap_err().is_invalid_argument());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquire_is_ordered_by_call_time() {
    timed(async {
        let engine = Engine::new();
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
        let engine = Engine::new();
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
    let engine = Engine::new();
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
    let engine = Engine::new();
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
    let engine = Engine::builder().bulk_size(1).build().unwrap();
    let v = engine.var(0u32);
    let g = v.write().blocking_wait().unwrap();
    let _queued = engine.op("queued-reader").read(&v).run(|(_v,), ()| Ok(()));
    let state = v.any().debug_state();
    assert!(state.write_running);
    assert_eq!(state.queued, [(false, "queued-reader".to_owned())]);
    drop(g);
    engine.blocking_wait_for_all().unwrap();
    let state = v.any().debug_state();
    assert!(state.queued.is_empty() && state.running_reads == 0 && state.version == 1);
}

#[test]
fn public_types_are_send_sync_static() {
    fn send_sync<T: Send + Sync + 'static>() {}
    fn send<T: Send + 'static>() {}
    send_sync::<Engine>();
    send_sync::<Var<Vec<u8>>>();
    send_sync::<depengine::AnyVar>();
    send_sync::<depengine::Error>();
    send_sync::<depengine::ReadGuard<u8>>();
    send_sync::<depengine::WriteGuard<u8>>();
    send::<depengine::OpHandle<String>>();
    send::<depengine::Completion<String>>();
    send::<depengine::Acquire<depengine::WriteGuard<u8>>>();
    send::<depengine::WaitForAll>();
}

#[test]
fn future_op_on_a_runtime_that_is_gone_resolves_with_an_error() {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let engine = Engine::builder().runtime(rt.handle().clone()).build().unwrap();
    drop(rt);
    let v = engine.var(0u32);
    let h = engine.op("orphan").write(&v).spawn(|(), (mut v,)| async move {
        *v += 1;
        Ok(())
    });
    let err = h.blocking_wait().unwrap_err();
    assert!(err.is_cancelled() && err.to_string().contains("runtime shut down"), "{err}");
    // The var was released, carrying the failure like any failed write.
    let skipped = engine.op("after").write(&v).run(|(), (v,)| Ok(*v)).blocking_wait().unwrap_err();
    assert!(skipped.is_skipped() && skipped.root().same_as(&err), "{skipped}");
    assert!(engine.blocking_wait_for_var(&v).unwrap_err().same_as(&err));
    assert_eq!(engine.op("later").write(&v).run(|(), (v,)| Ok(*v)).blocking_wait().unwrap(), 0);
}

#[test]
fn op_handle_wakes_once_the_op_has_completed() {
    use tokio_test::{assert_pending, assert_ready, task};
    let engine = Engine::builder().kind(EngineKind::Naive).build().unwrap();
    let v = engine.var(1u32);
    let held = v.write().blocking_wait().unwrap();
    let mut h = task::spawn(engine.op("inc").write(&v).run(|(), (mut v,)| {
        *v += 1;
        Ok(*v)
    }));
    assert_pending!(h.poll());
    assert!(!h.is_woken());
    drop(held); // the naive engine runs the op right here
    assert!(h.is_woken());
    assert_eq!(assert_ready!(h.poll()).unwrap(), 2);
}

#[test]
fn naive_engine_runs_ops_at_push() {
    let engine = Engine::builder().kind(EngineKind::Naive).build().unwrap();
    let v = engine.var(0u32);
    let me = std::thread::current().id();
    let h = engine.op("at-push").write(&v).run(move |(), (mut v,)| {
        *v += 1;
        Ok(std::thread::current().id() == me)
    });
    assert!(h.is_finished(), "done before push returned");
    assert!(h.blocking_wait().unwrap());
    assert_eq!(v.version(), 1);
}

/// Detached ops take effect in push order with handle-returning ops on the
/// same var, on both engines.
#[test]
fn detached_ops_keep_push_order_with_the_others() {
    for kind in [EngineKind::Threaded, EngineKind::Naive] {
        let engine = Engine::builder().kind(kind).cpu_workers(2).build().unwrap();
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
        engine.blocking_wait_for_all().unwrap();
        let got = futures::executor::block_on(log.read()).unwrap().clone();
        assert_eq!(got, (0..2_000).collect::<Vec<_>>(), "{kind:?}");
        for (k, h) in handles.into_iter().enumerate() {
            assert_eq!(h.blocking_wait().unwrap(), 3 * k as u32);
        }
    }
}

/// Counts its drops.
struct Counted(Arc<AtomicUsize>);

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// Guards that outlive their op's completion signal: the op completes when
/// the last of them is dropped, on whatever thread, and its record is freed
/// then (its result, which nobody takes, is dropped exactly once).
#[test]
fn guards_held_past_the_signal_complete_the_op_and_free_it() {
    for kind in [EngineKind::Threaded, EngineKind::Naive] {
        let engine = Engine::builder().kind(kind).cpu_workers(2).build().unwrap();
        let (a, b) = (engine.var(1u32), engine.var(2u32));
        let dropped = Arc::new(AtomicUsize::new(0));
        let (tx, rx) = std::sync::mpsc::channel();
        let result = Counted(dropped.clone());
        // The handle is dropped at once: the guards hold the op open alone.
        drop(engine.op("lend").read(&a).write(&b).run_async(move |(a,), (b,), done| {
            done.succeed(result);
            tx.send((a, b)).unwrap();
        }));
        let holder = std::thread::spawn(move || {
            let (a, mut b) = rx.recv().unwrap();
            std::thread::sleep(Duration::from_millis(20));
            *b += *a;
        });
        let after = engine.op("after").write(&b).run(|(), (b,)| Ok(*b));
        assert_eq!(after.blocking_wait().unwrap(), 3, "{kind:?}: ran after the guards were dropped");
        holder.join().unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while dropped.load(Ordering::SeqCst) == 0 {
            assert!(std::time::Instant::now() < deadline, "{kind:?}: the record was never freed");
            std::thread::yield_now();
        }
        engine.blocking_wait_for_all().unwrap();
        assert_eq!(dropped.load(Ordering::SeqCst), 1, "{kind:?}");
    }
}

/// Sync bodies that hand their guards to another thread, which writes
/// through them and drops them while the body returns: whichever drops
/// last, body or guard, completes the op exactly once, the next op on the
/// var sees the write, and every record is freed once (its unclaimed result
/// dropped exactly once).
#[test]
fn guards_racing_the_body_s_return_complete_each_op_once() {
    const OPS: usize = 2_000;
    for kind in [EngineKind::Threaded, EngineKind::Naive] {
        let engine = Engine::builder().kind(kind).cpu_workers(2).build().unwrap();
        let v = engine.var(0usize);
        let dropped = Arc::new(AtomicUsize::new(0));
        let (tx, rx) = std::sync::mpsc::channel::<depengine::WriteGuard<usize>>();
        let dropper = std::thread::spawn(move || {
            for mut guard in rx {
                *guard += 1;
            }
        });
        for i in 0..OPS {
            let (tx, result) = (tx.clone(), Counted(dropped.clone()));
            let seen = engine.op("lend").write(&v).run(move |(), (v,)| {
                let seen = *v;
                tx.send(v).unwrap();
                if i % 2 == 0 {
                    std::hint::spin_loop();
                }
                Ok((seen, result))
            });
            // Every other handle dropped at once: the engine drops those results.
            if i % 2 == 1 {
                let (seen, result) = seen.blocking_wait().unwrap();
                assert_eq!(seen, i, "{kind:?}: op {i} saw the writes of the ops before it");
                drop(result);
            }
        }
        engine.blocking_wait_for_all().unwrap();
        let last = engine.op("last").read(&v).run(|(v,), ()| Ok(*v)).blocking_wait().unwrap();
        assert_eq!(last, OPS, "{kind:?}");
        drop(tx);
        dropper.join().unwrap();
        engine.blocking_shutdown(depengine::ShutdownMode::Drain).unwrap();
        assert_eq!(dropped.load(Ordering::SeqCst), OPS, "{kind:?}: each result dropped once");
    }
}

/// A var's data lives as long as any handle to it, typed or untyped, on
/// whatever thread the last one is dropped, and is dropped exactly once:
/// both kinds of handle share one reference count.
#[test]
fn a_var_s_data_is_dropped_once_with_its_last_handle_of_either_kind() {
    let engine = Engine::builder().cpu_workers(2).build().unwrap();
    let dropped = Arc::new(AtomicUsize::new(0));
    let v = engine.var(Counted(dropped.clone()));
    let tags: Vec<depengine::AnyVar> = (0..3).map(|_| v.any()).collect();
    let tag = tags[0].clone();
    // Ops declaring the var both ways hold references of both kinds.
    engine.op("typed").read(&v).run_detached(|(_r,), ()| Ok(())).unwrap();
    drop(engine.push_sync("untyped", std::slice::from_ref(&tag), &[], || Ok(())).unwrap());
    engine.blocking_wait_for_all().unwrap();
    drop(v);
    drop(tags);
    assert_eq!(dropped.load(Ordering::SeqCst), 0, "an untyped handle still holds the var");
    assert_eq!(tag.version(), 0);
    let other = tag.clone();
    std::thread::spawn(move || drop(other)).join().unwrap();
    assert_eq!(dropped.load(Ordering::SeqCst), 0);
    std::thread::spawn(move || drop(tag)).join().unwrap();
    assert_eq!(dropped.load(Ordering::SeqCst), 1, "the last handle drops the data, once");
    engine.blocking_shutdown(depengine::ShutdownMode::Drain).unwrap();
    assert_eq!(dropped.load(Ordering::SeqCst), 1);
}
