//! Push one op on an idle engine and await its handle: round-trip latency,
//! from a plain thread (blocking wait) and from a Tokio task.

mod common;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};

fn round_trip(c: &mut Criterion) {
    let mut group = c.benchmark_group("push_await_one_op");
    for (name, engine) in common::engines() {
        let v = engine.var(0u64);
        let op = || {
            engine.op("one").write(&v).run(|(), (mut v,)| {
                *v += 1;
                Ok(())
            })
        };
        group.bench_function(BenchmarkId::new("blocking", name), |b| {
            b.iter(|| op().blocking_wait().unwrap());
        });
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        group.bench_function(BenchmarkId::new("tokio_current_thread", name), |b| {
            b.iter(|| rt.block_on(async { op().await.unwrap() }));
        });
    }
    group.finish();
}

criterion_group! { name = benches; config = common::config(); targets = round_trip }
criterion_main!(benches);
