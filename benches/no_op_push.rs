//! Push of no-op ops that declare no vars, then `wait_for_all`: pure push
//! and dispatch cost, with a handle dropped at once (`run`) and without one
//! (`run_detached`).

mod common;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};

fn no_op_push(c: &mut Criterion) {
    let mut group = c.benchmark_group("no_op_push");
    group.throughput(Throughput::Elements(common::OPS));
    for (name, engine) in common::engines() {
        group.bench_function(BenchmarkId::from_parameter(name), |b| {
            b.iter(|| {
                for _ in 0..common::OPS {
                    drop(engine.op("noop").run(|(), ()| Ok(())));
                }
                engine.wait_for_all().blocking_wait().unwrap();
            });
        });
        group.bench_function(BenchmarkId::new("detached", name), |b| {
            b.iter(|| {
                for _ in 0..common::OPS {
                    engine.op("noop").run_detached(|(), ()| Ok(())).unwrap();
                }
                engine.wait_for_all().blocking_wait().unwrap();
            });
        });
    }
    group.finish();
}

criterion_group! { name = benches; config = common::config(); targets = no_op_push }
criterion_main!(benches);
