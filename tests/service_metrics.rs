//! `Engine::metrics`: the counters of outcomes match what happened, the
//! gauges see ops waiting on vars, queued on a pool and running, busy time
//! and the timing distributions reflect bodies of known length.

mod common;

use std::time::Duration;

use common::{hold_worker, timed};
use depengine::metrics::Histogram;
use depengine::{Device, Engine, Error, Lane};

/// The metrics once `done` holds of them (at most 10 s): a worker counts an
/// op's end, and records its run time, when its run returns, which may come
/// just after the op's completion woke the test.
async fn settled(
    engine: &Engine,
    done: impl Fn(&depengine::metrics::Metrics) -> bool,
) -> depengine::metrics::Metrics {
    let start = std::time::Instant::now();
    loop {
        let m = engine.metrics();
        if done(&m) {
            return m;
        }
        assert!(start.elapsed() < Duration::from_secs(10), "metrics never settled: {m:?}");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

fn engine(timing: bool) -> Engine {
    depengine::EngineBuilder::from_env().cpu_workers(1).bulk_size(1).metrics_timing(timing).build().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outcome_counters_match_what_happened() {
    timed(async {
        let engine = engine(false);
        let v = engine.var(0u64);
        for _ in 0..20 {
            engine.op("ok").write(&v).run(|(), (mut v,)| {
                *v += 1;
                Ok(())
            });
        }
        let bad = engine.var(0u64);
        let failing = engine.op("fail").write(&bad).run(|(), (_b,)| Err::<(), _>("no".into()));
        // Three ops skipped for the error `fail` leaves on `bad`.
        let skipped: Vec<_> = (0..3).map(|_| engine.op("skip").read(&bad).run(|(_b,), ()| Ok(()))).collect();
        // One op aborted while it waits behind a held guard.
        let gate = engine.var(());
        let held = gate.write().await.unwrap();
        let aborted = engine.op("aborted").read(&gate).run(|(_g,), ()| Ok(()));
        assert!(aborted.abort());
        drop(held);
        assert!(failing.await.unwrap_err().is_failed());
        for s in skipped {
            assert!(s.await.unwrap_err().is_skipped());
        }
        assert!(aborted.await.unwrap_err().is_cancelled());
        let _ = engine.wait_for_all().await;
        // The aborted op leaves its var once the worker it was sent to
        // gets to it, which a loaded machine may delay past the waits: it
        // is queued on the pool from its let-through until then.
        let m = settled(&engine, |m| m.running() == 0 && m.waiting_on_vars == 0 && m.queued() == 0).await;
        assert_eq!((m.failed, m.skipped, m.cancelled), (1, 3, 1), "{m:?}");
        assert_eq!(m.completed, m.pushed, "{m:?}");
        assert_eq!(m.in_flight, 0);
        assert_eq!(m.waiting_on_vars, 0);
        assert_eq!(m.queued(), 0);
        assert_eq!(m.running(), 0);
        // Run on the worker: 20 `ok`, `fail`, and the skipped ones (a
        // skipped op is resolved where it would have run).
        let cpu = &m.pools[0];
        assert_eq!((cpu.device, cpu.lane, cpu.workers), (Device::Cpu(0), Lane::Normal, 1));
        assert!(cpu.ops_run >= 21, "{cpu:?}");
        assert!(!m.timing);
        assert_eq!(m.queue_wait().count() + m.run_time().count(), 0, "no timing unless asked for");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gauges_see_waiting_queued_and_running_ops() {
    timed(async {
        let engine = engine(true);
        let (release, blocker) = hold_worker(&engine);
        // Wait until the blocker runs.
        let started = std::time::Instant::now();
        while engine.metrics().running() != 1 {
            assert!(started.elapsed() < Duration::from_secs(10), "the blocker never ran");
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        // Five ready ops queue behind it; four wait on a var that one of
        // them writes (one of those is queued behind the write, so it
        // waits on the var too).
        let v = engine.var(0u64);
        let free: Vec<_> = (0..5).map(|_| engine.op("free").run(|(), ()| Ok(()))).collect();
        let writer = engine.op("writer").write(&v).run(|(), (mut v,)| {
            *v += 1;
            Ok(())
        });
        let readers: Vec<_> = (0..4).map(|_| engine.op("reader").read(&v).run(|(v,), ()| Ok(*v))).collect();
        let m = engine.metrics();
        assert_eq!(m.running(), 1, "{m:?}");
        assert_eq!(m.queued(), 6, "five free ops and the writer: {m:?}");
        assert_eq!(m.waiting_on_vars, 4, "{m:?}");
        assert_eq!(m.in_flight, 11, "{m:?}");
        std::thread::sleep(Duration::from_millis(20));
        release.send(()).unwrap();
        blocker.await.unwrap();
        for f in free {
            f.await.unwrap();
        }
        writer.await.unwrap();
        for r in readers {
            assert_eq!(r.await.unwrap(), 1);
        }
        engine.wait_for_all().await.unwrap();
        let m = settled(&engine, |m| m.running() == 0).await;
        assert_eq!((m.in_flight, m.waiting_on_vars, m.queued(), m.running()), (0, 0, 0, 0), "{m:?}");
        // The five free ops and the writer waited at least the 20 ms the
        // blocker held on after they were queued: in buckets from 16 ms up.
        let waits = m.queue_wait();
        assert_eq!(waits.count(), m.pools[0].ops_run, "{m:?}");
        let long = waits.counts()[first_bucket_from(Duration::from_millis(16))..].iter().sum::<u64>();
        assert!(long >= 6, "{waits:?}");
    })
    .await;
}

/// The first bucket whose durations are all at least `d`.
fn first_bucket_from(d: Duration) -> usize {
    (1..depengine::metrics::HISTOGRAM_BUCKETS)
        .find(|&k| Histogram::bucket_upper_bound(k - 1).unwrap() >= d)
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn busy_time_and_run_times_reflect_the_bodies() {
    timed(async {
        let engine = engine(true);
        for _ in 0..3 {
            engine.op("sleep").run(|(), ()| {
                std::thread::sleep(Duration::from_millis(10));
                Ok(())
            });
        }
        for _ in 0..50 {
            engine.op("short").run(|(), ()| Ok(()));
        }
        engine.wait_for_all().await.unwrap();
        let m = settled(&engine, |m| m.pools[0].run_time.count() == 53).await;
        let cpu = &m.pools[0];
        assert_eq!(cpu.ops_run, 53);
        assert!(cpu.busy >= Duration::from_millis(30), "{cpu:?}");
        let runs = &cpu.run_time;
        assert_eq!(runs.count(), 53);
        // Three runs of 10 ms or more: p99 falls among them, p50 does not.
        assert!(runs.p99().unwrap() >= Duration::from_millis(10), "{runs:?}");
        assert!(runs.p50().unwrap() < Duration::from_millis(10), "{runs:?}");
        assert!(runs.sum() >= Duration::from_millis(30), "{runs:?}");
        assert!(runs.mean().unwrap() >= Duration::from_micros(30_000 / 53), "{runs:?}");
        let slow: u64 = runs.counts()[first_bucket_from(Duration::from_millis(8))..].iter().sum();
        assert!(slow >= 3, "{runs:?}");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_pool_is_listed_with_its_own_counts() {
    timed(async {
        let engine = depengine::EngineBuilder::from_env()
            .cpu_workers(2)
            .priority_workers(1)
            .bulk_size(1)
            .build()
            .unwrap();
        for _ in 0..7 {
            engine.op("normal").run(|(), ()| Ok(()));
        }
        for _ in 0..4 {
            engine.op("urgent").lane(Lane::Prioritized).run(|(), ()| Ok(()));
        }
        engine.wait_for_all().await.unwrap();
        let m = engine.metrics();
        let pool = |lane| m.pools.iter().find(|p| p.lane == lane).unwrap();
        assert_eq!((pool(Lane::Normal).ops_run, pool(Lane::Normal).workers), (7, 2));
        assert_eq!((pool(Lane::Prioritized).ops_run, pool(Lane::Prioritized).workers), (4, 1));
        assert!(pool(Lane::Prioritized).name.ends_with("-prio"));
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_push_is_not_counted() {
    timed(async {
        let engine = engine(false);
        let v = engine.var(0u64);
        let err: Error =
            engine.op("twice").write(&v).write(&v).run(|(), (_a, _b)| Ok(())).pushed().unwrap_err();
        assert!(err.is_invalid_argument());
        engine.wait_for_all().await.unwrap();
        let m = engine.metrics();
        assert_eq!((m.pushed, m.completed, m.failed), (0, 0, 0), "{m:?}");
    })
    .await;
}
