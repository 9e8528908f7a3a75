//! Events from a pool, with no aliasing: an event goes back to its pool
//! only once the poller has observed it complete *and* nobody refers to it
//! any more (MXNet's ring of 64 events hands a slot out again without
//! checking either, so a stored event can alias a re-recorded one).

use std::sync::{Arc, Mutex, Weak};

use super::backend::RawEvent;
use crate::sync::atomic::{AtomicBool, Ordering};

/// Events ready to be recorded again.
pub(crate) type EventPool = Mutex<Vec<RawEvent>>;

/// An event recorded behind one op's work; cloned by whoever must wait
/// for it (the poller, the vars it fences).
#[derive(Clone)]
pub(crate) struct Event(Arc<Cell>);

struct Cell {
    raw: Option<RawEvent>,
    /// Observed complete by the poller (a query returned true).
    done: AtomicBool,
    pool: Weak<EventPool>,
}

impl Event {
    pub(crate) fn new(raw: RawEvent, pool: &Arc<EventPool>) -> Self {
        Self(Arc::new(Cell { raw: Some(raw), done: AtomicBool::new(false), pool: Arc::downgrade(pool) }))
    }

    pub(crate) fn raw(&self) -> &RawEvent {
        self.0.raw.as_ref().expect("an event's raw event is taken only when it is dropped")
    }

    /// Whether the poller has seen the work behind it complete.
    pub(crate) fn is_done(&self) -> bool {
        self.0.done.load(Ordering::Acquire)
    }

    pub(crate) fn set_done(&self) {
        self.0.done.store(true, Ordering::Release);
    }

    /// Whether `self` and `other` are the same recorded event.
    pub(crate) fn same(&self, other: &Event) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Drop for Cell {
    fn drop(&mut self) {
        if !self.done.load(Ordering::Acquire) {
            return;
        }
        if let (Some(raw), Some(pool)) = (self.raw.take(), self.pool.upgrade()) {
            pool.lock().unwrap_or_else(|e| e.into_inner()).push(raw);
        }
    }
}
