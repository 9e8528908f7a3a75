//! [`OpSet`]: ops' results one by one as they complete, as Tokio's
//! `JoinSet::join_next` gives tasks'.
//!
//! Each handle in the set is polled with a waker of its own that queues
//! its index when it fires (as `FuturesUnordered` does), so a call to
//! `join_next` polls only the handles that were woken, not all of them.

use std::collections::VecDeque;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};

use super::{OpHandle, block_helping};
use crate::error::Error;
use crate::may_block::{Instead, refuse_blocking};
use crate::sync::{Mutex, lock};

/// A set of ops' handles whose results come out one by one, in the order
/// the ops complete, as Tokio's `JoinSet::join_next` gives tasks'.
///
/// Dropping the set drops its handles, which detaches their ops (they
/// still run, as a dropped [`OpHandle`] does); [`abort_all`](Self::abort_all)
/// aborts those not started. To cancel a request's ops as one, put them in
/// an [`OpGroup`](crate::OpGroup) too.
///
/// # Examples
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> depengine::Result<()> {
/// use depengine::engine::OpSet;
///
/// let engine = depengine::Engine::new();
/// let mut set = OpSet::new();
/// for i in 1..=3u64 {
///     set.insert(engine.op("square").run(move |(), ()| Ok(i * i)));
/// }
/// let mut sum = 0;
/// while let Some(result) = set.join_next().await {
///     sum += result?;
/// }
/// assert_eq!(sum, 14);
/// # Ok(()) }
/// ```
pub struct OpSet<R: Send + 'static> {
    /// The handles, by index (`None`: a free index).
    handles: Vec<Option<Member<R>>>,
    free: Vec<usize>,
    woken: Arc<Woken>,
    len: usize,
}

struct Member<R: Send + 'static> {
    handle: OpHandle<R>,
    waker: Waker,
}

/// The indices whose handles were woken, and the waker of the set's own
/// `join_next`.
#[derive(Default)]
struct Woken {
    state: Mutex<WokenState>,
}

#[derive(Default)]
struct WokenState {
    indices: VecDeque<usize>,
    joiner: Option<Waker>,
}

impl Woken {
    fn push(&self, index: usize) {
        let joiner = {
            let mut s = lock(&self.state);
            s.indices.push_back(index);
            s.joiner.take()
        };
        if let Some(joiner) = joiner {
            joiner.wake();
        }
    }
}

/// A handle's waker: queues its index.
struct IndexWaker {
    index: usize,
    woken: Arc<Woken>,
}

impl Wake for IndexWaker {
    fn wake(self: Arc<Self>) {
        self.woken.push(self.index);
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.woken.push(self.index);
    }
}

impl<R: Send + 'static> Default for OpSet<R> {
    fn default() -> Self {
        Self { handles: Vec::new(), free: Vec::new(), woken: Arc::default(), len: 0 }
    }
}

impl<R: Send + 'static> OpSet<R> {
    /// An empty set.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds an op's handle: its result comes out of a later
    /// [`join_next`](Self::join_next).
    pub fn insert(&mut self, handle: OpHandle<R>) {
        let index = self.free.pop().unwrap_or(self.handles.len());
        let waker = Waker::from(Arc::new(IndexWaker { index, woken: self.woken.clone() }));
        let member = Some(Member { handle, waker });
        if index == self.handles.len() {
            self.handles.push(member);
        } else {
            self.handles[index] = member;
        }
        self.len += 1;
        // Polled once by the next `join_next`, which registers its waker.
        self.woken.push(index);
    }

    /// Handles in the set: their results not yet taken.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the set holds no handle.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The result of an op of the set that has completed, the first to
    /// complete among those not taken yet; `None` once the set is empty.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as `JoinSet::join_next`: a future dropped before it
    /// resolves takes no result out of the set.
    pub fn join_next(&mut self) -> JoinNext<'_, R> {
        JoinNext { set: self }
    }

    /// [`join_next`](Self::join_next), blocking the current thread, for
    /// non-async callers. Inside an op's body it runs queued ops while it
    /// waits, as [`OpHandle::blocking_wait`] does.
    ///
    /// # Errors
    ///
    /// Each result's own; [`Error::is_blocking_in_runtime`] (as `Some`) in
    /// an async task (`.await` `join_next` there).
    pub fn blocking_join_next(&mut self) -> Option<Result<R, Error>> {
        if let Err(err) = refuse_blocking("OpSet::blocking_join_next", Instead::Await) {
            return Some(Err(err));
        }
        block_helping(|cx| self.poll_join_next(cx), crate::exec::help)
    }

    /// Aborts every op of the set that has not started (see
    /// [`OpHandle::abort`]); their results come out as cancelled.
    pub fn abort_all(&self) {
        self.handles.iter().flatten().for_each(|m| {
            m.handle.abort();
        });
    }

    /// Polls for the next result (see [`join_next`](Self::join_next)).
    pub fn poll_join_next(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<R, Error>>> {
        loop {
            let index = {
                let mut s = lock(&self.woken.state);
                match s.indices.pop_front() {
                    Some(index) => index,
                    None if self.len == 0 => return Poll::Ready(None),
                    None => {
                        s.joiner = Some(cx.waker().clone());
                        return Poll::Pending;
                    }
                }
            };
            // A stale wake-up (a handle taken since) finds nothing there.
            let Some(member) = self.handles.get_mut(index).and_then(Option::as_mut) else { continue };
            let mut own = Context::from_waker(&member.waker);
            if let Poll::Ready(result) = Pin::new(&mut member.handle).poll(&mut own) {
                self.handles[index] = None;
                self.free.push(index);
                self.len -= 1;
                return Poll::Ready(Some(result));
            }
        }
    }
}

impl<R: Send + 'static> Extend<OpHandle<R>> for OpSet<R> {
    fn extend<I: IntoIterator<Item = OpHandle<R>>>(&mut self, handles: I) {
        handles.into_iter().for_each(|h| self.insert(h));
    }
}

impl<R: Send + 'static> FromIterator<OpHandle<R>> for OpSet<R> {
    fn from_iter<I: IntoIterator<Item = OpHandle<R>>>(handles: I) -> Self {
        let mut set = Self::new();
        set.extend(handles);
        set
    }
}

impl<R: Send + 'static> fmt::Debug for OpSet<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpSet").field("len", &self.len).finish_non_exhaustive()
    }
}

/// The future of [`OpSet::join_next`].
#[must_use = "futures do nothing unless awaited"]
pub struct JoinNext<'s, R: Send + 'static> {
    set: &'s mut OpSet<R>,
}

impl<R: Send + 'static> Future for JoinNext<'_, R> {
    type Output = Option<Result<R, Error>>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.set.poll_join_next(cx)
    }
}

impl<R: Send + 'static> fmt::Debug for JoinNext<'_, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JoinNext").field("len", &self.set.len).finish()
    }
}

#[cfg(all(test, not(depengine_loom)))]
mod tests;
