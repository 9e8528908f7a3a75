//! Unit tests of a feed: order through spills, ops dropped once, racing takers.

use super::*;

/// Past the ring's length the owner spills, and ops are still taken in
/// the order they were queued, through spilling and back to the ring.
#[test]
fn ops_are_taken_in_queue_order_through_spills() {
    let (mut feed, taker) = Feed::new(Barriers::new());
    let mut queued = 0..;
    let mut taken = Vec::new();
    for (push, take) in [(3 * SLOTS, SLOTS / 2), (SLOTS + 7, 3 * SLOTS), (5, 4 * SLOTS), (2 * SLOTS, 1)] {
        for _ in 0..push {
            feed.push(queued.next().unwrap()).unwrap();
        }
        taken.extend(std::iter::from_fn(|| taker.take()).take(take));
    }
    assert!(feed.spilling, "the last pushes spilled");
    feed.leave(|op| taken.push(op), |_| {});
    let all = queued.next().unwrap();
    assert_eq!(taken, (0..all).collect::<Vec<_>>());
    assert!(taker.take().is_none() && taker.is_empty());
}

/// Ops still queued when the feed goes are dropped once, wherever they
/// wait (ring or spill).
#[test]
fn ops_left_in_a_dropped_feed_are_dropped_once() {
    let op = Arc::new(());
    let (mut feed, taker) = Feed::new(Barriers::new());
    for _ in 0..SLOTS + 10 {
        feed.push(op.clone()).unwrap();
    }
    drop(taker.take());
    drop(feed);
    assert_eq!(Arc::strong_count(&op), SLOTS + 10);
    drop(taker);
    assert_eq!(Arc::strong_count(&op), 1);
}

/// Workers racing to take while the owner queues: each op is taken
/// once, and each worker sees its ops in queue order.
#[test]
fn racing_takers_take_each_op_once_in_order() {
    const OPS: usize = 20_000;
    let (mut feed, ring) = Feed::new(Barriers::new());
    let takers: Vec<_> = (0..3)
        .map(|_| {
            let taker = ring.clone();
            std::thread::spawn(move || {
                let mut got = Vec::new();
                while got.last() != Some(&usize::MAX) {
                    match taker.take() {
                        Some(op) => got.push(op),
                        None => std::hint::spin_loop(),
                    }
                }
                got.pop();
                got
            })
        })
        .collect();
    for op in 0..OPS {
        feed.push(op).unwrap();
    }
    for _ in 0..3 {
        feed.push(usize::MAX).unwrap();
    }
    let mut all = Vec::new();
    for taker in takers {
        let got = taker.join().unwrap();
        assert!(got.windows(2).all(|w| w[0] < w[1]), "a worker saw ops out of order");
        all.extend(got);
    }
    all.sort_unstable();
    assert_eq!(all, (0..OPS).collect::<Vec<_>>());
}
