//! One write releasing 64 readers, and the next write waiting for all 64
//! reads (docs/benchmarks.md's `w3_fan` shape): batch release and its reverse.

mod common;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};

const READERS: u64 = 64;
const ROUNDS: u64 = 16;

fn fan_out(c: &mut Criterion) {
    let mut group = c.benchmark_group("fan_out_64");
    group.throughput(Throughput::Elements(ROUNDS * (READERS + 1)));
    for (name, engine) in common::engines() {
        let x = engine.var(0u64);
        let outs: Vec<_> = (0..READERS).map(|j| engine.var(j)).collect();
        group.bench_function(BenchmarkId::from_parameter(name), |b| {
            b.iter(|| {
                for r in 0..ROUNDS {
                    drop(engine.op("write").write(&x).run(move |(), (mut x,)| {
                        *x = common::mix(r, *x);
                        Ok(())
                    }));
                    for (j, out) in outs.iter().enumerate() {
                        let arg = r * READERS + j as u64;
                        drop(engine.op("read").read(&x).write(out).run(move |(x,), (mut p,)| {
                            *p = common::mix(common::mix(arg, *x), *p);
                            Ok(())
                        }));
                    }
                }
                engine.wait_for_all().blocking_wait().unwrap();
            });
        });
    }
    group.finish();
}

criterion_group! { name = benches; config = common::config(); targets = fan_out }
criterion_main!(benches);
