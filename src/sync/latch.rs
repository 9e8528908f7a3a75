//! A one-shot event: set once, awaited by any number of futures, with
//! callbacks run when it is set.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use crate::sync::Mutex;
use crate::sync::atomic::{AtomicBool, Ordering};
use crate::sync::countdown::Countdown;
use crate::sync::lock;

type Callback = Box<dyn FnOnce() + Send>;

#[derive(Default)]
pub(crate) struct Latch {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    set: bool,
    waiters: Vec<Waker>,
    callbacks: Vec<Callback>,
}

impl Latch {
    /// Sets the latch: wakes every waiter and runs every callback, outside
    /// the lock. Later calls do nothing.
    pub(crate) fn set(&self) {
        let (waiters, callbacks) = {
            let mut state = lock(&self.state);
            if state.set {
                return;
            }
            state.set = true;
            (std::mem::take(&mut state.waiters), std::mem::take(&mut state.callbacks))
        };
        waiters.into_iter().for_each(Waker::wake);
        callbacks.into_iter().for_each(|f| f());
    }

    #[cfg(test)]
    pub(crate) fn is_set(&self) -> bool {
        lock(&self.state).set
    }

    /// Runs `f` when the latch is set (now, if it already is).
    pub(crate) fn on_set(&self, f: impl FnOnce() + Send + 'static) {
        let mut state = lock(&self.state);
        if state.set {
            drop(state);
            f();
        } else {
            state.callbacks.push(Box::new(f));
        }
    }

    pub(crate) fn wait(self: &Arc<Self>) -> LatchWait {
        LatchWait(self.clone())
    }
}

/// A latch set once a count of outstanding things, which starts with one
/// held by its owner, reaches zero: the owner gives its own up with
/// [`close`](Self::close) once no more can be added.
pub(crate) struct CountLatch {
    count: Countdown,
    closed: AtomicBool,
    done: Arc<Latch>,
}

impl Default for CountLatch {
    fn default() -> Self {
        Self { count: Countdown::new(1), closed: AtomicBool::new(false), done: Arc::default() }
    }
}

impl CountLatch {
    /// Counts one more. The caller must know the count has not reached
    /// zero (the owner has not closed it, or something it counts is
    /// outstanding and cannot be released meanwhile).
    pub(crate) fn add(&self) {
        self.count.add(1);
    }

    /// Releases one counted by [`add`](Self::add); the release that reaches
    /// zero sets the latch.
    pub(crate) fn release(&self) {
        if self.count.release(1) {
            self.done.set();
        }
    }

    /// Gives up the owner's count (the first call only); returns the latch
    /// set once the count reaches zero.
    pub(crate) fn close(&self) -> &Arc<Latch> {
        if !self.closed.swap(true, Ordering::AcqRel) {
            self.release();
        }
        &self.done
    }
}

/// Resolves once the latch is set.
pub(crate) struct LatchWait(Arc<Latch>);

impl Future for LatchWait {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let mut state = lock(&self.0.state);
        if state.set {
            return Poll::Ready(());
        }
        if !state.waiters.iter().any(|w| w.will_wake(cx.waker())) {
            state.waiters.push(cx.waker().clone());
        }
        Poll::Pending
    }
}

#[cfg(all(test, not(depengine_loom)))]
mod tests;
