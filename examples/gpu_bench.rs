//! GPU overhead figures, on a real GPU (built with `--features cuda`) or
//! on the simulated device:
//!
//! * `chain`: a chain of tiny kernels through the engine (each op writes
//!   the var the next one reads), against the same launches made directly
//!   on one stream (real GPU only): engine overhead per op;
//! * `latency`: push → handle resolved for one tiny kernel at a time, p50
//!   and p99 (on the simulated device: the poller's wake latency and the
//!   engine's path, the GPU thread's timing included);
//! * `cross`: a chain alternating between two streams (compute and
//!   prioritized lanes), with early release and with release at
//!   completion.
//!
//! ```sh
//! cargo run --release --example gpu_bench [--features cuda] -- [chain|latency|cross|all] [N]
//! ```

use std::time::{Duration, Instant};

use depengine::gpu::Gpu;
use depengine::gpu::GpuBuffer;
use depengine::gpu::GpuContext;
use depengine::{Device, Engine, Lane, Var};

/// A tiny kernel: increments one float. On the simulated device it takes
/// `SIM_KERNEL_US` microseconds (environment; default 0: the engine's own
/// costs and the simulator's, without a modelled kernel time).
fn sim_kernel() -> Duration {
    static KERNEL: std::sync::OnceLock<Duration> = std::sync::OnceLock::new();
    *KERNEL.get_or_init(|| {
        Duration::from_micros(std::env::var("SIM_KERNEL_US").ok().and_then(|s| s.parse().ok()).unwrap_or(0))
    })
}

#[derive(Clone)]
enum Tiny {
    Sim,
    #[cfg(feature = "cuda")]
    Cuda(std::sync::Arc<cudarc::driver::CudaFunction>),
}

impl Tiny {
    fn new(gpu: &Gpu) -> Self {
        #[cfg(feature = "cuda")]
        if let Some(ctx) = gpu.cuda() {
            let src = r#"extern "C" __global__ void inc(float* x) { x[0] += 1.0f; }"#;
            let module = ctx.load_module(nvrtc(src)).expect("the driver loads the PTX");
            return Tiny::Cuda(std::sync::Arc::new(module.load_function("inc").unwrap()));
        }
        let _ = gpu;
        Tiny::Sim
    }

    fn launch(&self, ctx: &GpuContext<'_>, x: &mut GpuBuffer<f32>) -> Result<(), depengine::BoxError> {
        match self {
            Tiny::Sim => {
                let (t, w) = x.sim_mut().unwrap().writer();
                ctx.sim_stream()
                    .unwrap()
                    .launch("inc", sim_kernel(), vec![t], move || w.with(|d| d[0] += 1.0))?;
            }
            #[cfg(feature = "cuda")]
            Tiny::Cuda(f) => {
                use cudarc::driver::PushKernelArg;
                let stream = ctx.cuda_stream().unwrap();
                let mut launch = stream.launch_builder(f);
                launch.arg(x.cuda_mut().unwrap());
                // SAFETY: `inc` takes one float* and touches its first
                // element, from the one thread it is launched with.
                unsafe { launch.launch(ONE_THREAD) }?;
            }
        }
        Ok(())
    }
}

fn open(early: bool) -> (Engine, Gpu) {
    let builder = || depengine::EngineBuilder::from_env().gpu_workers(1).gpu_early_release(early);
    let engine = builder().build().expect("engine");
    match engine.gpu(0) {
        Ok(gpu) => return (engine, gpu),
        Err(err) if std::env::var("DEPENGINE_REQUIRE_GPU").is_ok_and(|v| v == "1") => {
            panic!("DEPENGINE_REQUIRE_GPU=1 and no GPU: {err}")
        }
        Err(_) => {}
    }
    let engine = builder().simulated_gpus(1).build().expect("engine");
    let gpu = engine.gpu(0).expect("a simulated GPU");
    (engine, gpu)
}

/// One block of one thread: `inc` adds to one element, so more threads
/// would race on it.
#[cfg(feature = "cuda")]
const ONE_THREAD: cudarc::driver::LaunchConfig =
    cudarc::driver::LaunchConfig { grid_dim: (1, 1, 1), block_dim: (1, 1, 1), shared_mem_bytes: 0 };

/// The value of `x`, copied back on the GPU's schedule.
fn read_back(engine: &Engine, gpu: &Gpu, x: &Var<GpuBuffer<f32>>) -> f32 {
    let host = engine.var(gpu.host_buffer(&[0.0f32]).unwrap());
    let d2h = engine.op("d2h").read(x).write(&host).device(Device::Gpu(0)).lane(Lane::CopyFromGpu);
    d2h.run_gpu(|(src,), (mut dst,), ctx| Ok(ctx.copy_to_host(&src, &mut dst)?));
    engine.op("read").read(&host).run(|(h,), ()| Ok(h.to_vec()?[0])).blocking_wait().unwrap()
}

fn push_inc(engine: &Engine, tiny: &Tiny, x: &Var<GpuBuffer<f32>>, lane: Lane) -> depengine::OpHandle<()> {
    let tiny = tiny.clone();
    engine
        .op("inc")
        .write(x)
        .device(Device::Gpu(0))
        .lane(lane)
        .run_gpu(move |(), (mut x,), ctx| tiny.launch(ctx, &mut x))
}

fn chain(n: usize) {
    let (engine, gpu) = open(true);
    let tiny = Tiny::new(&gpu);
    let x = engine.var(gpu.buffer(&[0.0f32]).unwrap());
    push_inc(&engine, &tiny, &x, Lane::Normal).blocking_wait().unwrap();
    let start = Instant::now();
    for _ in 0..n {
        push_inc(&engine, &tiny, &x, Lane::Normal);
    }
    engine.wait_for_all().blocking_wait().unwrap();
    let through_engine = start.elapsed();
    assert_eq!(read_back(&engine, &gpu, &x), (n + 1) as f32, "every increment ran, once");
    println!(
        "chain: {n} dependent tiny kernels through the engine: {through_engine:.2?}, {:.2} µs per op ({:.0} ops/s)",
        through_engine.as_secs_f64() * 1e6 / n as f64,
        n as f64 / through_engine.as_secs_f64()
    );
    #[cfg(feature = "cuda")]
    if let (Tiny::Cuda(f), Some(ctx)) = (&tiny, gpu.cuda()) {
        use cudarc::driver::PushKernelArg;
        let stream = ctx.new_stream().unwrap();
        let mut x = stream.clone_htod(&[0.0f32]).unwrap();
        stream.synchronize().unwrap();
        let event = ctx.new_event(None).unwrap();
        let mut direct = |record: bool| {
            let start = Instant::now();
            for _ in 0..n {
                let mut launch = stream.launch_builder(f);
                launch.arg(&mut x);
                // SAFETY: as in `Tiny::launch`.
                unsafe { launch.launch(ONE_THREAD) }.unwrap();
                if record {
                    event.record(&stream).unwrap();
                }
            }
            stream.synchronize().unwrap();
            start.elapsed()
        };
        let raw = direct(false);
        let recorded = direct(true);
        assert_eq!(stream.clone_dtoh(&x).unwrap()[0], (2 * n) as f32, "every direct increment ran, once");
        let per = |d: Duration| d.as_secs_f64() * 1e6 / n as f64;
        println!(
            "chain: the same {n} launches directly on one stream: {raw:.2?}, {:.2} µs per op; engine overhead {:.2} µs per op",
            per(raw),
            per(through_engine) - per(raw)
        );
        println!(
            "chain: each direct launch followed by an event record: {:.2} µs per op; engine overhead above that {:.2} µs per op",
            per(recorded),
            per(through_engine) - per(recorded)
        );
    }
    engine.blocking_shutdown(depengine::ShutdownMode::Drain).unwrap();
}

fn latency(n: usize) {
    let (engine, gpu) = open(true);
    let tiny = Tiny::new(&gpu);
    let x = engine.var(gpu.buffer(&[0.0f32]).unwrap());
    let mut times: Vec<Duration> = (0..n)
        .map(|_| {
            let start = Instant::now();
            push_inc(&engine, &tiny, &x, Lane::Normal).blocking_wait().unwrap();
            start.elapsed()
        })
        .collect();
    times.sort_unstable();
    let at = |q: f64| times[((times.len() - 1) as f64 * q) as usize];
    let what =
        if gpu.sim().is_some() { format!("simulated, kernel {:?}", sim_kernel()) } else { "CUDA".to_owned() };
    println!(
        "latency ({what}): push -> handle resolved over {n} ops: p50 {:.1?}, p99 {:.1?}, max {:.1?}",
        at(0.5),
        at(0.99),
        times[times.len() - 1]
    );
    engine.blocking_shutdown(depengine::ShutdownMode::Drain).unwrap();
}

fn cross(n: usize) {
    for early in [true, false] {
        let (engine, gpu) = open(early);
        let tiny = Tiny::new(&gpu);
        let x = engine.var(gpu.buffer(&[0.0f32]).unwrap());
        push_inc(&engine, &tiny, &x, Lane::Prioritized).blocking_wait().unwrap();
        push_inc(&engine, &tiny, &x, Lane::Normal).blocking_wait().unwrap();
        let start = Instant::now();
        for i in 0..n {
            push_inc(&engine, &tiny, &x, if i % 2 == 0 { Lane::Normal } else { Lane::Prioritized });
        }
        engine.wait_for_all().blocking_wait().unwrap();
        let took = start.elapsed();
        let how = if early { "early release (stream waits on events)" } else { "release at completion" };
        println!(
            "cross: {n} ops alternating two streams, {how}: {took:.2?}, {:.2} µs per op",
            took.as_secs_f64() * 1e6 / n as f64
        );
        engine.blocking_shutdown(depengine::ShutdownMode::Drain).unwrap();
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let what = args.get(1).map_or("all", String::as_str);
    let n = args.get(2).and_then(|n| n.parse().ok()).unwrap_or(5000);
    let (_, gpu) = open(true);
    match gpu.driver_version() {
        Ok(version) => println!("device: CUDA GPU 0, driver version {version}"),
        Err(_) => println!("device: simulated (no CUDA GPU here)"),
    }
    drop(gpu);
    match what {
        "chain" => chain(n),
        "latency" => latency(n),
        "cross" => cross(n),
        _ => {
            chain(n);
            latency(n.min(2000));
            cross(n);
        }
    }
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
