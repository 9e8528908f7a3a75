//! The feeds of a pool (`feed.rs`: one FIFO per thread that queues ops on
//! it from outside), a worker's view of them, and the turns a worker takes
//! between them and the pool's injector.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use super::feed::{Feed, FeedShared, Spares};
use super::pool::{PoolShared, lock};
use crate::op::TaskRef;
use crate::sync::barrier::Barriers;

/// How many ops a worker takes in a row from one queue (a feed, the
/// injector) while others hold ops too, before it looks at the next.
pub(super) const SOURCE_STREAK: u32 = 64;

/// How often an idle worker looks for idle feeds to retire: a feed whose
/// thread queued nothing between two looks (and that is empty) leaves the
/// list, so it is retired after 50 to 100 ms without a push.
pub(super) const SWEEP_EVERY: Duration = Duration::from_millis(50);

/// The feeds of a pool: the taking ends of the FIFOs of the threads that
/// queue ops on it from outside.
///
/// A feed whose thread has stopped queuing ops is retired: it leaves the
/// list, so that workers no longer look at it, and its ring is freed once
/// no worker's copy of the list holds it (a worker about to sleep for good
/// drops its copy). Its thread, should it queue an op again, starts a new
/// feed. The handshake that makes this safe is `feed.rs`'s.
pub(super) struct Feeds {
    list: Mutex<Vec<Arc<FeedShared<TaskRef>>>>,
    /// Rings of freed feeds, for new ones (see `feed.rs`).
    spares: Arc<Spares<TaskRef>>,
    /// Bumped under `list`'s lock whenever it changes, so that workers
    /// refresh their copies ([`FeedView`]) without taking the lock.
    version: AtomicUsize,
    /// When the last sweep for idle feeds was (see [`Feeds::sweep`]).
    swept: Mutex<Instant>,
}

impl Default for Feeds {
    fn default() -> Self {
        Self {
            list: Mutex::default(),
            spares: Arc::default(),
            version: AtomicUsize::new(0),
            swept: Mutex::new(Instant::now()),
        }
    }
}

/// A worker's copy of its pool's feed list, and where its next look starts.
#[derive(Default)]
pub(super) struct FeedView {
    version: usize,
    pub(super) feeds: Vec<Arc<FeedShared<TaskRef>>>,
    pub(super) turns: SourceTurn,
}

/// Which queue a worker looks at first: sources take turns, at most
/// [`SOURCE_STREAK`] ops in a row from one while another holds ops.
#[derive(Default)]
pub(super) struct SourceTurn {
    /// The source the last op came from…
    turn: usize,
    /// …and how many ops in a row came from it.
    streak: u32,
}

impl FeedView {
    /// Drops the copy; the next look refreshes it.
    pub(super) fn forget(&mut self) {
        self.feeds = Vec::new();
        self.version = usize::MAX;
    }
}

impl SourceTurn {
    /// Takes an op from one of `sources` sources (`take(k, room)`: an op
    /// from source `k` and how many more it took with it, at most `room`;
    /// or none). The look starts at the source the last op came from
    /// (looking at an empty queue is not free), or at the next one after
    /// [`SOURCE_STREAK`] ops in a row from it; the ops taken along count
    /// in the streak, which they never take past its bound.
    #[inline(always)]
    pub(super) fn look<T>(
        &mut self,
        sources: usize,
        mut take: impl FnMut(usize, u32) -> Option<(T, u32)>,
    ) -> Option<T> {
        // (`turn` is past the end if sources left since the last look.)
        let turn = if self.turn >= sources { 0 } else { self.turn };
        let stay = self.streak < SOURCE_STREAK;
        let start = if stay { turn } else { (turn + 1) % sources };
        for k in 0..sources {
            let source = if start + k >= sources { start + k - sources } else { start + k };
            // A streak goes on only where the look started: back at `turn`
            // after the others were found empty, it starts over.
            let streak = if source == turn && stay { self.streak + 1 } else { 1 };
            if let Some((op, more)) = take(source, SOURCE_STREAK - streak) {
                debug_assert!(streak + more <= SOURCE_STREAK, "a take past the streak's room");
                self.streak = streak + more;
                self.turn = source;
                return Some(op);
            }
        }
        None
    }
}

impl Feeds {
    /// Adds a feed.
    fn add(&self, feed: Arc<FeedShared<TaskRef>>) {
        let mut list = lock(&self.list);
        list.push(feed);
        // Release: a worker that sees the new version sees the list's new
        // entry (it reads the list under the lock anyway), and the ops
        // queued on the feed after this.
        self.version.fetch_add(1, Ordering::Release);
    }

    /// Removes a feed (its thread is leaving, its ops were requeued).
    fn remove(&self, gone: &Arc<FeedShared<TaskRef>>) {
        let mut list = lock(&self.list);
        list.retain(|feed| !Arc::ptr_eq(feed, gone));
        self.version.fetch_add(1, Ordering::Release);
    }

    /// Retires the feeds that stayed empty, with nothing queued on them,
    /// since the last sweep (at most one sweep per [`SWEEP_EVERY`], by one
    /// worker at a time): they leave the list. Called by idle workers.
    pub(super) fn sweep(&self, barriers: Barriers) {
        let Ok(mut swept) = self.swept.try_lock() else {
            return;
        };
        if swept.elapsed() < SWEEP_EVERY {
            return;
        }
        *swept = Instant::now();
        self.spares.trim();
        let mut list = lock(&self.list);
        let idle: Vec<Arc<FeedShared<TaskRef>>> = list
            .iter()
            .filter(|feed| {
                let head = feed.head();
                feed.swept_head.swap(head, Ordering::Relaxed) == head && feed.is_empty()
            })
            .cloned()
            .collect();
        if idle.is_empty() {
            return;
        }
        let retired = FeedShared::retire(&idle, barriers);
        let gone: std::collections::HashSet<*const FeedShared<TaskRef>> = idle
            .iter()
            .zip(retired)
            .filter(|(_, retired)| *retired)
            .map(|(feed, _)| Arc::as_ptr(feed))
            .collect();
        if gone.is_empty() {
            return;
        }
        list.retain(|feed| !gone.contains(&Arc::as_ptr(feed)));
        self.version.fetch_add(1, Ordering::Release);
    }

    /// Whether sweeps are due: a feed is listed (it may go idle), or more
    /// spare rings are kept than a pool keeps for good.
    pub(super) fn need_sweeps(&self) -> bool {
        !lock(&self.list).is_empty() || self.spares.has_excess()
    }

    /// The ops queued on all feeds (for metrics).
    pub(super) fn queued(&self) -> usize {
        lock(&self.list).iter().map(|feed| feed.queued()).sum()
    }

    /// The feeds in the list.
    #[cfg(all(test, not(depengine_loom)))]
    pub(super) fn len(&self) -> usize {
        lock(&self.list).len()
    }

    /// Brings a worker's copy up to date: a plain load while nothing changed.
    pub(super) fn refresh(&self, view: &mut FeedView) {
        if self.version.load(Ordering::Acquire) == view.version {
            return;
        }
        let list = lock(&self.list);
        view.version = self.version.load(Ordering::Relaxed);
        view.feeds = list.clone();
    }
}

/// A thread's feed on one pool: the queuing end of its FIFO.
pub(super) struct OwnFeed {
    pool_id: usize,
    pool: Weak<PoolShared>,
    feed: Feed<TaskRef>,
}

impl OwnFeed {
    /// Queues `task` on this thread's feed on `pool` among its `feeds`, set
    /// up on first use (and the feeds of pools that are gone dropped then),
    /// or anew if a worker retired it while this thread queued nothing.
    #[inline]
    pub(super) fn push(feeds: &mut Vec<OwnFeed>, pool: &Arc<PoolShared>, task: TaskRef) {
        let own = Self::own(feeds, pool);
        if let Err(task) = own.feed.push(task) {
            Self::again(&mut own.feed, pool, task);
        }
    }

    /// [`push`](Self::push), unless the workers are far behind this feed
    /// (see `Feed::offer`): then hands `task` back.
    #[inline]
    pub(super) fn offer(feeds: &mut Vec<OwnFeed>, pool: &Arc<PoolShared>, task: TaskRef) -> Option<TaskRef> {
        let own = Self::own(feeds, pool);
        match own.feed.offer(task, pool.crowded_at) {
            Ok(back) => back,
            Err(task) => {
                Self::again(&mut own.feed, pool, task);
                None
            }
        }
    }

    /// This thread's feed on `pool`, set up on first use.
    #[inline]
    fn own<'a>(feeds: &'a mut Vec<OwnFeed>, pool: &Arc<PoolShared>) -> &'a mut OwnFeed {
        if let Some(at) = feeds.iter().position(|feed| feed.pool_id == pool.id) {
            return &mut feeds[at];
        }
        Self::first(feeds, pool)
    }

    /// This thread's first feed on `pool`.
    #[cold]
    fn first<'a>(feeds: &'a mut Vec<OwnFeed>, pool: &Arc<PoolShared>) -> &'a mut OwnFeed {
        feeds.retain(OwnFeed::pool_alive);
        let feed = Self::start(pool);
        feeds.push(OwnFeed { pool_id: pool.id, pool: Arc::downgrade(pool), feed });
        feeds.last_mut().expect("just pushed")
    }

    /// Queues `task` on a new feed: `feed` was retired.
    #[cold]
    fn again(feed: &mut Feed<TaskRef>, pool: &Arc<PoolShared>, mut task: TaskRef) {
        loop {
            *feed = Self::start(pool);
            match feed.push(task) {
                Ok(()) => return,
                Err(back) => task = back,
            }
        }
    }

    /// A new feed on `pool`, in its list.
    fn start(pool: &Arc<PoolShared>) -> Feed<TaskRef> {
        let (feed, ring) = Feed::with_spares(pool.parking.barriers(), Some(&pool.feeds.spares));
        pool.feeds.add(ring);
        feed
    }

    /// Whether its pool still exists.
    pub(super) fn pool_alive(&self) -> bool {
        self.pool.strong_count() > 0
    }
}

impl Drop for OwnFeed {
    /// The thread is leaving: its queued ops move to the injector, and its
    /// feed leaves the list. (Workers may still take from it meanwhile.)
    fn drop(&mut self) {
        let Some(pool) = self.pool.upgrade() else {
            return;
        };
        let mut moved = 0;
        self.feed.leave(
            |task| {
                pool.enqueue(task);
                moved += 1;
            },
            |ring| pool.feeds.remove(ring),
        );
        pool.parking.notify(moved);
    }
}

#[cfg(all(test, not(depengine_loom)))]
mod tests;
