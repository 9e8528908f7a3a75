//! The engine's vars, kept weakly: where a cancelling shutdown finds the
//! ops queued on them, and where metrics count the ops that wait.

use std::sync::{Arc, Weak};

use crate::sync::{Mutex, lock};
use crate::var::Queue;

/// Weak references to the queues of an engine's vars, pruned of the dead
/// ones whenever the list has doubled since the last pruning.
#[derive(Default)]
pub(super) struct Queues(Mutex<Listed>);

#[derive(Default)]
struct Listed {
    list: Vec<Weak<dyn Queue>>,
    /// The list's length after the last pruning.
    kept: usize,
}

impl Queues {
    /// Keeps (weakly) the queue of a new var.
    pub(super) fn register(&self, queue: Weak<dyn Queue>) {
        let mut listed = lock(&self.0);
        if listed.list.len() >= 2 * listed.kept + 64 {
            listed.list.retain(|q| q.strong_count() > 0);
            listed.kept = listed.list.len();
        }
        listed.list.push(queue);
    }

    /// The queues of the vars alive now.
    pub(super) fn alive(&self) -> Vec<Arc<dyn Queue>> {
        lock(&self.0).list.iter().filter_map(Weak::upgrade).collect()
    }
}
