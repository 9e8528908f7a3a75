//! A chain of writes to one var: each op can start only once the previous
//! one has completed (per-op dispatch latency).

mod common;

use std::hint::black_box;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};

fn write_chain(c: &mut Criterion) {
    let mut group = c.benchmark_group("write_chain");
    group.throughput(Throughput::Elements(common::OPS));
    for (name, engine) in common::engines() {
        let v = engine.var(0u64);
        group.bench_function(BenchmarkId::from_parameter(name), |b| {
            b.iter(|| {
                for i in 0..common::OPS {
                    drop(engine.op("chain").write(&v).run(move |(), (mut v,)| {
                        *v = common::mix(black_box(i), *v);
                        Ok(())
                    }));
                }
                engine.blocking_wait_for_var(&v).unwrap();
            });
        });
    }
    group.finish();
}

criterion_group! { name = benches; config = common::config(); targets = write_chain }
criterion_main!(benches);
