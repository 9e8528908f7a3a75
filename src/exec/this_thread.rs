//! What the current thread is to the engine: the one file whose
//! thread-locals decide where a ready op goes when it is not simply queued,
//! and how an op runs on the thread that holds it.
//!
//! * A pool's **worker** knows its pool ([`POOL`]) and keeps one successor
//!   in its **next slot** ([`NEXT`]), which it runs next (`worker.rs`).
//! * A thread that runs ops **inline** (an inline op ready at push, any op
//!   on the naive engine) is marked [`INLINE`]; inline ops it makes ready
//!   meanwhile wait in [`LOCAL`] and run after the one it runs, so chains of
//!   inline ops never recurse.
//! * Any other thread queues its priority-0 ops on a **feed** of its own per
//!   pool ([`FEEDS`], `feed.rs`).
//!
//! Whether user code is running on this thread is the op layer's to know
//! (`op::job::in_user_body`): an op made ready there must not wait in the
//! next slot of a worker that is busy with that very body.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

use super::feed_list::{FeedView, OwnFeed};
use super::pool::PoolShared;
use crate::error::panic_message;
use crate::op::{Help, TaskRef};

thread_local! {
    /// The pool this thread works for (0: none).
    static POOL: Cell<usize> = const { Cell::new(0) };
    /// The op this worker runs next. A `Cell` (taken and replaced whole):
    /// no borrow flag to keep on every op.
    static NEXT: Cell<Option<TaskRef>> = const { Cell::new(None) };
    /// Whether this thread is running ops through [`run_here`].
    static INLINE: Cell<bool> = const { Cell::new(false) };
    /// Ops running nested inside a push on this thread (see [`run_here`]).
    static NESTED: Cell<u32> = const { Cell::new(0) };
    /// Inline ops made ready on this thread, to run after the current one.
    static LOCAL: RefCell<VecDeque<TaskRef>> = const { RefCell::new(VecDeque::new()) };
    /// This thread's feeds, one per pool it queued ops on from outside.
    static FEEDS: RefCell<Vec<OwnFeed>> = const { RefCell::new(Vec::new()) };
    /// A worker's pool and its own view of the feeds, for taking ops while
    /// a body it runs blocks on a handle ([`help`]).
    static HELPER: RefCell<Option<(Arc<PoolShared>, FeedView)>> = const { RefCell::new(None) };
}

/// Makes this thread a worker of `pool` (for its whole life).
pub(super) fn become_worker(pool: &Arc<PoolShared>) {
    POOL.with(|id| id.set(pool.id));
    HELPER.with(|helper| *helper.borrow_mut() = Some((pool.clone(), FeedView::default())));
}

/// Runs one op while a body on this thread blocks on a handle (or a
/// group): first one this thread queued to run after its current op
/// ([`LOCAL`]), else, on a worker, one from its pool's queues. The op
/// waited for may be either.
///
/// Each op run here nests on the stack of the body that waits, so the
/// depth is bounded, as [`run_here`]'s is: past [`MAX_NESTED`] ops deep, a
/// wait takes no more from the pool (it looks again soon, as other
/// workers run what is queued). And a wait already nested takes ops the
/// workers queued (the injector: what bodies pushed, what completions
/// released) before the ops of outside threads, which hold the next
/// top-level bodies: so many bodies that fan ops out and join them do not
/// nest one inside the other while their children wait behind them.
pub(crate) fn help() -> Help {
    let depth = NESTED.with(Cell::get);
    let nested = |task: TaskRef| {
        NESTED.with(|n| n.set(depth + 1));
        execute(task);
        NESTED.with(|n| n.set(depth));
    };
    if let Some(task) = LOCAL.with(|local| local.borrow_mut().pop_front()) {
        nested(task);
        return Help::Ran;
    }
    let taken = HELPER.with(|helper| {
        let mut helper = helper.borrow_mut();
        let (pool, view) = helper.as_mut()?;
        if depth >= MAX_NESTED {
            return Some(None);
        }
        Some(if depth == 0 { pool.try_pop(view) } else { pool.try_pop_nested(view) })
    });
    match taken {
        Some(Some(task)) => {
            // Inside a body of this worker: the op runs nested, and what
            // it makes ready is queued, not kept in the next slot.
            nested(task);
            Help::Ran
        }
        Some(None) => Help::Later,
        None => Help::Nothing,
    }
}

/// Whether this thread is a worker of pool `id`.
#[inline]
pub(super) fn works_for(id: usize) -> bool {
    POOL.with(Cell::get) == id
}

/// Takes the op in this worker's next slot.
#[inline]
pub(super) fn take_next() -> Option<TaskRef> {
    NEXT.with(Cell::take)
}

/// Puts `task` in this worker's next slot if it is free; else hands it back.
#[inline]
pub(super) fn keep_next(task: TaskRef) -> Option<TaskRef> {
    NEXT.with(|next| match next.take() {
        Some(kept) => {
            next.set(Some(kept));
            Some(task)
        }
        None => {
            next.set(Some(task));
            None
        }
    })
}

/// Queues `task` on this thread's own feed for `pool`; hands it back when
/// the thread has no feeds any more (it is exiting) or is updating them.
#[inline]
pub(super) fn queue_on_own_feed(pool: &Arc<PoolShared>, task: TaskRef) -> Option<TaskRef> {
    let mut task = Some(task);
    let _ = FEEDS.try_with(|feeds| {
        if let Ok(mut feeds) = feeds.try_borrow_mut() {
            OwnFeed::push(&mut feeds, pool, task.take().expect("queued once"));
        }
    });
    task
}

/// What became of an op offered to this thread's own feed.
pub(super) enum Offered {
    /// Queued.
    Queued,
    /// The workers are far behind this thread's feed: this thread may run
    /// it itself.
    Crowded(TaskRef),
    /// No feed took it (see [`queue_on_own_feed`]).
    Refused(TaskRef),
}

/// [`queue_on_own_feed`], unless the workers are far behind that feed.
#[inline]
pub(super) fn offer_to_own_feed(pool: &Arc<PoolShared>, task: TaskRef) -> Offered {
    let mut task = Some(task);
    let mut crowded = None;
    let _ = FEEDS.try_with(|feeds| {
        if let Ok(mut feeds) = feeds.try_borrow_mut() {
            crowded = OwnFeed::offer(&mut feeds, pool, task.take().expect("offered once"));
        }
    });
    match (crowded, task) {
        (Some(task), _) => Offered::Crowded(task),
        (None, Some(task)) => Offered::Refused(task),
        (None, None) => Offered::Queued,
    }
}

/// How deep ops pushed from bodies may run nested inside their push.
const MAX_NESTED: u32 = 32;

/// Runs `task` on this thread.
///
/// An op made ready while this thread already runs one (a successor released
/// by its completion) is queued and run after it, so chains of inline ops
/// never recurse. One made ready by a push runs at once (`now`), even inside
/// another op, since the pusher may wait for it, up to [`MAX_NESTED`] ops
/// deep; deeper, it is queued as well (a trampoline: a body that pushes its
/// continuation does not grow the stack without bound), and a pusher that
/// blocks on its handle runs it meanwhile ([`help`]).
pub(super) fn run_here(task: TaskRef, now: bool) {
    if INLINE.with(Cell::get) {
        let depth = NESTED.with(Cell::get);
        if now && depth < MAX_NESTED {
            NESTED.with(|n| n.set(depth + 1));
            execute(task);
            NESTED.with(|n| n.set(depth));
        } else {
            LOCAL.with(|local| local.borrow_mut().push_back(task));
        }
        return;
    }
    run_first(|| execute(task));
}

/// Runs `first`, then the inline ops made ready on this thread meanwhile
/// (see [`run_here`]); the caller runs no op already.
#[inline(always)]
pub(super) fn run_first(first: impl FnOnce()) {
    /// Resets the thread if a panic escapes: the queued ops are dropped.
    struct Unwinding;
    impl Drop for Unwinding {
        fn drop(&mut self) {
            INLINE.with(|inline| inline.set(false));
            LOCAL.with(|local| local.borrow_mut().clear());
        }
    }
    debug_assert!(!INLINE.with(Cell::get), "a thread runs one op at a time");
    INLINE.with(|inline| inline.set(true));
    let unwinding = Unwinding;
    first();
    while let Some(next) = LOCAL.with(|local| local.borrow_mut().pop_front()) {
        execute(next);
    }
    // Nothing is queued now: only the flag goes back (once per op, on
    // every worker, so not through the queue's lock as well).
    std::mem::forget(unwinding);
    INLINE.with(|inline| inline.set(false));
}

/// Executes an op and drops the reference; a panic that escapes either (a
/// user destructor run by the engine, such as a result dropped with a
/// detached handle) is logged and contained, so the thread, and the ops
/// queued on it, live on.
fn execute(task: TaskRef) {
    contain(move || {
        task.execute();
        drop(task);
    });
}

/// Executes an op on the caller's reference (see [`execute`]). Inlined
/// into the worker's loop, whatever else calls it.
#[inline(always)]
pub(super) fn run(task: &TaskRef) {
    contain(|| task.execute());
}

/// Runs `f`, logging a panic that escapes it instead of unwinding further.
#[inline(always)]
pub(super) fn contain(f: impl FnOnce()) {
    if let Err(payload) = catch_unwind(AssertUnwindSafe(f)) {
        tracing::error!(target: "depengine", "a panic escaped an op, outside its body: {}", panic_message(&*payload));
    }
}

#[cfg(all(test, not(depengine_loom)))]
pub(super) fn feeds_alive() -> (usize, bool) {
    FEEDS.with(|feeds| {
        let feeds = feeds.borrow();
        (feeds.len(), feeds.iter().any(OwnFeed::pool_alive))
    })
}
