//! Per-op overhead: push + run + complete, for independent ops and for a
//! write chain on one var. Plain threads drive the engine (blocking waits).

use std::hint::black_box;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use depengine::{Engine, EngineKind};

const OPS: u64 = 1000;

fn engines() -> Vec<(&'static str, Engine)> {
    vec![
        ("threaded", Engine::builder().kind(EngineKind::Threaded).build().unwrap()),
        ("naive", Engine::builder().kind(EngineKind::Naive).build().unwrap()),
    ]
}

fn independent(c: &mut Criterion) {
    let mut group = c.benchmark_group("push_independent");
    group.throughput(Throughput::Elements(OPS));
    for (name, engine) in engines() {
        let vars: Vec<_> = (0..64u64).map(|i| engine.var(i)).collect();
        group.bench_function(BenchmarkId::from_parameter(name), |b| {
            b.iter(|| {
                for i in 0..OPS {
                    let v = &vars[(i % 64) as usize];
                    engine.op("inc").write(v).run(move |(), (mut v,)| {
                        *v = black_box(*v + i);
                        Ok(())
                    });
                }
                engine.blocking_wait_for_all().unwrap();
            });
        });
    }
    group.finish();
}

fn chain(c: &mut Criterion) {
    let mut group = c.benchmark_group("write_chain");
    group.throughput(Throughput::Elements(OPS));
    for (name, engine) in engines() {
        let v = engine.var(0u64);
        group.bench_function(BenchmarkId::from_parameter(name), |b| {
            b.iter(|| {
                for i in 0..OPS {
                    engine.op("chain").write(&v).run(move |(), (mut v,)| {
                        *v = black_box(*v ^ i);
                        Ok(())
                    });
                }
                engine.blocking_wait_for_var(&v).unwrap();
            });
        });
    }
    group.finish();
}

fn round_trip(c: &mut Criterion) {
    let engine = Engine::new();
    let v = engine.var(0u64);
    c.bench_function("push_then_wait_one_op", |b| {
        b.iter(|| {
            engine
                .op("one")
                .write(&v)
                .run(|(), (mut v,)| {
                    *v += 1;
                    Ok(())
                })
                .blocking_wait()
                .unwrap()
        });
    });
}

criterion_group!(benches, independent, chain, round_trip);
criterion_main!(benches);
