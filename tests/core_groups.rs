//! Op groups: a group's wait (async and blocking), its cancel (queued ops
//! resolved unrun, later pushes refused, future ops aborted, sync bodies
//! told), its counts, what dropping it does, its misuses (another engine's
//! group, a cancelled group, a wait inside its own op), groups in scopes
//! and across shutdowns, and a randomized test of cancels racing
//! completions against a model.

mod common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, mpsc};
use std::time::Duration;

use common::{Rng, bounded, mix};
use depengine::engine::GroupCounts;
use depengine::{Engine, ShutdownMode};

fn engine() -> Engine {
    depengine::EngineBuilder::from_env().cpu_workers(2).build().unwrap()
}

fn counts(pending: usize, running: usize, done: u64, failed: u64, cancelled: u64) -> GroupCounts {
    let mut c = GroupCounts::default();
    (c.pending, c.running, c.done, c.failed, c.cancelled) = (pending, running, done, failed, cancelled);
    c
}

#[test]
fn a_group_waits_for_all_its_ops_and_only_its_ops() {
    let engine = engine();
    let gate = engine.var(());
    let (held,) = engine.acquire().write(&gate).push().blocking_wait().unwrap();
    let group = engine.group("request");
    let ran = Arc::new(AtomicUsize::new(0));
    for _ in 0..3 {
        let ran = ran.clone();
        engine
            .op("step")
            .group(&group)
            .read(&gate)
            .run_detached(move |_, ()| {
                ran.fetch_add(1, Ordering::SeqCst);
                Ok(())
            })
            .unwrap();
    }
    // An op outside the group, behind the same gate: not waited for.
    let other = engine.op("other").write(&gate).run(|_, _| Ok(()));
    assert_eq!(group.counts(), counts(3, 0, 0, 0, 0));
    let mut wait = tokio_test::task::spawn(group.wait());
    tokio_test::assert_pending!(wait.poll());
    // Open, the group is waited for until it is closed, as a TaskTracker.
    assert!(group.close());
    tokio_test::assert_pending!(wait.poll());
    drop(held);
    bounded(10, "the group's wait", move || futures::executor::block_on(wait)).unwrap();
    assert_eq!(ran.load(Ordering::SeqCst), 3);
    assert_eq!(group.counts(), counts(0, 0, 3, 0, 0));
    other.blocking_wait().unwrap();
    // A closed group whose ops are done, or an empty one, resolves at once.
    assert!(group.wait().blocking_wait().is_ok());
    let empty = engine.group("empty");
    let mut open = tokio_test::task::spawn(empty.wait());
    tokio_test::assert_pending!(open.poll());
    empty.close();
    assert!(open.is_woken());
    tokio_test::assert_ready_ok!(open.poll());
    // Reopened, it waits for a close again.
    assert!(empty.reopen() && !empty.is_closed());
    let mut again = tokio_test::task::spawn(empty.wait());
    tokio_test::assert_pending!(again.poll());
    // Dropped, it is cancelled, and so done: nothing of it failed.
    drop(empty);
    tokio_test::assert_ready_ok!(again.poll());
}

#[test]
fn a_wait_resolves_with_the_first_error_and_counts_tell_the_rest() {
    let engine = engine();
    let group = engine.group("batch");
    let v = engine.var(0);
    engine.op("ok").group(&group).write(&v).run_detached(|(), _| Ok(())).unwrap();
    engine.op("fails").group(&group).write(&v).run_detached(|(), _| Err("bad input".into())).unwrap();
    // Skipped for the error on `v`: a failure of its own.
    let skipped = engine.op("skipped").group(&group).read(&v).run(|_, ()| Ok(()));
    group.close();
    let err = group.wait().blocking_wait().unwrap_err();
    assert_eq!(err.root().op_name(), Some("fails"), "{err}");
    assert!(skipped.blocking_wait().unwrap_err().is_skipped());
    assert_eq!(group.counts(), counts(0, 0, 1, 2, 0));
    let _ = engine.wait_for_all().blocking_wait();
}

#[test]
fn cancel_resolves_queued_ops_unrun_and_refuses_later_pushes() {
    let engine = engine();
    let v = engine.var(vec![0]);
    let (held,) = engine.acquire().write(&v).push().blocking_wait().unwrap();
    let group = engine.group("request");
    let wrote = Arc::new(AtomicBool::new(false));
    let handles: Vec<_> = (1..=3)
        .map(|i| {
            let wrote = wrote.clone();
            engine.op("append").group(&group).write(&v).run(move |(), (mut v,)| {
                wrote.store(true, Ordering::SeqCst);
                v.push(i);
                Ok(())
            })
        })
        .collect();
    let wrote2 = wrote.clone();
    engine
        .op("detached")
        .group(&group)
        .write(&v)
        .run_detached(move |(), _| {
            wrote2.store(true, Ordering::SeqCst);
            Ok(())
        })
        .unwrap();
    assert!(group.cancel());
    assert!(!group.cancel(), "cancelled once");
    assert!(group.is_cancelled());
    // Resolved at once, though `v` is still held.
    for h in handles {
        let err = h.blocking_wait().unwrap_err();
        assert!(err.is_cancelled() && err.to_string().contains("its group was cancelled"), "{err}");
    }
    let err = group.wait().blocking_wait().unwrap_err();
    assert!(err.is_cancelled(), "{err}");
    assert_eq!(group.counts(), counts(0, 0, 0, 0, 4));
    // Later pushes are refused, with and without a handle.
    assert!(engine.op("late").group(&group).run(|(), ()| Ok(())).pushed().unwrap_err().is_cancelled());
    assert!(engine.op("late").group(&group).run_detached(|(), ()| Ok(())).unwrap_err().is_cancelled());
    assert_eq!(group.counts(), counts(0, 0, 0, 0, 4), "a refused push is not counted");
    drop(held);
    // No cancelled op wrote, and the var carries no error for them.
    assert_eq!(*v.read().blocking_wait().unwrap(), vec![0]);
    assert!(!wrote.load(Ordering::SeqCst));
    engine.wait_for_var(&v).blocking_wait().unwrap();
    engine.wait_for_all().blocking_wait().unwrap();
}

#[test]
fn cancel_lets_running_bodies_see_it_and_aborts_future_ops() {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let engine = rt.block_on(async { engine() });
    let v = engine.var(0u32);
    let group = engine.group("request");
    // A future op that would never finish on its own, holding `v`.
    let (started_tx, started_rx) = mpsc::channel();
    let saw_cancel = Arc::new(AtomicBool::new(false));
    let seen = saw_cancel.clone();
    let stuck = engine.op("stuck").group(&group).write(&v).spawn(move |(), (mut v,)| async move {
        *v = 1;
        seen.store(depengine::engine::is_cancelled(), Ordering::SeqCst);
        started_tx.send(()).unwrap();
        std::future::pending::<()>().await;
        Ok(())
    });
    started_rx.recv_timeout(Duration::from_secs(10)).unwrap();
    assert!(!saw_cancel.load(Ordering::SeqCst));
    assert_eq!(group.counts().running, 1);
    // A sync body of the group that loops until it sees the cancel.
    let (looping_tx, looping_rx) = mpsc::channel();
    let long = engine.op("long").group(&group).run(move |(), ()| {
        looping_tx.send(()).unwrap();
        while !depengine::engine::is_cancelled() {
            std::thread::yield_now();
        }
        Ok("stopped")
    });
    looping_rx.recv_timeout(Duration::from_secs(10)).unwrap();
    group.cancel();
    let err = rt.block_on(stuck).unwrap_err();
    assert!(err.is_cancelled() && err.to_string().contains("its group was cancelled"), "{err}");
    assert_eq!(rt.block_on(long).unwrap(), "stopped");
    rt.block_on(group.wait()).unwrap_err();
    assert_eq!(group.counts(), counts(0, 0, 1, 0, 1));
    // The aborted op's guard was dropped: `v` is free. An abort is not a
    // rollback: as any failure, it is left on the var the op wrote (it may
    // have written half), with what the op wrote before it.
    let err = engine.wait_for_var(&v).blocking_wait().unwrap_err();
    assert!(err.is_cancelled(), "{err}");
    assert_eq!(*v.read().blocking_wait().unwrap(), 1);
    assert!(!depengine::engine::is_cancelled(), "outside a body");
    drop(engine);
    drop(rt);
}

#[test]
fn dropping_a_group_cancels_it_and_detach_does_not() {
    let engine = engine();
    let v = engine.var(0);
    let (held,) = engine.acquire().write(&v).push().blocking_wait().unwrap();
    let dropped = engine.group("dropped");
    let h1 = engine.op("never").group(&dropped).write(&v).run(|(), (mut v,)| {
        *v += 1;
        Ok(())
    });
    let wait = dropped.wait();
    drop(dropped);
    assert!(h1.blocking_wait().unwrap_err().is_cancelled());
    assert!(wait.blocking_wait().unwrap_err().is_cancelled(), "a wait outlives its group");
    let detached = engine.group("detached");
    let h2 = engine.op("runs").group(&detached).write(&v).run(|(), (mut v,)| {
        *v += 10;
        Ok(*v)
    });
    detached.detach();
    drop(held);
    assert_eq!(h2.blocking_wait().unwrap(), 10);
    // A forgotten group leaves nothing behind: its ops run, the engine idles.
    let forgotten = engine.group("forgotten");
    engine.op("forgotten op").group(&forgotten).write(&v).run_detached(|(), _| Ok(())).unwrap();
    std::mem::forget(forgotten);
    engine.wait_for_all().blocking_wait().unwrap();
    assert!(engine.debug_pending().is_empty());
}

#[test]
fn misuse_is_refused_with_a_clear_error() {
    let (a, b) = (engine(), engine());
    let group = a.group("of a");
    let err = b.op("wrong engine").group(&group).run(|(), ()| Ok(())).pushed().unwrap_err();
    assert_eq!(err.kind(), depengine::ErrorKind::InvalidArgument, "{err}");
    assert!(err.to_string().contains("group `of a` of another engine"), "{err}");
    assert_eq!(group.counts(), GroupCounts::default());
    // A wait inside one of the group's own ops: refused, not a hang.
    let inner = Arc::new(a.group("inner"));
    let same = inner.clone();
    let result = a.op("waits for its group").group(&inner).run(move |(), ()| Ok(same.wait().blocking_wait()));
    let err = bounded(10, "a wait inside its group", move || result.blocking_wait().unwrap()).unwrap_err();
    assert!(err.is_would_deadlock(), "{err}");
    // Waiting for another group from inside an op is fine.
    let other = Arc::new(a.group("other"));
    a.op("other's op").group(&other).run_detached(|(), ()| Ok(())).unwrap();
    other.close();
    let o = other.clone();
    let fine = a.op("waits for another").group(&inner).run(move |(), ()| Ok(o.wait().blocking_wait()));
    bounded(10, "a wait for another group", move || fine.blocking_wait().unwrap()).unwrap();
}

#[test]
fn a_future_op_awaiting_its_own_group_is_refused() {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let engine = rt.block_on(async { engine() });
    let group = Arc::new(engine.group("self"));
    let same = group.clone();
    let h =
        engine.op("awaits its group").group(&group).spawn(move |(), ()| async move { Ok(same.wait().await) });
    let err = rt.block_on(async { tokio::time::timeout(Duration::from_secs(10), h).await }).unwrap().unwrap();
    assert!(err.unwrap_err().is_would_deadlock());
    drop(engine);
    drop(rt);
}

#[test]
fn groups_in_a_scope_leave_borrowed_data_as_the_scope_promises() {
    let engine = engine();
    let mut data = vec![0u32; 4];
    let gate = engine.var(());
    depengine::scope(&engine, |s| {
        let d = s.var(&mut data);
        let group = engine.group("in scope");
        let (held,) = engine.acquire().write(&gate).push().blocking_wait().unwrap();
        let first = engine.op("first").group(&group).write(&d).run(|(), (mut d,)| {
            d[0] = 1;
            Ok(())
        });
        first.blocking_wait().unwrap();
        let queued = engine.op("queued").group(&group).read(&gate).write(&d).run(|_, (mut d,)| {
            d[1] = 1;
            Ok(())
        });
        drop(group); // cancels `queued`, which still waits on `gate`
        assert!(queued.blocking_wait().unwrap_err().is_cancelled());
        drop(held);
    })
    .unwrap();
    assert_eq!(data, [1, 0, 0, 0]);
}

#[test]
fn a_cancelling_shutdown_cancels_a_groups_queued_ops_and_a_drain_runs_them() {
    for mode in [ShutdownMode::Cancel, ShutdownMode::Drain] {
        let engine = engine();
        let v = engine.var(0);
        let (tx, rx) = mpsc::channel::<()>();
        let (started_tx, started_rx) = mpsc::channel::<()>();
        let blocker = engine.op("blocker").write(&v).run(move |(), _| {
            started_tx.send(()).unwrap();
            rx.recv_timeout(Duration::from_secs(10)).ok();
            Ok(())
        });
        started_rx.recv_timeout(Duration::from_secs(10)).unwrap();
        let group = engine.group("request");
        let queued: Vec<_> =
            (0..3).map(|_| engine.op("queued").group(&group).write(&v).run(|_, _| Ok(()))).collect();
        group.close();
        let shutdown = engine.shutdown(mode);
        tx.send(()).unwrap();
        let shut = futures::executor::block_on(shutdown);
        blocker.blocking_wait().unwrap();
        let results: Vec<_> = queued.into_iter().map(|h| h.blocking_wait()).collect();
        let waited = group.wait().blocking_wait();
        match mode {
            ShutdownMode::Cancel => {
                assert!(shut.unwrap_err().is_cancelled(), "the shutdown reports the cancellations");
                assert!(results.iter().all(|r| r.as_ref().is_err_and(depengine::Error::is_cancelled)));
                assert!(waited.unwrap_err().is_cancelled());
                assert_eq!(group.counts(), counts(0, 0, 0, 0, 3));
            }
            _ => {
                shut.unwrap();
                assert!(results.iter().all(Result::is_ok));
                waited.unwrap();
                assert_eq!(group.counts(), counts(0, 0, 3, 0, 0));
            }
        }
        // After the shutdown, the group's pushes are refused as any.
        assert!(engine.op("after").group(&group).run(|(), ()| Ok(())).pushed().unwrap_err().is_shutdown());
    }
}

#[test]
fn the_explainer_and_the_profiler_name_the_group() {
    let engine = engine();
    let v = engine.var_named("model", 0);
    let (held,) = engine.acquire().write(&v).push().blocking_wait().unwrap();
    engine.profiler().start();
    let group = engine.group("request 7");
    let h = engine.op("predict").group(&group).read(&v).run(|_, ()| Ok(()));
    let pending = engine.debug_pending();
    let op = pending.waiting().next().unwrap();
    assert_eq!(op.group.as_deref(), Some("request 7"));
    assert!(pending.to_string().contains("`predict` (group `request 7`)"), "{pending}");
    drop(held);
    h.blocking_wait().unwrap();
    let profile = engine.profiler().stop();
    let op = profile.ops().iter().find(|op| op.name == "predict").unwrap();
    assert_eq!(op.group.as_deref(), Some("request 7"));
    assert!(profile.chrome_trace().contains("\"group\":\"request 7\""));
}

/// Random programs: ops appending their number to random vars, some in one
/// of a few groups; a group cancelled at a random point while ops run.
/// Against the model: every op either ran (its handle `Ok`, its number in
/// each var it writes, in push order among the ops that ran) or was
/// cancelled (its handle `Err(cancelled)`, its number nowhere); each
/// group's counts add up to its ops, and its wait ends.
#[test]
fn cancels_racing_completions_match_the_model() {
    let seeds: u64 = std::env::var("DEPENGINE_GROUP_SEEDS").ok().and_then(|s| s.parse().ok()).unwrap_or(40);
    for seed in 0..seeds {
        bounded(60, "a random program with groups", move || random_program(seed));
    }
}

fn random_program(seed: u64) {
    let mut rng = Rng(mix(seed, 0x9e37));
    let engine = depengine::EngineBuilder::from_env().cpu_workers(1 + rng.below(3)).build().unwrap();
    let vars: Vec<_> = (0..3).map(|_| engine.var(Vec::<usize>::new())).collect();
    let groups: Vec<_> = (0..3).map(|g| engine.group(format!("g{g}"))).collect();
    let cancel_at: Vec<usize> = (0..3).map(|_| rng.below(60)).collect();
    let mut ops = Vec::new();
    for i in 0..50 {
        for (g, at) in cancel_at.iter().enumerate() {
            if *at == i && rng.chance(60) {
                groups[g].cancel();
            }
        }
        let writes: Vec<usize> = (0..3).filter(|_| rng.chance(40)).collect();
        let group = rng.chance(75).then(|| rng.below(3));
        let spin = rng.below(3) * 20;
        let b = engine.op("step").group_opt(group.map(|g| &groups[g]));
        let targets: Vec<_> = writes.iter().map(|&k| &vars[k]).collect();
        // A push into a cancelled group is refused, and not counted.
        let refused = group.is_some_and(|g| groups[g].is_cancelled());
        let h = b.write_all(targets).run(move |(), (mut vs,)| {
            for _ in 0..spin {
                std::hint::spin_loop();
            }
            vs.iter_mut().for_each(|v| v.push(i));
            Ok(())
        });
        ops.push((i, writes, group, refused, h));
    }
    let mut expected = vec![Vec::new(); 3];
    let mut per_group = [(0u64, 0u64); 3];
    let mut outcomes: Vec<(Vec<usize>, Option<usize>, bool)> = Vec::new();
    for (i, writes, group, refused, h) in ops {
        let result = h.blocking_wait();
        outcomes.push((writes.clone(), group, result.is_ok()));
        match result {
            Ok(()) => {
                writes.iter().for_each(|&k| expected[k].push(i));
                if let Some(g) = group {
                    per_group[g].0 += 1;
                }
            }
            Err(err) => {
                assert!(err.is_cancelled(), "seed {seed}, op {i}: {err}");
                let g = group.expect("only a group's ops are cancelled");
                assert!(groups[g].is_cancelled(), "seed {seed}");
                if !refused {
                    per_group[g].1 += 1;
                }
            }
        }
    }
    // No op starts once its group's cancel has begun: an op of a group
    // that ran after one of its group it waits for (a var both write) was
    // cancelled would have started after the cancel.
    for (j, (writes_j, group_j, ran_j)) in outcomes.iter().enumerate() {
        for (writes_i, group_i, ran_i) in &outcomes[..j] {
            let waits_for = writes_i.iter().any(|k| writes_j.contains(k));
            assert!(
                !(*ran_j && !*ran_i && group_j.is_some() && group_i == group_j && waits_for),
                "seed {seed}: op {j} ran after an op of its group it waits for was cancelled"
            );
        }
    }
    for (g, group) in groups.iter().enumerate() {
        group.close();
        let waited = group.wait().blocking_wait();
        let c = group.counts();
        assert_eq!((c.pending, c.running, c.failed), (0, 0, 0), "seed {seed}, group {g}");
        assert_eq!((c.done, c.cancelled), per_group[g], "seed {seed}, group {g}");
        assert_eq!(waited.is_err(), c.cancelled > 0, "seed {seed}, group {g}: {waited:?}");
    }
    for (k, v) in vars.iter().enumerate() {
        assert_eq!(*v.read().blocking_wait().unwrap(), expected[k], "seed {seed}, var {k}");
    }
    engine.wait_for_all().blocking_wait().unwrap();
}
