//! What an op records while the profiler is on (`crate::profile` has the
//! profile it becomes): when it was pushed, made ready, started and ended,
//! on which thread, the ops whose last dependency it released, and its
//! outcome. Kept in the op's cold box (`cold.rs`) beside its span, so that
//! an op that is not profiled carries nothing more than before.

use std::cell::RefCell;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use super::Header;
use crate::profile::{Dep, OpRecord, Outcome};
use crate::sync::{Mutex, lock};

/// The profiler's clock: nanoseconds since the first look at it in this
/// process, so that the ops of every engine share one time line.
pub(crate) fn now_ns() -> u64 {
    static ORIGIN: OnceLock<std::time::Instant> = OnceLock::new();
    ORIGIN.get_or_init(std::time::Instant::now).elapsed().as_nanos() as u64
}

static NEXT_SEQ: AtomicU64 = AtomicU64::new(1);

thread_local! {
    /// This thread's name for profiles, made once.
    static THREAD: RefCell<Option<Arc<str>>> = const { RefCell::new(None) };
}

/// The calling thread's name (or its id, for a thread without one).
pub(crate) fn thread_label() -> Arc<str> {
    THREAD.with(|t| {
        t.borrow_mut()
            .get_or_insert_with(|| {
                let me = std::thread::current();
                match me.name() {
                    Some(name) => name.into(),
                    None => format!("{:?}", me.id()).into(),
                }
            })
            .clone()
    })
}

/// The watched op's steps (profiled, in a group, or both), out of line:
/// called only for an op whose flags say it is watched (`Flags::WATCHED`).
impl Header {
    #[cold]
    #[inline(never)]
    pub(crate) fn watch_started(&self) {
        if let Some(p) = self.profile() {
            p.started();
        }
        self.group_started();
    }

    /// Its body returned, or stored its result (`err`: how it failed).
    #[cold]
    #[inline(never)]
    pub(crate) fn watch_ended(&self, err: Option<&crate::error::Error>) {
        if let Some(p) = self.profile() {
            p.ended();
            if let Some(err) = err {
                p.outcome(Outcome::of(err));
            }
        }
        if let Some(err) = err {
            self.group_ended(err);
        }
    }

    /// It completed: its record goes to the engine, its group counts it
    /// out.
    #[cold]
    #[inline(never)]
    pub(crate) fn watch_finished(&self) {
        if let Some(p) = self.profile() {
            self.engine.profiled(p.finish(self));
        }
        self.group_finished();
    }
}

/// An op's profile while it is in the engine.
pub(crate) struct OpProfile {
    /// Its number in the profile (the order of pushes, across engines).
    pub(crate) seq: u64,
    pushed: u64,
    /// The pushing thread.
    pushed_by: Arc<str>,
    /// Times in `now_ns`, 0 until they happen.
    push_end: AtomicU64,
    ready: AtomicU64,
    start: AtomicU64,
    end: AtomicU64,
    outcome: AtomicU8,
    thread: Mutex<Option<Arc<str>>>,
    /// The ops whose last dependency this one released, by `seq`.
    released: Mutex<smallvec::SmallVec<[u64; 2]>>,
}

impl OpProfile {
    pub(crate) fn new() -> Self {
        Self {
            seq: NEXT_SEQ.fetch_add(1, Ordering::Relaxed),
            pushed: now_ns(),
            pushed_by: thread_label(),
            push_end: AtomicU64::new(0),
            ready: AtomicU64::new(0),
            start: AtomicU64::new(0),
            end: AtomicU64::new(0),
            outcome: AtomicU8::new(Outcome::Ok as u8),
            thread: Mutex::new(None),
            released: Mutex::new(smallvec::SmallVec::new()),
        }
    }

    /// Its push has appended it to its vars (on the pushing thread).
    pub(crate) fn push_ended(&self) {
        let _ = self.push_end.compare_exchange(0, now_ns(), Ordering::Relaxed, Ordering::Relaxed);
    }

    /// When it was pushed, and when its body started (if it did), on the
    /// profiler's clock.
    pub(crate) fn times(&self) -> (u64, Option<u64>) {
        let start = self.start.load(Ordering::Relaxed);
        (self.pushed, (start != 0).then_some(start))
    }

    /// It is queued on a pool, ready (the first time counts).
    pub(crate) fn ready(&self) {
        let _ = self.ready.compare_exchange(0, now_ns(), Ordering::Relaxed, Ordering::Relaxed);
    }

    /// Its body starts on this thread.
    pub(crate) fn started(&self) {
        let now = now_ns();
        let _ = self.ready.compare_exchange(0, now, Ordering::Relaxed, Ordering::Relaxed);
        self.start.store(now, Ordering::Relaxed);
        *lock(&self.thread) = Some(thread_label());
    }

    /// Its body returned, or stored its result (the first time counts: a
    /// sync body stores its result as it returns, and the op may complete
    /// inside that store; an async body returns before its token stores).
    pub(crate) fn ended(&self) {
        let _ = self.end.compare_exchange(0, now_ns(), Ordering::Relaxed, Ordering::Relaxed);
    }

    /// Its result is stored: how it ended.
    pub(crate) fn outcome(&self, outcome: Outcome) {
        self.outcome.store(outcome as u8, Ordering::Relaxed);
    }

    /// It released the last dependency of op `seq`.
    pub(crate) fn released(&self, seq: u64) {
        lock(&self.released).push(seq);
    }

    /// The record of the op, as it completes on this thread.
    pub(crate) fn finish(&self, header: &Header) -> OpRecord {
        let deps = header.deps.iter().map(|d| Dep {
            id: d.var.id(),
            write: d.access == crate::var::Access::Write,
            name: d.var.name_shared().cloned(),
        });
        let (ready, start, done) =
            (self.ready.load(Ordering::Relaxed), self.start.load(Ordering::Relaxed), now_ns());
        // An op may complete before its push returns (another thread let
        // it through and ran it): its push had appended it by the time it
        // was ready, the closest mark there is then.
        let push_end = [self.push_end.load(Ordering::Relaxed), ready, start, done]
            .into_iter()
            .find(|t| *t != 0)
            .unwrap_or(done);
        OpRecord {
            seq: self.seq,
            name: header.meta.name.clone(),
            group: header.group().map(|link| link.core.name.clone()),
            device: header.meta.device(),
            lane: header.meta.lane,
            priority: header.meta.priority,
            thread: lock(&self.thread).clone(),
            completed_on: thread_label(),
            pushed_by: self.pushed_by.clone(),
            pushed: self.pushed,
            push_end,
            ready,
            start,
            end: self.end.load(Ordering::Relaxed),
            done,
            deps: deps.collect(),
            released: std::mem::take(&mut *lock(&self.released)),
            outcome: Outcome::from_u8(self.outcome.load(Ordering::Relaxed)),
        }
    }
}
