//! The soft bound on ops in flight (`EngineBuilder::throttle_at`): a plain
//! thread that pushes far ahead of the workers is held near the bound; a
//! push never waits where the wait could not end, or would stall async
//! code or an op's body. Every check ends in bounded time.

mod common;

use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use depengine::{Engine, Lane};

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

/// Ops that wait, each, until the test lets that many through: the
/// workers' progress is the test's, not the scheduler's.
#[derive(Default)]
struct Turnstile {
    open: Mutex<u64>,
    moved: Condvar,
}

impl Turnstile {
    fn let_through(&self, n: u64) {
        *self.open.lock().unwrap() = n;
        self.moved.notify_all();
    }

    fn pass(&self, i: u64) {
        let open = self.open.lock().unwrap();
        drop(self.moved.wait_while(open, |open| *open < i).unwrap());
    }
}

/// Pushes op `i` of a chain through `gate`, on one var.
fn push_gated(engine: &Engine, v: &depengine::Var<u64>, gate: &Arc<Turnstile>, i: u64) {
    let gate = gate.clone();
    engine
        .op("gated")
        .write(v)
        .run_detached(move |(), (mut v,)| {
            gate.pass(i);
            *v += 1;
            Ok(())
        })
        .unwrap();
}

/// Polls `done` until it holds, for at most 60 s.
fn until(what: &str, done: impl Fn() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < Duration::from_secs(60), "waited 60 s for {what}");
        std::thread::yield_now();
    }
}

/// A pusher over the bound behind workers that are draining waits, woken
/// by completions, until half the bound is in flight. The workers move
/// only when the test says, so every step is forced: 512 pushed (the
/// bound: the looks at 256 and 512 go on); ten let through and completed;
/// 256 more pushed, whose last push looks (758 in flight, ten completed
/// since the last look) and waits; once it waits, everything is let
/// through, and the push returns once at most 256 are in flight.
#[test]
fn a_plain_thread_far_ahead_is_held_near_the_bound() {
    let engine = Engine::builder().cpu_workers(1).throttle_at(512).pusher_runs_at(0).build().unwrap();
    assert_eq!(engine.settings().throttle_at, 512);
    let gate = Arc::new(Turnstile::default());
    let opener = {
        let (engine, gate) = (engine.clone(), gate.clone());
        std::thread::spawn(move || {
            until("the pusher to wait", || engine.metrics().throttle_waits == 1);
            gate.let_through(u64::MAX);
        })
    };
    let after = common::bounded(120, "a throttled pusher", {
        let (engine, gate) = (engine.clone(), gate.clone());
        move || {
            let v = engine.var(0u64);
            for i in 1..=512 {
                push_gated(&engine, &v, &gate, i);
            }
            gate.let_through(10);
            until("ten ops", || engine.metrics().completed == 10);
            for i in 513..=767 {
                push_gated(&engine, &v, &gate, i);
            }
            assert_eq!(engine.metrics().throttle_waits, 0);
            assert_eq!(engine.metrics().in_flight, 757);
            push_gated(&engine, &v, &gate, 768);
            engine.metrics()
        }
    });
    opener.join().unwrap();
    assert_eq!(after.throttle_waits, 1);
    assert_eq!(after.throttle_passes, 0, "the wait gave up");
    assert!(after.in_flight <= 256, "{} in flight after the wait", after.in_flight);
    engine.wait_for_all().blocking_wait().unwrap();
    // Unbounded, the same pushes are not held (the check can fail).
    let unbounded = Engine::builder().cpu_workers(1).throttle_at(0).pusher_runs_at(0).build().unwrap();
    let gate = Arc::new(Turnstile::default());
    let v = unbounded.var(0u64);
    for i in 1..=768 {
        push_gated(&unbounded, &v, &gate, i);
    }
    assert_eq!(unbounded.metrics().in_flight, 768);
    gate.let_through(u64::MAX);
    unbounded.wait_for_all().blocking_wait().unwrap();
}

/// Workers held until the pushes end (by long ops, or ops that wait for
/// the pushing thread) complete nothing between two looks: a pusher whose
/// ops it cannot run itself is never held behind them, whatever keeps it
/// from running them (a priority, another lane, `pusher_runs_at(0)`).
#[test]
fn a_pusher_behind_held_workers_never_waits() {
    type Shape = fn(depengine::engine::OpBuilder<'_>) -> depengine::engine::OpBuilder<'_>;
    let shapes: [(&str, usize, Shape); 3] = [
        ("priority", 64, |op| op.priority(1)),
        ("lane", 64, |op| op.lane(Lane::Prioritized)),
        ("pusher_runs_at(0)", 0, |op| op),
    ];
    for (what, pusher_runs_at, shape) in shapes {
        let engine = Engine::builder()
            .cpu_workers(1)
            .priority_workers(1)
            .throttle_at(512)
            .pusher_runs_at(pusher_runs_at)
            .build()
            .unwrap();
        let metrics = common::bounded(60, what, {
            let engine = engine.clone();
            move || {
                let (release, held) = std::sync::mpsc::channel::<()>();
                let (started, running) = std::sync::mpsc::channel::<()>();
                let held = Arc::new(Mutex::new(held));
                for lane in [Lane::Normal, Lane::Prioritized] {
                    let (held, started) = (held.clone(), started.clone());
                    engine
                        .op("hold")
                        .lane(lane)
                        .run_detached(move |(), ()| {
                            started.send(()).unwrap();
                            let _ = held.lock().unwrap().recv();
                            Ok(())
                        })
                        .unwrap();
                }
                // Both workers hold before any op that could run first.
                running.recv().unwrap();
                running.recv().unwrap();
                for _ in 0..20_000 {
                    shape(engine.op("behind")).run_detached(|(), ()| Ok(())).unwrap();
                }
                let metrics = engine.metrics();
                drop(release);
                metrics
            }
        });
        assert_eq!(metrics.throttle_waits, 0, "{what}");
        assert_eq!(metrics.in_flight, 20_002, "{what}");
        assert!(metrics.throttle_passes >= 70, "{what}: {} passes", metrics.throttle_passes);
        engine.wait_for_all().blocking_wait().unwrap();
    }
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
