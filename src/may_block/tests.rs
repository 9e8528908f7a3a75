use super::*;

fn runtime(multi: bool) -> tokio::runtime::Runtime {
    let mut builder = if multi {
        tokio::runtime::Builder::new_multi_thread()
    } else {
        tokio::runtime::Builder::new_current_thread()
    };
    builder.worker_threads(2).enable_all().build().unwrap()
}

#[test]
fn a_plain_thread_runs_no_runtime_tasks() {
    assert!(!runs_async_code());
    assert!(refuse_blocking("x", Instead::Await).is_ok());
}

#[test]
fn an_async_task_runs_them_on_either_flavour() {
    for multi in [false, true] {
        let rt = runtime(multi);
        assert!(rt.block_on(async { tokio::spawn(async { runs_async_code() }).await.unwrap() }));
        let refused = rt.block_on(async {
            tokio::spawn(async { refuse_blocking("x", Instead::SpawnBlocking) }).await.unwrap()
        });
        let err = refused.unwrap_err();
        assert!(err.is_blocking_in_runtime(), "{err}");
        assert!(err.to_string().contains("spawn_blocking"), "{err}");
    }
}

#[test]
fn the_future_of_any_block_on_is_async_code() {
    for multi in [false, true] {
        let rt = runtime(multi);
        assert!(rt.block_on(async { runs_async_code() }), "multi-thread: {multi}");
        // A handle's block_on from a thread that runs no task.
        let handle = rt.handle().clone();
        let inside = std::thread::spawn(move || handle.block_on(async { runs_async_code() }));
        assert!(inside.join().unwrap(), "Handle::block_on, multi-thread: {multi}");
    }
}

#[test]
fn a_local_set_task_is_async_code() {
    let rt = runtime(true);
    let local = tokio::task::LocalSet::new();
    assert!(
        local.block_on(&rt, async { tokio::task::spawn_local(async { runs_async_code() }).await.unwrap() })
    );
}

#[test]
fn block_in_place_from_a_block_on_may_block() {
    let rt = runtime(true);
    assert!(!rt.block_on(async { tokio::task::block_in_place(runs_async_code) }));
}

#[test]
fn spawn_blocking_and_block_in_place_may_block() {
    for multi in [false, true] {
        let rt = runtime(multi);
        let inside = rt.block_on(async { tokio::task::spawn_blocking(runs_async_code).await.unwrap() });
        assert!(!inside, "spawn_blocking, multi-thread: {multi}");
    }
    let rt = runtime(true);
    let inside = rt.block_on(async {
        tokio::spawn(async { tokio::task::block_in_place(runs_async_code) }).await.unwrap()
    });
    assert!(!inside, "block_in_place");
}

#[test]
fn a_thread_that_entered_a_runtime_runs_none_of_its_tasks() {
    let rt = runtime(true);
    let _entered = rt.enter();
    assert!(!runs_async_code());
}

#[test]
fn a_deferred_wake_does_not_fool_a_later_probe() {
    let rt = runtime(false);
    rt.block_on(async {
        assert!(runs_async_code());
        // The first probe's waker is woken by the scheduler at this yield.
        tokio::task::yield_now().await;
        assert!(runs_async_code());
    });
}

#[test]
fn a_start_hook_is_marked_while_it_runs_and_after_a_panic_no_more() {
    assert!(!is_in_start_hook());
    assert!(in_start_hook(is_in_start_hook));
    let refused = in_start_hook(|| refuse_blocking("x", Instead::Await));
    assert!(refused.unwrap_err().is_would_deadlock());
    let _ = std::panic::catch_unwind(|| in_start_hook(|| panic!("hook")));
    assert!(!is_in_start_hook());
}

#[test]
fn an_engine_thread_may_block_only_inside_a_body() {
    std::thread::spawn(|| {
        mark_engine_thread();
        let err = refuse_blocking("x", Instead::Await).unwrap_err();
        assert!(err.is_would_deadlock(), "{err}");
        assert!(err.to_string().contains("outside an op's body"), "{err}");
        let body = 1u8;
        BODY.with(|b| b.set(std::ptr::from_ref(&body).cast()));
        assert!(refuse_blocking("x", Instead::Await).is_ok());
        BODY.with(|b| b.set(std::ptr::null()));
    })
    .join()
    .unwrap();
}
