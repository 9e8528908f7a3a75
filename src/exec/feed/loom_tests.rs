//! Loom models of a feed: its ring and spill under racing takers, and the
//! retirement handshake.

use super::*;
use loom::thread;

/// Two workers each take once while the owner queues two ops into a
/// two-slot ring, then the owner takes what is left: each op is taken
/// exactly once, and loom checks that no slot is read while it is
/// written, nor written while it is read.
#[test]
fn two_takers_and_the_owner() {
    loom::model(|| {
        let (mut feed, ring) = Feed::new(Barriers::new());
        let takers: Vec<_> = (0..2)
            .map(|_| {
                let taker = ring.clone();
                thread::spawn(move || taker.take())
            })
            .collect();
        feed.push(1u32).unwrap();
        feed.push(2u32).unwrap();
        let mut got: Vec<_> = takers.into_iter().filter_map(|t| t.join().unwrap()).collect();
        got.extend(std::iter::from_fn(|| ring.take()));
        got.sort_unstable();
        assert_eq!(got, [1, 2]);
        assert!(!feed.spilling);
        // Both slots were freed: the ring takes the next two.
        feed.push(3).unwrap();
        feed.push(4).unwrap();
        assert!(!feed.spilling);
        assert_eq!((ring.take(), ring.take(), ring.take()), (Some(3), Some(4), None));
    });
}

/// One worker taking twice while the owner queues two ops, then the
/// owner taking the rest: the ops come out in queue order.
#[test]
fn one_taker_sees_queue_order() {
    loom::model(|| {
        let (mut feed, ring) = Feed::new(Barriers::new());
        let taker = ring.clone();
        let worker = thread::spawn(move || [taker.take(), taker.take()]);
        feed.push(1u32).unwrap();
        feed.push(2u32).unwrap();
        let got: Vec<u32> = worker.join().unwrap().into_iter().flatten().collect();
        let rest: Vec<u32> = std::iter::from_fn(|| ring.take()).collect();
        assert_eq!([got, rest].concat(), [1, 2]);
    });
}

/// Three ops into a two-slot ring (the third spills) while a worker
/// takes: every op is taken once, and in queue order, through the
/// spill and its lock.
#[test]
fn spilled_ops_come_after_the_ring() {
    loom::model(|| {
        let (mut feed, ring) = Feed::new(Barriers::new());
        let taker = ring.clone();
        let worker = thread::spawn(move || [taker.take(), taker.take()]);
        for op in 1..=3u32 {
            feed.push(op).unwrap();
        }
        let got: Vec<u32> = worker.join().unwrap().into_iter().flatten().collect();
        let rest: Vec<u32> = std::iter::from_fn(|| ring.take()).collect();
        assert_eq!([got, rest].concat(), [1, 2, 3]);
    });
}

/// A worker retires the feed while its owner queues an op: never both
/// (an op queued on a ring that left the list would be stranded). If
/// the push went ahead, the op is on the ring; if the owner saw the
/// retirement, it got its op back.
#[test]
fn a_push_and_a_retirement_never_both_go_ahead() {
    loom::model(|| {
        let (mut feed, ring) = Feed::new(Barriers::new());
        let worker = {
            let ring = ring.clone();
            thread::spawn(move || FeedShared::retire(&[ring], Barriers::new())[0])
        };
        let pushed = feed.push(1u32).is_ok();
        let retired = worker.join().unwrap();
        assert!(!(pushed && retired), "an op was queued on a retired feed");
        assert_eq!(ring.take(), pushed.then_some(1));
        if retired {
            // The owner never reaches a retired ring again.
            assert_eq!(feed.push(2), Err(2));
        }
    });
}

/// Two workers take in batches while the owner queues two ops, then
/// whatever is left is taken one at a time: each op is taken exactly
/// once, a batch holds its ops in queue order, and no slot is read while
/// it is written.
#[test]
fn batched_takers_take_each_op_once_in_order() {
    loom::model(|| {
        let (mut feed, ring) = Feed::new(Barriers::new());
        let takers: Vec<_> = (0..2)
            .map(|_| {
                let taker = ring.clone();
                thread::spawn(move || {
                    let mut got = Vec::new();
                    if let Some(first) = taker.take_some(1, |op| got.push(op)) {
                        got.insert(0, first);
                    }
                    got
                })
            })
            .collect();
        feed.push(1u32).unwrap();
        feed.push(2u32).unwrap();
        let mut all = Vec::new();
        for taker in takers {
            let got = taker.join().unwrap();
            assert!(got.windows(2).all(|w| w[0] < w[1]), "a batch out of order: {got:?}");
            all.extend(got);
        }
        all.extend(std::iter::from_fn(|| ring.take()));
        all.sort_unstable();
        assert_eq!(all, [1, 2]);
        // Both slots were freed: the ring takes the next two, and one
        // batch takes them both.
        feed.push(3).unwrap();
        feed.push(4).unwrap();
        let mut rest = Vec::new();
        let first = ring.take_some(1, |op| rest.push(op));
        assert_eq!((first, rest), (Some(3), vec![4]));
    });
}
