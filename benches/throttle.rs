//! Pushes behind busy workers: every worker that could run the pushed ops
//! is held by an op that waits for the pushes to end, and the pushing
//! thread may not run them itself (a non-zero priority, the prioritized
//! lane, `pusher_runs_at(0)`, a GPU on the simulated device). Each case
//! with the soft bound on ops in flight at its default (4,096) and off:
//! past the bound, nothing completes, so the bound must cost nothing.
//! Only the pushes are timed (`iter_custom`): 20,000 per iteration, five
//! bounds' worth.

mod common;

use std::sync::mpsc;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use depengine::{Device, Engine, Lane};

const PUSHES: u64 = 20_000;

/// The cases: a name, and how an engine with `throttle_at` pushes one op.
type Push = fn(&Engine);
const CASES: [(&str, Push); 4] = [
    ("priority", |e| e.op("behind").priority(1).run_detached(|(), ()| Ok(())).unwrap()),
    ("lane", |e| e.op("behind").lane(Lane::Prioritized).run_detached(|(), ()| Ok(())).unwrap()),
    ("pusher_runs_at_0", |e| e.op("behind").run_detached(|(), ()| Ok(())).unwrap()),
    ("gpu_sim", |e| drop(e.op("behind").device(Device::Gpu(0)).run_gpu(|(), (), _| Ok(())))),
];

fn engine(case: &str, throttle_at: usize) -> Engine {
    depengine::EngineBuilder::from_env()
        .cpu_workers(1)
        .priority_workers(1)
        .simulated_gpus(1)
        .gpu_workers(1)
        .pusher_runs_at(if case == "pusher_runs_at_0" { 0 } else { 64 })
        .throttle_at(throttle_at)
        .build()
        .expect("engine")
}

/// Holds the CPU worker, the prioritized lane's and the GPU's until the
/// returned sender is dropped; returns once all three hold.
fn hold(engine: &Engine) -> mpsc::Sender<()> {
    let (release, held) = mpsc::channel::<()>();
    let held = std::sync::Arc::new(std::sync::Mutex::new(held));
    let (started, running) = mpsc::channel::<()>();
    let wait = move |held: &std::sync::Mutex<mpsc::Receiver<()>>, started: &mpsc::Sender<()>| {
        started.send(()).unwrap();
        let _ = held.lock().unwrap().recv();
    };
    for lane in [Lane::Normal, Lane::Prioritized] {
        let (held, started) = (held.clone(), started.clone());
        engine
            .op("hold")
            .lane(lane)
            .run_detached(move |(), ()| {
                wait(&held, &started);
                Ok(())
            })
            .unwrap();
    }
    let (held, started) = (held.clone(), started.clone());
    drop(engine.op("hold").device(Device::Gpu(0)).run_gpu(move |(), (), _| {
        wait(&held, &started);
        Ok(())
    }));
    for _ in 0..3 {
        running.recv().unwrap();
    }
    release
}

fn behind_busy_workers(c: &mut Criterion) {
    let mut group = c.benchmark_group("throttle_behind_busy_workers");
    group.throughput(Throughput::Elements(PUSHES));
    group.sample_size(10);
    for (case, push) in CASES {
        for (bound, throttle_at) in [("bound_4096", 4_096), ("off", 0)] {
            let engine = engine(case, throttle_at);
            group.bench_function(BenchmarkId::new(case, bound), |b| {
                b.iter_custom(|iters| {
                    let mut pushing = Duration::ZERO;
                    for _ in 0..iters {
                        let release = hold(&engine);
                        let start = Instant::now();
                        for _ in 0..PUSHES {
                            push(&engine);
                        }
                        pushing += start.elapsed();
                        drop(release);
                        engine.wait_for_all().blocking_wait().unwrap();
                    }
                    pushing
                });
            });
        }
    }
    group.finish();
}

criterion_group! { name = benches; config = common::config(); targets = behind_busy_workers }
criterion_main!(benches);
