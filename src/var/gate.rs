//! The var gate: the per-var state machine of docs/semantics.md §1, free of locks,
//! atomics, wakers and threads.
//!
//! A [`Gate`] is a plain struct mutated under its var's lock (see
//! `var_cell.rs`). Every method returns the ops it let through; the caller
//! dispatches them after dropping the lock. The design and a proof sketch of
//! its properties are in `README.md` beside this file.

use std::collections::VecDeque;

/// How an op accesses a var.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Access {
    Read,
    Write,
}

/// One var's queue of ops that declared it and have not been let through,
/// plus what is currently let through.
///
/// Invariants (checked by `debug_assert_invariants`):
/// * `write_running` implies `running_reads == 0`;
/// * a read heads the queue only while a write runs (a read is only ever
///   queued behind a write, queued or running);
/// * if nothing is running, the queue is empty (an idle var lets the next
///   op through at once).
#[derive(Debug)]
pub(crate) struct Gate<T> {
    queue: VecDeque<(Access, T)>,
    running_reads: usize,
    write_running: bool,
    version: u64,
}

impl<T> Default for Gate<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> Gate<T> {
    pub(crate) const fn new() -> Self {
        Self { queue: VecDeque::new(), running_reads: 0, write_running: false, version: 0 }
    }

    /// Number of writes that have completed on this var.
    pub(crate) fn version(&self) -> u64 {
        self.version
    }

    /// Counts `n` more completed writes (see `VarCell::add_writes`).
    pub(crate) fn add_writes(&mut self, n: u64) {
        debug_assert!(self.write_running, "gate: writes added while no write runs");
        self.version += n;
    }

    /// Reads currently let through.
    pub(crate) fn running_reads(&self) -> usize {
        self.running_reads
    }

    /// Whether a write is currently let through.
    pub(crate) fn write_running(&self) -> bool {
        self.write_running
    }

    /// Ops queued and not yet let through, in order.
    pub(crate) fn queued(&self) -> impl Iterator<Item = &(Access, T)> {
        self.queue.iter()
    }

    /// Whether no op is queued.
    pub(crate) fn nothing_queued(&self) -> bool {
        self.queue.is_empty()
    }

    /// True when nothing is running or queued.
    pub(crate) fn is_idle(&self) -> bool {
        !self.write_running && self.running_reads == 0 && self.queue.is_empty()
    }

    /// Appends an op; returns it back if it was let through at once.
    pub(crate) fn append(&mut self, access: Access, op: T) -> Option<T> {
        let granted = match access {
            Access::Read => self.append_read(op),
            Access::Write => self.append_write(op),
        };
        self.debug_assert_invariants();
        granted
    }

    fn append_read(&mut self, op: T) -> Option<T> {
        // A read is only ever queued behind a write, so "no write queued or
        // running" is "nothing queued and no write running".
        if self.write_running || !self.queue.is_empty() {
            self.queue.push_back((Access::Read, op));
            None
        } else {
            self.running_reads += 1;
            Some(op)
        }
    }

    fn append_write(&mut self, op: T) -> Option<T> {
        if self.write_running || self.running_reads > 0 || !self.queue.is_empty() {
            self.queue.push_back((Access::Write, op));
            None
        } else {
            self.write_running = true;
            Some(op)
        }
    }

    /// Completes one running access; pushes what it let through onto `ready`.
    pub(crate) fn complete(&mut self, access: Access, ready: &mut impl FnMut(T)) {
        match access {
            Access::Read => self.complete_read(ready),
            Access::Write => self.complete_write(ready),
        }
        self.debug_assert_invariants();
    }

    fn complete_read(&mut self, ready: &mut impl FnMut(T)) {
        assert!(self.running_reads > 0, "gate: read completed but none running");
        self.running_reads -= 1;
        if self.running_reads == 0 {
            // No write runs, so only a write can head the queue here.
            self.let_write_through(ready);
        }
    }

    fn complete_write(&mut self, ready: &mut impl FnMut(T)) {
        assert!(self.write_running, "gate: write completed but none running");
        self.write_running = false;
        self.version += 1;
        while let Some((Access::Read, _)) = self.queue.front() {
            let (_, op) = self.queue.pop_front().expect("front exists");
            self.running_reads += 1;
            ready(op);
        }
        if self.running_reads == 0 {
            self.let_write_through(ready);
        }
    }

    fn let_write_through(&mut self, ready: &mut impl FnMut(T)) {
        if let Some((Access::Write, _)) = self.queue.front() {
            let (_, op) = self.queue.pop_front().expect("front exists");
            self.write_running = true;
            ready(op);
        }
    }

    fn debug_assert_invariants(&self) {
        debug_assert!(!(self.write_running && self.running_reads > 0));
        debug_assert!(self.write_running || !matches!(self.queue.front(), Some((Access::Read, _))));
        debug_assert!(self.write_running || self.running_reads > 0 || self.queue.is_empty());
    }
}

#[cfg(test)]
mod tests;
