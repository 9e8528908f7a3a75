//! GPU collectives with NCCL (feature `nccl`), run by every rank of
//! `tests/mpi_collectives.rs` after its MPI checks. Rank r uses GPU
//! r modulo the machine's GPUs; without a CUDA device (or with fewer GPUs
//! than ranks, which NCCL refuses) the real-GPU checks skip, saying why,
//! and fail instead with `DEPENGINE_REQUIRE_GPU=1`. What runs everywhere:
//! a simulated GPU is refused with a clear error on every rank.

use depengine::gpu::Gpu;
use depengine::gpu::GpuBuffer;
use depengine::gpu::HostBuffer;
use depengine::mpi::{Collectives, GpuCollectives, Reduce};
use depengine::{Device, Engine, Lane, Var};

pub fn run(engine: &Engine, mpi: &Collectives) {
    a_simulated_gpu_is_refused_on_every_rank(mpi);
    let Some(gpu) = real_gpu(engine, mpi) else { return };
    let nccl = GpuCollectives::new(mpi, &gpu).expect("NCCL sets up");
    all_reduce_and_broadcast_match_a_local_computation(engine, &gpu, &nccl);
    all_gather_and_reduce_scatter_match(engine, &gpu, &nccl);
    engine.wait_for_all().blocking_wait().expect("every GPU collective completed");
    an_upstream_failure_still_takes_part(engine, &gpu, &nccl);
    println!("nccl: rank {} of {}: every check passed", nccl.rank(), nccl.size());
}

fn required() -> bool {
    std::env::var("DEPENGINE_REQUIRE_GPU").is_ok_and(|v| v == "1")
}

fn a_simulated_gpu_is_refused_on_every_rank(mpi: &Collectives) {
    let sim = depengine::EngineBuilder::from_env().simulated_gpus(1).build().expect("engine");
    let gpu = sim.gpu(0).expect("a simulated GPU");
    let err = GpuCollectives::new(mpi, &gpu).expect_err("a simulated GPU has no NCCL");
    assert!(err.is_invalid_argument(), "{err}");
    assert!(err.to_string().contains("simulated"), "{err}");
}

/// This rank's GPU, or `None` (skipped) on a machine without enough.
fn real_gpu(engine: &Engine, mpi: &Collectives) -> Option<Gpu> {
    let skip = |why: String| {
        assert!(!required(), "DEPENGINE_REQUIRE_GPU=1, but {why}");
        eprintln!("nccl: rank {}: skipped: {why}", mpi.rank());
        None
    };
    let first = match engine.gpu(0) {
        Ok(gpu) => gpu,
        Err(err) => return skip(err.to_string()),
    };
    let count = (0..).take_while(|&i| i == 0 || engine.gpu(i).is_ok()).count();
    if count < mpi.size() {
        return skip(format!("{count} GPU(s) for {} ranks (NCCL needs one per rank)", mpi.size()));
    }
    Some(if mpi.rank() == 0 { first } else { engine.gpu(mpi.rank()).expect("counted") })
}

type Buf = Var<GpuBuffer<f64>>;

fn upload(engine: &Engine, gpu: &Gpu, data: &[f64]) -> Buf {
    engine.var(gpu.buffer(data).expect("a device buffer"))
}

/// A buffer's contents, through a copy to pinned memory on the GPU's schedule.
fn download(engine: &Engine, gpu: &Gpu, var: &Buf, len: usize) -> Vec<f64> {
    let host: Var<HostBuffer<f64>> = engine.var(gpu.host_buffer(&vec![0.0; len]).expect("pinned memory"));
    let device = Device::Gpu(gpu.ordinal());
    let d2h = engine.op("d2h").read(var).write(&host).device(device).lane(Lane::CopyFromGpu);
    d2h.run_gpu(|(src,), (mut dst,), ctx| Ok(ctx.copy_to_host(&src, &mut dst)?));
    futures::executor::block_on(engine.op("check").read(&host).run(|(h,), ()| Ok(h.to_vec()?)))
        .expect("read back")
}

fn all_reduce_and_broadcast_match_a_local_computation(engine: &Engine, gpu: &Gpu, nccl: &GpuCollectives) {
    let (rank, size) = (nccl.rank(), nccl.size());
    for len in [1, 1000, 1 << 20] {
        let mine: Vec<f64> = (0..len).map(|i| (rank * len + i) as f64).collect();
        let var = upload(engine, gpu, &mine);
        nccl.all_reduce(&var, Reduce::Sum).blocking_wait().expect("all_reduce");
        let want: Vec<f64> = (0..len).map(|i| (0..size).map(|r| (r * len + i) as f64).sum()).collect();
        assert_eq!(download(engine, gpu, &var, len), want, "all_reduce of {len}");
        let var = upload(engine, gpu, &mine);
        nccl.broadcast(&var, size - 1).blocking_wait().expect("broadcast");
        let root: Vec<f64> = (0..len).map(|i| ((size - 1) * len + i) as f64).collect();
        assert_eq!(download(engine, gpu, &var, len), root, "broadcast of {len}");
    }
}

fn all_gather_and_reduce_scatter_match(engine: &Engine, gpu: &Gpu, nccl: &GpuCollectives) {
    let (rank, size, len) = (nccl.rank(), nccl.size(), 257);
    let input = upload(engine, gpu, &vec![rank as f64; len]);
    let output = upload(engine, gpu, &vec![0.0; len * size]);
    nccl.all_gather(&input, &output).blocking_wait().expect("all_gather");
    let want: Vec<f64> = (0..size).flat_map(|r| vec![r as f64; len]).collect();
    assert_eq!(download(engine, gpu, &output, len * size), want);
    let input = upload(engine, gpu, &(0..len * size).map(|i| i as f64).collect::<Vec<_>>());
    let block = upload(engine, gpu, &vec![0.0; len]);
    nccl.reduce_scatter(&input, &block, Reduce::Max).blocking_wait().expect("reduce_scatter");
    let want: Vec<f64> = (rank * len..(rank + 1) * len).map(|i| i as f64).collect();
    assert_eq!(download(engine, gpu, &block, len), want);
}

/// Rank 0's input fails: its collective still takes part (the others
/// complete) and fails on rank 0.
fn an_upstream_failure_still_takes_part(engine: &Engine, gpu: &Gpu, nccl: &GpuCollectives) {
    let var = upload(engine, gpu, &[1.0; 64]);
    if nccl.rank() == 0 {
        let fail = engine.op("fails").write(&var).run(|(), (_,)| Err::<(), _>("upstream".into()));
        assert!(fail.blocking_wait().is_err());
    }
    let result = nccl.all_reduce(&var, Reduce::Sum).blocking_wait();
    assert_eq!(result.is_err(), nccl.rank() == 0, "{result:?}");
    let waited = engine.wait_for_all().blocking_wait();
    assert_eq!(waited.is_err(), nccl.rank() == 0, "{waited:?}");
}
