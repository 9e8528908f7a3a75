//! Failure paths that must neither leak nor stall.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use common::Counted;
use depengine::{Device, Lane, ShutdownMode};

#[test]
fn a_cancelling_shutdown_strands_no_op_on_another_pool() {
    for round in 0..300 {
        let engine = depengine::EngineBuilder::from_env().cpu_devices(2).build().unwrap();
        let drops = Arc::new(AtomicUsize::new(0));
        let v = engine.var(Counted(drops.clone()));
        for _ in 0..4 {
            engine.op("w").write(&v).run_detached(|(), (_v,)| Ok(())).unwrap();
        }
        let (device, lane) =
            if round % 2 == 0 { (Device::Cpu(0), Lane::Prioritized) } else { (Device::Cpu(1), Lane::Normal) };
        let r = engine.op("r").read(&v).device(device).lane(lane).run(|(_v,), ()| Ok(()));
        let _ = engine.blocking_shutdown(ShutdownMode::Cancel);
        let _ = r.blocking_wait();
        let state = v.any().debug_state();
        assert!(
            state.running_reads == 0 && !state.write_running && state.queued.is_empty(),
            "round {round}: {state:?}"
        );
        drop(v);
        drop(engine);
        assert_eq!(drops.load(Ordering::SeqCst), 1, "round {round}: the var's data was not freed");
    }
}

/// An op cancelled before its vars let it through (its handle dropped
/// with `cancel_on_drop`, or aborted) keeps its slot among the ops in
/// flight until it has left its vars: the bound bounds the records kept.
#[test]
fn cancelled_ops_count_against_the_bound_until_they_leave_their_vars() {
    for abort in [false, true] {
        let engine = depengine::EngineBuilder::from_env().max_in_flight(8).build().unwrap();
        let v = engine.var(0u64);
        let held = v.write().blocking_wait().unwrap();
        let (mut accepted, mut refused) = (0, 0);
        for _ in 0..1000 {
            let h = engine.op("request").read(&v).cancel_on_drop(true).run(|(v,), ()| Ok(*v));
            if h.is_finished() {
                assert!(h.blocking_wait().unwrap_err().is_full());
                refused += 1;
                continue;
            }
            accepted += 1;
            if abort {
                assert!(h.abort());
            }
            drop(h);
        }
        assert_eq!((accepted, refused), (8, 992), "abort={abort}");
        assert_eq!(engine.metrics().slots_used, 8, "abort={abort}");
        drop(held);
        engine.blocking_wait_for_var(&v).unwrap();
        // The cancelled reads leave as the var reaches them.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while engine.metrics().slots_used > 0 && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        assert_eq!(engine.metrics().slots_used, 0, "abort={abort}");
        assert_eq!(engine.op("after").read(&v).run(|(v,), ()| Ok(*v)).blocking_wait().unwrap(), 0);
    }
}

/// A watchdog thread stops with its engine, at shutdown or at the drop of
/// its last handle, however long its threshold.
#[test]
fn the_watchdog_stops_with_its_engine() {
    for shutdown in [false, true] {
        for _ in 0..20 {
            let engine = depengine::EngineBuilder::from_env()
                .thread_name("leakdog")
                .watchdog(std::time::Duration::from_secs(600))
                .build()
                .unwrap();
            let v = engine.var(0u32);
            engine.op("w").write(&v).run(|(), (mut v,)| {
                *v += 1;
                Ok(())
            });
            if shutdown {
                engine.blocking_shutdown(ShutdownMode::Drain).unwrap();
            }
            drop(engine);
        }
        // Joined before the drop returns.
        assert_eq!(common::threads_left("leakdog-watch"), Some(0), "shutdown={shutdown}");
    }
}

/// Runs the ignored test `test` of this file in a child process under an
/// address-space limit of `kib` KiB; its exit status and output.
#[cfg(target_os = "linux")]
fn child_under_limit(test: &str, kib: u64) -> (Option<i32>, String) {
    let exe = std::env::current_exe().unwrap();
    let script =
        format!("ulimit -v {kib} && exec \"$0\" --exact {test} --ignored --nocapture --test-threads=1");
    let out = std::process::Command::new("sh").arg("-c").arg(script).arg(exe).output().unwrap();
    (out.status.code(), String::from_utf8_lossy(&out.stdout).into_owned())
}

/// A pool that the OS cannot start (a thousand workers under a memory
/// limit) is refused to every push, and the process lives on: pushes
/// within the back-off do not ask the OS for the threads again, and the
/// threads are started one at a time, so that a refusal comes from a
/// thread's start, not from inside a thread the OS half started.
#[test]
#[cfg(target_os = "linux")]
fn a_pool_the_os_cannot_start_is_refused_without_aborting() {
    for kib in [800_000, 1_000_000, 1_200_000, 1_400_000] {
        let (code, out) = child_under_limit("child_pushes_to_a_huge_pool", kib);
        assert_eq!(code, Some(0), "{kib} KiB: {out}");
        assert!(out.contains("refused=100") || out.contains("ran=100"), "{kib} KiB: {out}");
    }
}

#[test]
#[ignore = "run by a_pool_the_os_cannot_start_is_refused_without_aborting"]
fn child_pushes_to_a_huge_pool() {
    let engine = depengine::EngineBuilder::from_env().cpu_workers(1024).build().unwrap();
    let v = engine.var(0u64);
    let (mut ran, mut refused) = (0, 0);
    for _ in 0..100 {
        match engine
            .op("w")
            .write(&v)
            .run(|(), (mut v,)| {
                *v += 1;
                Ok(())
            })
            .pushed()
        {
            Ok(_) => ran += 1,
            Err(err) => {
                assert!(err.is_pool_unavailable(), "{err}");
                refused += 1;
            }
        }
    }
    println!("ran={ran} refused={refused}");
}

/// The resident memory of this process, in KiB (Linux).
#[cfg(target_os = "linux")]
fn resident_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// Threads that pushed once and then idle cost little more memory than
/// threads that never pushed: a feed's ring holds only the pages its ops
/// touched, and goes back to the system once retired. (Each run in a child
/// process, alone, so that no other test's memory is counted.)
#[test]
#[cfg(target_os = "linux")]
fn idle_pushing_threads_keep_little_memory() {
    let per_thread = |push: bool| {
        let exe = std::env::current_exe().unwrap();
        let out = std::process::Command::new(exe)
            .args(["--exact", "child_with_idle_threads", "--ignored", "--nocapture", "--test-threads=1"])
            .env("CHILD_THREADS_PUSH", if push { "1" } else { "0" })
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(out.status.success(), "{text}");
        let figure = text.split("per thread: ").nth(1).and_then(|rest| rest.split_whitespace().next());
        figure.and_then(|f| f.parse::<f64>().ok()).unwrap_or_else(|| panic!("no figure in {text}"))
    };
    let (pushed, idle) = (per_thread(true), per_thread(false));
    assert!(
        pushed < idle + 16.0,
        "{pushed:.1} KiB per thread that pushed once, {idle:.1} per thread that did not"
    );
}

#[test]
#[ignore = "run by idle_pushing_threads_keep_little_memory"]
#[cfg(target_os = "linux")]
fn child_with_idle_threads() {
    use std::sync::Barrier;
    const THREADS: usize = 1000;
    let push = std::env::var("CHILD_THREADS_PUSH").as_deref() == Ok("1");
    let engine = depengine::EngineBuilder::from_env().cpu_workers(2).build().unwrap();
    engine.op("warm").run(|(), ()| Ok(())).blocking_wait().unwrap();
    let before = resident_kib();
    let (up, down) = (Arc::new(Barrier::new(THREADS + 1)), Arc::new(Barrier::new(THREADS + 1)));
    let threads: Vec<_> = (0..THREADS)
        .map(|_| {
            let (engine, up, down) = (engine.clone(), up.clone(), down.clone());
            std::thread::Builder::new()
                .stack_size(64 << 10)
                .spawn(move || {
                    if push {
                        engine.op("once").run(|(), ()| Ok(())).blocking_wait().unwrap();
                    }
                    up.wait();
                    down.wait();
                })
                .unwrap()
        })
        .collect();
    up.wait();
    // Idle feeds are retired 50 to 100 ms after their last push.
    std::thread::sleep(std::time::Duration::from_millis(300));
    let kib = resident_kib().saturating_sub(before) as f64 / THREADS as f64;
    println!("per thread: {kib:.1} KiB");
    down.wait();
    threads.into_iter().for_each(|t| t.join().unwrap());
}
