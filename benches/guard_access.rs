//! Typed guard access: an op receiving four read guards and one write
//! guard, against the same dependencies declared untyped (no guards), and
//! the async acquire of a var's guard outside any op.

mod common;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};

fn guard_access(c: &mut Criterion) {
    let mut group = c.benchmark_group("guard_access");
    group.throughput(Throughput::Elements(common::OPS));
    for (name, engine) in common::engines() {
        let ins: Vec<_> = (0..4u64).map(|i| engine.var(i)).collect();
        let out = engine.var(0u64);
        group.bench_function(BenchmarkId::new("typed_4r_1w", name), |b| {
            b.iter(|| {
                for i in 0..common::OPS {
                    let op = engine.op("typed").read(&ins[0]).read(&ins[1]).read(&ins[2]).read(&ins[3]);
                    drop(op.write(&out).run(move |(a, b, c, d), (mut o,)| {
                        *o = common::mix(i, *a ^ *b ^ *c ^ *d ^ *o);
                        Ok(())
                    }));
                }
                engine.wait_for_all().blocking_wait().unwrap();
            });
        });
        let reads: Vec<_> = ins.iter().map(|v| v.any()).collect();
        let writes = [out.any()];
        group.bench_function(BenchmarkId::new("untyped_4r_1w", name), |b| {
            b.iter(|| {
                for i in 0..common::OPS {
                    let op = reads.iter().fold(engine.op("untyped"), |op, r| op.read_any(r));
                    let h = writes
                        .iter()
                        .fold(op, |op, w| op.write_any(w))
                        .run(move |(), ()| {
                            std::hint::black_box(common::mix(i, i));
                            Ok(())
                        })
                        .pushed();
                    drop(h);
                }
                engine.wait_for_all().blocking_wait().unwrap();
            });
        });
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        group.bench_function(BenchmarkId::new("acquire_write_guard", name), |b| {
            b.iter(|| {
                rt.block_on(async {
                    for _ in 0..common::OPS {
                        *out.write().await.unwrap() += 1;
                    }
                });
            });
        });
    }
    group.finish();
}

criterion_group! { name = benches; config = common::config(); targets = guard_access }
criterion_main!(benches);
