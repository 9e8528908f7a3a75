//! `wait_for_var` on a var with nothing pending: the cost of asking.

mod common;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};

fn wait_idle_var(c: &mut Criterion) {
    let mut group = c.benchmark_group("wait_for_var_idle");
    for (name, engine) in common::engines() {
        let v = engine.var(0u64);
        group.bench_function(BenchmarkId::new("blocking", name), |b| {
            b.iter(|| engine.blocking_wait_for_var(&v).unwrap());
        });
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        group.bench_function(BenchmarkId::new("tokio_current_thread", name), |b| {
            b.iter(|| rt.block_on(async { engine.wait_for_var(&v).await.unwrap() }));
        });
    }
    group.finish();
}

criterion_group! { name = benches; config = common::config(); targets = wait_idle_var }
criterion_main!(benches);
