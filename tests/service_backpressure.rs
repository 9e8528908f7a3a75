//! Backpressure: a bound on user ops in flight. At the bound a push is
//! refused with `Error::is_full` and nothing is pushed; `Engine::reserve`
//! waits for room, cancel safe; every way an op leaves (completion,
//! refusal, abort, cancellation) gives its slot back; memory stays bounded
//! under a flood.

use std::time::Duration;

use depengine::{Engine, ShutdownMode};
use tokio_test::{assert_pending, assert_ready, task};

fn engine(limit: usize) -> Engine {
    depengine::EngineBuilder::from_env().max_in_flight(limit).cpu_workers(2).build().unwrap()
}

/// Resident memory of this process, in bytes (Linux).
fn resident() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * 4096)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_the_bound_pushes_are_refused_and_slots_come_back() {
    let engine = engine(4);
    assert_eq!(engine.settings().max_in_flight, Some(4));
    let gate = engine.var(());
    let held = gate.write().await.unwrap();
    // Four ops wait behind the held guard: the bound is reached.
    let waiting: Vec<_> = (0..4).map(|_| engine.op("wait").read(&gate).run(|(_g,), ()| Ok(()))).collect();
    assert_eq!(engine.metrics().slots_used, 4);
    let err = engine.op("more").run(|(), ()| Ok(())).pushed().unwrap_err();
    assert!(err.is_full() && err.to_string().contains("limit of 4"), "{err}");
    assert!(engine.op("more").run(|(), ()| Ok(())).await.unwrap_err().is_full());
    assert!(engine.op("more").run_detached(|(), ()| Ok(())).unwrap_err().is_full());
    let before = engine.metrics();
    assert!(engine.op("more").run(|(), ()| Ok(())).pushed().is_err());
    let after = engine.metrics();
    assert_eq!(after.slots_used, before.slots_used, "a refused push takes no slot");
    // With bulk execution on, the segment that holds the waiting ops may be
    // pushed meanwhile (by an idle worker, or by this push, which flushes
    // the open segment before it is refused): an op of the engine's own,
    // counted as pushed.
    if engine.settings().bulk_size == 1 {
        assert_eq!(after.pushed, before.pushed, "a refused push pushes nothing");
    }
    // Waits and acquires are not counted.
    drop(engine.wait_for_var(&gate));
    drop(held);
    for w in waiting {
        w.await.unwrap();
    }
    engine.wait_for_all().await.unwrap();
    assert_eq!(engine.metrics().slots_used, 0);
    assert!(engine.op("again").run(|(), ()| Ok(())).await.is_ok());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reserve_waits_for_room_and_gives_it_back_when_dropped() {
    let engine = engine(2);
    let gate = engine.var(());
    let held = gate.write().await.unwrap();
    let a = engine.op("a").read(&gate).run(|(_g,), ()| Ok(1));
    let b = engine.op("b").read(&gate).run(|(_g,), ()| Ok(2));
    let mut waiting = task::spawn(engine.reserve());
    assert_pending!(waiting.poll());
    // A dropped wait gives its place up.
    let mut dropped = task::spawn(engine.reserve());
    assert_pending!(dropped.poll());
    drop(dropped);
    drop(held);
    assert_eq!(a.await.unwrap() + b.await.unwrap(), 3);
    tokio::time::timeout(Duration::from_secs(30), async {
        while !waiting.is_woken() {
            tokio::task::yield_now().await;
        }
    })
    .await
    .expect("the reservation was never woken");
    let mut room = assert_ready!(waiting.poll());
    assert_eq!(engine.metrics().slots_used, 1, "the reservation holds one slot");
    // Its op cannot be refused as full, even with the other slot taken.
    let other = engine.op("other").read(&gate).run(|(_g,), ()| Ok(()));
    let mine = room.op("mine").run(|(), ()| Ok(7));
    assert_eq!(mine.await.unwrap(), 7);
    other.await.unwrap();
    // A reservation dropped unused gives its slot back.
    drop(engine.reserve().await);
    engine.wait_for_all().await.unwrap();
    assert_eq!(engine.metrics().slots_used, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_way_an_op_leaves_gives_its_slot_back() {
    let engine = engine(8);
    let v = engine.var(0u32);
    // Refused after taking its slot: a deleted var.
    let doomed = engine.var(0u32);
    engine.delete_var(&doomed).await.unwrap();
    assert!(engine.op("late").write(&doomed).run(|(), (_d,)| Ok(())).pushed().unwrap_err().is_var_deleted());
    // Refused before it was built, with a reserved slot: no runtime for a
    // future op (an engine built outside one, with no runtime given).
    let no_runtime =
        std::thread::spawn(|| depengine::EngineBuilder::from_env().max_in_flight(1).build().unwrap())
            .join()
            .unwrap();
    let mut reserved = no_runtime.reserve().await;
    let refused = reserved.op("future").spawn(|(), ()| async { Ok(()) }).pushed();
    assert!(refused.unwrap_err().is_no_runtime());
    // A reserved builder dropped unpushed gives its slot back too.
    drop(no_runtime.reserve().await.op("unused"));
    // Aborted, dropped with cancel_on_drop, failed, skipped.
    let held = v.write().await.unwrap();
    let aborted = engine.op("aborted").write(&v).run(|(), (_v,)| Ok(()));
    aborted.abort();
    drop(engine.op("dropped").write(&v).cancel_on_drop(true).run(|(), (_v,)| Ok(())));
    let failed =
        engine.op("failed").write(&v).run(|(), (_v,)| -> depengine::Result<(), _> { Err("no".into()) });
    let skipped = engine.op("skipped").write(&v).run(|(), (_v,)| Ok(()));
    drop(held);
    assert!(failed.await.is_err());
    assert!(skipped.await.unwrap_err().is_skipped());
    let _ = engine.wait_for_all().await;
    assert_eq!(engine.metrics().slots_used, 0);
    assert_eq!(no_runtime.metrics().slots_used, 0);
    // A cancelling shutdown resolves queued ops: their slots come back too.
    assert!(engine.wait_for_var(&v).await.is_err(), "the failure is taken");
    let held = v.write().await.unwrap();
    let queued: Vec<_> = (0..8).map(|_| engine.op("queued").write(&v).run(|(), (_v,)| Ok(()))).collect();
    assert_eq!(engine.metrics().slots_used, 8);
    let shutdown = engine.shutdown(ShutdownMode::Cancel);
    drop(held);
    let _ = shutdown.await;
    for q in queued {
        assert!(q.await.unwrap_err().is_cancelled());
    }
    assert_eq!(engine.metrics().slots_used, 0);
}

#[test]
fn memory_stays_bounded_under_a_flood_past_the_bound() {
    let engine = engine(1000);
    let gate = engine.var(());
    let held = futures::executor::block_on(gate.write()).unwrap();
    for _ in 0..1000 {
        engine.op("queued").read(&gate).run_detached(|(_g,), ()| Ok(())).unwrap();
    }
    let Some(before) = resident() else { return };
    let mut refused = 0;
    for _ in 0..300_000 {
        match engine.op("flood").read(&gate).run_detached(|(_g,), ()| Ok(())) {
            Err(e) if e.is_full() => refused += 1,
            other => panic!("{other:?}"),
        }
    }
    let growth = resident().unwrap().saturating_sub(before);
    assert_eq!(refused, 300_000);
    // 300,000 queued ops would take tens of MiB; refused ones take nothing.
    assert!(growth < 8 << 20, "resident memory grew by {growth} bytes under the flood");
    drop(held);
    engine.wait_for_all().blocking_wait().unwrap();
    assert_eq!(engine.metrics().slots_used, 0);
}

/// An op's slot is back before its handle says it completed: a caller
/// that waited for its one op never finds the engine full, whether it
/// blocks, awaits, or sees the handle finished.
#[test]
fn a_completed_op_has_given_its_slot_back() {
    let engine = engine(1);
    let v = engine.var(0u64);
    let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
    for i in 0..3_000 {
        let op = engine.op("one").write(&v).run(|(), (mut v,)| {
            *v += 1;
            Ok(())
        });
        match i % 3 {
            0 => op.blocking_wait().unwrap(),
            1 => runtime.block_on(op).unwrap(),
            _ => {
                while !op.is_finished() {
                    std::hint::spin_loop();
                }
            }
        }
        assert_eq!(engine.metrics().slots_used, 0, "push {i}: the slot was not back");
    }
}

/// A reservation owns its hold on the engine: it moves into a spawned task,
/// and the op built there uses its room.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reservation_moves_into_a_task() {
    let engine = depengine::EngineBuilder::from_env().max_in_flight(1).build().unwrap();
    let v = engine.var(0u32);
    let mut room = engine.reserve().await;
    assert_eq!(engine.metrics().slots_used, 1);
    let task = tokio::spawn({
        let v = v.clone();
        async move {
            room.op("in a task")
                .write(&v)
                .run(|(), (mut v,)| {
                    *v += 1;
                    Ok(())
                })
                .await
        }
    });
    task.await.unwrap().unwrap();
    assert_eq!(*v.read().await.unwrap(), 1);
    assert_eq!(engine.metrics().slots_used, 0);
}
