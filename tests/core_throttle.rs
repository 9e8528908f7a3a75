//! The soft bound on ops in flight (`EngineBuilder::throttle_at`): a plain
//! thread that pushes far ahead of the workers is held near the bound; a
//! push never waits where the wait could not end, or would stall async
//! code or an op's body. Every check ends in bounded time.

mod common;

use std::time::Duration;

use depengine::Engine;

/// A body that takes a while, so that the pusher runs ahead.
fn slow(micros: u64) {
    let start = std::time::Instant::now();
    while start.elapsed() < Duration::from_micros(micros) {
        std::hint::spin_loop();
    }
}

fn engine(throttle_at: usize) -> Engine {
    Engine::builder().cpu_workers(1).throttle_at(throttle_at).build().unwrap()
}

/// The most ops in flight a pushing thread saw, every 64 pushes (metrics
/// are not free: read at every push, they slow the pusher to the workers'
/// pace), while it pushed `n` ops of `micros` each on one chain.
fn most_in_flight_seen(engine: &Engine, n: usize, micros: u64) -> u64 {
    let v = engine.var(0u64);
    let mut most = 0;
    for i in 0..n {
        engine
            .op("link")
            .write(&v)
            .run_detached(move |(), (mut v,)| {
                slow(micros);
                *v += 1;
                Ok(())
            })
            .unwrap();
        if i % 64 == 0 {
            most = most.max(engine.metrics().in_flight);
        }
    }
    most
}

#[test]
fn a_plain_thread_far_ahead_is_held_near_the_bound() {
    let engine = engine(512);
    assert_eq!(engine.settings().throttle_at, 512);
    let seen = common::bounded(60, "a throttled pusher", {
        let engine = engine.clone();
        move || most_in_flight_seen(&engine, 5_000, 20)
    });
    // Looked at every 256 pushes: at most that many past the bound.
    assert!(seen <= 512 + 256, "{seen} ops in flight");
    engine.wait_for_all().blocking_wait().unwrap();
    // Unbounded, the same pusher runs far ahead (the check can fail).
    let unbounded = engine_unbounded();
    let seen = common::bounded(60, "an unthrottled pusher", {
        let engine = unbounded.clone();
        move || most_in_flight_seen(&engine, 5_000, 20)
    });
    assert!(seen > 768, "unbounded, only {seen} ops in flight: the check above proves nothing");
    unbounded.wait_for_all().blocking_wait().unwrap();
}

fn engine_unbounded() -> Engine {
    engine(0)
}

/// Ops held back by a guard the pushing thread holds cannot complete until
/// it is dropped, after the pushes: no worker runs, and the pushes do not
/// wait for them.
#[test]
fn a_pusher_holding_the_guard_its_ops_wait_for_is_not_held() {
    let engine = engine(256);
    let done = common::bounded(60, "pushes behind a held guard", move || {
        let v = engine.var(0u64);
        let guard = v.write().blocking_wait().unwrap();
        for _ in 0..5_000 {
            engine
                .op("behind")
                .write(&v)
                .run_detached(|(), (mut v,)| {
                    *v += 1;
                    Ok(())
                })
                .unwrap();
        }
        assert!(engine.metrics().in_flight >= 5_000);
        drop(guard);
        engine.wait_for_all().blocking_wait().unwrap();
        *v.read().blocking_wait().unwrap()
    });
    assert_eq!(done, 5_000);
}

/// Async code and op bodies push without waiting: the ops in flight may
/// need their thread.
#[test]
fn async_code_and_bodies_are_never_held() {
    let engine = engine(256);
    let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
    let from_task = engine.clone();
    let seen = common::bounded(60, "pushes from async code", move || {
        rt.block_on(
            async move { tokio::spawn(async move { most_in_flight_seen(&from_task, 3_000, 20) }).await },
        )
    });
    assert!(seen.unwrap() > 256 + 256, "async code was held");
    engine.wait_for_all().blocking_wait().unwrap();
    // A body on one worker pushing ops that the other runs: held, it
    // would wait for them.
    let two = Engine::builder().cpu_workers(2).throttle_at(256).build().unwrap();
    let inner = two.clone();
    let seen = two
        .op("pushes")
        .run(move |(), ()| Ok(most_in_flight_seen(&inner, 3_000, 20)))
        .blocking_wait()
        .unwrap();
    assert!(seen > 256 + 256, "a body was held");
    two.wait_for_all().blocking_wait().unwrap();
}

#[test]
fn the_bound_is_a_setting_with_zero_for_none() {
    assert_eq!(Engine::builder().build().unwrap().settings().throttle_at, 4_096);
    assert_eq!(engine(0).settings().throttle_at, 0);
}
