//! Bulk execution: consecutive sync ops fused into segments keep every
//! guarantee of ops pushed one by one (order, errors, versions, handles,
//! shutdown), and no op waits in an open segment while the engine is idle.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use depengine::{BoxError, Engine, ShutdownMode};

fn engine(bulk: usize) -> Engine {
    depengine::EngineBuilder::from_env().cpu_workers(1).bulk_size(bulk).build().unwrap()
}

/// Occupies the engine's one worker until the returned sender is used (or
/// dropped); returns once the worker is inside the blocking op.
fn hold_worker(engine: &Engine) -> mpsc::Sender<()> {
    let (release, released) = mpsc::channel::<()>();
    let (inside_tx, inside) = mpsc::channel();
    engine
        .op("hold")
        .run_detached(move |(), ()| {
            inside_tx.send(()).unwrap();
            let _ = released.recv_timeout(Duration::from_secs(10));
            Ok(())
        })
        .unwrap();
    engine.flush();
    inside.recv_timeout(Duration::from_secs(10)).expect("the worker never started the holding op");
    release
}

/// Releases the held worker from another thread a little later (while
/// this one blocks in a shutdown).
fn release_later(release: mpsc::Sender<()>) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(20));
        release.send(()).unwrap();
    })
}

/// A body that counts its runs in `ran`.
fn bump(ran: &Arc<AtomicUsize>) -> impl FnOnce((), ()) -> Result<(), BoxError> + Send + 'static {
    let ran = ran.clone();
    move |(), ()| {
        ran.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
}

fn eventually(what: &str, done: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !done() {
        assert!(Instant::now() < deadline, "{what}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn bulk_size_is_configured() {
    assert_eq!(engine(8).settings().bulk_size, 8);
    assert_eq!(engine(1).settings().bulk_size, 1);
    let naive = depengine::EngineBuilder::from_env()
        .kind(depengine::engine::EngineKind::Naive)
        .bulk_size(8)
        .build()
        .unwrap();
    assert_eq!(naive.settings().bulk_size, 1, "the naive engine runs every op at its push");
    assert!(depengine::EngineBuilder::from_env().bulk_size(0).build().unwrap_err().is_invalid_argument());
}

/// While the workers are busy, consecutive ops join segments: each full
/// segment is one more engine op. They run in push order.
#[test]
fn ops_fuse_while_the_workers_are_busy() {
    let engine = engine(8);
    let v = engine.var(Vec::new());
    let release = hold_worker(&engine);
    let before = engine.metrics().pushed;
    for i in 0..32u32 {
        engine
            .op("push")
            .write(&v)
            .run_detached(move |(), (mut v,)| {
                v.push(i);
                Ok(())
            })
            .unwrap();
    }
    assert_eq!(engine.metrics().pushed - before, 32 + 4, "32 ops in four full segments");
    release.send(()).unwrap();
    engine.wait_for_all().blocking_wait().unwrap();
    let values = engine.op("get").read(&v).run(|(v,), ()| Ok(v.clone())).blocking_wait().unwrap();
    assert_eq!(values, (0..32).collect::<Vec<_>>());
    assert_eq!(v.version(), 32, "every fused write counts");
}

/// Without any wait, ops in an open segment run once the workers have
/// nothing else to do, whether they were busy or idle at the push.
#[test]
fn an_open_segment_runs_once_the_workers_are_idle() {
    let engine = engine(16);
    let ran = Arc::new(AtomicUsize::new(0));
    let release = hold_worker(&engine);
    for _ in 0..3 {
        engine.op("bump").run_detached(bump(&ran)).unwrap();
    }
    release.send(()).unwrap();
    eventually("the open segment never ran after the worker went idle", || ran.load(Ordering::SeqCst) == 3);
    // The worker is idle (and parks): a lone op is not held back either.
    std::thread::sleep(Duration::from_millis(20));
    engine.op("bump").run_detached(bump(&ran)).unwrap();
    eventually("a lone op waited in a segment on an idle engine", || ran.load(Ordering::SeqCst) == 4);
}

/// Polling the handle of an op in the open segment is a wait: it pushes
/// the segment.
#[test]
fn polling_a_handle_pushes_the_open_segment() {
    let engine = engine(16);
    let release = hold_worker(&engine);
    let mut h = engine.op("member").run(|(), ()| Ok(7));
    let before = engine.metrics().pushed;
    assert!(futures::FutureExt::now_or_never(&mut h).is_none());
    assert_eq!(engine.metrics().pushed, before + 1, "the poll pushed the segment");
    release.send(()).unwrap();
    assert_eq!(h.blocking_wait().unwrap(), 7);
}

/// Inside one segment, the var gate's error rules hold between members: a
/// failure is carried by the vars its op writes, a member using such a var
/// is skipped (unless no-skip), others run; every write counts.
#[test]
fn errors_inside_a_segment_follow_the_gate() {
    let engine = engine(16);
    let (x, y, z) = (engine.var(0u32), engine.var(0u32), engine.var(0u32));
    let release = hold_worker(&engine);
    let before = engine.metrics().pushed;
    let a = engine.op("a").write(&x).run(|(), _| Err::<(), _>("a failed".into()));
    let b = engine.op("b").read(&x).write(&y).run(|(x,), (mut y,)| {
        *y = *x + 1;
        Ok(())
    });
    let c = engine.op("c").write(&z).run(|(), (mut z,)| {
        *z = 5;
        Ok(())
    });
    let d = engine.op("d").no_skip(true).read(&x).run(|(x,), ()| Ok(*x));
    assert_eq!(engine.metrics().pushed, before + 4, "the four ops are still in one open segment");
    release.send(()).unwrap();
    assert!(a.blocking_wait().unwrap_err().is_failed());
    let b = b.blocking_wait().unwrap_err();
    assert!(b.is_skipped() && b.root().op_name() == Some("a"), "{b}");
    c.blocking_wait().unwrap();
    assert_eq!(d.blocking_wait().unwrap(), 0);
    let x_err = engine.blocking_wait_for_var(&x).unwrap_err();
    assert_eq!(x_err.root().op_name(), Some("a"));
    let y_err = engine.blocking_wait_for_var(&y).unwrap_err();
    assert_eq!(y_err.root().op_name(), Some("a"));
    engine.blocking_wait_for_var(&z).unwrap();
    assert_eq!((x.version(), y.version(), z.version()), (1, 1, 1));
    let z_now = engine.op("get").read(&z).run(|(z,), ()| Ok(*z)).blocking_wait().unwrap();
    assert_eq!(z_now, 5);
}

/// A member whose guard outlives its body holds the rest of its segment
/// back until the guard is dropped: the next member sees what was written
/// through it.
#[test]
fn a_guard_that_outlives_its_body_holds_the_segment_back() {
    let engine = engine(16);
    let v = engine.var(0u32);
    let release = hold_worker(&engine);
    let lend = engine.op("lend").write(&v).run(|(), (g,)| {
        std::thread::spawn(move || {
            let mut g = g;
            std::thread::sleep(Duration::from_millis(50));
            *g = 10;
        });
        Ok(())
    });
    let next = engine.op("next").write(&v).run(|(), (mut v,)| {
        *v += 1;
        Ok(*v)
    });
    release.send(()).unwrap();
    lend.blocking_wait().unwrap();
    assert_eq!(next.blocking_wait().unwrap(), 11);
    assert_eq!(v.version(), 2);
}

/// An open segment is pushed before the engine stops taking work: a
/// draining shutdown runs it, a cancelling one cancels its ops.
#[test]
fn shutdown_drains_or_cancels_an_open_segment() {
    let engine = engine(16);
    let ran = Arc::new(AtomicUsize::new(0));
    let release = hold_worker(&engine);
    for _ in 0..5 {
        engine.op("bump").run_detached(bump(&ran)).unwrap();
    }
    let releaser = release_later(release);
    engine.blocking_shutdown(ShutdownMode::Drain).unwrap();
    releaser.join().unwrap();
    assert_eq!(ran.load(Ordering::SeqCst), 5);

    let engine = self::engine(16);
    let release = hold_worker(&engine);
    let handles: Vec<_> = (0..3).map(|i| engine.op("late").run(move |(), ()| Ok(i))).collect();
    let releaser = release_later(release);
    // It reports the first failure: a cancelled op.
    let first = engine.blocking_shutdown(ShutdownMode::Cancel).unwrap_err();
    assert!(first.is_cancelled(), "{first}");
    releaser.join().unwrap();
    for h in handles {
        assert!(h.blocking_wait().unwrap_err().is_cancelled());
    }
}

/// A push that would join a segment after the var's deletion is refused
/// at push time, as without bulk execution.
#[test]
fn a_deleted_var_refuses_ops_that_would_join_a_segment() {
    let engine = engine(16);
    let v = engine.var(1u32);
    let release = hold_worker(&engine);
    let before = engine.op("before").write(&v).run(|(), (mut v,)| {
        *v += 1;
        Ok(())
    });
    let deleted = engine.delete_var(&v);
    let err = engine.op("after").write(&v).run(|(), _| Ok(())).pushed().unwrap_err();
    assert!(err.is_var_deleted(), "{err}");
    release.send(()).unwrap();
    before.blocking_wait().unwrap();
    assert_eq!(deleted.blocking_wait().unwrap(), 2);
}

/// Placement is checked at push with bulk execution on too: an op for a
/// device the engine lacks is refused, whether the workers are busy or not.
#[test]
fn a_bad_placement_is_refused_at_push() {
    let engine = engine(16);
    let refused = |engine: &Engine| {
        let err = engine.op("c").device(depengine::Device::Cpu(3)).run(|(), ()| Ok(())).pushed().unwrap_err();
        assert!(err.is_invalid_argument() && err.to_string().contains("cpu(3)"), "{err}");
    };
    refused(&engine);
    let release = hold_worker(&engine);
    let member = engine.op("member").run(|(), ()| Ok(1));
    refused(&engine);
    release.send(()).unwrap();
    assert_eq!(member.blocking_wait().unwrap(), 1);
}

/// A segment that a waiting thread pushes and then runs itself (its feed
/// crowded) runs bodies that push: the push lock is released before
/// anything a push made ready runs, so their pushes never wait for it.
#[test]
fn a_segment_run_where_it_is_pushed_may_push_from_its_bodies() {
    for round in 0..4 {
        let engine = Engine::builder().bulk_size(16).cpu_workers(2).pusher_runs_at(1).build().unwrap();
        let sum = common::bounded(60, "segments whose bodies push", {
            let engine = engine.clone();
            move || {
                let parents: Vec<_> = (0..2_000u64)
                    .map(|i| {
                        let inner = engine.clone();
                        engine.op("parent").run(move |(), ()| {
                            let children = inner.group("children");
                            for _ in 0..4 {
                                inner.op("child").group(&children).run_detached(|(), ()| Ok(()))?;
                            }
                            children.close();
                            children.wait().blocking_wait()?;
                            Ok(i)
                        })
                    })
                    .collect();
                parents.into_iter().map(|h| h.blocking_wait().unwrap()).sum::<u64>()
            }
        });
        assert_eq!(sum, (0..2_000).sum::<u64>(), "round {round}");
        engine.wait_for_all().blocking_wait().unwrap();
    }
}
