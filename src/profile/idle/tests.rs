use super::*;
use crate::profile::Outcome;

fn op(seq: u64, thread: &str, ready: u64, start: u64, end: u64) -> ProfiledOp {
    ProfiledOp {
        seq,
        name: "op".into(),
        group: None,
        device: Device::Cpu(0),
        lane: Lane::Normal,
        priority: 0,
        thread: Some(thread.into()),
        completed_on: thread.into(),
        pushed_by: "main".into(),
        pushed: 0,
        push_end: Some(1),
        ready: Some(ready),
        start: Some(start),
        end: Some(end),
        done: end,
        reads: Vec::new(),
        writes: Vec::new(),
        released: Vec::new(),
        outcome: Outcome::Ok,
    }
}

#[test]
fn a_ready_op_beside_an_idle_worker_is_a_gap() {
    // w1 runs 0..30 then idles; w0 runs 0..100. B is ready at 50 and
    // waits for w0 until 100: a gap 50..100 (w1 idle).
    let ops = vec![
        op(1, "w0", 0, 0, 100),
        op(2, "w1", 0, 0, 30),
        op(3, "w0", 50, 100, 120),
        // Run by the pushing thread: not a worker, no gap of its own.
        op(4, "main", 130, 200, 210),
    ];
    let gaps = compute(&Profile::new(ops, 0));
    assert_eq!(gaps.len(), 2, "{gaps:?}");
    assert_eq!((gaps[0].start, gaps[0].end), (50, 100));
    // Op 4 waited 130..200 with both workers idle.
    assert_eq!((gaps[1].start, gaps[1].end), (130, 200));
}

#[test]
fn busy_workers_leave_no_gap() {
    let ops = vec![op(1, "w0", 0, 0, 100), op(2, "w1", 0, 0, 100), op(3, "w0", 10, 100, 150)];
    assert!(compute(&Profile::new(ops, 0)).is_empty());
}
