//! Seeded random programs mixing CPU ops and GPU ops (on every GPU lane,
//! so on several streams) over vars holding simulated GPU buffers, run on
//! the engine and checked against a sequential model: every handle's
//! result, every `wait_for_var` and `wait_for_all`, every var's final value
//! and error, and the simulator's hazard check (no two streams touch one
//! buffer without an event between them; the host never touches a buffer
//! that queued GPU work still touches). GPU consumers of GPU-written vars
//! are let through at enqueue (early release), so this is the check of
//! that protocol end to end. `DEPENGINE_GPU_DIFF_SEEDS` runs more seeds
//! (from `DEPENGINE_GPU_DIFF_SEED_FROM`).

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::{Rng, mix};
use depengine::gpu::GpuBuffer;
use depengine::{Device, Engine, Error, Lane, OpHandle, Var};

/// The body's arithmetic: identical in the model, on the CPU, on the GPU.
fn compute(id: usize, reads: &[u64]) -> u64 {
    reads.iter().fold(mix(id as u64, 1), |x, r| mix(x, *r))
}

#[derive(Clone, Debug)]
enum Step {
    /// `gpu`: the device and lane of a GPU op, whose vars are all that
    /// device's (var `v` lives on device `v % devices`).
    Op {
        id: usize,
        reads: Vec<usize>,
        writes: Vec<usize>,
        gpu: Option<(usize, Lane)>,
        fail: bool,
        micros: u64,
    },
    WaitVar(usize),
    WaitAll,
}

fn program(seed: u64, nvars: usize, devices: usize, steps: usize) -> Vec<Step> {
    let mut rng = Rng(seed);
    (0..steps)
        .map(|id| match rng.below(100) {
            0..=4 => Step::WaitVar(rng.below(nvars)),
            5 => Step::WaitAll,
            _ => {
                let mut writes: Vec<usize> = (0..rng.below(3)).map(|_| rng.below(nvars)).collect();
                writes.sort_unstable();
                writes.dedup();
                let mut reads: Vec<usize> =
                    (0..rng.below(4)).map(|_| rng.below(nvars)).filter(|v| !writes.contains(v)).collect();
                reads.sort_unstable();
                reads.dedup();
                let lane = match rng.below(10) {
                    0..=3 => None,
                    4..=6 => Some(Lane::Normal),
                    7 => Some(Lane::CopyToGpu),
                    8 => Some(Lane::CopyFromGpu),
                    _ => Some(Lane::Prioritized),
                };
                // A GPU op touches only its device's buffers; a CPU op any.
                let gpu = lane.map(|lane| {
                    let device = if devices > 1 { rng.below(devices) } else { 0 };
                    writes.retain(|v| v % devices == device);
                    reads.retain(|v| v % devices == device);
                    (device, lane)
                });
                let fail = rng.below(100) < 3;
                Step::Op { id, reads, writes, gpu, fail, micros: rng.below(300) as u64 }
            }
        })
        .collect()
}

#[derive(Debug, PartialEq)]
enum Expect {
    Ok(u64),
    Failed(usize),
    Skipped,
}

/// The ops whose failure a var carries: the engine names one of them.
type Roots = BTreeSet<usize>;

#[derive(Default)]
struct Model {
    vals: Vec<u64>,
    errs: Vec<Option<Roots>>,
    failed: bool,
}

impl Model {
    fn op(&mut self, id: usize, reads: &[usize], writes: &[usize], fail: bool) -> Expect {
        let seen = reads.iter().chain(writes).filter_map(|v| self.errs[*v].clone()).reduce(|a, b| &a | &b);
        let (expect, carry) = match (seen, fail) {
            (Some(roots), _) => (Expect::Skipped, Some(roots)),
            (None, true) => (Expect::Failed(id), Some(Roots::from([id]))),
            (None, false) => {
                let x = compute(id, &reads.iter().map(|r| self.vals[*r]).collect::<Vec<_>>());
                writes.iter().for_each(|w| self.vals[*w] = mix(x, self.vals[*w]));
                (Expect::Ok(x), None)
            }
        };
        if let Some(roots) = carry {
            writes.iter().for_each(|w| self.errs[*w] = Some(roots.clone()));
            self.failed = true;
        }
        expect
    }
}

type Buf = Var<GpuBuffer<u64>>;

/// Pushes one op; its handle gives the value it computed (a GPU op's is
/// known only on the GPU: it gives 0, and its effect is checked through
/// the vars).
fn push(engine: &Engine, vars: &[Buf], step: &Step) -> OpHandle<u64> {
    let Step::Op { id, reads, writes, gpu, fail, micros } = step.clone() else { unreachable!() };
    let rs: Vec<Buf> = reads.iter().map(|r| vars[*r].clone()).collect();
    let ws: Vec<Buf> = writes.iter().map(|w| vars[*w].clone()).collect();
    let op = engine.op(format!("op{id}")).read_all(&rs).write_all(&ws);
    match gpu {
        None => op.run(move |(rs,), (mut ws,)| {
            if fail {
                return Err("planned failure".into());
            }
            let x = compute(id, &rs.iter().map(|r| r.sim().unwrap().to_vec()[0]).collect::<Vec<_>>());
            for w in &mut ws {
                let old = w.sim().unwrap().to_vec()[0];
                w.sim_mut().unwrap().copy_from_slice(&[mix(x, old)]);
            }
            Ok(x)
        }),
        Some((device, lane)) => {
            op.device(Device::Gpu(device)).lane(lane).run_gpu(move |(rs,), (mut ws,), ctx| {
                if fail {
                    return Err("planned failure".into());
                }
                let mut touches = Vec::new();
                let readers: Vec<_> = rs
                    .iter()
                    .map(|r| r.sim().unwrap().reader())
                    .map(|(t, r)| (touches.push(t), r).1)
                    .collect();
                let writers: Vec<_> = ws
                    .iter_mut()
                    .map(|w| w.sim_mut().unwrap().writer())
                    .map(|(t, w)| (touches.push(t), w).1)
                    .collect();
                ctx.sim_stream().unwrap().launch(
                    &format!("op{id}"),
                    Duration::from_micros(micros),
                    touches,
                    move || {
                        let x = compute(id, &readers.iter().map(|r| r.with(|d| d[0])).collect::<Vec<_>>());
                        writers.iter().for_each(|w| w.with(|d| d[0] = mix(x, d[0])));
                    },
                )?;
                Ok(0)
            })
        }
    }
}

fn check(expect: &Expect, got: Result<u64, Error>, gpu: bool, what: &str) {
    match (expect, got) {
        (Expect::Ok(x), Ok(y)) => assert!(gpu || *x == y, "{what}: {x} != {y}"),
        (Expect::Failed(id), Err(e)) => {
            assert!(e.is_failed() && e.op_name() == Some(format!("op{id}").as_str()), "{what}: {e}")
        }
        (Expect::Skipped, Err(e)) => assert!(e.is_skipped(), "{what}: {e}"),
        (expect, got) => panic!("{what}: expected {expect:?}, got {got:?}"),
    }
}

fn run_seed(seed: u64, devices: usize) {
    let mut rng = Rng(mix(seed, 7));
    let engine = depengine::EngineBuilder::from_env()
        .simulated_gpus(devices)
        .gpu_workers(1 + rng.below(3))
        .gpu_copy_workers(1 + rng.below(2))
        .gpu_early_release(rng.below(5) != 0)
        .cpu_workers(2)
        .build()
        .unwrap();
    let gpus: Vec<_> = (0..devices).map(|d| engine.gpu(d).unwrap()).collect();
    let nvars = 3 + rng.below(4);
    let mut model = Model { vals: (0..nvars as u64).collect(), errs: vec![None; nvars], failed: false };
    let vars: Vec<Buf> =
        (0..nvars).map(|i| engine.var(gpus[i % devices].sim_buffer(vec![i as u64]).unwrap())).collect();
    let mut pending = Vec::new();
    futures::executor::block_on(async {
        for step in program(seed, nvars, devices, 60) {
            let what = format!("seed {seed}, {step:?}");
            match &step {
                Step::Op { id, reads, writes, gpu, fail, .. } => {
                    let expect = model.op(*id, reads, writes, *fail);
                    pending.push((push(&engine, &vars, &step), expect, gpu.is_some(), what));
                }
                Step::WaitVar(v) => {
                    let got = engine.wait_for_var(&vars[*v]).await;
                    match model.errs[*v].take() {
                        None => assert!(got.is_ok(), "{what}: {got:?}"),
                        Some(roots) => {
                            let e = got.unwrap_err();
                            let root = e.root().op_name().and_then(|n| n.strip_prefix("op")?.parse().ok());
                            assert!(root.is_some_and(|r| roots.contains(&r)), "{what}: {e}, roots {roots:?}");
                        }
                    }
                }
                Step::WaitAll => {
                    let got = engine.wait_for_all().await;
                    assert_eq!(got.is_err(), std::mem::take(&mut model.failed), "{what}: {got:?}");
                }
            }
        }
        for (handle, expect, is_gpu, what) in pending {
            check(&expect, handle.await, is_gpu, &what);
        }
        for (i, var) in vars.iter().enumerate() {
            let got =
                engine.op("final").read(var).no_skip(true).run(|(v,), ()| Ok(v.sim().unwrap().to_vec()[0]));
            if model.errs[i].is_none() {
                assert_eq!(got.await.unwrap(), model.vals[i], "seed {seed}: var {i}");
            }
        }
    });
    for gpu in &gpus {
        let hazards = gpu.sim().unwrap().hazards();
        let first = &hazards[..hazards.len().min(5)];
        assert!(hazards.is_empty(), "seed {seed}, gpu({}): {first:?}…", gpu.ordinal());
    }
    engine.blocking_shutdown(depengine::ShutdownMode::Drain).ok();
}

fn seeds() -> std::ops::Range<u64> {
    let var = |name: &str| std::env::var(name).ok().and_then(|s| s.parse::<u64>().ok());
    let from = var("DEPENGINE_GPU_DIFF_SEED_FROM").unwrap_or(0);
    from..from + var("DEPENGINE_GPU_DIFF_SEEDS").unwrap_or(150)
}

#[test]
fn random_cpu_and_gpu_programs_match_the_sequential_model() {
    for seed in seeds() {
        run_seed(seed, 1);
    }
}

/// Two devices, each var on one of them: GPU ops touch their device's
/// vars, CPU ops span both, so an op is held back for work in flight on
/// two devices at once.
#[test]
fn random_programs_over_two_devices_match_the_sequential_model() {
    for seed in seeds() {
        run_seed(seed, 2);
    }
}

/// Four threads push CPU and GPU ops at once over shared vars, each op
/// adding one to every var it writes (so the final counts do not depend
/// on the order between threads): every handle resolves, every var counts
/// its writes, and the hazard check stays clean. On one device, and on two
/// with CPU ops spanning both.
#[test]
fn threads_pushing_cpu_and_gpu_ops_at_once_lose_no_write() {
    for devices in [1, 2] {
        for round in 0..4u64 {
            threads_round(devices, round);
        }
    }
}

fn threads_round(devices: usize, round: u64) {
    const VARS: usize = 6;
    const OPS: usize = 300;
    let engine = depengine::EngineBuilder::from_env()
        .simulated_gpus(devices)
        .gpu_workers(2)
        .cpu_workers(2)
        .build()
        .unwrap();
    let gpus: Vec<_> = (0..devices).map(|d| engine.gpu(d).unwrap()).collect();
    let vars: Vec<Buf> =
        (0..VARS).map(|i| engine.var(gpus[i % devices].sim_buffer(vec![0u64]).unwrap())).collect();
    let writes: Vec<Vec<usize>> = std::thread::scope(|scope| {
        let pushers: Vec<_> = (0..4u64)
            .map(|t| {
                let (engine, vars) = (&engine, &vars);
                scope.spawn(move || {
                    let mut rng = Rng(mix(round, t));
                    let mut counts = vec![0usize; VARS];
                    let mut handles = Vec::new();
                    for _ in 0..OPS {
                        let w = rng.below(VARS);
                        let kind = rng.below(4);
                        // A GPU op reads a var of its own device.
                        let r = match kind {
                            0 => rng.below(VARS),
                            _ => w % devices + devices * rng.below(VARS / devices),
                        };
                        counts[w] += 1;
                        let op = engine.op("inc").write(&vars[w]).read_any(&vars[r].any());
                        handles.push(match kind {
                            0 => op.run(|(), (mut w,)| {
                                let x = w.sim().unwrap().to_vec()[0];
                                w.sim_mut().unwrap().copy_from_slice(&[x + 1]);
                                Ok(())
                            }),
                            lane => {
                                let lane = [Lane::Normal, Lane::CopyToGpu, Lane::Prioritized][lane - 1];
                                let micros = rng.below(50) as u64;
                                let device = Device::Gpu(w % devices);
                                op.device(device).lane(lane).run_gpu(move |(), (mut w,), ctx| {
                                    let (t, w) = w.sim_mut().unwrap().writer();
                                    let d = Duration::from_micros(micros);
                                    ctx.sim_stream()
                                        .unwrap()
                                        .launch("inc", d, vec![t], move || w.with(|x| x[0] += 1))?;
                                    Ok(())
                                })
                            }
                        });
                    }
                    for h in handles {
                        futures::executor::block_on(h).unwrap();
                    }
                    counts
                })
            })
            .collect();
        pushers.into_iter().map(|p| p.join().unwrap()).collect()
    });
    for (i, var) in vars.iter().enumerate() {
        let want: usize = writes.iter().map(|c| c[i]).sum();
        let got = engine.op("get").read(var).run(|(v,), ()| Ok(v.sim().unwrap().to_vec()[0])).blocking_wait();
        assert_eq!(got.unwrap(), want as u64, "{devices} device(s), round {round}: var {i}");
    }
    for gpu in &gpus {
        let hazards = gpu.sim().unwrap().hazards();
        assert!(
            hazards.is_empty(),
            "{devices} device(s), round {round}, gpu({}): {hazards:?}",
            gpu.ordinal()
        );
    }
    engine.blocking_shutdown(depengine::ShutdownMode::Drain).unwrap();
}
