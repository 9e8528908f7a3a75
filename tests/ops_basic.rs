//! Basic behaviour of ops, handles and vars.

use std::time::Duration;

use depengine::{Engine, EngineKind};

async fn timed<F: std::future::Future>(f: F) -> F::Output {
    tokio::time::timeout(Duration::from_secs(20), f).await.expect("test timed out")
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
        h.await.unwrap();
        let total = engine.op("get").read(&s).run(|(s,), ()| Ok(*s)).await.unwrap();
        assert_eq!(total, 1000.0);
        assert_eq!(s.version(), 1);
        engine.wait_for_var(&s).await.unwrap();
        engine.wait_for_all().await.unwrap();
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chain_in_push_order_threaded_and_naive() {
    for kind in [EngineKind::Threaded, EngineKind::Naive] {
        timed(async {
            let engine = Engine::builder().kind(kind).build().unwrap();
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
