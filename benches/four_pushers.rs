//! Four threads pushing at once over shared vars: contention on the push
//! path (var locks, ordered multi-var appends).

mod common;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};

const THREADS: u64 = 4;
const VARS: u64 = 16;

fn four_pushers(c: &mut Criterion) {
    let mut group = c.benchmark_group("four_pushers");
    group.throughput(Throughput::Elements(common::OPS));
    for (name, engine) in common::engines() {
        let vars: Vec<_> = (0..VARS).map(|v| engine.var(v)).collect();
        group.bench_function(BenchmarkId::from_parameter(name), |b| {
            b.iter(|| {
                std::thread::scope(|s| {
                    for t in 0..THREADS {
                        let (engine, vars) = (&engine, &vars);
                        s.spawn(move || {
                            for i in 0..common::OPS / THREADS {
                                let r = &vars[((i * 7 + t) % VARS) as usize];
                                let w = &vars[((i * 3 + t * 5 + 1) % VARS) as usize];
                                let arg = t << 32 | i;
                                let handle = if r.id() == w.id() {
                                    engine.op("rw").write(w).run(move |(), (mut w,)| {
                                        *w = common::mix(arg, *w);
                                        Ok(())
                                    })
                                } else {
                                    engine.op("rw").read(r).write(w).run(move |(r,), (mut w,)| {
                                        *w = common::mix(common::mix(arg, *r), *w);
                                        Ok(())
                                    })
                                };
                                drop(handle);
                            }
                        });
                    }
                });
                engine.wait_for_all().blocking_wait().unwrap();
            });
        });
    }
    group.finish();
}

criterion_group! { name = benches; config = common::config(); targets = four_pushers }
criterion_main!(benches);
