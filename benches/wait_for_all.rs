//! `wait_for_all` right after one op is pushed, and on an idle engine: the
//! cost of an epoch's wait (its latch set by the op's completion, its
//! waker or parked thread woken), from a plain thread and a Tokio task.

mod common;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};

fn wait_for_all(c: &mut Criterion) {
    let mut group = c.benchmark_group("wait_for_all");
    for (name, engine) in common::engines() {
        let v = engine.var(0u64);
        let push = || {
            engine
                .op("one")
                .write(&v)
                .run_detached(|(), (mut v,)| {
                    *v += 1;
                    Ok(())
                })
                .unwrap();
        };
        group.bench_function(BenchmarkId::new("after_one_op_blocking", name), |b| {
            b.iter(|| {
                push();
                engine.wait_for_all().blocking_wait().unwrap();
            });
        });
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        group.bench_function(BenchmarkId::new("after_one_op_tokio_current_thread", name), |b| {
            b.iter(|| {
                push();
                rt.block_on(engine.wait_for_all()).unwrap();
            });
        });
        group.bench_function(BenchmarkId::new("idle_blocking", name), |b| {
            b.iter(|| engine.wait_for_all().blocking_wait().unwrap());
        });
    }
    group.finish();
}

criterion_group! { name = benches; config = common::config(); targets = wait_for_all }
criterion_main!(benches);
