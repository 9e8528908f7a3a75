//! A pool's ops with a non-zero priority: highest first, FIFO among equals
//! (by the order they were queued).

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use crate::op::TaskRef;

#[derive(Default)]
pub(super) struct Heap {
    heap: BinaryHeap<Queued>,
    /// Ops queued so far: each one's place among equals.
    seq: u64,
}

struct Queued {
    priority: i32,
    seq: u64,
    task: TaskRef,
}

impl Heap {
    pub(super) fn push(&mut self, priority: i32, task: TaskRef) {
        self.seq += 1;
        self.heap.push(Queued { priority, seq: self.seq, task });
    }

    /// Pops the top op, with its priority, if its priority passes `take`.
    pub(super) fn pop_if(&mut self, take: impl FnOnce(i32) -> bool) -> Option<(i32, TaskRef)> {
        if !take(self.heap.peek()?.priority) {
            return None;
        }
        self.heap.pop().map(|Queued { priority, task, .. }| (priority, task))
    }
}

impl Ord for Queued {
    fn cmp(&self, other: &Self) -> Ordering {
        self.priority.cmp(&other.priority).then_with(|| other.seq.cmp(&self.seq))
    }
}

impl PartialOrd for Queued {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for Queued {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Queued {}
