//! Bulk execution: consecutive small sync ops for one device fused into one
//! engine op, a *segment*, to cut the per-op cost of the var gate and the
//! pools (SPEC §6, MXNet's bulk execution).
//!
//! While bulk execution is on (`bulk_size` > 1), every push holds the
//! engine's push lock ([`Bulk::open`]). A sync op for the normal lane of a
//! CPU device joins the open segment: its record is built as for any push
//! (its handle, its count in the `wait_for_all` epoch), but it is appended
//! to no var; its vars are merged into the segment's. Any other push first
//! pushes the open segment, so push order is still the order of effect:
//! the segment takes its members' place in every var's queue, all at once.
//!
//! A segment is pushed (flushed) when it is full, when an op that cannot
//! join it is pushed (another device or priority, any other kind of op, any
//! wait), when the handle of one of its members is polled, on
//! [`Engine::flush`](super::Engine::flush), at shutdown, and when every
//! worker of its pool is idle: either the push that opened it finds them
//! all parking, or the last worker to park finds it open (a store-buffering
//! handshake, see `pool.rs` and `park.rs`). So no op waits in a segment
//! while the engine has nothing else to do; and an op pushed while every
//! worker is parked opens no segment at all: it is pushed on its own.
//!
//! The segment runs its members one after the other, in push order, on one
//! worker, with the var gate's rules applied between them: a member that
//! uses a var whose error an earlier member (or an earlier op) left is
//! skipped, and each var the segment writes is left with the error of the
//! members that wrote it. A member whose guards outlive its body holds the
//! segment back until they are dropped; the rest of the segment then runs
//! on a worker again. Versions count every member's write.

use std::sync::Arc;

use super::{Role, Shared};
use crate::device::{Device, Lane};
use crate::error::{Error, Kind};
use crate::loom::lock;
use crate::loom::sync::Mutex;
use crate::loom::sync::atomic::{AtomicBool, Ordering, fence};
use crate::op::access::Decl;
use crate::op::builder::OpOptions;
use crate::op::cell::{Job, OpCell, Running, SlotRef};
use crate::op::{DepList, Header, Meta, Shell, Task, TaskRef};
use crate::small::SmallList;
use crate::var::Access;

/// The open segment, and the lock every push takes while bulk execution is
/// on.
pub(super) struct Bulk {
    /// Most members per segment; 1: bulk execution is off.
    size: usize,
    open: Mutex<Open>,
    /// Whether `open` holds members; read without the lock by idle workers.
    any: Arc<AtomicBool>,
}

/// A segment's members: inline up to 16, so that a segment needs no
/// allocation of its own (its record is reused like any op's).
type Members = SmallList<TaskRef, 16>;

#[derive(Default)]
pub(super) struct Open {
    members: Members,
    /// The members' vars, one entry per var, a write if any member writes it.
    deps: DepList,
    /// The members' device and priority.
    key: Option<(Device, i32)>,
}

impl Bulk {
    pub(super) fn new(size: usize) -> Self {
        Self { size, open: Mutex::new(Open::default()), any: Arc::new(AtomicBool::new(false)) }
    }

    pub(super) fn is_on(&self) -> bool {
        self.size > 1
    }

    pub(super) fn size(&self) -> usize {
        self.size
    }
}

/// What a pool's idle workers see of the engine's open segment.
pub(super) struct Held {
    any: Arc<AtomicBool>,
    shared: std::sync::Weak<Shared>,
}

impl Held {
    pub(super) fn new(bulk: &Bulk, shared: std::sync::Weak<Shared>) -> Self {
        Self { any: bulk.any.clone(), shared }
    }
}

impl crate::pool::Held for Held {
    fn any(&self) -> bool {
        self.any.load(Ordering::Relaxed)
    }

    fn release(&self) {
        if let Some(shared) = self.shared.upgrade() {
            shared.flush();
        }
    }
}

impl Shared {
    /// Pushes the open segment, if it holds members.
    pub(crate) fn flush(self: &Arc<Self>) {
        if self.bulk.any.load(Ordering::Relaxed) {
            self.flush_open(&mut lock(&self.bulk.open));
        }
    }

    /// Pushes the open segment, then holds the push lock until the guard
    /// is dropped.
    pub(super) fn bulk_lock(self: &Arc<Self>) -> crate::loom::sync::MutexGuard<'_, Open> {
        let mut open = lock(&self.bulk.open);
        self.flush_open(&mut open);
        open
    }

    /// Pushes an op while bulk execution is on: joins it to the open
    /// segment if it may, else pushes the segment, then the op. Returns
    /// its record, for its handle, unless it is `detached`.
    pub(super) fn push_in_bulk<J: Job>(
        self: &Arc<Self>,
        opts: OpOptions,
        role: Role,
        deps: DepList,
        job: J,
        starts_inline: bool,
        detached: bool,
    ) -> Result<Option<Arc<OpCell<J>>>, Error> {
        let mut open = lock(&self.bulk.open);
        let joins = J::FUSES
            && role == Role::User
            && opts.lane == Lane::Normal
            && !starts_inline
            && matches!(opts.device, Device::Cpu(_))
            // With every worker parked, a new segment would be pushed at
            // once (below): the op goes on its own, without a segment.
            && !(open.members.is_empty() && self.dispatcher.all_parked(opts.device));
        if !joins {
            self.flush_open(&mut open);
            let record = self.build(opts, role, deps, job, starts_inline, detached)?;
            let handle = (!detached).then(|| record.clone());
            self.submit_built(record)?;
            return Ok(handle);
        }
        let key = (opts.device, opts.priority);
        if open.key.is_some_and(|k| k != key) {
            self.flush_open(&mut open);
        }
        let record = self.build(opts, Role::Member, deps, job, false, detached)?;
        let header = record.header();
        // Deletions are pushed under this lock too: this is exact.
        if let Some(dep) = header.deps.iter().find(|d| d.var.cell().is_deleted()) {
            let err = Error::new(Kind::VarDeleted { var: dep.var.id() });
            self.tracker.with_side(|intake| intake.pushed -= 1);
            return Err(err);
        }
        for dep in header.deps.iter() {
            match open.deps.iter_mut().find(|d| d.var.id() == dep.var.id()) {
                Some(merged) if dep.access == Access::Write => merged.access = Access::Write,
                Some(_) => {}
                None => open.deps.push(Decl { var: dep.var.clone(), access: dep.access, typed: false }),
            }
        }
        let opened = open.members.is_empty();
        open.key = Some(key);
        let handle = (!detached).then(|| record.clone());
        open.members.push(record);
        if open.members.len() >= self.bulk.size {
            self.flush_open(&mut open);
        } else if opened {
            // Seen by every worker that parks from now on; if all have
            // parked already, none will look: push the segment now.
            self.bulk.any.store(true, Ordering::Relaxed);
            fence(Ordering::SeqCst);
            if self.dispatcher.all_parked(key.0) {
                self.flush_open(&mut open);
            }
        }
        Ok(handle)
    }

    /// Pushes the open segment, if it holds members.
    fn flush_open(self: &Arc<Self>, open: &mut Open) {
        let Some((device, priority)) = open.key.take() else {
            return;
        };
        self.bulk.any.store(false, Ordering::Relaxed);
        let members = std::mem::take(&mut open.members);
        let mut deps = std::mem::take(&mut open.deps);
        deps.sort_by_key(|d| d.var.id());
        let mut opts = OpOptions::new("bulk".into());
        opts.device = device;
        opts.priority = priority;
        // Its members' vars are of this engine and not deleted, its device
        // was checked with theirs, and the engine closes only after pushing
        // it: neither step fails. Should one, `Segment`'s drop completes
        // the members with an error.
        let pushed = self
            .build(opts, Role::Segment, deps, Segment { members }, false, true)
            .and_then(|record| self.submit_built(record));
        if let Err(err) = pushed {
            debug_assert!(false, "a bulk segment was refused: {err}");
            tracing::error!(target: "depengine", "a bulk segment was refused: {err}");
        }
    }
}

/// The body of a segment: its members, in push order.
struct Segment {
    members: Members,
}

impl Job for Segment {
    type Output = ();

    fn start(mut self, op: Running<'_, ()>) {
        let members = std::mem::take(&mut self.members);
        let errors = op.header().take_seen_on_vars();
        let done = Members::new();
        Run {
            rest: members.into_iter(),
            done,
            errors,
            writes: SmallList::new(),
            segment: Some(op.to_owned()),
        }
        .go();
    }
}

impl Drop for Segment {
    /// Members of a segment that never ran complete with an error.
    fn drop(&mut self) {
        for member in self.members.drain(..) {
            abandon(&member);
            member.publish();
        }
    }
}

fn abandon(member: &TaskRef) {
    let op = member.header().meta.name.clone();
    let reason = "its bulk segment could not run";
    member.abandon(member, Error::new(Kind::Cancelled { op, reason }));
}

/// A segment running its members.
struct Run {
    rest: smallvec::IntoIter<[TaskRef; 16]>,
    /// Members run, published once the segment has released its vars: a
    /// member's handle resolves once its effects on its vars (version,
    /// error) are visible, as any op's does.
    done: Members,
    /// The error each var carries at this point of the segment.
    errors: Vec<(u64, Error)>,
    /// Writes of each var by the members run so far.
    writes: SmallList<(u64, u64), 4>,
    /// The segment, until it has stored its result.
    segment: Option<SlotRef<()>>,
}

impl Run {
    fn go(mut self) {
        while let Some(member) = self.rest.next() {
            let header = member.header();
            if !self.errors.is_empty() {
                let seen = header.deps.iter().find_map(|d| error_of(&self.errors, d.var.id()));
                if let Some(err) = seen {
                    header.see(err.clone());
                }
            }
            member.execute(&member);
            self.absorb(header);
            let finished = header.member_done();
            self.done.push(member);
            if !finished {
                // A guard outlived the body: the rest runs once it is gone.
                let member = self.done.last().expect("just pushed").clone();
                let run = self;
                member.header().member_then(Box::new(move || run.resume()));
                return;
            }
        }
        self.finish();
    }

    /// Takes in what a member that stored its result leaves on its vars.
    fn absorb(&mut self, member: &Header) {
        let carry = member.carry();
        for dep in member.deps.iter().filter(|d| d.access == Access::Write) {
            let id = dep.var.id();
            match self.writes.iter_mut().find(|(var, _)| *var == id) {
                Some((_, n)) => *n += 1,
                None => self.writes.push((id, 1)),
            }
            if let Some(err) = &carry {
                match self.errors.iter_mut().find(|(var, _)| *var == id) {
                    Some((_, e)) => *e = err.clone(),
                    None => self.errors.push((id, err.clone())),
                }
            }
        }
    }

    /// Runs the rest on a worker of the segment's pool.
    fn resume(self) {
        let Some(segment) = &self.segment else { return };
        let header = segment.header();
        let shared = header.shared.clone();
        // The segment's placement; it is run, never completed, as a task.
        let meta = Meta { segment: false, ..header.meta.clone() };
        let task: TaskRef = Arc::new(ResumeTask {
            header: Header::new(meta, DepList::new(), shared.clone()),
            run: std::sync::Mutex::new(Some(self)),
        });
        shared.dispatch_pushed(task);
    }

    /// Completes the segment: versions, errors, result.
    fn finish(&mut self) {
        let Some(segment) = self.segment.take() else { return };
        let header = segment.header();
        for &(id, n) in self.writes.iter().filter(|(_, n)| *n > 1) {
            if let Some(dep) = header.deps.iter().find(|d| d.var.id() == id) {
                dep.var.cell().add_writes(n - 1);
            }
        }
        header.carry_on_vars(std::mem::take(&mut self.errors));
        // The segment has no guards of its own: storing its result
        // completes it here, its vars first.
        segment.store_owned(Ok(()));
        for member in &self.done {
            member.publish();
        }
        recycle(&mut self.done);
    }
}

impl Drop for Run {
    /// A segment dropped before its end (its continuation never ran)
    /// completes its members with an error, then itself.
    fn drop(&mut self) {
        if self.segment.is_some() {
            let Self { rest, done, .. } = self;
            for member in rest.by_ref() {
                abandon(&member);
                done.push(member);
            }
            self.finish();
        }
    }
}

thread_local! {
    /// Shells of members, on their way to their engine's graveyard.
    static SHELLS: std::cell::RefCell<Vec<Shell>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Strips the records of published members that nothing else references
/// and buries them, for pushes to rebuild (as workers do with the records
/// of the ops they run): records freed here would be freed away from the
/// thread that allocated them.
fn recycle(members: &mut Members) {
    SHELLS.with(|shells| {
        let mut shells = shells.borrow_mut();
        for member in members.drain(..) {
            super::dispatch::keep_shell(member, &mut shells);
        }
        super::bury(&mut shells);
    });
}

fn error_of(errors: &[(u64, Error)], var: u64) -> Option<&Error> {
    errors.iter().find(|(id, _)| *id == var).map(|(_, err)| err)
}

/// The rest of a segment, run on a worker once the guards of a member
/// that outlived its body are gone.
struct ResumeTask {
    header: Header,
    run: std::sync::Mutex<Option<Run>>,
}

impl ResumeTask {
    fn take(&self) -> Option<Run> {
        self.run.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take()
    }
}

impl Task for ResumeTask {
    fn header(&self) -> &Header {
        &self.header
    }

    fn execute(&self, _this: &TaskRef) {
        if let Some(run) = self.take() {
            run.go();
        }
    }

    fn publish(&self) {}

    fn strip(&mut self) {
        self.header.strip();
        drop(self.take());
    }

    fn abandon(&self, _this: &TaskRef, _err: Error) {
        drop(self.take());
    }
}
