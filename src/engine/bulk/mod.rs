//! Bulk execution: consecutive small sync ops for one device fused into one
//! engine op, a *segment*, to cut the per-op cost of the var gate and the
//! pools (docs/semantics.md §6, MXNet's bulk execution). Everything about it is in this
//! folder, but for one documented hook in each layer below: nested ops in
//! the op layer (`op::nest`: the members), [`HeldBack`](crate::exec::HeldBack) in
//! the exec layer (idle workers push the open segment), and
//! `VarCell::add_writes` in the var layer (each member's write counts).
//!
//! While bulk execution is on (`bulk_size` > 1), every push holds the
//! engine's push lock ([`Bulk::open`]). A sync op for the normal lane of a
//! CPU device joins the open segment: its record is built as for any push
//! (its handle, its count in the `wait_for_all` epoch), as a nested op, but
//! it is appended to no var; its vars are merged into the segment's. Any
//! other push first pushes the open segment, so push order is still the
//! order of effect: the segment takes its members' place in every var's
//! queue, all at once.
//!
//! A segment is pushed (flushed) when it is full, when an op that cannot
//! join it is pushed (another device or priority, any other kind of op, any
//! wait), when the handle of one of its members is polled, on
//! [`Engine::flush`](crate::Engine::flush), at shutdown, and when every
//! worker of its pool is idle: either the push that opened it finds them
//! all parking, or the last worker to park finds it open (the
//! store-buffering handshake of `exec/README.md`). So no op waits in a
//! segment while the engine has nothing else to do; and an op pushed while
//! every worker is parked opens no segment at all: it is pushed on its own.
//!
//! The segment runs its members one after the other, in push order, on one
//! worker, with the var gate's rules applied between them (`segment.rs`).

mod index;
mod segment;

use std::sync::{Arc, Weak};

use super::shared::{Body, OpOptions, Role, Shared};
use crate::device::{Device, Lane};
use crate::error::{Error, Kind};
use crate::exec::HeldBack;
use crate::op::Decl;
use crate::op::GroupCore;
use crate::op::job::Job;
use crate::op::slot::SlotRef;
use crate::op::{DepList, TaskRef, submit};
use crate::sync::atomic::{AtomicBool, Ordering, fence};
use crate::sync::latch::Latch;
use crate::sync::small::SmallList;
use crate::sync::{Mutex, lock};
use crate::var::Access;
use index::VarIndex;
use segment::Segment;

/// A segment's members: inline up to 16, so that a segment needs no
/// allocation of its own (its record is reused like any op's).
type Members = SmallList<TaskRef, 16>;

/// The open segment, and the lock every push takes while bulk execution is
/// on.
pub(super) struct Bulk {
    /// Most members per segment; 1: bulk execution is off.
    size: usize,
    open: Mutex<Open>,
    /// Whether `open` holds members; read without the lock by idle workers.
    any: Arc<AtomicBool>,
    shared: Weak<Shared>,
}

#[derive(Default)]
struct Open {
    members: Members,
    /// The members' vars, one entry per var, a write if any member writes it.
    deps: Vec<Decl>,
    /// Where each var is in `deps`.
    index: VarIndex,
    /// The members' device and priority.
    key: Option<(Device, i32)>,
}

impl Bulk {
    pub(super) fn new(size: usize, shared: Weak<Shared>) -> Self {
        Self { size, open: Mutex::new(Open::default()), any: Arc::new(AtomicBool::new(false)), shared }
    }

    pub(super) fn is_on(&self) -> bool {
        self.size > 1
    }

    pub(super) fn size(&self) -> usize {
        self.size
    }

    /// What the CPU pools' idle workers see of the open segment (nothing
    /// while bulk execution is off).
    pub(super) fn held(&self) -> Option<Arc<dyn HeldBack>> {
        let held = OpenSegment { any: self.any.clone(), shared: self.shared.clone() };
        self.is_on().then(|| Arc::new(held) as Arc<dyn HeldBack>)
    }

    /// Pushes the open segment, if it holds members.
    pub(super) fn flush(&self) {
        if self.any.load(Ordering::Relaxed)
            && let Some(shared) = self.shared.upgrade()
        {
            let mut ready = Ready::new(&shared);
            shared.flush_open(&mut lock(&self.open), &mut ready);
        }
    }

    /// Runs `close` (which closes the engine) with the open segment pushed
    /// and the push lock held, so that no op joins a segment after it.
    pub(super) fn closing(&self, close: impl FnOnce() -> Arc<Latch>) -> Arc<Latch> {
        let Some(shared) = self.is_on().then(|| self.shared.upgrade()).flatten() else {
            return close();
        };
        let mut ready = Ready::new(&shared);
        let mut open = lock(&self.open);
        shared.flush_open(&mut open, &mut ready);
        close()
    }
}

/// What a pool's idle workers see of the engine's open segment.
struct OpenSegment {
    any: Arc<AtomicBool>,
    shared: Weak<Shared>,
}

impl HeldBack for OpenSegment {
    fn any(&self) -> bool {
        self.any.load(Ordering::Relaxed)
    }

    fn release(&self) {
        if let Some(shared) = self.shared.upgrade() {
            shared.bulk.flush();
        }
    }
}

impl Shared {
    /// Pushes an op while bulk execution is on: joins it to the open
    /// segment if it may, else pushes the segment, then the op. Returns
    /// its record, for its handle, unless it is `detached`.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn push_in_bulk<J: Job>(
        self: &Arc<Self>,
        opts: OpOptions,
        role: Role,
        deps: DepList,
        job: J,
        body: Body,
        detached: bool,
        group: Option<Arc<GroupCore>>,
    ) -> Result<Option<SlotRef<J::Output>>, Error> {
        // Declared first, dropped last: what the push made ready is
        // dispatched once the push lock is released, however the push ends.
        let mut ready = Ready::new(self);
        let mut open = lock(&self.bulk.open);
        let joins = body == Body::Sync
            && role == Role::User
            && !opts.has(OpOptions::REPAIR)
            && !opts.has(OpOptions::INLINE_WHEN_IDLE)
            && opts.lane == Lane::Normal
            && matches!(opts.device, Device::Cpu(_))
            // A group's op stays its own op, for its group's cancel to reach.
            && group.is_none()
            // With every worker parked, a new segment would be pushed at
            // once (below): the op goes on its own, without a segment.
            && !(open.members.is_empty() && self.dispatcher.all_parked(opts.device));
        if !joins {
            self.flush_open(&mut open, &mut ready);
            let record = match group {
                None => self.build(opts, role, deps, job, body, detached, false)?,
                Some(group) => self.build_grouped(opts, role, deps, job, body, detached, group)?,
            };
            let handle = (!detached).then(|| record.slot());
            let record = record.into_task();
            // Appended under the push lock, for push order; run after it is
            // released: an op that runs where it becomes ready (an inline
            // op) may push from its body.
            let watched = super::shared::watched(&record);
            let submitted = submit(record, |op| ready.0.push(op)).inspect_err(|_| self.uncount());
            drop(open);
            if let Some(record) = watched {
                super::shared::push_ended(&record, submitted.is_ok());
            }
            submitted?;
            return Ok(handle);
        }
        let key = (opts.device, opts.priority);
        if open.key.is_some_and(|k| k != key) {
            self.flush_open(&mut open, &mut ready);
        }
        let record = self.build(opts, Role::Member, deps, job, body, detached, false)?;
        let header = record.header();
        // Deletions are pushed under this lock too: this is exact.
        if let Some(dep) = header.deps.iter().find(|d| d.var.is_deleted()) {
            let err = Error::new(Kind::VarDeleted { var: dep.var.label() });
            self.uncount();
            return Err(err);
        }
        let Open { deps: merged, index, .. } = &mut *open;
        for dep in header.deps.iter() {
            match index.position(merged.len(), |k| merged[k].var.id(), dep.var.id()) {
                Some(k) if dep.access == Access::Write => merged[k].access = Access::Write,
                Some(_) => {}
                None => merged.push(Decl { var: dep.var.clone(), access: dep.access, typed: false }),
            }
        }
        let opened = open.members.is_empty();
        open.key = Some(key);
        let handle = (!detached).then(|| record.slot());
        open.members.push(record.into_task());
        if open.members.len() >= self.bulk.size {
            self.flush_open(&mut open, &mut ready);
        } else if opened {
            // Seen by every worker that parks from now on; if all have
            // parked already, none will look: push the segment now.
            self.bulk.any.store(true, Ordering::Relaxed);
            fence(Ordering::SeqCst);
            if self.dispatcher.all_parked(key.0) {
                self.flush_open(&mut open, &mut ready);
            }
        }
        Ok(handle)
    }

    /// Pushes the open segment, if it holds members.
    /// The segment is appended to its vars under the push lock; what that
    /// made ready goes to `ready`, dispatched once the lock is released
    /// (a segment run where it becomes ready, on the pushing thread, runs
    /// bodies that may push).
    fn flush_open(self: &Arc<Self>, open: &mut Open, ready: &mut Ready<'_>) {
        let Some((device, priority)) = open.key.take() else {
            return;
        };
        self.bulk.any.store(false, Ordering::Relaxed);
        let members = std::mem::take(&mut open.members);
        let mut deps = std::mem::take(&mut open.deps);
        open.index.clear();
        deps.sort_by_key(|d| d.var.id());
        let mut opts = OpOptions::new("bulk".into());
        opts.device = device;
        opts.priority = priority;
        // Its members' vars are of this engine and not deleted, its device
        // was checked with theirs, and the engine closes only after pushing
        // it: neither step fails. Should one, `Segment`'s drop completes
        // the members with an error.
        let pushed = self
            .build(
                opts,
                Role::Segment,
                DepList::from_vec(deps),
                Segment::new(members, self.clone()),
                Body::Async,
                true,
                false,
            )
            .and_then(|record| {
                let record = record.into_task();
                let watched = super::shared::watched(&record);
                let submitted = submit(record, |op| ready.0.push(op)).inspect_err(|_| self.uncount());
                if let Some(record) = watched {
                    super::shared::push_ended(&record, submitted.is_ok());
                }
                submitted
            });
        if let Err(err) = pushed {
            debug_assert!(false, "a bulk segment was refused: {err}");
            tracing::error!(target: "depengine", "a bulk segment was refused: {err}");
        }
    }
}

/// Ops a push made ready under the push lock, dispatched as the list is
/// dropped: after the lock, which the pushing code declares after it.
struct Ready<'s>(SmallList<TaskRef, 4>, &'s Shared);

impl<'s> Ready<'s> {
    fn new(shared: &'s Shared) -> Self {
        Self(SmallList::new(), shared)
    }
}

impl Drop for Ready<'_> {
    fn drop(&mut self) {
        for op in self.0.drain(..) {
            self.1.dispatcher.dispatch_pushed(op);
        }
    }
}
