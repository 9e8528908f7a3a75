//! Unit tests of the engine that reach inside it: freeing, pools that
//! cannot start, idle feeds.

use super::*;

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

/// Ops hold engine references: dropping the last handle must still free
/// the engine once the ops are done.
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

/// The records of detached ops hold nothing their ops used once they
/// finish: a var whose handles are all dropped is freed, and a result
/// nobody took is dropped, as soon as the ops finish.
#[test]
fn finished_records_hold_nothing_their_ops_used() {
    let engine = crate::EngineBuilder::from_env().cpu_workers(1).build().unwrap();
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
    // The worker lets the last record go after `wait_for_all` may have
    // seen it complete.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while Arc::strong_count(&data) > 1 || Arc::strong_count(&result) > 1 {
        assert!(
            std::time::Instant::now() < deadline,
            "var data refs {}, result refs {}",
            Arc::strong_count(&data),
            Arc::strong_count(&result)
        );
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    engine.blocking_shutdown(ShutdownMode::Drain).unwrap();
}
