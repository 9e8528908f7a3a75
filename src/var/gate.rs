//! The var gate: the per-var state machine of SPEC §1, free of locks,
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
    #[cfg(test)]
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
mod tests {
    use super::Access::{Read, Write};
    use super::*;

    /// Applies steps to a fresh gate and checks what each step let through.
    enum Step {
        Append(Access, u32, bool),
        Complete(Access, &'static [u32]),
    }
    use Step::{Append, Complete};

    fn run(steps: &[Step]) -> Gate<u32> {
        let mut gate = Gate::new();
        for (i, step) in steps.iter().enumerate() {
            match *step {
                Append(access, op, expect) => {
                    let got = gate.append(access, op);
                    assert_eq!(got.is_some(), expect, "step {i}: append {access:?} {op}");
                }
                Complete(access, expect) => {
                    let mut ready = Vec::new();
                    gate.complete(access, &mut |op| ready.push(op));
                    assert_eq!(ready, expect, "step {i}: complete {access:?}");
                }
            }
        }
        gate
    }

    #[test]
    fn read_on_idle_var_is_let_through() {
        let gate = run(&[Append(Read, 1, true), Append(Read, 2, true)]);
        assert_eq!(gate.running_reads(), 2);
        assert!(!gate.write_running());
    }

    #[test]
    fn write_on_idle_var_is_let_through() {
        let gate = run(&[Append(Write, 1, true)]);
        assert!(gate.write_running());
        assert_eq!(gate.version(), 0);
    }

    #[test]
    fn write_waits_for_running_reads() {
        run(&[
            Append(Read, 1, true),
            Append(Read, 2, true),
            Append(Write, 3, false),
            Complete(Read, &[]),
            Complete(Read, &[3]),
        ]);
    }

    #[test]
    fn read_behind_queued_write_is_queued() {
        // tokio's write_read_shared_pending shape: two reads granted, a write
        // queued, a later read queued behind the write.
        let gate = run(&[
            Append(Read, 1, true),
            Append(Read, 2, true),
            Append(Write, 3, false),
            Append(Read, 4, false),
            Complete(Read, &[]),
            Complete(Read, &[3]),
            Complete(Write, &[4]),
            Complete(Read, &[]),
        ]);
        assert!(gate.is_idle());
        assert_eq!(gate.version(), 1);
    }

    #[test]
    fn write_completion_releases_read_batch_then_next_write() {
        // w1 running -> w2 queued -> r1, r2 queued -> w3 queued.
        let gate = run(&[
            Append(Write, 1, true),
            Append(Write, 2, false),
            Append(Read, 3, false),
            Append(Read, 4, false),
            Append(Write, 5, false),
            Complete(Write, &[2]),
            Complete(Write, &[3, 4]),
            Complete(Read, &[]),
            Complete(Read, &[5]),
            Complete(Write, &[]),
        ]);
        assert!(gate.is_idle());
        assert_eq!(gate.version(), 3);
    }

    #[test]
    fn write_completion_with_empty_queue_leaves_var_idle() {
        let gate = run(&[Append(Write, 1, true), Complete(Write, &[])]);
        assert!(gate.is_idle());
        assert_eq!(gate.version(), 1);
    }

    #[test]
    fn read_after_idle_again_is_let_through() {
        run(&[
            Append(Write, 1, true),
            Append(Read, 2, false),
            Complete(Write, &[2]),
            Append(Read, 3, true),
            Append(Write, 4, false),
            Append(Read, 5, false),
            Complete(Read, &[]),
            Complete(Read, &[4]),
            Complete(Write, &[5]),
        ]);
    }

    #[test]
    fn read_batch_stops_at_next_write() {
        run(&[
            Append(Write, 1, true),
            Append(Read, 2, false),
            Append(Write, 3, false),
            Append(Read, 4, false),
            Complete(Write, &[2]),
            Complete(Read, &[3]),
            Complete(Write, &[4]),
        ]);
    }

    #[test]
    fn queued_ops_are_visible_in_order() {
        let gate = run(&[Append(Write, 1, true), Append(Read, 2, false), Append(Write, 3, false)]);
        let queued: Vec<_> = gate.queued().copied().collect();
        assert_eq!(queued, [(Read, 2), (Write, 3)]);
    }

    #[test]
    #[should_panic(expected = "write completed but none running")]
    fn completing_a_write_that_is_not_running_panics() {
        run(&[Append(Read, 1, true), Complete(Write, &[])]);
    }

    #[test]
    #[should_panic(expected = "read completed but none running")]
    fn completing_a_read_that_is_not_running_panics() {
        run(&[Complete(Read, &[])]);
    }

    /// Every op is let through exactly once and in an order consistent with
    /// the reader-writer rules, over all short sequences of appends.
    #[test]
    fn exhaustive_short_programs_respect_order() {
        for len in 1..=7u32 {
            for mask in 0..(1u32 << len) {
                let ops: Vec<Access> =
                    (0..len).map(|i| if mask >> i & 1 == 1 { Write } else { Read }).collect();
                check_program(&ops);
            }
        }
    }

    fn check_program(ops: &[Access]) {
        let mut gate = Gate::new();
        let mut running: Vec<usize> = Vec::new();
        let mut started = Vec::new();
        for (i, &a) in ops.iter().enumerate() {
            if let Some(op) = gate.append(a, i) {
                running.push(op);
                started.push(op);
            }
        }
        // Complete the oldest running op each time.
        while let Some(op) = (!running.is_empty()).then(|| running.remove(0)) {
            for &r in &running {
                assert!(ops[r] == Read && ops[op] == Read, "{ops:?}: {op} and {r} overlap");
            }
            let mut ready = Vec::new();
            gate.complete(ops[op], &mut |op| ready.push(op));
            running.extend(&ready);
            started.extend(ready);
        }
        assert_eq!(started, (0..ops.len()).collect::<Vec<_>>(), "{ops:?}");
        assert!(gate.is_idle());
    }
}
