use std::sync::mpsc;
use std::time::Duration;

use super::OpSet;
use crate::Engine;

fn engine() -> Engine {
    Engine::builder().cpu_workers(2).build().unwrap()
}

#[test]
fn results_come_out_in_completion_order_and_then_none() {
    let engine = engine();
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let mut set = OpSet::new();
    // The first op pushed completes last.
    set.insert(engine.op("late").run(move |(), ()| {
        go_rx.recv_timeout(Duration::from_secs(10)).unwrap();
        Ok("late")
    }));
    set.insert(engine.op("early").run(|(), ()| Ok("early")));
    assert_eq!(set.len(), 2);
    assert_eq!(set.blocking_join_next().unwrap().unwrap(), "early");
    go_tx.send(()).unwrap();
    assert_eq!(set.blocking_join_next().unwrap().unwrap(), "late");
    assert!(set.is_empty());
    assert!(set.blocking_join_next().is_none());
}

#[test]
fn freed_indices_are_reused_and_errors_come_out_as_results() {
    let engine = engine();
    let mut set: OpSet<u32> = (0..4).map(|i| engine.op("n").run(move |(), ()| Ok(i))).collect();
    let mut got: Vec<u32> = (0..4).map(|_| set.blocking_join_next().unwrap().unwrap()).collect();
    got.sort_unstable();
    assert_eq!(got, [0, 1, 2, 3]);
    set.extend([engine.op("fails").run(|(), ()| Err::<u32, _>("bad".into()))]);
    assert_eq!(set.handles.len(), 4, "an index freed is reused");
    let err = set.blocking_join_next().unwrap().unwrap_err();
    assert_eq!(err.root().op_name(), Some("fails"));
    assert!(set.blocking_join_next().is_none());
}

#[test]
fn abort_all_cancels_what_has_not_started() {
    let engine = Engine::builder().cpu_workers(1).build().unwrap();
    let v = engine.var(0u32);
    let (held,) = engine.acquire().write(&v).push().blocking_wait().unwrap();
    let mut set = OpSet::new();
    for _ in 0..3 {
        set.insert(engine.op("queued").write(&v).run(|(), (mut v,)| {
            *v += 1;
            Ok(())
        }));
    }
    set.abort_all();
    for _ in 0..3 {
        assert!(set.blocking_join_next().unwrap().unwrap_err().is_cancelled());
    }
    drop(held);
    assert_eq!(*v.read().blocking_wait().unwrap(), 0);
}

#[test]
fn a_join_dropped_unresolved_takes_nothing() {
    let engine = engine();
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let mut set = OpSet::new();
    set.insert(engine.op("waits").run(move |(), ()| {
        go_rx.recv_timeout(Duration::from_secs(10)).unwrap();
        Ok(7)
    }));
    let mut join = tokio_test::task::spawn(set.join_next());
    tokio_test::assert_pending!(join.poll());
    drop(join);
    go_tx.send(()).unwrap();
    assert_eq!(set.blocking_join_next().unwrap().unwrap(), 7);
}

#[test]
fn a_blocking_join_in_a_runtime_is_refused() {
    let engine = engine();
    let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
    let mut set = OpSet::new();
    set.insert(engine.op("x").run(|(), ()| Ok(())));
    let refused = rt.block_on(async { set.blocking_join_next() });
    assert!(refused.unwrap().unwrap_err().is_blocking_in_runtime());
    assert!(set.blocking_join_next().unwrap().is_ok());
}
