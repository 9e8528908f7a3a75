//! A random DAG over 64 vars (docs/benchmarks.md's `w4_dag` op list, no spin): each op
//! reads two random vars and writes a third.

mod common;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use depengine::Engine;

const VARS: u32 = 64;

/// (a, b, w) per op, from the random generator of docs/benchmarks.md.
fn op_list(n: u64) -> Vec<(usize, usize, usize)> {
    let mut state: u64 = 42;
    let mut next = || {
        state = state.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        ((state >> 33) as u32 % VARS) as usize
    };
    (0..n).map(|_| (next(), next(), next())).collect()
}

fn push_all(engine: &Engine, vars: &[depengine::Var<u64>], ops: &[(usize, usize, usize)]) {
    for (i, &(a, b, w)) in ops.iter().enumerate() {
        let arg = i as u64;
        // The typed API gets one guard per var: declare the distinct ones.
        let handle = match (a == w, b == w, a == b) {
            (true, true, _) => engine.op("dag").write(&vars[w]).run(move |(), (mut w,)| {
                *w = common::mix(common::mix(arg, *w), *w);
                Ok(())
            }),
            (true, false, _) => engine.op("dag").read(&vars[b]).write(&vars[w]).run(move |(b,), (mut w,)| {
                *w = common::mix(common::mix(arg, *w), *b);
                Ok(())
            }),
            (false, true, _) => engine.op("dag").read(&vars[a]).write(&vars[w]).run(move |(a,), (mut w,)| {
                *w = common::mix(common::mix(arg, *a), *w);
                Ok(())
            }),
            (false, false, true) => {
                engine.op("dag").read(&vars[a]).write(&vars[w]).run(move |(a,), (mut w,)| {
                    *w = common::mix(common::mix(arg, *a), *a);
                    Ok(())
                })
            }
            (false, false, false) => {
                engine.op("dag").read(&vars[a]).read(&vars[b]).write(&vars[w]).run(move |(a, b), (mut w,)| {
                    *w = common::mix(common::mix(arg, *a), *b);
                    Ok(())
                })
            }
        };
        drop(handle);
    }
}

fn random_dag(c: &mut Criterion) {
    let ops = op_list(common::OPS);
    let mut group = c.benchmark_group("random_dag");
    group.throughput(Throughput::Elements(common::OPS));
    for (name, engine) in common::engines() {
        let vars: Vec<_> = (0..u64::from(VARS)).map(|v| engine.var(v)).collect();
        group.bench_function(BenchmarkId::from_parameter(name), |b| {
            b.iter(|| {
                push_all(&engine, &vars, &ops);
                engine.wait_for_all().blocking_wait().unwrap();
            });
        });
    }
    group.finish();
}

criterion_group! { name = benches; config = common::config(); targets = random_dag }
criterion_main!(benches);
