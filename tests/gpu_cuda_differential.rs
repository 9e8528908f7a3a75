//! Seeded random programs on the `cuda` backend, checked against a
//! sequential model: kernels over device buffers on the compute and
//! prioritized streams, copies between page-locked host buffers and device
//! buffers on the copy lanes, CPU ops over the host buffers, waits. Every
//! handle's result, every `wait_for_var` and `wait_for_all`, and every
//! var's final value are checked, so a missing stream wait or a host
//! buffer reached before its copy completed shows as a wrong value.
//!
//! It runs where `tests/gpu_cuda.rs` runs: on a CUDA GPU, or on the CUDA
//! driver double (`DEPENGINE_CUDA_DOUBLE=1`, which also fails it at any
//! violation of the driver's rules, and delays each command by a random
//! few microseconds to widen race windows); elsewhere it skips.
//! `DEPENGINE_CUDA_DIFF_SEEDS` runs more seeds (default 40).

#[path = "cuda_double/mod.rs"]
mod cuda_double;

mod common;

#[cfg(feature = "cuda")]
mod cuda {
    use std::collections::BTreeSet;
    use std::sync::Arc;

    use cudarc::driver::{CudaFunction, DevicePtr, LaunchConfig, PushKernelArg};
    use depengine::gpu::Gpu;
    use depengine::gpu::GpuBuffer;
    use depengine::gpu::HostBuffer;
    use depengine::{Device, Engine, Error, Lane, OpHandle, Var};

    use super::common::{Rng, mix};

    /// The op of a kernel: `x = fold(mix(id, 1), reads, mix)`, then each
    /// write `w = mix(x, w)` (tests/common's `mix`, on one thread).
    const KERNEL: &str = r#"
__device__ unsigned long long mix(unsigned long long a, unsigned long long b) {
    unsigned long long z = a ^ (b * 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
extern "C" __global__ void mix_op(unsigned long long* w0, unsigned long long* w1,
        const unsigned long long* r0, const unsigned long long* r1, const unsigned long long* r2,
        int nreads, int nwrites, unsigned long long id) {
    const unsigned long long* reads[3] = {r0, r1, r2};
    unsigned long long* writes[2] = {w0, w1};
    unsigned long long x = mix(id, 1ull);
    for (int i = 0; i < nreads; i++) x = mix(x, reads[i][0]);
    for (int i = 0; i < nwrites; i++) writes[i][0] = mix(x, writes[i][0]);
}
"#;

    fn compute(id: usize, reads: &[u64]) -> u64 {
        reads.iter().fold(mix(id as u64, 1), |x, r| mix(x, *r))
    }

    /// Var `v` is on the device when `v` is even, on the host when odd.
    fn on_device(v: usize) -> bool {
        v.is_multiple_of(2)
    }

    #[derive(Clone, Copy, Debug, PartialEq)]
    enum Kind {
        Cpu,
        Kernel(Lane),
        CopyIn,
        CopyOut,
    }

    #[derive(Clone, Debug)]
    enum Step {
        Op { id: usize, reads: Vec<usize>, writes: Vec<usize>, kind: Kind, fail: bool },
        WaitVar(usize),
        WaitAll,
    }

    fn pick(rng: &mut Rng, nvars: usize, device: bool) -> usize {
        loop {
            let v = rng.below(nvars);
            if on_device(v) == device {
                return v;
            }
        }
    }

    fn program(seed: u64, nvars: usize, steps: usize) -> Vec<Step> {
        let mut rng = Rng(seed);
        (0..steps)
            .map(|id| {
                let roll = rng.below(100);
                let kind = match roll {
                    0..=4 => return Step::WaitVar(rng.below(nvars)),
                    5 => return Step::WaitAll,
                    6..=40 => Kind::Cpu,
                    41..=60 => Kind::Kernel(Lane::Normal),
                    61..=70 => Kind::Kernel(Lane::Prioritized),
                    71..=85 => Kind::CopyIn,
                    _ => Kind::CopyOut,
                };
                let fail = rng.chance(3);
                let (reads, writes) = match kind {
                    Kind::CopyIn => (vec![pick(&mut rng, nvars, false)], vec![pick(&mut rng, nvars, true)]),
                    Kind::CopyOut => (vec![pick(&mut rng, nvars, true)], vec![pick(&mut rng, nvars, false)]),
                    _ => {
                        let device = kind != Kind::Cpu;
                        let mut writes: Vec<usize> =
                            (0..rng.below(3)).map(|_| pick(&mut rng, nvars, device)).collect();
                        writes.sort_unstable();
                        writes.dedup();
                        let mut reads: Vec<usize> = (0..rng.below(4))
                            .map(|_| pick(&mut rng, nvars, device))
                            .filter(|v| !writes.contains(v))
                            .collect();
                        reads.sort_unstable();
                        reads.dedup();
                        (reads, writes)
                    }
                };
                Step::Op { id, reads, writes, kind, fail }
            })
            .collect()
    }

    #[derive(Debug, PartialEq)]
    enum Expect {
        Ok(Option<u64>),
        Failed(usize),
        Skipped,
    }

    #[derive(Default)]
    struct Model {
        vals: Vec<u64>,
        errs: Vec<Option<BTreeSet<usize>>>,
        failed: bool,
    }

    impl Model {
        fn op(&mut self, id: usize, reads: &[usize], writes: &[usize], kind: Kind, fail: bool) -> Expect {
            let seen =
                reads.iter().chain(writes).filter_map(|v| self.errs[*v].clone()).reduce(|a, b| &a | &b);
            let (expect, carry) = match (seen, fail) {
                (Some(roots), _) => (Expect::Skipped, Some(roots)),
                (None, true) => (Expect::Failed(id), Some(BTreeSet::from([id]))),
                (None, false) if matches!(kind, Kind::CopyIn | Kind::CopyOut) => {
                    self.vals[writes[0]] = self.vals[reads[0]];
                    (Expect::Ok(None), None)
                }
                (None, false) => {
                    let x = compute(id, &reads.iter().map(|r| self.vals[*r]).collect::<Vec<_>>());
                    writes.iter().for_each(|w| self.vals[*w] = mix(x, self.vals[*w]));
                    // A kernel's value is known only on the GPU.
                    (Expect::Ok(Some(x).filter(|_| kind == Kind::Cpu)), None)
                }
            };
            if let Some(roots) = carry {
                writes.iter().for_each(|w| self.errs[*w] = Some(roots.clone()));
                self.failed = true;
            }
            expect
        }
    }

    type Dev = Var<GpuBuffer<u64>>;
    type Host = Var<HostBuffer<u64>>;

    struct Vars {
        dev: Vec<Option<Dev>>,
        host: Vec<Option<Host>>,
    }

    impl Vars {
        fn dev(&self, vs: &[usize]) -> Vec<Dev> {
            vs.iter().map(|v| self.dev[*v].clone().expect("a device var")).collect()
        }

        fn host(&self, vs: &[usize]) -> Vec<Host> {
            vs.iter().map(|v| self.host[*v].clone().expect("a host var")).collect()
        }
    }

    fn push(engine: &Engine, f: &Arc<CudaFunction>, vars: &Vars, step: &Step) -> OpHandle<u64> {
        let Step::Op { id, reads, writes, kind, fail } = step.clone() else { unreachable!() };
        let name = format!("op{id}");
        let gpu0 = Device::Gpu(0);
        let failed = || -> Result<u64, depengine::BoxError> { Err("planned failure".into()) };
        match kind {
            Kind::Cpu => {
                let op = engine.op(name).read_all(&vars.host(&reads)).write_all(&vars.host(&writes));
                op.run(move |(rs,), (mut ws,)| {
                    if fail {
                        return failed();
                    }
                    let x = compute(
                        id,
                        &rs.iter().map(|r| r.to_vec().map(|v| v[0])).collect::<Result<Vec<_>, _>>()?,
                    );
                    for w in &mut ws {
                        let old = w.to_vec()?[0];
                        w.copy_from_slice(&[mix(x, old)])?;
                    }
                    Ok(x)
                })
            }
            Kind::CopyIn => {
                let op = engine.op(name).read(&vars.host(&reads)[0]).write(&vars.dev(&writes)[0]);
                op.device(gpu0).lane(Lane::CopyToGpu).run_gpu(move |(src,), (mut dst,), ctx| {
                    if fail {
                        return failed();
                    }
                    ctx.copy_to_gpu(&src, &mut dst)?;
                    Ok(0)
                })
            }
            Kind::CopyOut => {
                let op = engine.op(name).read(&vars.dev(&reads)[0]).write(&vars.host(&writes)[0]);
                op.device(gpu0).lane(Lane::CopyFromGpu).run_gpu(move |(src,), (mut dst,), ctx| {
                    if fail {
                        return failed();
                    }
                    ctx.copy_to_host(&src, &mut dst)?;
                    Ok(0)
                })
            }
            Kind::Kernel(lane) => {
                let f = f.clone();
                let op = engine.op(name).read_all(&vars.dev(&reads)).write_all(&vars.dev(&writes));
                op.device(gpu0).lane(lane).run_gpu(move |(rs,), (ws,), ctx| {
                    if fail {
                        return failed();
                    }
                    let stream = ctx.cuda_stream().unwrap();
                    let ptr = |b: &GpuBuffer<u64>| b.cuda().unwrap().device_ptr(stream).0;
                    let mut args = [0u64; 5];
                    ws.iter().enumerate().for_each(|(i, w)| args[i] = ptr(w));
                    rs.iter().enumerate().for_each(|(i, r)| args[2 + i] = ptr(r));
                    let (nreads, nwrites, id) = (rs.len() as i32, ws.len() as i32, id as u64);
                    let mut launch = stream.launch_builder(&f);
                    for a in &args {
                        launch.arg(a);
                    }
                    launch.arg(&nreads).arg(&nwrites).arg(&id);
                    let one = LaunchConfig { grid_dim: (1, 1, 1), block_dim: (1, 1, 1), shared_mem_bytes: 0 };
                    // SAFETY: `mix_op` takes five u64 pointers, two ints and
                    // a u64; it touches element 0 of the first `nwrites` and
                    // of the `nreads` read pointers, each a live buffer of
                    // one u64 that this op's guards hold.
                    unsafe { launch.launch(one) }?;
                    Ok(0)
                })
            }
        }
    }

    fn check(expect: &Expect, got: Result<u64, Error>, what: &str) {
        match (expect, got) {
            (Expect::Ok(x), Ok(y)) => assert!(x.is_none_or(|x| x == y), "{what}: {x:?} != {y}"),
            (Expect::Failed(id), Err(e)) => {
                assert!(e.is_failed() && e.op_name() == Some(format!("op{id}").as_str()), "{what}: {e}")
            }
            (Expect::Skipped, Err(e)) => assert!(e.is_skipped(), "{what}: {e}"),
            (expect, got) => panic!("{what}: expected {expect:?}, got {got:?}"),
        }
    }

    /// The value of var `v`: a host var read on the CPU, a device var
    /// copied out first.
    fn value(engine: &Engine, gpu: &Gpu, vars: &Vars, v: usize) -> u64 {
        let host = match &vars.dev[v] {
            None => vars.host[v].clone().unwrap(),
            Some(dev) => {
                let host = engine.var(gpu.host_buffer(&[0u64]).unwrap());
                let op =
                    engine.op("out").read(dev).write(&host).device(Device::Gpu(0)).lane(Lane::CopyFromGpu);
                op.run_gpu(|(src,), (mut dst,), ctx| Ok(ctx.copy_to_host(&src, &mut dst)?));
                host
            }
        };
        engine.op("value").read(&host).run(|(h,), ()| Ok(h.to_vec()?[0])).blocking_wait().unwrap()
    }

    fn run_seed(seed: u64, f: &Arc<CudaFunction>) {
        let mut rng = Rng(mix(seed, 11));
        let engine = depengine::EngineBuilder::from_env()
            .gpu_workers(1 + rng.below(3))
            .gpu_copy_workers(1 + rng.below(2))
            .gpu_early_release(rng.below(5) != 0)
            .cpu_workers(2)
            .build()
            .unwrap();
        let gpu = engine.gpu(0).unwrap();
        if super::cuda_double::active() {
            super::cuda_double::set_delay_us(rng.below(40) as u64);
        }
        let nvars = 4 + rng.below(5);
        let mut model = Model { vals: (0..nvars as u64).collect(), errs: vec![None; nvars], failed: false };
        let vars = Vars {
            dev: (0..nvars)
                .map(|v| on_device(v).then(|| engine.var(gpu.buffer(&[v as u64]).unwrap())))
                .collect(),
            host: (0..nvars)
                .map(|v| (!on_device(v)).then(|| engine.var(gpu.host_buffer(&[v as u64]).unwrap())))
                .collect(),
        };
        let mut pending = Vec::new();
        for step in program(seed, nvars, 60) {
            let what = format!("seed {seed}, {step:?}");
            match &step {
                Step::Op { id, reads, writes, kind, fail } => {
                    let expect = model.op(*id, reads, writes, *kind, *fail);
                    pending.push((push(&engine, f, &vars, &step), expect, what));
                }
                Step::WaitVar(v) => {
                    let got = match (&vars.dev[*v], &vars.host[*v]) {
                        (Some(d), _) => engine.blocking_wait_for_var(d),
                        (_, Some(h)) => engine.blocking_wait_for_var(h),
                        _ => unreachable!(),
                    };
                    assert_eq!(got.is_err(), model.errs[*v].take().is_some(), "{what}: {got:?}");
                }
                Step::WaitAll => {
                    let got = engine.wait_for_all().blocking_wait();
                    assert_eq!(got.is_err(), std::mem::take(&mut model.failed), "{what}: {got:?}");
                }
            }
        }
        for (handle, expect, what) in pending {
            check(&expect, handle.blocking_wait(), &what);
        }
        for v in 0..nvars {
            if model.errs[v].is_none() {
                assert_eq!(value(&engine, &gpu, &vars, v), model.vals[v], "seed {seed}: var {v}");
            }
        }
        engine.blocking_shutdown(depengine::ShutdownMode::Drain).ok();
        super::cuda_double::assert_clean();
    }

    #[test]
    fn random_kernels_copies_and_cpu_ops_match_the_sequential_model() {
        super::cuda_double::load();
        let probe = depengine::EngineBuilder::from_env().build().unwrap();
        let gpu = match probe.gpu(0) {
            Ok(gpu) => gpu,
            Err(err) if !super::gpu_required() => return eprintln!("skipped: {err}"),
            Err(err) => panic!("DEPENGINE_REQUIRE_GPU=1 and no GPU: {err}"),
        };
        let module = match super::cuda_double::module(gpu.cuda().unwrap(), KERNEL) {
            Ok(module) => module,
            Err(why) if !super::gpu_required() => return eprintln!("skipped: {why}"),
            Err(why) => panic!("DEPENGINE_REQUIRE_GPU=1: {why}"),
        };
        let f = Arc::new(module.load_function("mix_op").unwrap());
        let var = |name: &str| std::env::var(name).ok().and_then(|s| s.parse::<u64>().ok());
        let seeds = var("DEPENGINE_CUDA_DIFF_SEEDS").unwrap_or(40);
        for seed in 0..seeds {
            run_seed(seed, &f);
        }
        eprintln!("{seeds} seeds");
    }
}

#[allow(dead_code)]
fn gpu_required() -> bool {
    std::env::var("DEPENGINE_REQUIRE_GPU").is_ok_and(|v| v == "1")
}
