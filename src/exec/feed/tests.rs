//! Unit tests of a feed: order through spills, ops dropped once, racing takers.

use super::spares::{KEEP_SPARE, UNMAP_PER_SWEEP};
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
    const OPS: usize = if cfg!(miri) { 300 } else { 20_000 };
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

/// Workers taking in batches (and one taking one op at a time) while the
/// owner queues, spilling now and then: each op is taken once, each batch
/// and each worker sees its ops in queue order, and no batch passes its
/// bound.
#[test]
fn batched_takers_take_each_op_once_in_order() {
    use std::sync::atomic::AtomicUsize;
    const OPS: usize = if cfg!(miri) { 300 } else { 50_000 };
    let (mut feed, ring) = Feed::new(Barriers::new());
    // A full ring and a spill before the takers start: batches to take.
    let early = 3 * SLOTS;
    for op in 0..early {
        feed.push(op).unwrap();
    }
    let taken = Arc::new(AtomicUsize::new(0));
    let takers: Vec<_> = (0..3)
        .map(|k| {
            let (taker, taken) = (ring.clone(), taken.clone());
            std::thread::spawn(move || {
                let (mut got, mut batches) = (Vec::new(), 0);
                while taken.load(Ordering::Relaxed) < OPS {
                    let mut batch = Vec::new();
                    let first = if k == 0 { taker.take() } else { taker.take_some(8, |op| batch.push(op)) };
                    let Some(first) = first else {
                        std::hint::spin_loop();
                        continue;
                    };
                    assert!(batch.len() <= 8, "a batch past its bound");
                    batches += usize::from(!batch.is_empty());
                    batch.insert(0, first);
                    taken.fetch_add(batch.len(), Ordering::Relaxed);
                    got.extend(batch);
                }
                (got, batches)
            })
        })
        .collect();
    for op in early..OPS {
        feed.push(op).unwrap();
    }
    let mut all = Vec::new();
    let mut batches = 0;
    for taker in takers {
        let (got, n) = taker.join().unwrap();
        assert!(got.windows(2).all(|w| w[0] < w[1]), "a worker saw ops out of order");
        all.extend(got);
        batches += n;
    }
    all.sort_unstable();
    assert_eq!(all, (0..OPS).collect::<Vec<_>>());
    // Not asserted (it depends on the schedule), but worth seeing when it
    // fails: how often a take claimed more than one op.
    eprintln!("{batches} takes claimed more than one op");
}

/// A batched take claims its bound of ops when at least as many more stay
/// queued behind them, in queue order; with fewer queued it takes one.
#[test]
fn a_batched_take_leaves_as_many_for_the_others() {
    let (mut feed, ring) = Feed::new(Barriers::new());
    for op in 0..14u32 {
        feed.push(op).unwrap();
    }
    let mut rest = Vec::new();
    // 14 queued: 5 claimed (4 along), at least 4 left behind them.
    assert_eq!(ring.take_some(4, |op| rest.push(op)), Some(0));
    assert_eq!(rest, [1, 2, 3, 4]);
    // 9 queued: as many again.
    assert_eq!(ring.take_some(4, |op| rest.push(op)), Some(5));
    assert_eq!(rest, [1, 2, 3, 4, 6, 7, 8, 9]);
    rest.clear();
    // 4 queued: one at a time, to the end.
    let ones: Vec<u32> = std::iter::from_fn(|| ring.take_some(4, |op| rest.push(op))).collect();
    assert_eq!((ones, rest), (vec![10, 11, 12, 13], vec![]));
}

/// A freed ring goes to the spares; a new feed takes it and goes on from
/// its position, in order; spares past those kept go back to the system
/// a sweep's worth at a time.
#[test]
fn a_spare_ring_is_reused_from_where_it_was_left() {
    let spares: Arc<Spares<u32>> = Arc::default();
    let (mut feed, ring) = Feed::with_spares(Barriers::new(), Some(&spares));
    for i in 0..(SLOTS as u32 + 5) {
        feed.push(i).unwrap();
    }
    let taken: Vec<u32> = std::iter::from_fn(|| ring.take()).collect();
    assert_eq!(taken, (0..SLOTS as u32 + 5).collect::<Vec<_>>());
    drop((feed, ring));
    assert_eq!(spares.len(), 1);
    let (mut feed, ring) = Feed::with_spares(Barriers::new(), Some(&spares));
    assert_eq!(spares.len(), 0, "the new feed took the spare ring");
    // (The five spilled ops took no ring position.)
    assert_eq!(ring.head(), SLOTS, "it goes on from where it was left");
    for i in 0..3 * SLOTS as u32 {
        feed.push(i).unwrap();
        assert_eq!(ring.take(), Some(i));
    }
    drop((feed, ring));
    let rings: Vec<_> = (0..KEEP_SPARE + UNMAP_PER_SWEEP + 10)
        .map(|_| Feed::<u32>::with_spares(Barriers::new(), Some(&spares)))
        .collect();
    drop(rings);
    assert_eq!(spares.len(), KEEP_SPARE + UNMAP_PER_SWEEP + 10);
    assert!(spares.has_excess());
    spares.trim();
    assert_eq!(spares.len(), KEEP_SPARE + 10);
    spares.trim();
    assert_eq!(spares.len(), KEEP_SPARE);
    assert!(!spares.has_excess());
}
