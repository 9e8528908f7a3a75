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
//!
//! **Retirement.** The ring belongs to the pool's feed list and to the
//! workers' copies of it, not to its owner, which reaches it through a raw
//! pointer: so a feed whose thread stopped pushing can leave the list
//! (`feed_list.rs` retires it) and its memory goes with the last copy, while
//! its thread lives on. The owner and a retiring worker meet in a
//! handshake on the owner's [`Flags`]: the owner marks itself as pushing,
//! issues the light half of an asymmetric barrier pair, and looks at
//! `retired`; the worker sets `retired`, issues the heavy half, and then
//! looks at `pushing` and at the ring. So either the owner sees `retired`
//! and never touches the ring again (it starts a new feed), or the worker
//! sees the push (the owner marked, or its op in the ring) and does not
//! retire the feed. `README.md` beside this file has the argument.
//!
//! Why `unsafe`: the ring's slots are written by their owner and read by the
//! workers without a lock, and an idle feed's memory is mapped by hand.
//! Measured: PERFORMANCE.md, *A queue of its own for each pushing thread*
//! (`w1_novars` 178–199 → 95–97 ns/op); modelled: `feed/loom_tests.rs`.

#![allow(unsafe_code)]

use std::collections::VecDeque;
use std::mem::{ManuallyDrop, MaybeUninit};
use std::ptr::NonNull;
use std::sync::Arc;

use crate::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use crate::sync::barrier::Barriers;
use crate::sync::cell::UnsafeCell;
use crate::sync::spin::SpinLock;
use crossbeam_utils::CachePadded;

mod slots;
mod spares;
use slots::{Slots, new_slots};
pub(crate) use spares::Spares;

/// Slots in a ring (fewer where a checker walks every step: loom's models,
/// and Miri, whose tests fill and spill the ring in a few steps).
#[cfg(not(any(depengine_loom, miri)))]
const SLOTS: usize = 1024;
#[cfg(all(miri, not(depengine_loom)))]
const SLOTS: usize = 16;
#[cfg(depengine_loom)]
const SLOTS: usize = 2;

/// Whether a take that may bring `more` ops along and sees `seen` queued
/// claims a batch, `more + 1` ops: only while at least as many stay queued
/// for the other workers; near the end of a run of ops, ops are taken one
/// at a time, so that no worker idles while another holds ops it claimed.
/// Under loom, whose rings hold two ops, whenever it sees two: so that the
/// models claim more than one at once.
#[cfg(not(depengine_loom))]
fn claims_batch(seen: usize, more: usize) -> bool {
    seen > 2 * more
}
#[cfg(depengine_loom)]
fn claims_batch(seen: usize, more: usize) -> bool {
    more > 0 && seen > more
}

/// How far ahead of the slot it writes the owner fetches slots.
const AHEAD: usize = 8;

/// One slot per cache line: a worker freeing a slot and the owner filling
/// the next do not write the same line.
#[repr(align(64))]
struct Slot<T> {
    /// The slot's sequence minus its index in the ring (see
    /// [`FeedShared::seq`]): zero, all bits clear, is its first state.
    seq: AtomicUsize,
    task: UnsafeCell<MaybeUninit<T>>,
}

/// What the owner and a retiring worker share (see the module docs):
/// written by the owner on every push, so on a line of its own.
#[repr(align(64))]
pub(crate) struct Flags {
    /// The owner is inside a push (or taking back its ops).
    pushing: AtomicBool,
    /// A worker retired the feed, or is retiring it.
    retired: AtomicBool,
}

/// The part of a feed the workers reach: its ring, owned by the pool's
/// feed list and the workers' copies of it.
pub(crate) struct FeedShared<T> {
    flags: Arc<Flags>,
    /// The head at the last sweep (see `feed_list.rs`): unchanged over a sweep,
    /// with the ring empty, the feed is idle.
    pub(crate) swept_head: AtomicUsize,
    /// The next op to take; claimed by a CAS.
    head: CachePadded<AtomicUsize>,
    /// Given back to `spares` when the ring is freed (see [`Spares`]).
    slots: ManuallyDrop<Slots<T>>,
    /// Where the slots go when the ring is freed, if anywhere.
    spares: Option<Arc<Spares<T>>>,
    /// Whether `spill` holds ops (changed under its lock), readable
    /// without it.
    spilled: CachePadded<AtomicBool>,
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
    /// The ring, alive until the feed is retired (see the module docs).
    shared: NonNull<FeedShared<T>>,
    flags: Arc<Flags>,
    barriers: Barriers,
    /// The next ring position to write (only the owner knows it).
    tail: usize,
    /// Whether the last op went to the spill.
    spilling: bool,
    /// Offers since the workers' progress was last looked at (see
    /// [`offer`](Self::offer)).
    offers: u32,
    /// Whether the workers were far behind at the last look.
    crowded: bool,
}

/// How often an [`offer`](Feed::offer) looks at how far behind the workers
/// are: a read of the line they write on every take, once per this many.
const LOOK_EVERY: u32 = 32;

// SAFETY: the owner's end is used by one thread at a time (`&mut self`);
// it reaches the ring as the workers do, which is `Sync`, and owns no op.
unsafe impl<T: Send> Send for Feed<T> {}

impl<T> Feed<T> {
    /// A new feed, and its ring: the caller keeps the ring (a clone of the
    /// `Arc`) until the feed is retired, for the owner reaches it through
    /// a raw pointer meanwhile (see the module docs).
    #[cfg(test)]
    pub(crate) fn new(barriers: Barriers) -> (Self, Arc<FeedShared<T>>) {
        Self::with_spares(barriers, None)
    }

    /// [`new`](Self::new), its ring one of `spares` if it holds one; the
    /// ring goes back there when it is freed.
    pub(crate) fn with_spares(
        barriers: Barriers,
        spares: Option<&Arc<Spares<T>>>,
    ) -> (Self, Arc<FeedShared<T>>) {
        // A spare ring goes on from the position it was left at: its
        // slots' sequences are those of an empty ring there.
        let (slots, at) = spares.and_then(|s| s.take()).unwrap_or_else(|| (new_slots(), 0));
        let flags = Arc::new(Flags { pushing: AtomicBool::new(false), retired: AtomicBool::new(false) });
        let shared = Arc::new(FeedShared {
            flags: flags.clone(),
            swept_head: AtomicUsize::new(usize::MAX),
            head: CachePadded::new(AtomicUsize::new(at)),
            slots: ManuallyDrop::new(slots),
            spares: spares.cloned(),
            spilled: CachePadded::new(AtomicBool::new(false)),
            spill: SpinLock::new(VecDeque::new()),
        });
        // From the `Arc`'s own pointer: it may be turned back into one.
        let ring = NonNull::new(Arc::as_ptr(&shared).cast_mut()).expect("an Arc's pointer is not null");
        let feed =
            Self { shared: ring, flags, barriers, tail: at, spilling: false, offers: 0, crowded: false };
        (feed, shared)
    }

    /// Runs `f` on the ring with `arg` unless the feed is retired (then
    /// hands `arg` back): the owner's half of the handshake.
    #[inline(always)]
    fn with_ring<A, R>(&mut self, arg: A, f: impl FnOnce(&mut Self, &FeedShared<T>, A) -> R) -> Result<R, A> {
        self.flags.pushing.store(true, Ordering::Relaxed);
        self.barriers.light();
        if self.flags.retired.load(Ordering::Relaxed) {
            self.flags.pushing.store(false, Ordering::Relaxed);
            return Err(arg);
        }
        // SAFETY: the feed is not retired and this thread is marked as
        // pushing, so no worker retires it before the store below: the
        // ring is still in the pool's feed list, which keeps it alive.
        let ring = unsafe { self.shared.as_ref() };
        let out = f(self, ring, arg);
        // Release: a retiring worker that sees the mark cleared sees the
        // ops queued meanwhile.
        self.flags.pushing.store(false, Ordering::Release);
        Ok(out)
    }

    /// Queues an op; hands it back if the feed was retired.
    #[inline]
    pub(crate) fn push(&mut self, task: T) -> Result<(), T> {
        self.with_ring(task, |feed, ring, task| feed.push_on(ring, task))
    }

    /// Queues an op unless the workers are far behind: `crowded_at` ops of
    /// this feed queued and not yet taken, until fewer than half as many
    /// are (looked at once every [`LOOK_EVERY`] offers, and at every offer
    /// while crowded). Then hands it back
    /// (`Ok(Some(task))`), for the caller to run itself. `Err(task)` if the
    /// feed was retired.
    #[inline]
    pub(crate) fn offer(&mut self, task: T, crowded_at: usize) -> Result<Option<T>, T> {
        self.with_ring(task, |feed, ring, task| {
            feed.offers = feed.offers.wrapping_add(1);
            // While crowded, every offer looks: the ops this thread then
            // runs itself are expensive anyway, and a thread that comes
            // back after a pause must not find the workers behind from
            // what it saw long ago.
            if feed.crowded || feed.offers % LOOK_EVERY == 0 {
                feed.look_behind(ring, crowded_at);
            }
            if feed.crowded {
                return Some(task);
            }
            feed.push_on(ring, task);
            None
        })
    }

    /// Notes whether the workers are far behind this feed.
    #[cold]
    fn look_behind(&mut self, ring: &FeedShared<T>, crowded_at: usize) {
        let behind = self.tail.wrapping_sub(ring.head());
        self.crowded = self.spilling
            || if self.crowded { behind >= crowded_at.div_ceil(2) } else { behind >= crowded_at };
    }

    /// Queues `task` on the ring (or its spill). Inlined into both ways in:
    /// it is the push's own store.
    #[inline(always)]
    fn push_on(&mut self, ring: &FeedShared<T>, task: T) {
        if self.spilling {
            let mut spill = ring.spill.lock();
            if !spill.is_empty() {
                spill.push_back((self.tail, task));
                return;
            }
            // Every spilled op was taken, so was every op of the ring
            // queued before them: the ring may take ops again.
            self.spilling = false;
        }
        let tail = self.tail;
        let slot = &ring.slots[tail % SLOTS];
        // Acquire: the worker that took the slot's last op is done with it.
        if ring.seq(tail, Ordering::Acquire) != tail {
            // Full.
            self.spilling = true;
            let mut spill = ring.spill.lock();
            spill.push_back((tail, task));
            // Release: a worker that sees the flag sees the op (it takes
            // the lock besides).
            ring.spilled.store(true, Ordering::Release);
            return;
        }
        // SAFETY: the slot is free (its sequence is `tail`): no worker reads
        // it until the store below, and only this thread writes slots.
        slot.task.with_mut(|cell| unsafe { (*cell).write(task) });
        // Release: the worker that sees the sequence sees the op.
        ring.set_seq(tail, tail + 1, Ordering::Release);
        self.tail = tail + 1;
        let ahead = &ring.slots[(tail + AHEAD) % SLOTS];
        crate::sync::prefetch::for_write(std::ptr::from_ref(ahead).cast(), size_of::<Slot<T>>());
    }

    /// Takes back every op still queued (the owner is leaving) and runs
    /// `leave` on the ring before the feed can be retired; nothing if it
    /// was retired (it held no op then).
    pub(crate) fn leave(&mut self, mut each: impl FnMut(T), leave: impl FnOnce(&Arc<FeedShared<T>>)) {
        let raw = self.shared.as_ptr().cast_const();
        let kept = self.with_ring((), |_, ring, ()| {
            // The spill is flagged whenever it holds ops: `take` looks at it.
            while let Some(task) = ring.take() {
                each(task);
            }
            // SAFETY: the ring is alive (see `with_ring`), and `raw` is the
            // pointer of the `Arc` it was made in (`new`): a new reference
            // to it, from its own count.
            let ring = unsafe {
                Arc::increment_strong_count(raw);
                Arc::from_raw(raw)
            };
            leave(&ring);
            // Dropped by the caller, once `ring` (a reference this closure
            // was given) is no longer in use: this may be the last count
            // (`leave` took the ring out of the pool's list, and a worker
            // may have dropped its own), and a ring must not be freed while
            // a reference to it is still an argument in use (Miri found it).
            ring
        });
        drop(kept);
    }
}

impl<T> FeedShared<T> {
    /// The sequence of the slot of ring position `pos`: slot `k` holds op
    /// `i` (`i % SLOTS == k`) once it is `i + 1`, and is free for op `i`
    /// while it is `i`. Kept minus `k`, so that every slot starts free for
    /// its first op in memory that is all zero.
    #[inline(always)]
    fn seq(&self, pos: usize, order: Ordering) -> usize {
        self.slots[pos % SLOTS].seq.load(order).wrapping_add(pos % SLOTS)
    }

    /// Sets the sequence of the slot of ring position `pos` (see [`seq`](Self::seq)).
    #[inline(always)]
    fn set_seq(&self, pos: usize, seq: usize, order: Ordering) {
        self.slots[pos % SLOTS].seq.store(seq.wrapping_sub(pos % SLOTS), order);
    }

    /// The next ring position to take.
    pub(crate) fn head(&self) -> usize {
        self.head.load(Ordering::Relaxed)
    }

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

    /// Takes the oldest op, and with it, by the same claim, `more` further
    /// ops of the ring (passed to `rest`, in queue order) if it sees at
    /// least as many more still queued behind them (`claims_batch`): the
    /// other workers keep work. One CAS on `head` for the lot, where
    /// [`take`](Self::take) pays one per op.
    pub(crate) fn take_some(&self, more: usize, mut rest: impl FnMut(T)) -> Option<T> {
        let mut head = self.head.load(Ordering::Relaxed);
        loop {
            // The ops queued from `head` on, as far as `2 * more + 1`.
            let seen =
                (0..=2 * more).take_while(|&k| self.seq(head + k, Ordering::Acquire) == head + k + 1).count();
            if !claims_batch(seen, more) {
                // Few queued (or none, or a stale head): as `take` does.
                return self.take();
            }
            let n = more + 1;
            match self.head.compare_exchange_weak(head, head + n, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => {
                    let mut first = None;
                    for pos in head..head + n {
                        // SAFETY: the CAS claimed ops `head .. head + n`,
                        // whose slots were seen full (their sequences were
                        // `pos + 1`, read with Acquire, and only the claim of
                        // `pos` frees a slot): no other worker reads them,
                        // and the owner does not write one until the store
                        // below frees it.
                        let task = self.slots[pos % SLOTS]
                            .task
                            .with_mut(|cell| unsafe { (*cell).assume_init_read() });
                        // Release: the owner's next write of the slot comes
                        // after this read.
                        self.set_seq(pos, pos + SLOTS, Ordering::Release);
                        match first {
                            None => first = Some(task),
                            Some(_) => rest(task),
                        }
                    }
                    return first;
                }
                Err(now) => head = now,
            }
        }
    }

    fn take_from_ring(&self) -> Option<T> {
        let mut head = self.head.load(Ordering::Relaxed);
        loop {
            let slot = &self.slots[head % SLOTS];
            // Acquire: pairs with the owner's release of the op.
            let seq = self.seq(head, Ordering::Acquire);
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
                        self.set_seq(head, head + SLOTS, Ordering::Release);
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

    /// A worker's half of the retirement handshake (see the module docs),
    /// for feeds that look idle: marks them retired, issues the heavy
    /// barrier once for all, and keeps retired those whose owner is not
    /// pushing and whose ring is empty; the others are let go. Returns
    /// which stay retired.
    pub(crate) fn retire(feeds: &[Arc<Self>], barriers: Barriers) -> Vec<bool> {
        for feed in feeds {
            feed.flags.retired.store(true, Ordering::Relaxed);
        }
        barriers.heavy();
        feeds
            .iter()
            .map(|feed| {
                // Acquire: pairs with the end of the owner's push.
                let idle = !feed.flags.pushing.load(Ordering::Acquire) && feed.is_empty();
                if !idle {
                    feed.flags.retired.store(false, Ordering::Relaxed);
                }
                idle
            })
            .collect()
    }

    /// The ops queued, as far as this thread sees (for metrics): the full
    /// ring slots from the head on, and the spill.
    pub(crate) fn queued(&self) -> usize {
        let head = self.head.load(Ordering::Relaxed);
        let in_ring = (head..head + SLOTS).take_while(|&p| self.seq(p, Ordering::Acquire) == p + 1).count();
        let spilled = if self.spilled.load(Ordering::Acquire) { self.spill.lock().len() } else { 0 };
        in_ring + spilled
    }

    /// Whether no op is queued, as far as this thread sees (no fence: a
    /// hint for a watching worker, which then takes with [`Self::take`]).
    pub(crate) fn is_empty(&self) -> bool {
        let head = self.head.load(Ordering::Relaxed);
        self.seq(head, Ordering::Acquire) != head + 1 && !self.spilled.load(Ordering::Acquire)
    }
}

impl<T> Drop for FeedShared<T> {
    fn drop(&mut self) {
        // Nobody else holds the feed: drop the ops it still holds.
        while self.take_from_ring().is_some() {}
        // SAFETY: `slots` is taken once, here, and not used after.
        let slots = unsafe { ManuallyDrop::take(&mut self.slots) };
        if let Some(spares) = &self.spares {
            spares.put(slots, self.head.load(Ordering::Relaxed));
        }
    }
}

#[cfg(all(test, not(depengine_loom)))]
mod tests;

#[cfg(all(test, not(depengine_loom), not(miri)))]
mod against_st3;

#[cfg(all(test, depengine_loom))]
mod loom_tests;
