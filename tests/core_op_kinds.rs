//! Op kinds: sync, async with a completion token, future ops, the low-level tag
//! API, typed declarations of any arity, and the naive engine.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::timed;
use depengine::engine::EngineKind;
use depengine::{Engine, Var};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sum_then_get() {
    timed(async {
        let engine = Engine::from_env();
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
async fn read_all_write_all_and_tuple_arity() {
    timed(async {
        let engine = Engine::from_env();
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
        let engine = Engine::from_env();
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
        let engine = Engine::from_env();
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
    let engine = Engine::from_env();
    let v = engine.var(0);
    let err = engine.op("f").write(&v).spawn(|(), (_v,)| async { Ok(()) }).pushed().unwrap_err();
    assert!(err.is_no_runtime(), "{err}");
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let engine = depengine::EngineBuilder::from_env().runtime(rt.handle().clone()).build().unwrap();
    let v = engine.var(0);
    let h = engine.op("f").write(&v).spawn(|(), (mut v,)| async move {
        *v += 5;
        Ok(*v)
    });
    assert_eq!(rt.block_on(h).unwrap(), 5);
}

#[test]
fn future_op_on_a_runtime_that_is_gone_resolves_with_an_error() {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let engine = depengine::EngineBuilder::from_env().runtime(rt.handle().clone()).build().unwrap();
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

/// Untyped tags (MXNet's `NewVariable`, `PushSync`, `PushAsync`): ops that
/// declare a bare `Var<()>` by its `AnyVar`, sync and async, in push order.
#[test]
fn low_level_tags_order_sync_and_async_ops() {
    let engine = Engine::from_env();
    let tag = engine.var(()).any();
    let data = Arc::new(std::sync::Mutex::new(Vec::new()));
    for i in 0..50 {
        let data = data.clone();
        let op = engine.op(if i % 2 == 0 { "sync" } else { "async" }).write_any(&tag);
        if i % 2 == 0 {
            op.run(move |(), ()| {
                data.lock().unwrap().push(i);
                Ok(())
            })
            .pushed()
            .unwrap();
        } else {
            op.run_async(move |(), (), done| {
                std::thread::spawn(move || {
                    data.lock().unwrap().push(i);
                    done.succeed(());
                });
            })
            .pushed()
            .unwrap();
        }
    }
    engine.wait_for_all().blocking_wait().unwrap();
    assert_eq!(*data.lock().unwrap(), (0..50).collect::<Vec<_>>());
    assert_eq!(tag.version(), 50);
}

#[test]
fn naive_engine_runs_ops_at_push() {
    let engine = depengine::EngineBuilder::from_env().kind(EngineKind::Naive).build().unwrap();
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
