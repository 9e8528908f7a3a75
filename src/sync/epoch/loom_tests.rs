use super::*;
use loom::thread;

/// Ops of two epochs complete on two threads while the main thread
/// rotates again: each latch is set once its epoch and every earlier
/// one have finished, and no node is used after it is freed (loom
/// reports accesses to a freed node's atomics and mutex, and accesses
/// that the count's orderings leave unsynchronized).
#[test]
fn epochs_finish_in_order_under_concurrent_completion() {
    loom::model(|| {
        let t: Arc<Tracker> = Arc::new(Tracker::new());
        let a = t.enter(|_| ()).unwrap().0;
        let first = t.rotate(false);
        let b = t.enter(|_| ()).unwrap().0;
        let a_done = thread::spawn(move || drop(a));
        let b_done = thread::spawn(move || drop(b));
        let second = t.rotate(false);
        a_done.join().unwrap();
        assert!(first.is_set());
        b_done.join().unwrap();
        assert!(second.is_set());
        assert!(t.rotate(true).is_set());
    });
}
