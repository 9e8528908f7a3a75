//! Unit tests of the engine that reach inside it: record reuse, freeing,
//! pools that cannot start, idle feeds.

use super::*;

impl Shared {
    /// Spare records waiting, in the pushes' list and kept.
    fn spares(&self) -> usize {
        self.tracker.with_side(|intake| intake.spares.len() + self.core.spare_records().len())
    }
}

/// The names of this process's threads that start with `prefix`.
fn threads_named(prefix: &str) -> usize {
    let tasks = std::fs::read_dir("/proc/self/task").unwrap();
    tasks
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .filter(|comm| comm.starts_with(prefix))
        .count()
}

/// [`threads_named`] once joined threads have left the system's list (a
/// joined thread may stay listed a moment while the system finishes its
/// exit): waits up to a second for zero.
fn threads_left(prefix: &str) -> usize {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(1);
    loop {
        let n = threads_named(prefix);
        if n == 0 || std::time::Instant::now() > deadline {
            return n;
        }
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
}

/// A pool whose threads the OS refuses fails the push that needed it:
/// its var is left as if the op had never been pushed, the threads
/// that did start are stopped, pushes within the back-off are refused
/// without asking the OS again, and a later push starts the pool.
#[test]
#[cfg(target_os = "linux")]
fn a_pool_that_cannot_start_fails_the_push_and_leaves_the_var_alone() {
    let engine = crate::EngineBuilder::from_env().cpu_workers(3).thread_name("nostart").build().unwrap();
    let v = engine.var(1u32);
    crate::exec::FAIL_SPAWN_AT.with(|at| at.set(Some(2)));
    let push = || {
        engine
            .op("first")
            .write(&v)
            .run(|(), (mut v,)| {
                *v += 1;
                Ok(())
            })
            .pushed()
    };
    let err = push();
    for _ in 0..100 {
        assert!(push().unwrap_err().is_pool_unavailable());
    }
    crate::exec::FAIL_SPAWN_AT.with(|at| at.set(None));
    assert_eq!(crate::exec::SPAWNS_REFUSED.with(std::cell::Cell::get), 1, "pushes retried the start at once");
    let err = err.unwrap_err();
    assert!(err.is_pool_unavailable(), "{err}");
    assert!(err.to_string().contains("nostart-cpu0"), "{err}");
    let state = v.any().debug_state();
    assert!(!state.write_running && state.queued.is_empty() && state.version == 0, "{state:?}");
    assert_eq!(threads_left("nostart-cpu0"), 0, "started workers were not stopped");
    engine.wait_for_all().blocking_wait().unwrap();
    // A push after the back-off starts the pool and runs.
    std::thread::sleep(std::time::Duration::from_millis(60));
    let after = engine.op("after").write(&v).run(|(), (mut v,)| {
        *v += 10;
        Ok(*v)
    });
    assert_eq!(after.blocking_wait().unwrap(), 11);
    // A new thread names itself once it runs.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while threads_named("nostart-cpu0") != 3 {
        assert!(std::time::Instant::now() < deadline, "{} workers", threads_named("nostart-cpu0"));
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    engine.blocking_shutdown(ShutdownMode::Cancel).unwrap();
    assert_eq!(threads_left("nostart-cpu0"), 0);
}

/// Threads that pushed once and then stayed idle cost the workers
/// nothing: their feeds leave the pool's list (and their rings are
/// freed); a thread that pushes again gets a new feed, and its ops run.
#[test]
fn idle_feeds_are_retired_and_come_back_when_used() {
    let engine = crate::EngineBuilder::from_env().cpu_workers(2).build().unwrap();
    let gate = Arc::new(std::sync::Barrier::new(17));
    let threads: Vec<_> = (0..16u32)
        .map(|i| {
            let (engine, gate) = (engine.clone(), gate.clone());
            std::thread::spawn(move || {
                engine.op("once").run(|(), ()| Ok(())).blocking_wait().unwrap();
                gate.wait();
                gate.wait();
                let again: Vec<_> = (0..3).map(|k| engine.op("again").run(move |(), ()| Ok(i + k))).collect();
                again.into_iter().map(|h| h.blocking_wait().unwrap()).sum::<u32>()
            })
        })
        .collect();
    gate.wait();
    // (Feeds of the first threads may be retired already.)
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while engine.shared().dispatcher.feeds_listed() > 0 {
        assert!(std::time::Instant::now() < deadline, "idle feeds were never retired");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    gate.wait();
    let sums: u32 = threads.into_iter().map(|t| t.join().unwrap()).sum();
    assert_eq!(sums, (0..16).map(|i| 3 * i + 3).sum::<u32>());
}

/// Ops, and the spare records their records leave, hold engine references:
/// dropping the last handle must still free the engine once the ops
/// are done.
#[test]
fn dropped_engine_is_freed_after_its_ops() {
    let engine = crate::EngineBuilder::from_env().cpu_workers(2).build().unwrap();
    let weak = Arc::downgrade(engine.shared());
    for i in 0..100u64 {
        drop(engine.op("noop").run(move |(), ()| Ok(i)));
    }
    drop(engine);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while weak.strong_count() > 0 {
        assert!(std::time::Instant::now() < deadline, "engine still alive: {} refs", weak.strong_count());
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

/// A push builds its op in the last kept spare record when that spare record held
/// an op of the same type (and frees it otherwise); the rebuilt op runs
/// and returns its own result.
#[test]
fn push_builds_its_op_in_a_shell_of_its_type() {
    // Bulk execution off: segments rebuild records of their own.
    let engine = crate::EngineBuilder::from_env().cpu_workers(1).bulk_size(1).build().unwrap();
    let shared = engine.shared().clone();
    let var = engine.var(0u64);
    let add = |i: u64| {
        engine.op("add").write(&var).run(move |(), (mut v,)| {
            *v += i;
            Ok(*v)
        })
    };
    for i in 0..100 {
        drop(add(i));
    }
    engine.wait_for_all().blocking_wait().unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while shared.spares() == 0 {
        assert!(std::time::Instant::now() < deadline, "no spare record kept");
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    let rebuilt = || crate::op::recycle::REBUILT.with(std::cell::Cell::get);
    let spares = shared.tracker.with_side(|intake| shared.core.spare_records().addresses(&intake.spares));
    let before = rebuilt();
    let reused = add(1000);
    assert_eq!(rebuilt(), before + 1, "the op was not built in a spare record");
    assert_eq!(reused.record(), spares.last().copied(), "the op was not built in the last spare record");
    assert_eq!(reused.blocking_wait().unwrap(), 4950 + 1000);

    let before = rebuilt();
    let other = engine.op("read").read(&var).run(|(v,), ()| Ok(format!("{}", *v)));
    assert_eq!(rebuilt(), before, "a spare record of another op type was reused");
    assert_eq!(other.blocking_wait().unwrap(), "5950");
}

/// Records of detached ops go back to the pushing thread as spare records that
/// hold nothing their ops used: a var whose handles are all dropped is
/// freed, and a result nobody took is dropped, as soon as the ops finish.
#[test]
fn shells_hold_nothing_their_ops_used() {
    let engine = crate::EngineBuilder::from_env().cpu_workers(1).build().unwrap();
    let shared = engine.shared().clone();
    let data = Arc::new(());
    let result = Arc::new(());
    let var = engine.var(data.clone());
    for _ in 0..100 {
        let result = result.clone();
        drop(engine.op("touch").write(&var).run(move |(), (v,)| {
            drop(v);
            Ok(result)
        }));
    }
    drop(var);
    engine.wait_for_all().blocking_wait().unwrap();
    // The worker keeps its spare records when it runs out of work, before
    // it parks: once it has parked, their count holds still (a loaded
    // machine may keep it working well after the last op completed).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while shared.spares() == 0
        || Arc::strong_count(&data) > 1
        || Arc::strong_count(&result) > 1
        || !shared.dispatcher.all_parked(crate::Device::Cpu(0))
    {
        assert!(
            std::time::Instant::now() < deadline,
            "spares {}, var data refs {}, result refs {}",
            shared.spares(),
            Arc::strong_count(&data),
            Arc::strong_count(&result)
        );
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    // A push frees spare records on the pushing thread; closing frees the rest.
    let before = shared.spares();
    drop(engine.op("noop").run(|(), ()| Ok(())));
    assert!(shared.spares() < before, "{} spares before the push, {} after", before, shared.spares());
    engine.blocking_shutdown(ShutdownMode::Drain).unwrap();
    assert_eq!(shared.spares(), 0);
}

/// An engine that goes idle gives back its spare records but a few, once
/// no push has wanted them for a while; one used in bursts keeps them from
/// one burst to the next.
#[test]
fn an_idle_engine_gives_back_its_spare_records() {
    use crate::op::record::IDLE_KEEP;
    let engine = Engine::builder().cpu_workers(1).build().unwrap();
    let shared = engine.shared().clone();
    let var = engine.var(0u64);
    let burst = || {
        for _ in 0..2_000 {
            let pushed = engine.op("add").write(&var).run_detached(|(), (mut v,)| {
                *v += 1;
                Ok(())
            });
            pushed.unwrap();
        }
        engine.wait_for_all().blocking_wait().unwrap();
    };
    burst();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while shared.spares() <= IDLE_KEEP {
        assert!(std::time::Instant::now() < deadline, "the burst left {} spare records", shared.spares());
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    // Bursts 100 ms apart: the records stay.
    for _ in 0..5 {
        std::thread::sleep(std::time::Duration::from_millis(100));
        burst();
    }
    assert!(shared.spares() > IDLE_KEEP, "records given back between bursts: {}", shared.spares());
    // Idle: given back within a few seconds.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while shared.spares() > IDLE_KEEP {
        assert!(std::time::Instant::now() < deadline, "still {} spare records kept", shared.spares());
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let sum = engine.op("read").read(&var).run(|(v,), ()| Ok(*v));
    assert_eq!(sum.blocking_wait().unwrap(), 12_000);
}
