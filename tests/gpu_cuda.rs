//! GPU ops on a real device (feature `cuda`): a copy in on the copy lane,
//! NVRTC-compiled kernels on two compute streams with cross-stream
//! dependencies, a copy out, results checked against the CPU. Each test
//! skips, saying so, when no CUDA device can be used, and fails instead
//! when `DEPENGINE_REQUIRE_GPU=1`. With `DEPENGINE_CUDA_DOUBLE=1` they run
//! on the CUDA driver double instead of a driver (`tests/cuda_double`),
//! and fail at any violation of the driver's rules it saw.

#[path = "cuda_double/mod.rs"]
mod cuda_double;

fn gpu_required() -> bool {
    std::env::var("DEPENGINE_REQUIRE_GPU").is_ok_and(|v| v == "1")
}

#[test]
fn a_required_gpu_needs_the_cuda_feature() {
    assert!(
        !gpu_required() || cfg!(feature = "cuda"),
        "DEPENGINE_REQUIRE_GPU=1, but this test binary was built without `--features cuda`"
    );
}

#[cfg(feature = "cuda")]
mod cuda {
    use std::sync::Arc;

    use cudarc::driver::{CudaFunction, LaunchConfig, PushKernelArg};
    use depengine::gpu::Gpu;
    use depengine::gpu::GpuBuffer;
    use depengine::gpu::HostBuffer;
    use depengine::{Device, Engine, Lane, OpHandle, Var};

    const KERNELS: &str = r#"
extern "C" __global__ void scale(float* out, const float* in, float k, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = in[i] * k;
}
extern "C" __global__ void add(float* out, const float* a, const float* b, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = a[i] + b[i];
}
"#;

    /// One test at a time: a fault injected in the double is for the
    /// next matching call of the test that injects it.
    fn serial() -> std::sync::MutexGuard<'static, ()> {
        static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());
        SERIAL.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The engine and its GPU 0, or `None` (the test skips) without one.
    fn engine() -> Option<(Engine, Gpu)> {
        super::cuda_double::load();
        let engine = depengine::EngineBuilder::from_env().gpu_workers(2).build().unwrap();
        match engine.gpu(0) {
            Ok(gpu) => {
                let ctx = gpu.cuda().expect("gpu(0) is real");
                let version = gpu.driver_version().expect("a real device has a driver");
                eprintln!("CUDA driver {version}, device: {}", ctx.name().unwrap_or_default());
                Some((engine, gpu))
            }
            Err(err) if !super::gpu_required() => {
                assert!(err.is_gpu_unavailable(), "{err}");
                eprintln!("skipped: {err}");
                None
            }
            Err(err) => panic!("DEPENGINE_REQUIRE_GPU=1 and no GPU: {err}"),
        }
    }

    /// The test's kernels, or `None` (the test skips, saying why) where
    /// NVRTC cannot make them for this driver (finding 9); a failure
    /// instead with `DEPENGINE_REQUIRE_GPU=1`.
    fn kernels(gpu: &Gpu) -> Option<(Arc<CudaFunction>, Arc<CudaFunction>)> {
        let module = match super::cuda_double::module(gpu.cuda().unwrap(), KERNELS) {
            Ok(module) => module,
            Err(why) if !super::gpu_required() => {
                eprintln!("skipped: {why}");
                return None;
            }
            Err(why) => panic!("DEPENGINE_REQUIRE_GPU=1: {why}"),
        };
        Some((
            Arc::new(module.load_function("scale").unwrap()),
            Arc::new(module.load_function("add").unwrap()),
        ))
    }

    type Buf = Var<GpuBuffer<f32>>;

    fn scale(engine: &Engine, f: &Arc<CudaFunction>, src: &Buf, dst: &Buf, k: f32) -> OpHandle<()> {
        let f = f.clone();
        let op = engine.op("scale").read(src).write(dst).device(Device::Gpu(0));
        op.run_gpu(move |(src,), (mut dst,), ctx| {
            let (src, dst) = (src.cuda().unwrap(), dst.cuda_mut().unwrap());
            let n = src.len() as i32;
            let stream = ctx.cuda_stream().unwrap();
            let mut launch = stream.launch_builder(&f);
            launch.arg(dst).arg(src).arg(&k).arg(&n);
            // SAFETY: `scale` takes (float*, const float*, float, int) and
            // writes `n` elements of `dst`, which has `n` (its length).
            unsafe { launch.launch(LaunchConfig::for_num_elems(n as u32)) }?;
            Ok(())
        })
    }

    #[test]
    fn a_pipeline_across_streams_matches_the_cpu() {
        let _serial = serial();
        let Some((engine, gpu)) = engine() else { return };
        let Some((scale_f, add_f)) = kernels(&gpu) else { return };
        let n = 1 << 20;
        let input: Vec<f32> = (0..n).map(|i| (i % 1000) as f32).collect();
        let host_in = engine.var(gpu.host_buffer(&input).unwrap());
        let host_out = engine.var(gpu.host_buffer(&vec![0.0f32; n]).unwrap());
        let zeros = vec![0.0f32; n];
        let [a, b, c, d]: [Buf; 4] = std::array::from_fn(|_| engine.var(gpu.buffer(&zeros).unwrap()));
        let h2d = engine.op("h2d").read(&host_in).write(&a).device(Device::Gpu(0)).lane(Lane::CopyToGpu);
        h2d.run_gpu(|(src,), (mut dst,), ctx| Ok(ctx.copy_to_gpu(&src, &mut dst)?));
        // b and c on the two compute streams, both after the copy stream.
        scale(&engine, &scale_f, &a, &b, 2.0);
        scale(&engine, &scale_f, &a, &c, 3.0);
        let f = add_f.clone();
        let add = engine.op("add").read(&b).read(&c).write(&d).device(Device::Gpu(0));
        add.run_gpu(move |(b, c), (mut d,), ctx| {
            let (b, c, d) = (b.cuda().unwrap(), c.cuda().unwrap(), d.cuda_mut().unwrap());
            let n = b.len() as i32;
            let stream = ctx.cuda_stream().unwrap();
            let mut launch = stream.launch_builder(&f);
            launch.arg(d).arg(b).arg(c).arg(&n);
            // SAFETY: `add` takes (float*, const float*, const float*, int)
            // over `n` elements, the length of all three buffers.
            unsafe { launch.launch(LaunchConfig::for_num_elems(n as u32)) }?;
            Ok(())
        });
        let d2h = engine.op("d2h").read(&d).write(&host_out).device(Device::Gpu(0)).lane(Lane::CopyFromGpu);
        d2h.run_gpu(|(src,), (mut dst,), ctx| Ok(ctx.copy_to_host(&src, &mut dst)?));
        let out: Vec<f32> =
            futures::executor::block_on(engine.op("check").read(&host_out).run(|(h,), ()| Ok(h.to_vec()?)))
                .unwrap();
        for (i, (x, y)) in input.iter().zip(&out).enumerate() {
            assert_eq!(*y, x * 5.0, "element {i}");
        }
        engine.wait_for_all().blocking_wait().unwrap();
        assert!(gpu.completions() >= 5);
        super::cuda_double::assert_clean();
    }

    #[test]
    fn a_long_chain_of_tiny_kernels_completes_in_order() {
        let _serial = serial();
        let Some((engine, gpu)) = engine() else { return };
        let Some((scale_f, _)) = kernels(&gpu) else { return };
        let a: Buf = engine.var(gpu.buffer(&[1.0f32; 256]).unwrap());
        let b: Buf = engine.var(gpu.buffer(&[0.0f32; 256]).unwrap());
        for _ in 0..500 {
            scale(&engine, &scale_f, &a, &b, 1.0);
            scale(&engine, &scale_f, &b, &a, 1.0);
        }
        scale(&engine, &scale_f, &a, &b, 2.0);
        let out = engine.var(gpu.host_buffer(&[0.0f32; 256]).unwrap());
        let d2h = engine.op("d2h").read(&b).write(&out).device(Device::Gpu(0)).lane(Lane::CopyFromGpu);
        d2h.run_gpu(|(src,), (mut dst,), ctx| Ok(ctx.copy_to_host(&src, &mut dst)?));
        let host: HostBuffer<f32> = futures::executor::block_on(engine.delete_var(&out)).unwrap();
        assert!(host.to_vec().unwrap().iter().all(|&x| x == 2.0));
        super::cuda_double::assert_clean();
    }

    /// Finding 1: cudarc frees a buffer without binding its context, so a
    /// buffer dropped on a thread that never bound one was not freed.
    #[test]
    fn a_buffer_dropped_on_a_thread_without_a_context_is_freed() {
        let _serial = serial();
        let Some((engine, gpu)) = engine() else { return };
        let var: Buf = engine.var(gpu.buffer(&[1.0f32; 1024]).unwrap());
        let buffer = futures::executor::block_on(engine.delete_var(&var)).unwrap();
        std::thread::spawn(move || drop(buffer)).join().unwrap();
        let direct = gpu.buffer(&[2.0f32; 16]).unwrap();
        std::thread::spawn(move || drop(direct)).join().unwrap();
        super::cuda_double::assert_clean();
    }

    /// Finding 2: cudarc parks an error that a drop cannot return and hands
    /// it to the next call that checks, on any thread; the engine's record
    /// and wait went through that check, so an unrelated op failed.
    #[test]
    fn an_error_parked_by_a_drop_does_not_fail_an_unrelated_op() {
        let _serial = serial();
        let Some((engine, gpu)) = engine() else { return };
        if !super::cuda_double::active() {
            return; // the failing free is injected in the double
        }
        let Some((scale_f, _)) = kernels(&gpu) else { return };
        let a: Buf = engine.var(gpu.buffer(&[1.0f32; 64]).unwrap());
        let b: Buf = engine.var(gpu.buffer(&[0.0f32; 64]).unwrap());
        scale(&engine, &scale_f, &a, &b, 2.0);
        engine.wait_for_all().blocking_wait().unwrap();
        let doomed = gpu.buffer(&[0.0f32; 8]).unwrap();
        super::cuda_double::inject("cuMemFreeAsync", 1, false, 0);
        drop(doomed);
        scale(&engine, &scale_f, &b, &a, 2.0);
        engine.wait_for_all().blocking_wait().expect("an op unrelated to the failed free succeeds");
        // The drop took its error back: nothing is left for the next call.
        assert!(gpu.cuda().unwrap().check_err().is_ok(), "a failed free's error is left parked");
        super::cuda_double::assert_clean();
    }

    /// Finding 2, second half: when the event record behind an op's work
    /// failed, the op completed at once, letting its vars go while its
    /// kernel still ran, so a deletion freed memory the kernel wrote. Now
    /// the op completes, with the record's error, once its stream drained.
    #[test]
    fn an_op_whose_record_fails_keeps_its_vars_until_its_work_has_run() {
        let _serial = serial();
        let Some((engine, gpu)) = engine() else { return };
        if !super::cuda_double::active() {
            return; // the failing record is injected in the double
        }
        let Some((scale_f, _)) = kernels(&gpu) else { return };
        let a: Buf = engine.var(gpu.buffer(&[1.0f32; 1024]).unwrap());
        let b: Buf = engine.var(gpu.buffer(&[0.0f32; 1024]).unwrap());
        scale(&engine, &scale_f, &a, &b, 2.0).blocking_wait().unwrap();
        super::cuda_double::set_delay_us(50_000);
        // The pooled event's record fails, and so does a new one's.
        super::cuda_double::inject("cuEventRecord", 400, false, 0);
        super::cuda_double::inject("cuEventRecord", 400, false, 0);
        let err = scale(&engine, &scale_f, &a, &b, 3.0).blocking_wait().unwrap_err();
        assert!(err.is_gpu() && err.to_string().contains("cuEventRecord"), "{err}");
        let buffer = futures::executor::block_on(engine.delete_var(&b)).unwrap();
        drop(buffer);
        // The free runs on its stream: let it.
        gpu.cuda().unwrap().synchronize().unwrap();
        super::cuda_double::set_delay_us(0);
        assert!(gpu.fault().is_none(), "a record that failed is not a device fault: {:?}", gpu.fault());
        super::cuda_double::assert_clean();
    }

    /// A record that fails once is tried again with a new event: the op
    /// succeeds.
    #[test]
    fn a_record_that_fails_once_is_tried_with_a_new_event() {
        let _serial = serial();
        let Some((engine, gpu)) = engine() else { return };
        if !super::cuda_double::active() {
            return;
        }
        let Some((scale_f, _)) = kernels(&gpu) else { return };
        let a: Buf = engine.var(gpu.buffer(&[1.0f32; 64]).unwrap());
        let b: Buf = engine.var(gpu.buffer(&[0.0f32; 64]).unwrap());
        super::cuda_double::inject("cuEventRecord", 400, false, 0);
        scale(&engine, &scale_f, &a, &b, 3.0).blocking_wait().unwrap();
        let out = engine.var(gpu.host_buffer(&[0.0f32; 64]).unwrap());
        let d2h = engine.op("d2h").read(&b).write(&out).device(Device::Gpu(0)).lane(Lane::CopyFromGpu);
        d2h.run_gpu(|(src,), (mut dst,), ctx| Ok(ctx.copy_to_host(&src, &mut dst)?));
        let host = futures::executor::block_on(engine.delete_var(&out)).unwrap();
        assert!(host.to_vec().unwrap().iter().all(|&x| x == 3.0));
        super::cuda_double::assert_clean();
    }

    /// Finding 4: cudarc's pinned copies made the stream wait for the
    /// buffer's own event, never recorded with event tracking off: a
    /// driver call per copy for nothing.
    #[test]
    fn pinned_copies_make_no_stream_wait() {
        let _serial = serial();
        let Some((engine, gpu)) = engine() else { return };
        if !super::cuda_double::active() {
            return; // the calls are counted in the double
        }
        let host = engine.var(gpu.host_buffer(&[1.0f32; 256]).unwrap());
        let dev: Buf = engine.var(gpu.buffer(&[0.0f32; 256]).unwrap());
        let before = super::cuda_double::calls("cuStreamWaitEvent");
        for _ in 0..50 {
            let h2d = engine.op("h2d").read(&host).write(&dev).device(Device::Gpu(0)).lane(Lane::CopyToGpu);
            h2d.run_gpu(|(src,), (mut dst,), ctx| Ok(ctx.copy_to_gpu(&src, &mut dst)?));
        }
        engine.wait_for_all().blocking_wait().unwrap();
        assert_eq!(
            super::cuda_double::calls("cuStreamWaitEvent") - before,
            0,
            "one stream: nothing to wait for"
        );
        super::cuda_double::assert_clean();
    }

    /// Finding 4: a host buffer whose var's last handle goes while a copy
    /// into it is in flight is dropped by the copy's completion, on the
    /// poller; freeing page-locked memory may synchronize the device, so
    /// the poller would wait behind all queued work. It is freed on a
    /// thread of its own.
    #[test]
    fn a_host_buffer_dropped_by_a_completion_is_freed_off_the_poller() {
        let _serial = serial();
        let Some((engine, gpu)) = engine() else { return };
        if !super::cuda_double::active() {
            return;
        }
        let dev: Buf = engine.var(gpu.buffer(&[2.0f32; 256]).unwrap());
        super::cuda_double::set_delay_us(20_000);
        for _ in 0..4 {
            let host = engine.var(gpu.host_buffer(&[0.0f32; 256]).unwrap());
            let d2h = engine.op("d2h").read(&dev).write(&host).device(Device::Gpu(0)).lane(Lane::CopyFromGpu);
            d2h.run_gpu(|(src,), (mut dst,), ctx| Ok(ctx.copy_to_host(&src, &mut dst)?));
        }
        engine.wait_for_all().blocking_wait().unwrap();
        engine.blocking_shutdown(depengine::ShutdownMode::Drain).unwrap();
        super::cuda_double::set_delay_us(0);
        super::cuda_double::assert_clean();
    }

    /// Finding 3: buffers were made on a stream each, and a buffer's free
    /// ran on that idle stream, ordered after none of the engine's work: a
    /// body that replaced its write guard's buffer freed the old one while
    /// a kernel on another stream still read it. Buffers are made on one
    /// setup stream, and a buffer dropped in a body is freed on the op's
    /// stream, after its waits.
    #[test]
    fn a_buffer_replaced_in_a_body_is_freed_after_the_work_that_reads_it() {
        let _serial = serial();
        let Some((engine, gpu)) = engine() else { return };
        if !super::cuda_double::active() {
            return;
        }
        let Some((scale_f, _)) = kernels(&gpu) else { return };
        let streams = super::cuda_double::stream_priorities().len();
        let v: Buf = engine.var(gpu.buffer(&[1.0f32; 1024]).unwrap());
        let w: Buf = engine.var(gpu.buffer(&[0.0f32; 1024]).unwrap());
        let spare: Vec<_> = (0..20).map(|_| gpu.buffer(&[0.0f32; 4]).unwrap()).collect();
        assert!(super::cuda_double::stream_priorities().len() <= streams + 1, "a stream per buffer");
        drop(spare);
        let fresh = gpu.buffer(&[7.0f32; 1024]).unwrap();
        super::cuda_double::set_delay_us(30_000);
        // A slow read of v on the compute stream, then a write of v on the
        // prioritized stream that swaps its buffer.
        scale(&engine, &scale_f, &v, &w, 2.0);
        let swap = engine.op("swap").write(&v).device(Device::Gpu(0)).lane(Lane::Prioritized);
        swap.run_gpu(move |(), (mut v,), _ctx| {
            *v = fresh;
            Ok(())
        })
        .blocking_wait()
        .unwrap();
        engine.wait_for_all().blocking_wait().unwrap();
        super::cuda_double::set_delay_us(0);
        let out = engine.var(gpu.host_buffer(&[0.0f32; 1024]).unwrap());
        let d2h = engine.op("d2h").read(&v).write(&out).device(Device::Gpu(0)).lane(Lane::CopyFromGpu);
        d2h.run_gpu(|(src,), (mut dst,), ctx| Ok(ctx.copy_to_host(&src, &mut dst)?));
        let host = futures::executor::block_on(engine.delete_var(&out)).unwrap();
        assert!(host.to_vec().unwrap().iter().all(|&x| x == 7.0));
        gpu.cuda().unwrap().synchronize().unwrap();
        super::cuda_double::assert_clean();
    }

    /// Finding 7: the prioritized lane's stream had the default priority.
    #[test]
    fn the_prioritized_lane_has_the_greatest_stream_priority() {
        let _serial = serial();
        let Some((engine, _gpu)) = engine() else { return };
        if !super::cuda_double::active() {
            return; // the priorities are read in the double
        }
        let (least, greatest) = cudarc::driver::result::stream::get_priority_range().unwrap();
        assert!(greatest < least, "the double has priorities");
        let priorities = super::cuda_double::stream_priorities();
        assert_eq!(priorities.iter().filter(|p| **p == greatest).count(), 1, "{priorities:?}");
        drop(engine);
    }
}
