//! GPU ops on the simulated device: completion through the poller, a
//! worker that never waits for the GPU, cross-stream order (hazard check
//! clean), faults, shutdown, and the refusals.

mod common;

use std::time::Duration;

use common::threads_named;
use depengine::gpu::{GpuBuffer, GpuFault};
use depengine::{Device, Engine, Lane, ShutdownMode};

fn engine(workers: usize) -> Engine {
    depengine::EngineBuilder::from_env()
        .simulated_gpus(1)
        .gpu_workers(workers)
        .cpu_workers(2)
        .build()
        .unwrap()
}

/// Enqueues `out[i] = f(in[i])` on the op's stream, taking `ms`.
fn map(
    ctx: &depengine::gpu::GpuContext<'_>,
    input: &GpuBuffer<f32>,
    out: &mut GpuBuffer<f32>,
    ms: u64,
    f: fn(f32) -> f32,
) -> Result<(), depengine::BoxError> {
    let (ti, r) = input.sim().unwrap().reader();
    let (to, w) = out.sim_mut().unwrap().writer();
    ctx.sim_stream().unwrap().launch("map", Duration::from_millis(ms), vec![ti, to], move || {
        let x = r.with(<[f32]>::to_vec);
        w.with(|o| o.iter_mut().zip(x).for_each(|(o, x)| *o = f(x)));
    })?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chain_across_streams_completes_in_order_and_a_cpu_reader_sees_the_result() {
    let engine = engine(3);
    let gpu = engine.gpu(0).unwrap();
    let a = engine.var(gpu.sim_buffer(vec![1.0f32; 64]).unwrap());
    let b = engine.var(gpu.sim_buffer(vec![0.0f32; 64]).unwrap());
    for _ in 0..10 {
        engine
            .op("a->b")
            .read(&a)
            .write(&b)
            .device(Device::Gpu(0))
            .run_gpu(|(a,), (mut b,), ctx| map(ctx, &a, &mut b, 1, |x| x + 1.0));
        engine
            .op("b->a")
            .read(&b)
            .write(&a)
            .device(Device::Gpu(0))
            .run_gpu(|(b,), (mut a,), ctx| map(ctx, &b, &mut a, 1, |x| x * 2.0));
    }
    let got = engine.op("read").read(&a).run(|(a,), ()| Ok(a.sim().unwrap().to_vec())).await.unwrap();
    let mut want = 1.0f32;
    for _ in 0..10 {
        want = (want + 1.0) * 2.0;
    }
    assert!(got.iter().all(|&x| x == want), "{} != {want}", got[0]);
    let sim = gpu.sim().unwrap();
    assert_eq!(sim.hazards(), Vec::<String>::new());
    assert_eq!(sim.work_done(), 20);
    assert_eq!(gpu.completions(), 20);
    engine.shutdown(ShutdownMode::Drain).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_gpu_worker_enqueues_many_long_ops_without_waiting_for_any() {
    let engine = engine(1);
    let gpu = engine.gpu(0).unwrap();
    let sim = gpu.sim().unwrap().clone();
    let n = 8;
    let mut handles = Vec::new();
    for i in 0..n {
        let v = engine.var(gpu.sim_buffer(vec![i as f32; 4]).unwrap());
        let sim = sim.clone();
        handles.push(engine.op("long").write(&v).device(Device::Gpu(0)).run_gpu(move |(), (mut v,), ctx| {
            let (t, w) = v.sim_mut().unwrap().writer();
            ctx.sim_stream()
                .unwrap()
                .launch("long", Duration::from_millis(100), vec![t], move || w.with(|d| d[0] += 1.0))?;
            // Work run on the GPU when this op's was enqueued.
            Ok(sim.work_done())
        }));
    }
    let mut seen = Vec::new();
    for h in handles {
        seen.push(h.await.unwrap());
    }
    // Eight ops of 100 ms on one stream: had the worker waited for each,
    // the last would have seen seven done.
    assert!(seen[n - 1] < 4, "the worker waited for the GPU: {seen:?}");
    assert_eq!(sim.work_done(), n as u64);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copies_in_and_out_on_their_lanes_feed_a_cpu_op() {
    let engine = engine(2);
    let gpu = engine.gpu(0).unwrap();
    let host_in = engine.var((0..256).map(|i| i as f32).collect::<Vec<f32>>());
    let dev = engine.var(gpu.sim_buffer(vec![0.0f32; 256]).unwrap());
    let staged = engine.var(gpu.sim_buffer(vec![0.0f32; 256]).unwrap());
    engine.op("h2d").read(&host_in).write(&dev).device(Device::Gpu(0)).lane(Lane::CopyToGpu).run_gpu(
        |(src,), (mut dst,), ctx| {
            let data = src.clone();
            let (t, w) = dst.sim_mut().unwrap().writer();
            ctx.sim_stream().unwrap().launch("h2d", Duration::from_millis(2), vec![t], move || {
                w.with(|d| d.copy_from_slice(&data))
            })?;
            Ok(())
        },
    );
    let sq = engine.op("square").read(&dev).write(&staged).device(Device::Gpu(0));
    sq.run_gpu(|(d,), (mut s,), ctx| map(ctx, &d, &mut s, 2, |x| x * x));
    let out = engine.var(vec![0.0f32; 256]);
    // The copy-out reads the device buffer on the d2h lane; the host var is
    // filled by a CPU op once that completes.
    let d2h = engine.op("d2h").read(&staged).device(Device::Gpu(0)).lane(Lane::CopyFromGpu);
    d2h.run_gpu(|(_s,), (), _ctx| Ok(())).await.unwrap();
    engine.op("fill").read(&staged).write(&out).run(|(s,), (mut o,)| {
        o.copy_from_slice(&s.sim().unwrap().to_vec());
        Ok(())
    });
    let sum: f32 = engine.op("sum").read(&out).run(|(o,), ()| Ok(o.iter().sum())).await.unwrap();
    assert_eq!(sum, (0..256).map(|i| (i * i) as f32).sum::<f32>());
    assert_eq!(gpu.sim().unwrap().hazards(), Vec::<String>::new());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sticky_fault_fails_the_pending_ops_and_refuses_later_pushes() {
    let engine = engine(2);
    let gpu = engine.gpu(0).unwrap();
    let sim = gpu.sim().unwrap().clone();
    let a = engine.var(gpu.sim_buffer(vec![1.0f32; 8]).unwrap());
    let b = engine.var(gpu.sim_buffer(vec![1.0f32; 8]).unwrap());
    sim.fail_next("bad");
    let bad = engine.op("bad").write(&a).device(Device::Gpu(0)).run_gpu(|(), (mut a,), ctx| {
        let (t, w) = a.sim_mut().unwrap().writer();
        ctx.sim_stream()
            .unwrap()
            .launch("bad kernel", Duration::from_millis(5), vec![t], move || w.with(|d| d[0] = 0.0))?;
        Ok(())
    });
    let after = engine
        .op("after")
        .read(&a)
        .write(&b)
        .device(Device::Gpu(0))
        .run_gpu(|(a,), (mut b,), ctx| map(ctx, &a, &mut b, 1, |x| x));
    let err = bad.await.unwrap_err();
    assert!(err.is_gpu(), "{err}");
    assert!(err.to_string().contains("CUDA_ERROR_ILLEGAL_ADDRESS"), "{err}");
    assert_eq!(err.gpu_fault().and_then(GpuFault::cuda_error), Some("CUDA_ERROR_ILLEGAL_ADDRESS"));
    let err = after.await.unwrap_err();
    assert!(err.is_gpu() || err.is_skipped(), "{err}");
    let refused = engine.op("later").write(&b).device(Device::Gpu(0)).run_gpu(|(), (_b,), _| Ok(())).pushed();
    let err = refused.unwrap_err();
    assert!(err.is_gpu() && err.to_string().contains("sticky"), "{err}");
    assert!(gpu.fault().is_some());
    // The refusal carries the device's one fault, typed.
    assert_eq!(err.gpu_fault(), gpu.fault().as_ref());
    // The error is on the vars the failed op wrote, and waits do not hang;
    // a wait_for_var takes it, and the var is usable again from the CPU.
    assert!(engine.wait_for_var(&a).await.unwrap_err().is_gpu());
    assert!(engine.wait_for_all().await.is_err());
    let len = engine.op("len").read(&a).run(|(a,), ()| Ok(a.len())).await.unwrap();
    assert_eq!(len, 8);
    engine.shutdown(ShutdownMode::Drain).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_with_gpu_work_in_flight_resolves_every_handle() {
    for mode in [ShutdownMode::Drain, ShutdownMode::Cancel] {
        let engine = engine(1);
        let gpu = engine.gpu(0).unwrap();
        let v = engine.var(gpu.sim_buffer(vec![0.0f32; 4]).unwrap());
        let handles: Vec<_> = (0..20)
            .map(|_| {
                engine.op("step").write(&v).device(Device::Gpu(0)).run_gpu(|(), (mut v,), ctx| {
                    let (t, w) = v.sim_mut().unwrap().writer();
                    ctx.sim_stream().unwrap().launch(
                        "step",
                        Duration::from_millis(3),
                        vec![t],
                        move || w.with(|d| d[0] += 1.0),
                    )?;
                    Ok(())
                })
            })
            .collect();
        let shut = tokio::time::timeout(Duration::from_secs(30), engine.shutdown(mode)).await;
        let shut = shut.expect("shutdown hung");
        // A cancelling shutdown reports the first cancellation, as on CPU.
        match shut {
            Ok(()) => {}
            Err(e) => assert!(mode == ShutdownMode::Cancel && e.is_cancelled(), "{mode:?}: {e}"),
        }
        let mut ran = 0;
        for h in handles {
            match tokio::time::timeout(Duration::from_secs(30), h).await.expect("a handle hung") {
                Ok(()) => ran += 1,
                Err(e) => assert!(mode == ShutdownMode::Cancel && e.is_cancelled(), "{e}"),
            }
        }
        if mode == ShutdownMode::Drain {
            assert_eq!(ran, 20);
        }
    }
}

/// Finding 8: the poller's own driver calls were outside `catch_unwind`; a
/// panic in a query (cudarc panics when the driver lacks a function)
/// ended the poller, and every GPU op of the device hung. The panic is the
/// device's fault now: the ops in flight fail with it, later pushes are
/// refused, nothing hangs.
#[test]
fn a_panic_in_the_pollers_query_is_a_device_fault_not_a_hang() {
    let engine = engine(1);
    let gpu = engine.gpu(0).unwrap();
    let a = engine.var(gpu.sim_buffer(vec![1.0f32; 8]).unwrap());
    gpu.sim().unwrap().panic_next_query();
    let ops: Vec<_> = (0..3)
        .map(|_| {
            engine
                .op("inc")
                .write(&a)
                .device(Device::Gpu(0))
                .run_gpu(|(), (mut a,), ctx| map_in_place(ctx, &mut a))
        })
        .collect();
    let (send, done) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let results: Vec<_> = ops.into_iter().map(|op| op.blocking_wait()).collect();
        let _ = send.send(results);
    });
    let results = done.recv_timeout(Duration::from_secs(20)).expect("GPU ops hung: the poller died");
    let err = results[0].as_ref().unwrap_err();
    assert!(err.is_gpu() && err.to_string().contains("panicked"), "{err}");
    let fault = gpu.fault();
    assert!(
        matches!(&fault, Some(GpuFault::Panicked { call: "cuEventQuery", message }) if message.contains("lacks cuEventQuery")),
        "{fault:?}"
    );
    let refused = engine.op("later").write(&a).device(Device::Gpu(0)).run_gpu(|(), (_a,), _| Ok(())).pushed();
    assert!(refused.unwrap_err().is_gpu());
    engine.blocking_shutdown(ShutdownMode::Drain).unwrap();
}

#[test]
fn placements_that_cannot_work_are_refused_clearly() {
    let engine = engine(1);
    let v = engine.var(0u32);
    let err = engine.op("cpu body").device(Device::Gpu(0)).run(|(), ()| Ok(())).pushed().unwrap_err();
    assert!(err.is_invalid_argument() && err.to_string().contains("run_gpu"), "{err}");
    let err = engine.op("gpu body").read(&v).run_gpu(|(_v,), (), _| Ok(())).pushed().unwrap_err();
    assert!(err.is_invalid_argument(), "{err}");
    let err =
        engine.op("inline").device(Device::Gpu(0)).lane(Lane::Inline).run_gpu(|(), (), _| Ok(())).pushed();
    assert!(err.unwrap_err().is_invalid_argument());
    // Gpu(1) is not simulated: without a CUDA device it is unavailable, and
    // the error says why.
    let err = engine.op("real").device(Device::Gpu(1)).run_gpu(|(), (), _| Ok(())).pushed().unwrap_err();
    assert!(err.is_gpu_unavailable(), "{err}");
    assert!(err.to_string().contains("gpu(1)"), "{err}");
    let err = engine.gpu(depengine::EngineBuilder::MAX_GPU_DEVICES).unwrap_err();
    assert!(err.is_gpu_unavailable(), "{err}");
}

#[cfg(debug_assertions)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_that_blocks_on_the_gpu_fails_in_debug_builds() {
    let engine = engine(1);
    let err = engine
        .op("sync")
        .device(Device::Gpu(0))
        .run_gpu(|(), (), ctx| Ok(ctx.sim_stream().unwrap().synchronize()?))
        .await
        .unwrap_err();
    assert!(err.is_panic() && err.to_string().contains("block an engine thread"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gpu_consumer_on_another_stream_is_enqueued_before_its_producer_completes() {
    let engine = engine(2);
    let gpu = engine.gpu(0).unwrap();
    let sim = gpu.sim().unwrap().clone();
    let a = engine.var(gpu.sim_buffer(vec![1.0f32; 16]).unwrap());
    let b = engine.var(gpu.sim_buffer(vec![0.0f32; 16]).unwrap());
    let c = engine.var(gpu.sim_buffer(vec![0.0f32; 16]).unwrap());
    engine.op("slow").write(&a).device(Device::Gpu(0)).run_gpu(|(), (mut a,), ctx| {
        let (t, w) = a.sim_mut().unwrap().writer();
        ctx.sim_stream().unwrap().launch("slow", Duration::from_millis(200), vec![t], move || {
            w.with(|d| d.iter_mut().for_each(|x| *x = 5.0))
        })?;
        Ok(ctx.stream().id())
    });
    // Two consumers at once, then a writer after both: the writer must be
    // ordered after both reads on the GPU (a write-after-read hazard).
    let s1 = sim.clone();
    let first =
        engine.op("copy b").read(&a).write(&b).device(Device::Gpu(0)).run_gpu(move |(a,), (mut b,), ctx| {
            map(ctx, &a, &mut b, 1, |x| x)?;
            Ok(s1.work_done())
        });
    let second = engine
        .op("copy c")
        .read(&a)
        .write(&c)
        .device(Device::Gpu(0))
        .run_gpu(|(a,), (mut c,), ctx| map(ctx, &a, &mut c, 1, |x| x + 1.0));
    engine.op("overwrite a").write(&a).device(Device::Gpu(0)).run_gpu(|(), (mut a,), ctx| {
        let (t, w) = a.sim_mut().unwrap().writer();
        ctx.sim_stream().unwrap().launch("overwrite", Duration::from_millis(1), vec![t], move || {
            w.with(|d| d.iter_mut().for_each(|x| *x = -1.0))
        })?;
        Ok(())
    });
    // Enqueued while the 200 ms producer had not run: early release.
    assert_eq!(first.await.unwrap(), 0, "the consumer waited for its producer's completion");
    second.await.unwrap();
    let b = engine.op("b").read(&b).run(|(b,), ()| Ok(b.sim().unwrap().to_vec())).await.unwrap();
    let c = engine.op("c").read(&c).run(|(c,), ()| Ok(c.sim().unwrap().to_vec())).await.unwrap();
    let a = engine.op("a").read(&a).run(|(a,), ()| Ok(a.sim().unwrap().to_vec())).await.unwrap();
    assert!(b.iter().all(|&x| x == 5.0) && c.iter().all(|&x| x == 6.0) && a.iter().all(|&x| x == -1.0));
    assert_eq!(sim.hazards(), Vec::<String>::new());
    // wait_for_var resolves at completion, not at early release.
    engine.wait_for_all().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_are_reused_only_once_complete_and_let_go() {
    let engine = engine(1);
    let gpu = engine.gpu(0).unwrap();
    let v = engine.var(gpu.sim_buffer(vec![0u64; 1]).unwrap());
    let step = |engine: &Engine| {
        engine.op("step").write(&v).device(Device::Gpu(0)).run_gpu(|(), (mut v,), ctx| {
            let (t, w) = v.sim_mut().unwrap().writer();
            ctx.sim_stream()
                .unwrap()
                .launch("step", Duration::ZERO, vec![t], move || w.with(|d| d[0] += 1))?;
            Ok(())
        })
    };
    // One op at a time: each takes the event the previous one gave back.
    for _ in 0..200 {
        step(&engine).await.unwrap();
        engine.wait_for_var(&v).await.unwrap();
    }
    assert!(gpu.events_created() <= 3, "{} events for 200 sequential ops", gpu.events_created());
    // Many in flight at once: each needs its own, none is shared.
    let handles: Vec<_> = (0..100).map(|_| step(&engine)).collect();
    for h in handles {
        h.await.unwrap();
    }
    let got = engine.op("read").read(&v).run(|(v,), ()| Ok(v.sim().unwrap().to_vec()[0])).await.unwrap();
    assert_eq!(got, 300);
    assert_eq!(gpu.sim().unwrap().hazards(), Vec::<String>::new());
    engine.wait_for_all().await.unwrap();
    assert_eq!(gpu.pooled_events(), gpu.events_created(), "every event is back once nothing refers to it");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handles_and_waits_resolve_at_completion_not_at_early_release() {
    let engine = engine(2);
    let gpu = engine.gpu(0).unwrap();
    let sim = gpu.sim().unwrap().clone();
    let v = engine.var(gpu.sim_buffer(vec![0u32; 1]).unwrap());
    let long = |engine: &Engine, ms: u64| {
        engine.op("long").write(&v).device(Device::Gpu(0)).run_gpu(move |(), (mut v,), ctx| {
            let (t, w) = v.sim_mut().unwrap().writer();
            ctx.sim_stream()
                .unwrap()
                .launch("long", Duration::from_millis(ms), vec![t], move || w.with(|d| d[0] += 1))?;
            Ok(())
        })
    };
    let first = long(&engine, 100);
    // Let through at the first one's enqueue, ordered behind it on the GPU.
    let second = long(&engine, 1);
    engine.wait_for_var(&v).await.unwrap();
    assert_eq!(sim.work_done(), 2, "wait_for_var resolved before the GPU work it waits for");
    first.await.unwrap();
    second.await.unwrap();
    let third = long(&engine, 50);
    third.await.unwrap();
    assert_eq!(sim.work_done(), 3, "a handle resolved before its op's GPU work");
    let mut guard = v.write().await.unwrap();
    assert_eq!(guard.sim().unwrap().to_vec(), [3]);
    guard.sim_mut().unwrap().copy_from_slice(&[10]);
    drop(guard);
    assert_eq!(sim.hazards(), Vec::<String>::new());
}

#[test]
fn gpu_ops_on_the_naive_engine_complete_through_the_poller_too() {
    let engine = depengine::EngineBuilder::from_env()
        .kind(depengine::engine::EngineKind::Naive)
        .simulated_gpus(1)
        .build()
        .unwrap();
    let gpu = engine.gpu(0).unwrap();
    let v = engine.var(gpu.sim_buffer(vec![1.0f32; 8]).unwrap());
    let w = engine.var(gpu.sim_buffer(vec![0.0f32; 8]).unwrap());
    let copy = engine.op("copy").read(&v).write(&w).device(Device::Gpu(0));
    copy.run_gpu(|(v,), (mut w,), ctx| map(ctx, &v, &mut w, 5, |x| x * 3.0));
    let got =
        engine.op("read").read(&w).run(|(w,), ()| Ok(w.sim().unwrap().to_vec())).blocking_wait().unwrap();
    assert_eq!(got, vec![3.0; 8]);
    engine.blocking_shutdown(ShutdownMode::Drain).unwrap();
    assert_eq!(gpu.sim().unwrap().hazards(), Vec::<String>::new());
}

#[test]
fn no_gpu_thread_is_left_behind() {
    for shutdown in [true, false] {
        let prefix = if shutdown { "gq1" } else { "gq2" };
        let engine =
            depengine::EngineBuilder::from_env().simulated_gpus(1).thread_name(prefix).build().unwrap();
        let gpu = engine.gpu(0).unwrap();
        let v = engine.var(gpu.sim_buffer(vec![0.0f32; 4]).unwrap());
        let step = engine.op("step").write(&v).device(Device::Gpu(0));
        step.run_gpu(|(), (mut v,), ctx| map_in_place(ctx, &mut v)).blocking_wait().unwrap();
        if threads_named(&format!("{prefix}-gpu0")).is_none() {
            return;
        }
        // Five lanes of one worker, the poller and the simulated GPU (each
        // names itself as it starts: wait for the names).
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while threads_named(&format!("{prefix}-gpu0")) != Some(7) {
            assert!(
                std::time::Instant::now() < deadline,
                "{:?} GPU threads",
                threads_named(&format!("{prefix}-gpu0"))
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        drop((gpu, v));
        if shutdown {
            engine.blocking_shutdown(ShutdownMode::Drain).unwrap();
            assert_eq!(
                common::threads_left(&format!("{prefix}-gpu0")),
                Some(0),
                "shutdown joins every GPU thread"
            );
        } else {
            // Dropping the last handle starts a drain: the threads exit.
            drop(engine);
            let deadline = std::time::Instant::now() + Duration::from_secs(10);
            while threads_named(&format!("{prefix}-gpu0")) != Some(0) {
                assert!(std::time::Instant::now() < deadline, "GPU threads outlived their engine");
                std::thread::sleep(Duration::from_millis(5));
            }
        }
    }
}

fn map_in_place(
    ctx: &depengine::gpu::GpuContext<'_>,
    v: &mut GpuBuffer<f32>,
) -> Result<(), depengine::BoxError> {
    let (t, w) = v.sim_mut().unwrap().writer();
    ctx.sim_stream().unwrap().launch("step", Duration::from_millis(1), vec![t], move || {
        w.with(|d| d.iter_mut().for_each(|x| *x += 1.0))
    })?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kernel_that_panics_is_a_device_fault_not_a_hang() {
    let engine = engine(1);
    let gpu = engine.gpu(0).unwrap();
    let v = engine.var(gpu.sim_buffer(vec![0u32; 1]).unwrap());
    let bad = engine.op("bad").write(&v).device(Device::Gpu(0)).run_gpu(|(), (mut v,), ctx| {
        let (t, _w) = v.sim_mut().unwrap().writer();
        ctx.sim_stream()
            .unwrap()
            .launch("trap", Duration::from_millis(1), vec![t], || panic!("out of bounds"))?;
        Ok(())
    });
    let next = engine.op("next").read(&v).run(|(v,), ()| Ok(v.len()));
    let err = tokio::time::timeout(Duration::from_secs(30), bad).await.expect("hung").unwrap_err();
    assert!(err.is_gpu() && err.to_string().contains("out of bounds"), "{err}");
    let err = tokio::time::timeout(Duration::from_secs(30), next).await.expect("hung").unwrap_err();
    assert!(err.is_gpu() || err.is_skipped(), "{err}");
    assert!(gpu.fault().is_some());
    engine.shutdown(ShutdownMode::Drain).await.ok();
}
