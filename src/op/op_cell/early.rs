//! Early resolution, all of it: an op that has not started is resolved at
//! once (a cancelling shutdown, a GPU's sticky fault) though its vars let
//! it through only later. The protocol and why each op leaves its vars
//! exactly once, in push order: `../README.md`, *Resolved early*. The slot's
//! bits it relies on (`EARLY`, `THROUGH`) are claimed in `../slot.rs`; the
//! engine's core counts it (`EngineCore::lingers` / `gone`,
//! `../record/engine_core.rs`), which keeps a shutdown waiting until every
//! such op has left its vars.
//!
//! Why `unsafe`: the body and the epoch are the record's (`../op_cell.rs`),
//! claimed once through the slot's state word; modelled in
//! `../slot/loom_tests.rs`.

#![allow(unsafe_code)]

use std::panic::{AssertUnwindSafe, catch_unwind};

use super::super::job::Job;
use super::super::record::TaskRef;
use super::super::slot::{self, Published};
use super::OpCell;
use crate::error::Error;

impl<J: Job> OpCell<J> {
    /// Resolves the op now, unstarted: see `TaskVtable::resolve_early`.
    pub(super) fn resolve_now(&self, this: &TaskRef, err: Error, pass_on: bool) -> bool {
        debug_assert!(std::ptr::addr_eq(this.as_ptr().as_ptr(), self), "`this` is this record");
        if !slot::start_early(&self.header.state) {
            return false;
        }
        // SAFETY: this call claimed the start (`ResultSlot::start`), which
        // makes it the only one to touch the job.
        let job = self.job.with_mut(|job| unsafe { (*job).take() });
        if let Some(job) = job {
            // Drops the body: a panic of its destructor is contained.
            let _ = catch_unwind(AssertUnwindSafe(|| job.vetoed(&err)));
        }
        // What `store` does, but the op does not complete: its vars have
        // not let it through.
        if !self.header.meta.clears_error() {
            self.header.engine.failed(&err, pass_on);
        } else if pass_on {
            self.header.engine.keep_failure(&err);
        }
        if self.header.meta.watched() {
            self.header.watch_ended(Some(&err));
        }
        if pass_on {
            self.header.record_outcome(Err(&err));
        }
        let _ = self.slot.store(&self.header.state, Err(err));
        self.header.engine.lingers();
        self.publish_resolved();
        if slot::mark_early(&self.header.state) {
            self.release_body(this, true);
            self.gone();
        }
        true
    }

    /// An op resolved early (`TaskVtable::resolve_early`) is let through by its
    /// vars (or its segment): it completes on them now if the resolution
    /// has ended, else the resolution's end completes it.
    pub(super) fn through_early(&self, this: &TaskRef) {
        if slot::mark_through(&self.header.state) {
            self.release_body(this, false);
            self.gone();
        }
    }

    /// Publishes an op that an early resolution claimed, by the resolution
    /// itself (every other publication of such an op returns at once: see
    /// `publish_now`): it counts the op as done, but neither gives its slot
    /// among the ops in flight back nor releases its epoch: [`gone`](Self::gone)
    /// does both, once it has left its vars, so that a `wait_for_all`
    /// resolves only once nothing it waited for is still queued anywhere.
    #[cold]
    fn publish_resolved(&self) {
        // Nobody reads a detached op's result: the slot is left alone.
        let waker = if self.header.meta.detached() {
            None
        } else {
            let Published::First(waker) = self.slot.publish(&self.header.state) else {
                unreachable!("an op resolved early is published by its resolution alone");
            };
            waker
        };
        // SAFETY: only the resolution, which claimed the start, publishes
        // an op resolved early, once; the epoch is taken only by `gone`,
        // which comes after this call (see there).
        let in_epoch = self.epoch.with_mut(|epoch| unsafe { (*epoch).is_some() });
        if in_epoch {
            if self.header.meta.watched() {
                self.header.watch_finished();
            }
            self.header.engine.done(false);
        }
        if let Some(waker) = waker {
            waker.wake();
        }
    }

    /// The op resolved early has left its vars: its slot among the ops in
    /// flight goes back, then its epoch, so that a `wait_for_all` that
    /// waited for it finds the slot free.
    fn gone(&self) {
        self.header.engine.gone(self.header.meta.counted());
        // SAFETY: `gone` runs once, in the second of the resolution's end
        // (`mark_early`) and the vars' let-through (`mark_through`), each
        // of which follows `publish_resolved` (the resolution calls it
        // before `mark_early`; a let-through that comes second follows
        // `mark_early` through the state word's read-modify-write). So no
        // other access to the epoch runs meanwhile.
        let epoch = self.epoch.with_mut(|epoch| unsafe { (*epoch).take() });
        drop(epoch);
    }
}
