//! Handles and guards: exact wake-ups, guards that outlive their op's body or
//! signal, and the public types' auto traits.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::Counted;
use depengine::engine::EngineKind;
use depengine::{Engine, Var};

#[test]
fn op_handle_wakes_once_the_op_has_completed() {
    use tokio_test::{assert_pending, assert_ready, task};
    let engine = depengine::EngineBuilder::from_env().kind(EngineKind::Naive).build().unwrap();
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

/// Guards that outlive their op's completion signal: the op completes when
/// the last of them is dropped, on whatever thread, and its record is freed
/// then (its result, which nobody takes, is dropped exactly once).
#[test]
fn guards_held_past_the_signal_complete_the_op_and_free_it() {
    for kind in [EngineKind::Threaded, EngineKind::Naive] {
        let engine = depengine::EngineBuilder::from_env().kind(kind).cpu_workers(2).build().unwrap();
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
        engine.wait_for_all().blocking_wait().unwrap();
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
        let engine = depengine::EngineBuilder::from_env().kind(kind).cpu_workers(2).build().unwrap();
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
        engine.wait_for_all().blocking_wait().unwrap();
        let last = engine.op("last").read(&v).run(|(v,), ()| Ok(*v)).blocking_wait().unwrap();
        assert_eq!(last, OPS, "{kind:?}");
        drop(tx);
        dropper.join().unwrap();
        engine.blocking_shutdown(depengine::ShutdownMode::Drain).unwrap();
        assert_eq!(dropped.load(Ordering::SeqCst), OPS, "{kind:?}: each result dropped once");
    }
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
    send::<depengine::engine::Completion<String>>();
    send::<depengine::var::Acquire<depengine::WriteGuard<u8>>>();
    send::<depengine::engine::WaitForAll>();
}
