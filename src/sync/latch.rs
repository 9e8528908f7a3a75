//! A one-shot event: set once, awaited by any number of futures, with
//! callbacks run when it is set.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use crate::sync::Mutex;
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
