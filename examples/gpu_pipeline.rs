//! A small GPU pipeline: tiles copied in on the copy lane while earlier
//! tiles compute, two kernels per tile chained across the compute streams,
//! results copied out on the other copy lane and checked on the CPU.
//!
//! On a machine with a CUDA GPU (built with `--features cuda`) it runs
//! there; otherwise it says so and runs the same pipeline on the simulated
//! device, whose copies and kernels take modelled times.
//!
//! ```sh
//! cargo run --release --example gpu_pipeline [--features cuda]
//! ```

use std::time::{Duration, Instant};

use depengine::gpu::Gpu;
use depengine::gpu::GpuBuffer;
use depengine::gpu::GpuContext;
use depengine::gpu::HostBuffer;
use depengine::{Device, Engine, Lane, Var};

const TILES: usize = 16;
/// Floats per tile on a real GPU.
const TILE: usize = 1 << 20;
/// Floats per tile on the simulated device, whose kernels run on one CPU
/// thread: small, so that the modelled times dominate.
const SIM_TILE: usize = 1 << 14;
/// The simulated kernels' time per tile.
const SIM_KERNEL: Duration = Duration::from_micros(300);

/// `out = in * k` (`scale`), or `out = in + k` (`shift`).
#[derive(Clone, Copy)]
enum Kernel {
    Scale,
    Shift,
}

/// The kernels: simulated closures, or NVRTC-compiled CUDA.
#[derive(Clone)]
enum Kernels {
    Sim,
    #[cfg(feature = "cuda")]
    Cuda(std::sync::Arc<(cudarc::driver::CudaFunction, cudarc::driver::CudaFunction)>),
}

impl Kernels {
    fn for_gpu(gpu: &Gpu) -> Self {
        #[cfg(feature = "cuda")]
        if let Some(ctx) = gpu.cuda() {
            let src = r#"
extern "C" __global__ void scale(float* out, const float* in, float k, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) out[i] = in[i] * k;
}
extern "C" __global__ void shift(float* out, const float* in, float k, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) out[i] = in[i] + k;
}"#;
            let module = ctx.load_module(nvrtc(src)).expect("the driver loads the PTX");
            let f = (module.load_function("scale").unwrap(), module.load_function("shift").unwrap());
            return Kernels::Cuda(std::sync::Arc::new(f));
        }
        let _ = gpu;
        Kernels::Sim
    }

    fn launch(
        &self,
        ctx: &GpuContext<'_>,
        kernel: Kernel,
        src: &GpuBuffer<f32>,
        dst: &mut GpuBuffer<f32>,
        k: f32,
    ) -> Result<(), depengine::BoxError> {
        match self {
            Kernels::Sim => {
                let (ts, r) = src.sim().unwrap().reader();
                let (td, w) = dst.sim_mut().unwrap().writer();
                ctx.sim_stream().unwrap().launch("kernel", SIM_KERNEL, vec![ts, td], move || {
                    let x = r.with(<[f32]>::to_vec);
                    w.with(|o| {
                        for (o, x) in o.iter_mut().zip(x) {
                            *o = match kernel {
                                Kernel::Scale => x * k,
                                Kernel::Shift => x + k,
                            };
                        }
                    });
                })?;
            }
            #[cfg(feature = "cuda")]
            Kernels::Cuda(f) => {
                use cudarc::driver::PushKernelArg;
                let f = match kernel {
                    Kernel::Scale => &f.0,
                    Kernel::Shift => &f.1,
                };
                let (src, dst) = (src.cuda().unwrap(), dst.cuda_mut().unwrap());
                let n = src.len() as i32;
                let stream = ctx.cuda_stream().unwrap();
                let mut launch = stream.launch_builder(f);
                launch.arg(dst).arg(src).arg(&k).arg(&n);
                // SAFETY: both kernels take (float*, const float*, float,
                // int) and touch `n` elements, the length of both buffers.
                unsafe { launch.launch(cudarc::driver::LaunchConfig::for_num_elems(n as u32)) }?;
            }
        }
        Ok(())
    }
}

/// The engine and its GPU 0: real if one can be used, else simulated.
fn open() -> (Engine, Gpu) {
    let real = depengine::EngineBuilder::from_env().gpu_workers(2).build().expect("engine");
    match real.gpu(0) {
        Ok(gpu) => {
            println!("running on a CUDA GPU (driver version {})", gpu.driver_version().unwrap_or(0));
            return (real, gpu);
        }
        Err(err) if std::env::var("DEPENGINE_REQUIRE_GPU").is_ok_and(|v| v == "1") => {
            panic!("DEPENGINE_REQUIRE_GPU=1 and no GPU: {err}")
        }
        Err(err) => println!("no GPU here ({err}):\nrunning the same pipeline on the simulated device"),
    }
    let engine =
        depengine::EngineBuilder::from_env().gpu_workers(2).simulated_gpus(1).build().expect("engine");
    let gpu = engine.gpu(0).expect("a simulated GPU");
    (engine, gpu)
}

type Buf = Var<GpuBuffer<f32>>;
type Host = Var<HostBuffer<f32>>;

fn main() -> depengine::Result<()> {
    let (engine, gpu) = open();
    let kernels = Kernels::for_gpu(&gpu);
    let tile = if gpu.sim().is_some() { SIM_TILE } else { TILE };
    let input: Vec<Vec<f32>> =
        (0..TILES).map(|t| (0..tile).map(|i| ((t * 7 + i) % 1000) as f32).collect()).collect();
    let zeros = vec![0.0f32; tile];
    let hosts_in: Vec<Host> = input.iter().map(|x| engine.var(gpu.host_buffer(x).unwrap())).collect();
    let hosts_out: Vec<Host> = (0..TILES).map(|_| engine.var(gpu.host_buffer(&zeros).unwrap())).collect();
    let tiles: Vec<[Buf; 3]> =
        (0..TILES).map(|_| std::array::from_fn(|_| engine.var(gpu.buffer(&zeros).unwrap()))).collect();

    let start = Instant::now();
    let mut checks = Vec::new();
    for t in 0..TILES {
        let [a, b, c] = &tiles[t];
        let gpu0 = Device::Gpu(0);
        let h2d = engine.op("h2d").read(&hosts_in[t]).write(a).device(gpu0).lane(Lane::CopyToGpu);
        h2d.run_gpu(|(src,), (mut dst,), ctx| Ok(ctx.copy_to_gpu(&src, &mut dst)?));
        let k = kernels.clone();
        let scale = engine.op("scale").read(a).write(b).device(gpu0);
        scale.run_gpu(move |(a,), (mut b,), ctx| k.launch(ctx, Kernel::Scale, &a, &mut b, 2.0));
        let k = kernels.clone();
        let shift = engine.op("shift").read(b).write(c).device(gpu0);
        shift.run_gpu(move |(b,), (mut c,), ctx| k.launch(ctx, Kernel::Shift, &b, &mut c, 1.0));
        let d2h = engine.op("d2h").read(c).write(&hosts_out[t]).device(gpu0).lane(Lane::CopyFromGpu);
        d2h.run_gpu(|(src,), (mut dst,), ctx| Ok(ctx.copy_to_host(&src, &mut dst)?));
        let want: Vec<f32> = input[t].iter().map(|x| x * 2.0 + 1.0).collect();
        checks.push(engine.op("check").read(&hosts_out[t]).run(move |(out,), ()| Ok(out.to_vec()? == want)));
    }
    let all_right =
        checks.into_iter().map(|h| h.blocking_wait()).collect::<depengine::Result<Vec<bool>>>()?;
    let elapsed = start.elapsed();
    assert!(all_right.iter().all(|&ok| ok), "a tile came back wrong");
    println!(
        "{TILES} tiles of {tile} floats: copied in, scaled, shifted, copied out and checked in {elapsed:.2?}"
    );
    println!("{} GPU ops completed through the poller", gpu.completions());
    if let Some(sim) = gpu.sim() {
        let bytes = (tile * 4) as f64;
        let copy = Duration::from_secs_f64(bytes / 12e9);
        let serial = TILES as u32 * (2 * copy + 2 * SIM_KERNEL);
        println!(
            "simulated: {} work items; at most {} streams busy at once (copy in, two compute, copy out); \
             the same work one item at a time takes {serial:.2?}",
            sim.work_done(),
            sim.max_overlap()
        );
        assert!(sim.hazards().is_empty(), "hazards: {:?}", sim.hazards());
        println!("hazard check: clean");
    }
    engine.blocking_shutdown(depengine::ShutdownMode::Drain)
}

/// NVRTC's PTX of `src`, or an exit saying why NVRTC cannot be loaded.
#[cfg(feature = "cuda")]
fn nvrtc(src: &str) -> cudarc::nvrtc::Ptx {
    match std::panic::catch_unwind(|| cudarc::nvrtc::compile_ptx(src)) {
        Ok(ptx) => ptx.expect("NVRTC compiles the kernels"),
        Err(_) => {
            eprintln!(
                "NVRTC cannot be loaded: cudarc built for CUDA 12 looks for libnvrtc.so and libnvrtc.so.12, \
                 never CUDA 13's libnvrtc.so.13; put a libnvrtc.so link to yours on LD_LIBRARY_PATH \
                 (tools/real-gpu.sh does)"
            );
            std::process::exit(2)
        }
    }
}
