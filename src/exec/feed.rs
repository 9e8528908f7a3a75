//! A thread's own FIFO of ready ops for one pool: written by that thread
//! only, taken from by the pool's workers.
//!
//! Built for the pushing thread's cost. Queuing an op writes one slot and
//! publishes it with a plain store: no read-modify-write, and no read of a
//! line the workers write on every take (a take claims the op with a CAS on
//! `head`, which sits on a line of its own and which the owner never reads).
//! The slot being written was last written by the worker that emptied it,
//! a ring's length ago; it is fetched ahead.
//!
//! The ring is bounded: when it is full the owner spills into an unbounded
//! queue under a spin lock (paid only while the ring is full; its release
//! is a plain store) and keeps spilling
//! until that is empty again. Each spilled op carries the ring position at
//! which the ops queued before it end, and a worker takes it only once every
//! one of those has been claimed: a worker that found the ring empty, then
//! was overtaken by the end of that spill, the ring filling up again and a
//! new spill, would otherwise take an op of the new spill ahead of ring ops
//! queued before it. So the ops are taken in the order they were queued.
//! The workers look at the spill only while it holds ops.
//!
//! Each slot carries a sequence number (Dmitry Vyukov's bounded queue, with
//! one producer): slot `i % N` holds op `i` once its sequence is `i + 1`,
//! and is free for op `i + N` once the worker that took op `i` sets it to
//! `i + N`.

#![allow(unsafe_code)]

use std::collections::VecDeque;
use std::mem::MaybeUninit;
use std::sync::Arc;

use crate::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use crate::sync::cell::UnsafeCell;
use crate::sync::small::Padded;
use crate::sync::spin::SpinLock;

/// Slots in a ring.
#[cfg(not(depengine_loom))]
const SLOTS: usize = 1024;
#[cfg(depengine_loom)]
const SLOTS: usize = 2;

/// How far ahead of the slot it writes the owner fetches slots.
const AHEAD: usize = 8;

/// One slot per cache line: a worker freeing a slot and the owner filling
/// the next do not write the same line.
#[repr(align(64))]
struct Slot<T> {
    seq: AtomicUsize,
    task: UnsafeCell<MaybeUninit<T>>,
}

/// The part of a feed the workers reach.
pub(crate) struct FeedShared<T> {
    /// The next op to take; claimed by a CAS.
    head: Padded<AtomicUsize>,
    slots: Box<[Slot<T>]>,
    /// Whether `spill` holds ops (changed under its lock), readable
    /// without it.
    spilled: Padded<AtomicBool>,
    /// Ops queued while the ring was full, in queue order, each with the
    /// ring position at which the ops queued before it end.
    spill: SpinLock<VecDeque<(usize, T)>>,
}

// SAFETY: a slot's task is written only by the owner, while the slot's
// sequence says it is free (no worker reads it), and read only by the one
// worker whose CAS on `head` claimed it, while the sequence says it is full
// (the owner does not write it until that worker frees it). The tasks are
// `Send`.
unsafe impl<T: Send> Sync for FeedShared<T> {}

/// The owner's end of a feed.
pub(crate) struct Feed<T> {
    shared: Arc<FeedShared<T>>,
    /// The next ring position to write (only the owner knows it).
    tail: usize,
    /// Whether the last op went to the spill.
    spilling: bool,
}

impl<T> Feed<T> {
    pub(crate) fn new() -> Self {
        let slots = (0..SLOTS)
            .map(|i| Slot { seq: AtomicUsize::new(i), task: UnsafeCell::new(MaybeUninit::uninit()) })
            .collect();
        let shared = Arc::new(FeedShared {
            head: Padded(AtomicUsize::new(0)),
            slots,
            spilled: Padded(AtomicBool::new(false)),
            spill: SpinLock::new(VecDeque::new()),
        });
        Self { shared, tail: 0, spilling: false }
    }

    /// The workers' end.
    pub(crate) fn shared(&self) -> &Arc<FeedShared<T>> {
        &self.shared
    }

    /// Queues an op.
    pub(crate) fn push(&mut self, task: T) {
        if self.spilling {
            let mut spill = self.shared.spill.lock();
            if !spill.is_empty() {
                spill.push_back((self.tail, task));
                return;
            }
            // Every spilled op was taken, so was every op of the ring
            // queued before them: the ring may take ops again.
            self.spilling = false;
        }
        let tail = self.tail;
        let slot = &self.shared.slots[tail % SLOTS];
        // Acquire: the worker that took the slot's last op is done with it.
        if slot.seq.load(Ordering::Acquire) != tail {
            // Full.
            self.spilling = true;
            let mut spill = self.shared.spill.lock();
            spill.push_back((tail, task));
            // Release: a worker that sees the flag sees the op (it takes
            // the lock besides).
            self.shared.spilled.store(true, Ordering::Release);
            return;
        }
        // SAFETY: the slot is free (its sequence is `tail`): no worker reads
        // it until the store below, and only this thread writes slots.
        slot.task.with_mut(|cell| unsafe { (*cell).write(task) });
        // Release: the worker that sees the sequence sees the op.
        slot.seq.store(tail + 1, Ordering::Release);
        self.tail = tail + 1;
        let ahead = &self.shared.slots[(tail + AHEAD) % SLOTS];
        crate::sync::prefetch::for_write(std::ptr::from_ref(ahead).cast(), size_of::<Slot<T>>());
    }

    /// Takes back the oldest op (the owner is leaving).
    pub(crate) fn pop(&mut self) -> Option<T> {
        // The spill is flagged whenever it holds ops: `take` looks at it.
        self.shared.take()
    }
}

impl<T> FeedShared<T> {
    /// Takes the oldest op, if any.
    pub(crate) fn take(&self) -> Option<T> {
        loop {
            if let Some(task) = self.take_from_ring() {
                return Some(task);
            }
            if !self.spilled.load(Ordering::Acquire) {
                return None;
            }
            let mut spill = self.spill.lock();
            let &(before, _) = spill.front()?;
            if self.head.load(Ordering::Relaxed) < before {
                // Ring ops queued before this one are still unclaimed
                // (queued after this thread found the ring empty): they go
                // first.
                continue;
            }
            let (_, task) = spill.pop_front()?;
            if spill.is_empty() {
                self.spilled.store(false, Ordering::Relaxed);
            }
            return Some(task);
        }
    }

    fn take_from_ring(&self) -> Option<T> {
        let mut head = self.head.load(Ordering::Relaxed);
        loop {
            let slot = &self.slots[head % SLOTS];
            // Acquire: pairs with the owner's release of the op.
            let seq = slot.seq.load(Ordering::Acquire);
            if seq == head + 1 {
                match self.head.compare_exchange_weak(head, head + 1, Ordering::Relaxed, Ordering::Relaxed) {
                    Ok(_) => {
                        // SAFETY: the CAS claimed op `head`, whose slot is
                        // full (its sequence is `head + 1`): no other worker
                        // reads it, and the owner does not write it until
                        // the store below frees it.
                        let task = slot.task.with_mut(|cell| unsafe { (*cell).assume_init_read() });
                        // Release: the owner's next write of the slot comes
                        // after this read.
                        slot.seq.store(head + SLOTS, Ordering::Release);
                        return Some(task);
                    }
                    Err(now) => head = now,
                }
            } else if seq <= head {
                // Not queued yet: empty (or another worker's stale head).
                let now = self.head.load(Ordering::Relaxed);
                if now == head {
                    return None;
                }
                head = now;
            } else {
                // Taken already: `head` is stale.
                head = self.head.load(Ordering::Relaxed);
            }
        }
    }

    /// Whether no op is queued, as far as this thread sees (no fence: a
    /// hint for a watching worker, which then takes with [`Self::take`]).
    pub(crate) fn is_empty(&self) -> bool {
        let head = self.head.load(Ordering::Relaxed);
        self.slots[head % SLOTS].seq.load(Ordering::Acquire) != head + 1
            && !self.spilled.load(Ordering::Acquire)
    }
}

impl<T> Drop for FeedShared<T> {
    fn drop(&mut self) {
        // Nobody else holds the feed: drop the ops it still holds.
        while self.take_from_ring().is_some() {}
    }
}

#[cfg(all(test, not(depengine_loom)))]
mod tests {
    use super::*;

    /// Past the ring's length the owner spills, and ops are still taken in
    /// the order they were queued, through spilling and back to the ring.
    #[test]
    fn ops_are_taken_in_queue_order_through_spills() {
        let mut feed = Feed::new();
        let taker = feed.shared().clone();
        let mut queued = 0..;
        let mut taken = Vec::new();
        for (push, take) in [(3 * SLOTS, SLOTS / 2), (SLOTS + 7, 3 * SLOTS), (5, 4 * SLOTS), (2 * SLOTS, 1)] {
            for _ in 0..push {
                feed.push(queued.next().unwrap());
            }
            taken.extend(std::iter::from_fn(|| taker.take()).take(take));
        }
        assert!(feed.spilling, "the last pushes spilled");
        while let Some(op) = feed.pop() {
            taken.push(op);
        }
        let all = queued.next().unwrap();
        assert_eq!(taken, (0..all).collect::<Vec<_>>());
        assert!(taker.take().is_none() && taker.is_empty());
    }

    /// Ops still queued when the feed goes are dropped once, wherever they
    /// wait (ring or spill).
    #[test]
    fn ops_left_in_a_dropped_feed_are_dropped_once() {
        let op = Arc::new(());
        let mut feed = Feed::new();
        for _ in 0..SLOTS + 10 {
            feed.push(op.clone());
        }
        let taker = feed.shared().clone();
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
        let mut feed = Feed::new();
        let takers: Vec<_> = (0..3)
            .map(|_| {
                let taker = feed.shared().clone();
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
            feed.push(op);
        }
        for _ in 0..3 {
            feed.push(usize::MAX);
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
}

#[cfg(all(test, depengine_loom))]
mod loom_tests {
    use super::*;
    use loom::thread;

    /// Two workers each take once while the owner queues two ops into a
    /// two-slot ring, then the owner takes what is left: each op is taken
    /// exactly once, and loom checks that no slot is read while it is
    /// written, nor written while it is read.
    #[test]
    fn two_takers_and_the_owner() {
        loom::model(|| {
            let mut feed = Feed::new();
            let takers: Vec<_> = (0..2)
                .map(|_| {
                    let taker = feed.shared().clone();
                    thread::spawn(move || taker.take())
                })
                .collect();
            feed.push(1u32);
            feed.push(2u32);
            let mut got: Vec<_> = takers.into_iter().filter_map(|t| t.join().unwrap()).collect();
            got.extend(std::iter::from_fn(|| feed.pop()));
            got.sort_unstable();
            assert_eq!(got, [1, 2]);
            assert!(!feed.spilling);
            // Both slots were freed: the ring takes the next two.
            feed.push(3);
            feed.push(4);
            assert!(!feed.spilling);
            assert_eq!((feed.pop(), feed.pop(), feed.pop()), (Some(3), Some(4), None));
        });
    }

    /// One worker taking twice while the owner queues two ops, then the
    /// owner taking the rest: the ops come out in queue order.
    #[test]
    fn one_taker_sees_queue_order() {
        loom::model(|| {
            let mut feed = Feed::new();
            let taker = feed.shared().clone();
            let worker = thread::spawn(move || [taker.take(), taker.take()]);
            feed.push(1u32);
            feed.push(2u32);
            let got: Vec<u32> = worker.join().unwrap().into_iter().flatten().collect();
            let rest: Vec<u32> = std::iter::from_fn(|| feed.pop()).collect();
            assert_eq!([got, rest].concat(), [1, 2]);
        });
    }

    /// Three ops into a two-slot ring (the third spills) while a worker
    /// takes: every op is taken once, and in queue order, through the
    /// spill and its lock.
    #[test]
    fn spilled_ops_come_after_the_ring() {
        loom::model(|| {
            let mut feed = Feed::new();
            let taker = feed.shared().clone();
            let worker = thread::spawn(move || [taker.take(), taker.take()]);
            for op in 1..=3u32 {
                feed.push(op);
            }
            let got: Vec<u32> = worker.join().unwrap().into_iter().flatten().collect();
            let rest: Vec<u32> = std::iter::from_fn(|| feed.pop()).collect();
            assert_eq!([got, rest].concat(), [1, 2, 3]);
        });
    }
}
