//! Where the blocking calls (`scope`, every `blocking_*`) may run: refused
//! exactly where they would stall a thread that runs a Tokio runtime's
//! tasks, or wait for what cannot happen (a pool's start hook, a waker the
//! engine wakes), and allowed everywhere else (`spawn_blocking`,
//! `block_in_place`, plain threads). Every check ends in bounded time: a
//! call that hangs fails its test instead.

mod common;

use std::sync::Arc;
use std::sync::mpsc;
use std::task::{Context, Wake, Waker};
use std::time::Duration;

use depengine::{Engine, Error, ShutdownMode};

/// Every blocking form once, on a fresh engine: `scope` over borrowed
/// memory with an op in it, a handle's wait, a var's wait, a var's
/// acquire, the wait for all, and a shutdown.
fn every_blocking_form() -> Result<u64, Error> {
    let engine = Engine::from_env();
    let mut data = vec![1u64; 64];
    depengine::scope(&engine, |s| -> Result<(), Error> {
        for chunk in s.chunks(&mut data, 16) {
            engine.op("double").write(&chunk).run_detached(|(), (mut c,)| {
                c.iter_mut().for_each(|x| *x *= 2);
                Ok(())
            })?;
        }
        Ok(())
    })??;
    let v = engine.var(0u64);
    let sum = data.iter().sum::<u64>();
    engine.op("store").write(&v).run(move |(), (mut v,)| {
        *v = sum;
        Ok(())
    });
    engine.blocking_wait_for_var(&v)?;
    let got = engine.op("get").read(&v).run(|(v,), ()| Ok(*v)).blocking_wait()?;
    assert_eq!(*v.read().blocking_wait()?, got);
    engine.wait_for_all().blocking_wait()?;
    engine.blocking_shutdown(ShutdownMode::Drain)?;
    Ok(got)
}

fn runtime(multi: bool) -> tokio::runtime::Runtime {
    let mut builder = if multi {
        tokio::runtime::Builder::new_multi_thread()
    } else {
        tokio::runtime::Builder::new_current_thread()
    };
    builder.worker_threads(2).enable_all().build().unwrap()
}

#[test]
fn every_blocking_form_runs_inside_spawn_blocking() {
    for multi in [false, true] {
        let got = common::bounded(30, "spawn_blocking", move || {
            runtime(multi).block_on(async { tokio::task::spawn_blocking(every_blocking_form).await.unwrap() })
        });
        assert_eq!(got.unwrap(), 128, "multi-thread: {multi}");
    }
}

#[test]
fn every_blocking_form_runs_inside_block_in_place() {
    // Tokio allows block_in_place on the multi-thread runtime only.
    let got = common::bounded(30, "block_in_place", || {
        runtime(true).block_on(async {
            tokio::spawn(async { tokio::task::block_in_place(every_blocking_form) }).await.unwrap()
        })
    });
    assert_eq!(got.unwrap(), 128);
}

#[test]
fn every_blocking_form_runs_on_a_plain_thread_beside_a_runtime() {
    for multi in [false, true] {
        let got = common::bounded(30, "a plain thread", move || {
            let rt = runtime(multi);
            // Even with the runtime entered: this thread runs none of its tasks.
            let _entered = rt.enter();
            every_blocking_form()
        });
        assert_eq!(got.unwrap(), 128, "multi-thread: {multi}");
    }
    assert_eq!(common::bounded(30, "a plain thread", every_blocking_form).unwrap(), 128);
}

/// Each blocking form, in an async task, is refused with an error that
/// says what to do instead.
async fn refused_in_a_task() {
    let engine = Engine::from_env();
    let v = engine.var(0u32);
    let mut x = 0u8;
    let err = depengine::scope(&engine, |s| drop(s.var(&mut x))).unwrap_err();
    assert!(err.is_blocking_in_runtime(), "{err}");
    assert!(err.to_string().contains("spawn_blocking"), "{err}");
    let refusals = [
        engine.wait_for_all().blocking_wait().unwrap_err(),
        engine.blocking_wait_for_var(&v).unwrap_err(),
        engine.op("x").read(&v).run(|_, ()| Ok(())).blocking_wait().unwrap_err(),
        v.read().blocking_wait().map(drop).unwrap_err(),
        engine.blocking_shutdown(ShutdownMode::Drain).unwrap_err(),
    ];
    for err in refusals {
        assert!(err.is_blocking_in_runtime(), "{err}");
        assert!(err.to_string().contains("`.await`"), "{err}");
    }
    // The async forms work there.
    common::timed(engine.wait_for_all()).await.unwrap();
}

#[test]
fn every_blocking_form_is_refused_in_an_async_task() {
    for multi in [false, true] {
        common::bounded(30, "the refusals", move || {
            let rt = runtime(multi);
            rt.block_on(async { tokio::spawn(refused_in_a_task()).await.unwrap() });
            // The future a block_on drives is async code too.
            rt.block_on(refused_in_a_task());
        });
    }
}

/// A start hook that pushes to its own engine is refused, clearly, instead
/// of waiting for ever for the pool that waits for the hook; the pool
/// still starts, and the engine drains.
#[test]
fn a_start_hook_pushing_to_its_own_engine_is_refused_not_hung() {
    let (tx, rx) = mpsc::channel::<Error>();
    let tx = std::sync::Mutex::new(tx);
    let slot: Arc<std::sync::OnceLock<Engine>> = Arc::default();
    let in_hook = slot.clone();
    let engine = Engine::builder()
        .cpu_workers(1)
        .on_thread_start(move |_| {
            if let Some(engine) = in_hook.get() {
                let refused = engine.op("from hook").run_detached(|(), ()| Ok(())).unwrap_err();
                let _ = tx.lock().unwrap().send(refused);
                let waited = engine.wait_for_all().blocking_wait().unwrap_err();
                let _ = tx.lock().unwrap().send(waited);
            }
        })
        .build()
        .unwrap();
    assert!(slot.set(engine.clone()).is_ok());
    let first = engine.clone();
    let ran = common::bounded(30, "a push whose pool's start hook pushes", move || {
        first.op("first").run(|(), ()| Ok(7)).blocking_wait()
    });
    assert_eq!(ran.unwrap(), 7);
    for _ in 0..2 {
        let err = rx.recv_timeout(Duration::from_secs(5)).expect("the hook ran");
        assert!(err.is_would_deadlock(), "{err}");
        assert!(err.to_string().contains("start hook"), "{err}");
    }
    common::bounded(30, "the drain", move || engine.blocking_shutdown(ShutdownMode::Drain)).unwrap();
}

/// A waker that blocks on the engine, woken by an op's completion on a
/// worker, is refused there instead of blocking that worker for ever.
#[test]
fn a_waker_that_blocks_on_the_engine_is_refused_on_its_worker() {
    struct Blocking {
        engine: Engine,
        tx: std::sync::Mutex<mpsc::Sender<Result<(), Error>>>,
    }
    impl Wake for Blocking {
        fn wake(self: Arc<Self>) {
            let waited = self.engine.wait_for_all().blocking_wait();
            let _ = self.tx.lock().unwrap().send(waited);
        }
    }
    let engine = Engine::builder().cpu_workers(1).build().unwrap();
    let (tx, rx) = mpsc::channel();
    let (go, gate) = mpsc::channel::<()>();
    let mut handle = engine.op("slow").run(move |(), ()| {
        gate.recv_timeout(Duration::from_secs(10)).unwrap();
        Ok(())
    });
    let waker = Waker::from(Arc::new(Blocking { engine: engine.clone(), tx: tx.into() }));
    let polled = std::pin::Pin::new(&mut handle).poll(&mut Context::from_waker(&waker));
    assert!(polled.is_pending());
    go.send(()).unwrap();
    let waited = rx.recv_timeout(Duration::from_secs(10)).expect("the waker returned");
    let err = waited.unwrap_err();
    assert!(err.is_would_deadlock(), "{err}");
    common::bounded(30, "the wait after", move || engine.wait_for_all().blocking_wait()).unwrap();
}

use std::future::Future;
