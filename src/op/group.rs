//! Op groups, as the op layer keeps them: a group's books ([`GroupCore`]:
//! its counts, its first error, its unfinished ops, who waits for it) and
//! the link each of its ops carries in its cold box ([`GroupLink`]). The
//! public face is `engine::group`.
//!
//! An op in no group carries no link and runs none of this: every hook is
//! entered on the header's `WATCHED` bit, which a profiled op sets too.
//!
//! The protocol (`README.md` beside `op/`, *Groups*): every step of an op
//! that touches its group's books (`enter`, `submitted`, `started`,
//! `finished`, `left`) takes the group's lock and reads or writes the
//! link's state under it, so each op is counted in exactly once and out
//! exactly once, whatever order a push, a worker and a `cancel` reach it
//! in. `cancel` sets its flag under that lock, so a push either is refused
//! or is seen by the cancel (or, between its build and its append, sees
//! the flag at `submitted` and resolves itself); and an op that reaches
//! its start once the flag is set is resolved there (`OpCell::execute`),
//! so none starts after the cancel, even one the cancel has not reached
//! yet whose dependency it resolved.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::{Arc, Weak};
use std::task::Waker;

use super::{Header, TaskRef};
use crate::error::{Error, Kind};
use crate::sync::atomic::{AtomicBool, Ordering};
use crate::sync::wakers::WakerSet;
use crate::sync::{Mutex, lock};

/// Why a group's ops end unrun.
pub(crate) const REASON: &str = "its group was cancelled";

/// A group's books.
pub(crate) struct GroupCore {
    pub(crate) name: Cow<'static, str>,
    /// The engine whose ops may join (a `Weak`: the address stays its own;
    /// erased, for this file names nothing of the engine).
    host: Weak<dyn std::any::Any + Send + Sync>,
    cancelled: AtomicBool,
    state: Mutex<State>,
    /// The token the group is tied to (`OpGroup::tie`), if any.
    #[cfg(feature = "tokio-util")]
    token: std::sync::OnceLock<tokio_util::sync::CancellationToken>,
}

impl std::fmt::Debug for GroupCore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpGroup")
            .field("name", &self.name)
            .field("cancelled", &self.is_cancelled())
            .field("counts", &self.counts())
            .finish()
    }
}

/// A group's counts, as [`GroupCore::counts`] reads them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Counts {
    pub(crate) pending: usize,
    pub(crate) running: usize,
    pub(crate) done: u64,
    pub(crate) failed: u64,
    pub(crate) cancelled: u64,
}

#[derive(Default)]
struct State {
    /// Ops counted in and not yet out.
    live: usize,
    running: usize,
    done: u64,
    failed: u64,
    cancelled: u64,
    first_error: Option<Error>,
    /// The unfinished ops a `cancel` reaches, by header address, from their
    /// append on until they are counted out (as they are published, which
    /// every appended op is), when the reference goes.
    ops: HashMap<usize, TaskRef>,
    /// `close` was called (and no `reopen` since): a wait resolves once
    /// nothing is unfinished.
    closed: bool,
    /// Who waits for the group to be closed (or cancelled) and idle.
    idle_waiters: WakerSet,
    /// Who waits for the group to be cancelled.
    cancel_waiters: WakerSet,
}

impl State {
    /// The idle waiters, to wake, if the group is done: closed or
    /// cancelled, and nothing unfinished.
    fn woken_if_done(&mut self, cancelled: bool) -> Vec<Waker> {
        if self.live == 0 && (self.closed || cancelled) { self.idle_waiters.take() } else { Vec::new() }
    }
}

/// Where an op stands with its group: written under the group's lock.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Step {
    /// Built, not counted in (refused, or not asked yet).
    Out,
    /// Counted in, its body not started.
    In,
    Running,
    /// Counted out.
    Finished,
}

/// What a grouped op carries in its cold box.
pub(crate) struct GroupLink {
    pub(crate) core: Arc<GroupCore>,
    step: Mutex<Step>,
    /// The first error its result was stored with (its outcome).
    error: Mutex<Option<Error>>,
    /// A future op's task, once spawned: a cancel aborts it.
    abort: Mutex<Option<tokio::task::AbortHandle>>,
}

impl GroupCore {
    pub(crate) fn new(name: Cow<'static, str>, host: Weak<dyn std::any::Any + Send + Sync>) -> Arc<Self> {
        Arc::new(Self {
            name,
            host,
            cancelled: AtomicBool::new(false),
            state: Mutex::default(),
            #[cfg(feature = "tokio-util")]
            token: std::sync::OnceLock::new(),
        })
    }

    /// Whether `host` is the engine this group belongs to.
    pub(crate) fn of(&self, host: *const ()) -> bool {
        std::ptr::addr_eq(self.host.as_ptr(), host)
    }

    /// Whether the group is cancelled: by `cancel`, or by the token it is
    /// tied to (whose cancel the group's next look turns into its own:
    /// [`cancel_if_tied`](Self::cancel_if_tied)).
    pub(crate) fn is_cancelled(&self) -> bool {
        self.cancelled.load(Ordering::Acquire) || self.token_cancelled()
    }

    #[cfg(feature = "tokio-util")]
    fn token_cancelled(&self) -> bool {
        self.token.get().is_some_and(tokio_util::sync::CancellationToken::is_cancelled)
    }

    #[cfg(not(feature = "tokio-util"))]
    fn token_cancelled(&self) -> bool {
        false
    }

    /// Cancels the group if the token it is tied to was cancelled and the
    /// group not yet: its queued ops resolve, its waiters wake. Called
    /// wherever the group is looked at (a push into it, an op of it
    /// starting, a wait for it polled), outside its lock.
    pub(crate) fn cancel_if_tied(&self) {
        if self.token_cancelled() && !self.cancelled.load(Ordering::Acquire) {
            self.cancel();
        }
    }

    /// Ties the group to `token`: cancelling the token cancels the group
    /// (not the other way round). False if it was tied already.
    #[cfg(feature = "tokio-util")]
    pub(crate) fn tie(&self, token: tokio_util::sync::CancellationToken) -> bool {
        let tied = self.token.set(token).is_ok();
        self.cancel_if_tied();
        tied
    }

    /// The token the group is tied to, if any.
    #[cfg(feature = "tokio-util")]
    pub(crate) fn tied_token(&self) -> Option<&tokio_util::sync::CancellationToken> {
        self.token.get()
    }

    pub(crate) fn counts(&self) -> Counts {
        let s = lock(&self.state);
        Counts {
            pending: s.live - s.running,
            running: s.running,
            done: s.done,
            failed: s.failed,
            cancelled: s.cancelled,
        }
    }

    /// `Some` once the group is closed (or cancelled) and no op of it is
    /// unfinished: the first error any of them ended with, if one did.
    /// Else `waker` is woken when that holds; it is kept under `key` (given
    /// one here the first time), which [`forget`](Self::forget) takes out.
    pub(crate) fn poll_done(&self, key: &mut Option<u64>, waker: &Waker) -> Option<Result<(), Error>> {
        self.cancel_if_tied();
        let mut s = lock(&self.state);
        if s.live == 0 && (s.closed || self.is_cancelled()) {
            let kept = s.idle_waiters.remove(key.take());
            let result = s.first_error.clone().map_or(Ok(()), Err);
            drop(s);
            drop(kept);
            return Some(result);
        }
        s.idle_waiters.register(key, waker);
        None
    }

    /// Whether the group is cancelled; else `waker` is woken when it is,
    /// kept under `key` as for [`poll_done`](Self::poll_done).
    pub(crate) fn poll_cancelled(&self, key: &mut Option<u64>, waker: &Waker) -> bool {
        self.cancel_if_tied();
        let mut s = lock(&self.state);
        if self.is_cancelled() {
            let kept = s.cancel_waiters.remove(key.take());
            drop(s);
            drop(kept);
            return true;
        }
        s.cancel_waiters.register(key, waker);
        false
    }

    /// A wait for the group to be done is dropped: its waker goes (`key`:
    /// the one `poll_done` gave it, if polled).
    pub(crate) fn forget_done(&self, key: Option<u64>) {
        let kept = lock(&self.state).idle_waiters.remove(key);
        drop(kept);
    }

    /// A wait for the group's cancel is dropped: its waker goes (`key`:
    /// the one `poll_cancelled` gave it, if polled).
    pub(crate) fn forget_cancelled(&self, key: Option<u64>) {
        let kept = lock(&self.state).cancel_waiters.remove(key);
        drop(kept);
    }

    /// Wakers kept for waits on the group.
    pub(crate) fn waiters(&self) -> usize {
        let s = lock(&self.state);
        s.idle_waiters.len() + s.cancel_waiters.len()
    }

    /// Closes the group (`true`) or reopens it: a wait resolves once it is
    /// closed and idle. Returns whether this call changed it.
    pub(crate) fn set_closed(&self, closed: bool) -> bool {
        let waiters = {
            let mut s = lock(&self.state);
            if s.closed == closed {
                return false;
            }
            s.closed = closed;
            s.woken_if_done(self.is_cancelled())
        };
        waiters.into_iter().for_each(Waker::wake);
        true
    }

    pub(crate) fn is_closed(&self) -> bool {
        lock(&self.state).closed
    }

    /// Up to `max` of the group's ops that are ready (every gate passed)
    /// and not started, for a wait for the group to run out of turn.
    pub(crate) fn ready_ops(&self, max: usize) -> Vec<TaskRef> {
        let ops: Vec<TaskRef> = lock(&self.state).ops.values().cloned().collect();
        ops.into_iter().filter(|op| op.header().state.pending() == 0 && !op.is_started()).take(max).collect()
    }

    /// The engine whose ops may join, if it lives.
    pub(crate) fn engine(&self) -> Option<Arc<dyn std::any::Any + Send + Sync>> {
        self.host.upgrade()
    }

    /// The group's ops that have not finished and that a cancel reaches
    /// (appended to their vars), each passed to `each` outside the lock.
    pub(crate) fn any_unfinished(&self, mut each: impl FnMut(&Header) -> bool) -> bool {
        let ops: Vec<TaskRef> = lock(&self.state).ops.values().cloned().collect();
        ops.iter().any(|op| each(op.header()))
    }

    /// Counts a new op of the group in (its record built, held alone by
    /// the push): refused if the group is cancelled.
    pub(crate) fn enter(self: &Arc<Self>, header: &Header) -> Result<(), Error> {
        let link = header.cold().group.get_or_init(|| GroupLink {
            core: self.clone(),
            step: Mutex::new(Step::Out),
            error: Mutex::new(None),
            abort: Mutex::new(None),
        });
        self.cancel_if_tied();
        let mut s = lock(&self.state);
        if self.is_cancelled() {
            return Err(Error::new(Kind::Cancelled { op: header.meta.name.clone(), reason: REASON }));
        }
        s.live += 1;
        *lock(&link.step) = Step::In;
        Ok(())
    }

    /// Stops the group's later pushes, resolves its ops that have not
    /// started as cancelled, and aborts its future ops' tasks. Returns
    /// whether this call cancelled it (not an earlier one).
    pub(crate) fn cancel(&self) -> bool {
        let (ops, waiters) = {
            let mut s = lock(&self.state);
            if self.cancelled.swap(true, Ordering::AcqRel) {
                return false;
            }
            let ops: Vec<TaskRef> = s.ops.values().cloned().collect();
            let mut waiters = s.cancel_waiters.take();
            waiters.extend(s.woken_if_done(true));
            (ops, waiters)
        };
        for op in ops {
            cancel_op(&op);
        }
        waiters.into_iter().for_each(Waker::wake);
        true
    }

    /// Counts the op of `header` out with `outcome` (`None`: it succeeded).
    fn count_out(&self, header: &Header, link: &GroupLink, outcome: Option<Error>) {
        let (waiters, _gone) = {
            let mut s = lock(&self.state);
            let mut step = lock(&link.step);
            if matches!(*step, Step::Out | Step::Finished) {
                return;
            }
            s.live -= 1;
            if *step == Step::Running {
                s.running -= 1;
            }
            *step = Step::Finished;
            // Dropped outside the locks (its publisher holds another).
            let gone = s.ops.remove(&key(header));
            match outcome {
                None => s.done += 1,
                Some(err) => {
                    if err.is_cancelled() {
                        s.cancelled += 1;
                    } else {
                        s.failed += 1;
                    }
                    s.first_error.get_or_insert(err);
                }
            }
            (s.woken_if_done(self.is_cancelled()), gone)
        };
        waiters.into_iter().for_each(Waker::wake);
    }
}

/// An op's key in its group: its header's address.
fn key(header: &Header) -> usize {
    std::ptr::from_ref(header) as usize
}

/// Resolves `op` as cancelled if it has not started; aborts its task if it
/// is a future op already spawned.
fn cancel_op(op: &TaskRef) {
    let err = Error::new(Kind::Cancelled { op: op.header().meta.name.clone(), reason: REASON });
    if op.resolve_early(err, false) {
        return;
    }
    if let Some(link) = op.header().group()
        && let Some(task) = lock(&link.abort).as_ref()
    {
        task.abort();
    }
}

/// The group hooks of an op's life, entered only on its `WATCHED` bit.
impl Header {
    /// The op's group link, if it is in a group.
    pub(crate) fn group(&self) -> Option<&GroupLink> {
        self.cold.get().and_then(|c| c.group.get())
    }

    /// It was appended to its vars (`this` is its record): from now on a
    /// cancel reaches it; if the group was cancelled since it entered, it is
    /// resolved now.
    #[cold]
    pub(crate) fn group_submitted(&self, this: &TaskRef) {
        let Some(link) = self.group() else { return };
        let core = &link.core;
        {
            let mut s = lock(&core.state);
            if *lock(&link.step) == Step::Finished {
                return;
            }
            if !core.is_cancelled() {
                s.ops.insert(key(self), this.clone());
                return;
            }
        }
        cancel_op(this);
    }

    /// Its body starts.
    #[cold]
    pub(crate) fn group_started(&self) {
        let Some(link) = self.group() else { return };
        let mut s = lock(&link.core.state);
        let mut step = lock(&link.step);
        if *step == Step::In {
            *step = Step::Running;
            s.running += 1;
        }
    }

    /// Its result was stored with `err`.
    #[cold]
    pub(crate) fn group_ended(&self, err: &Error) {
        if let Some(link) = self.group() {
            lock(&link.error).get_or_insert_with(|| err.clone());
        }
    }

    /// It was published: counted out with its outcome.
    #[cold]
    pub(crate) fn group_finished(&self) {
        let Some(link) = self.group() else { return };
        let outcome = lock(&link.error).take();
        link.core.count_out(self, link, outcome);
    }

    /// Its record is dropped unpublished (its push was refused after it was
    /// built): counted out as if it had never been pushed.
    #[cold]
    pub(crate) fn group_left(&self) {
        let Some(link) = self.group() else { return };
        let core = &link.core;
        let waiters = {
            let mut s = lock(&core.state);
            let mut step = lock(&link.step);
            if *step != Step::In {
                return;
            }
            *step = Step::Finished;
            s.live -= 1;
            // Never appended (its push was refused): it is not listed.
            debug_assert!(!s.ops.contains_key(&key(self)), "a listed op holds its record");
            s.woken_if_done(core.is_cancelled())
        };
        waiters.into_iter().for_each(Waker::wake);
    }

    /// A future op's task was spawned: a cancel aborts it (now, if the
    /// group was cancelled before the abort handle was kept).
    #[cold]
    pub(crate) fn group_spawned(&self, task: tokio::task::AbortHandle) {
        let Some(link) = self.group() else { return };
        let mut abort = lock(&link.abort);
        let task = abort.insert(task);
        if link.core.is_cancelled() {
            task.abort();
        }
    }
}
