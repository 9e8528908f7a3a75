use super::*;

#[test]
fn wait_covers_earlier_epochs_and_not_later_ops() {
    let t: Tracker = Tracker::new();
    let a = t.enter(|_| ()).unwrap().0;
    let first = t.rotate(false);
    let b = t.enter(|_| ()).unwrap().0;
    let second = t.rotate(false);
    let c = t.enter(|_| ()).unwrap().0;
    assert!(!first.is_set() && !second.is_set());
    drop(b);
    assert!(!second.is_set(), "second waits for the first epoch too");
    drop(a);
    assert!(first.is_set() && second.is_set(), "c, pushed later, is not waited for");
    let third = t.rotate(false);
    assert!(!third.is_set(), "c is still running");
    drop(c);
    assert!(third.is_set());
    assert!(t.rotate(true).is_set());
    assert!(t.enter(|_| ()).err().unwrap().is_shutdown());
}

/// An epoch holds as many references as the ops in it, whatever the
/// batches the tracker counted them in: it finishes with the last op,
/// not before.
#[test]
fn epoch_finishes_with_its_last_op_across_batches() {
    let t: Tracker = Tracker::new();
    for n in [1, BATCH - 1, BATCH, BATCH + 1, 3 * BATCH + 5] {
        let mut ops: Vec<_> = (0..n).map(|_| t.enter(|_| ()).unwrap().0).collect();
        let done = t.rotate(false);
        while let Some(op) = ops.pop() {
            assert!(!done.is_set(), "{n} ops: finished with {} still running", ops.len() + 1);
            drop(op);
        }
        assert!(done.is_set(), "{n} ops: not finished after the last one");
    }
}

#[test]
fn empty_epoch_finishes_at_once() {
    let t: Tracker = Tracker::new();
    assert!(t.rotate(false).is_set());
    let op = t.enter(|_| ()).unwrap().0;
    drop(op);
    assert!(t.rotate(false).is_set());
}

#[test]
fn one_op_holding_back_many_epochs_finishes_them_without_recursion() {
    let t: Tracker = Tracker::new();
    let op = t.enter(|_| ()).unwrap().0;
    let epochs = if cfg!(miri) { 2_000 } else { 200_000 };
    let latches: Vec<_> = (0..epochs).map(|_| t.rotate(false)).collect();
    assert!(latches.iter().all(|l| !l.is_set()));
    drop(op);
    assert!(latches.iter().all(|l| l.is_set()));
}

/// A tracker dropped with references counted ahead and an op still
/// running: the epoch finishes when that op completes.
#[test]
fn dropped_tracker_leaves_running_ops_their_epoch() {
    let t: Tracker = Tracker::new();
    let op = t.enter(|_| ()).unwrap().0;
    let done = op.done().clone();
    drop(t);
    assert!(!done.is_set());
    drop(op);
    assert!(done.is_set());
}
