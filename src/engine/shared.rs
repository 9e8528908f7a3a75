//! The engine's bookkeeping, shared by every handle, var and op record of
//! one engine: what pushes count (epochs, pushed ops), the first
//! failure since the last `wait_for_all`, the shutdown mode, and the push
//! path itself (check, build, submit, dispatch).

use std::sync::Arc;

use super::bulk::Bulk;
use super::config::{Config, EngineKind};
use super::options::bit_set;
pub(super) use super::options::{Body, OpOptions, Role};
use super::queues::Queues;
use super::recorder::Recorder;
use super::throttle;
use super::watchdog::Watchdog;
use crate::error::{Error, Kind};
use crate::exec::{Dispatcher, Runs};
use crate::op::EngineCore;
use crate::op::access::normalize;
use crate::op::job::Job;
use crate::op::op_cell::{OpCell, Typed};
use crate::op::slot::SlotRef;
use crate::op::{DepList, Exec, Flags, HandleKind, Meta, PackedDevice, ReadyList, TaskRef, submit};
use crate::op::{GROUP_REASON, GroupCore};
use crate::sync::coarse::Keeper;
use crate::sync::epoch::Tracker;
use crate::sync::latch::Latch;
use crate::sync::limit::Limit;
use crate::var::{Queue, VarCell};
use crossbeam_utils::CachePadded;
use hooks::HOOKS;

mod hooks;

/// What pushes count and take, under the epoch tracker's lock (one lock
/// per push for all of it).
#[derive(Default)]
pub(super) struct Intake {
    /// Ops pushed so far.
    pub(super) pushed: u64,
}

/// The engine's allocation. `repr(C)` with its core first: a record's
/// `EngineRef` points to the core, which is this struct's address (see
/// `op::engine_core`).
#[repr(C)]
pub(crate) struct Shared {
    /// What every op reaches of its engine: its counts, the bound's
    /// slots, the throttle's waiters, the failures.
    pub(super) core: EngineCore,
    pub(super) config: Config,
    /// Written by every push: kept off the lines completing workers read.
    pub(super) tracker: CachePadded<Tracker<Intake>>,
    pub(super) dispatcher: Dispatcher,
    runtime: Option<tokio::runtime::Handle>,
    pub(super) bulk: Bulk,
    /// The engine's vars, weakly: where a cancelling shutdown finds the ops
    /// queued on them.
    pub(super) queues: Queues,
    /// What the throttle's looks past the bound decided, for metrics.
    pub(super) throttle_looks: throttle::Tallies,
    /// The profiler.
    pub(super) recorder: Recorder,
    /// The watchdog, if the engine has one (see `engine/watchdog.rs`).
    watchdog: std::sync::OnceLock<Watchdog>,
    /// Keeps the explainer's clock while vars note when they let ops
    /// through (`sync/coarse.rs`).
    _clock: Option<Keeper>,
}

impl Shared {
    pub(super) fn new(config: Config, runtime: Option<tokio::runtime::Handle>) -> Arc<Self> {
        let bulk_size = if config.kind == EngineKind::Naive { 1 } else { config.bulk_size };
        Arc::new_cyclic(|weak| {
            let bulk = Bulk::new(bulk_size, weak.clone());
            let limit = config.max_in_flight.map(Limit::new);
            let recorder = Recorder::new(config.profile_keep, config.profile_to.clone());
            let track_holders = config.track_holders;
            Shared {
                core: EngineCore::new(&HOOKS, limit),
                dispatcher: Dispatcher::new(config.topology.clone(), bulk.held()),
                config,
                tracker: CachePadded::new(Tracker::new()),
                runtime,
                bulk,
                queues: Queues::default(),
                throttle_looks: throttle::Tallies::default(),
                recorder,
                watchdog: std::sync::OnceLock::new(),
                _clock: track_holders.then(Keeper::new),
            }
        })
    }

    /// Keeps the engine's watchdog, stopped at shutdown and drop.
    pub(super) fn watch(&self, watchdog: Watchdog) {
        let _ = self.watchdog.set(watchdog);
    }

    /// Stops the watchdog, if any, and joins its thread.
    pub(super) fn stop_watchdog(&self) {
        if let Some(watchdog) = self.watchdog.get() {
            watchdog.stop();
        }
    }

    /// The bound on user ops in flight, if there is one.
    pub(super) fn limit(&self) -> Option<&Limit> {
        self.core.limit()
    }

    /// Gives back a slot among the ops in flight that a push took and
    /// did not use.
    #[cold]
    pub(super) fn give_slot(&self) {
        self.core.slot_freed();
    }

    /// Gives back the slot a refused push took (`counted`), before its
    /// record exists.
    #[cold]
    fn refund(&self, counted: bool) {
        if counted {
            self.core.slot_freed();
        }
    }

    /// Takes a slot among the ops in flight for a push (`reserved`: a
    /// reservation took it already).
    #[cold]
    fn take_slot(&self, reserved: bool) -> Result<(), Error> {
        match (self.core.limit(), reserved) {
            (Some(limit), false) => limit.take(),
            _ => Ok(()),
        }
    }

    pub(crate) fn runtime(&self) -> Option<tokio::runtime::Handle> {
        self.runtime.clone()
    }

    /// The first failure since the last `wait_for_all`, which forgets them.
    pub(super) fn take_error(&self) -> Result<(), Error> {
        self.take_first(|_| true)
    }

    /// The first failure since the last `wait_for_all` that no handle has
    /// handed to the user (for a shutdown's result), forgetting them all.
    pub(super) fn take_unseen_error(&self) -> Result<(), Error> {
        self.take_first(|err| !err.is_seen())
    }

    /// Forgets the failures kept, returning the first that `keep` accepts.
    fn take_first(&self, keep: impl Fn(&Error) -> bool) -> Result<(), Error> {
        self.core.take_failure(keep)
    }

    /// Calls `each` on every live var's cell with the ops queued on it, in
    /// order, each with when it was pushed (`Header::ready_at`, read while
    /// it is queued, so before any pool writes it); returns the vars
    /// visited, which the caller may need alive. Looking moves a var's
    /// inbox to its queue, as its next completion would; an op that lets
    /// through meanwhile is dispatched, as it would have been then.
    pub(super) fn visit_vars(
        &self,
        mut each: impl FnMut(&VarCell<TaskRef>, &[(TaskRef, u32)]),
    ) -> Vec<Arc<dyn Queue>> {
        let queues = self.queues.alive();
        for queue in &queues {
            let cell = queue.cell();
            let (mut ready, mut queued) = (ReadyList::new(), Vec::new());
            let mut note = |op: &TaskRef| queued.push((op.clone(), op.header().ready_at()));
            cell.queued_ops(&mut |op| ready.push(op), &mut note);
            ready.drain(..).for_each(|op| self.dispatcher.dispatch_pushed(op));
            each(cell, &queued);
        }
        queues
    }

    /// A cancelling shutdown: resolves every op that has not started, but
    /// for deletions and `wait_for_var`s, as cancelled at once, wherever it
    /// waits (queued on a var behind a running op, or on a pool behind busy
    /// workers), instead of when it would have run. Each still completes on
    /// its vars once they let it through (see `TaskVtable::resolve_early`).
    fn cancel_queued(&self) {
        let mut queued: Vec<TaskRef> = Vec::new();
        let mut take = |op: &TaskRef| {
            let meta = &op.header().meta;
            if !meta.deletes() && !meta.clears_error() {
                queued.push(op.clone());
            }
        };
        let queues = self.visit_vars(|_, ops| ops.iter().for_each(|(op, _)| take(op)));
        self.dispatcher.each_queued(&mut take);
        for op in queued {
            let reason = "the engine was shut down in cancel mode";
            let err = Error::new(Kind::Cancelled { op: op.header().meta.name.clone(), reason });
            op.resolve_early(err, true);
        }
        // These may be the last references to vars, whose data goes here.
        if let Err(payload) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || drop(queues))) {
            tracing::error!(target: "depengine", "a panic escaped a var's destructor: {}", crate::error::panic_message(&*payload));
        }
    }

    /// Once everything pushed has completed (the latch `close` returned is
    /// set): the latch set once the ops resolved early have left their
    /// vars too. They may still be sent to any pool until then, so the
    /// pools stop only after it.
    pub(super) fn lingering(&self) -> Arc<Latch> {
        self.core.lingering().close().clone()
    }

    /// Stops taking work; returns the latch set once everything pushed has
    /// completed (with `cancel`, every op that had not started is resolved
    /// at once: see `cancel_queued`); then wait for
    /// [`lingering`](Self::lingering) before stopping the pools.
    pub(super) fn close(self: &Arc<Self>, cancel: bool) -> Arc<Latch> {
        if cancel {
            self.core.cancel();
            crate::op::note_cancelling();
        }
        // The open segment is pushed, and no op joins another, before the
        // engine stops taking work.
        let latch = self.bulk.closing(|| self.tracker.rotate(true));
        if cancel {
            self.cancel_queued();
        }
        latch
    }

    /// The push: check → build → append → dispatch, for every kind of op
    /// (sync, async, future, GPU, the engine's own; with a handle or
    /// `detached`), or joins the op to a bulk segment (`bulk/`). Returns
    /// the record for the handle, unless `detached` (then no reference is
    /// taken for one, and none dropped).
    #[inline(always)]
    pub(super) fn push<J: Job>(
        self: &Arc<Self>,
        opts: OpOptions,
        role: Role,
        decls: DepList,
        job: J,
        body: Body,
        detached: bool,
    ) -> Result<Option<SlotRef<J::Output>>, Error> {
        let handle = if self.bulk.is_on() {
            self.push_in_bulk(opts, role, decls, job, body, detached, None)?
        } else {
            let record = self.build(opts, role, decls, job, body, detached, false)?;
            let handle = (!detached).then(|| record.slot());
            self.submit(record)?;
            handle
        };
        // After the push, outside every lock it took.
        if self.config.throttle_at != 0 && throttle::due() {
            throttle::throttle(&**self, self.config.throttle_at);
        }
        Ok(handle)
    }

    /// [`push`](Self::push) for a user op that joins `group`: out of line,
    /// so that the common push, inlined into every `run`, carries none of
    /// the group's code. Such an op never joins a bulk segment.
    #[cold]
    #[inline(never)]
    pub(super) fn push_grouped<J: Job>(
        self: &Arc<Self>,
        opts: OpOptions,
        decls: DepList,
        job: J,
        body: Body,
        detached: bool,
        group: Arc<GroupCore>,
    ) -> Result<Option<SlotRef<J::Output>>, Error> {
        let role = Role::User;
        let handle = if self.bulk.is_on() {
            self.push_in_bulk(opts, role, decls, job, body, detached, Some(group))?
        } else {
            let record = self.build_grouped(opts, role, decls, job, body, detached, group)?;
            let handle = (!detached).then(|| record.slot());
            self.submit(record)?;
            handle
        };
        if self.config.throttle_at != 0 && throttle::due() {
            throttle::throttle(&**self, self.config.throttle_at);
        }
        Ok(handle)
    }

    /// [`build`](Self::build) for an op that joins `group`: refused if the
    /// group is another engine's or cancelled; else the record is built
    /// watched and counted in its group.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn build_grouped<J: Job>(
        self: &Arc<Self>,
        opts: OpOptions,
        role: Role,
        deps: DepList,
        job: J,
        body: Body,
        detached: bool,
        group: Arc<GroupCore>,
    ) -> Result<Typed<J>, Error> {
        check_group(&group, self, &opts.name)?;
        let record = self.build(opts, role, deps, job, body, detached, true)?;
        // Refused (cancelled since the check above): the record is dropped
        // unpublished, which gives its slot back.
        group.enter(record.header()).inspect_err(|_| self.uncount())?;
        Ok(record)
    }

    /// Appends a record `build` made to its vars and dispatches what became
    /// ready (a ready op at once: the short path). A refused one leaves the
    /// pushed-ops count as it was. A profiled op's push ends once it is
    /// appended (the op may have completed by then, and recorded its push
    /// as unfinished).
    #[inline]
    pub(super) fn submit<J: Job>(&self, record: Typed<J>) -> Result<(), Error> {
        let record = record.into_task();
        let watched = watched(&record);
        let submitted =
            submit(record, |ready| self.dispatcher.dispatch_pushed(ready)).inspect_err(|_| self.uncount());
        if let Some(record) = watched {
            push_ended(&record, submitted.is_ok());
        }
        submitted
    }

    /// Takes back the count of a push that was refused after `build` (its
    /// slot among the ops in flight, if it took one, goes back as its
    /// record is dropped unpublished).
    pub(super) fn uncount(&self) {
        self.tracker.with_side(|intake| intake.pushed -= 1);
    }

    /// Checks an op (its slot among the ops in flight, its placement, its
    /// declarations) and builds its record, counted in its epoch and in
    /// the pushed ops; [`submit`](Self::submit) then appends it to its
    /// vars. `grouped`: it joins a group (watched). Inlined into each push:
    /// called, it would move the options, the deps and the body through
    /// memory once more.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    pub(super) fn build<J: Job>(
        self: &Arc<Self>,
        opts: OpOptions,
        role: Role,
        mut deps: DepList,
        job: J,
        body: Body,
        detached: bool,
        grouped: bool,
    ) -> Result<Typed<J>, Error> {
        let runs = match body {
            Body::Hands => Runs::WhereReady,
            Body::Gpu => Runs::OnGpu,
            Body::Sync | Body::Async => Runs::OnWorker,
        };
        // A user op's slot among the ops in flight, taken first (or given
        // by a reservation), and given back if the push is refused before
        // the record holds it (its publication gives it back after).
        let counted = self.core.limit().is_some() && matches!(role, Role::User | Role::Member);
        if counted {
            self.take_slot(opts.has(OpOptions::RESERVED))?;
        }
        let when_idle = opts.has(OpOptions::INLINE_WHEN_IDLE);
        let exec = self
            .dispatcher
            .place(&opts.name, opts.device, opts.lane, runs, when_idle)
            .inspect_err(|_| self.refund(counted))?;
        if !deps.is_empty() {
            normalize(&mut deps, &opts.name, Arc::as_ptr(self).cast())
                .inspect_err(|_| self.refund(counted))?;
        }
        // The op's count in its epoch.
        let (epoch, ()) =
            self.tracker.enter(|intake| intake.pushed += 1).inspect_err(|_| self.refund(counted))?;
        let profiled = self.recorder.wants(&opts);
        let meta = meta(opts, role, exec, detached, counted, profiled, grouped);
        Ok(OpCell::place(self.engine_ref(), meta, deps, job, epoch))
    }
}

impl Shared {
    /// Ops pushed and not yet completed.
    pub(super) fn in_flight(&self) -> u64 {
        // Completions first: an op is pushed before it completes.
        let completed = self.core.counts.completed.get();
        self.tracker.with_side(|intake| intake.pushed).saturating_sub(completed)
    }
}

impl throttle::Progress for Shared {
    fn id(&self) -> usize {
        std::ptr::from_ref(self) as usize
    }

    fn pushed(&self) -> u64 {
        self.tracker.with_side(|intake| intake.pushed)
    }

    fn completed(&self) -> u64 {
        self.core.counts.completed.get()
    }

    fn all_idle(&self) -> bool {
        self.dispatcher.all_idle()
    }

    fn now(&self) -> std::time::Instant {
        std::time::Instant::now()
    }

    fn park(&self, goal: u64, patience: std::time::Duration) {
        self.core.drain.park(goal, || self.core.counts.completed.get(), patience);
    }

    fn decided(&self, decision: throttle::Decision) {
        self.throttle_looks.count(decision);
    }
}

/// A reference to a watched op (profiled, or in a group) for
/// [`push_ended`]; `None` for the others.
#[inline(always)]
pub(super) fn watched(record: &TaskRef) -> Option<TaskRef> {
    record.header().meta.watched().then(|| record.clone())
}

/// Marks the end of a watched op's push: its profile's push ends; its
/// group's cancel reaches it from now on, if it was appended.
#[cold]
pub(super) fn push_ended(record: &TaskRef, appended: bool) {
    if let Some(profile) = record.header().profile() {
        profile.push_ended();
    }
    if appended {
        record.header().group_submitted(record);
    }
}

/// Refuses an op of another engine's group, or of a cancelled group.
#[cold]
fn check_group(group: &GroupCore, shared: &Arc<Shared>, name: &str) -> Result<(), Error> {
    if !group.of(Arc::as_ptr(shared).cast()) {
        return Err(Error::invalid(format!(
            "op `{name}` was pushed with group `{}` of another engine: a group takes the ops of the engine that made it",
            group.name
        )));
    }
    if group.is_cancelled() {
        return Err(Error::new(Kind::Cancelled { op: name.to_owned().into(), reason: GROUP_REASON }));
    }
    Ok(())
}

/// An op's record header fields from its options and its role.
#[inline(always)]
#[allow(clippy::fn_params_excessive_bools)]
fn meta(
    opts: OpOptions,
    role: Role,
    exec: Exec,
    detached: bool,
    counted: bool,
    profiled: bool,
    grouped: bool,
) -> Meta {
    let bits = opts.bits();
    Meta {
        device: PackedDevice::new(opts.device).expect("device ordinals are checked at placement"),
        lane: opts.lane,
        exec,
        priority: opts.priority,
        flags: Flags::new(0)
            .with(
                Flags::NO_SKIP,
                bit_set(bits, OpOptions::NO_SKIP | OpOptions::REPAIR)
                    || role == Role::Delete
                    || role == Role::Segment,
            )
            .with(Flags::CLEARS_ERROR, role == Role::WaitForVar)
            .with(Flags::CANCELLABLE, matches!(role, Role::User | Role::Member | Role::Acquire))
            .with(Flags::DELETES, role == Role::Delete)
            .with(Flags::NESTED, role == Role::Member)
            .with(Flags::NO_POISON, bit_set(bits, OpOptions::NO_POISON))
            .with(Flags::COUNTED, counted)
            .with(Flags::WATCHED, profiled || grouped),
        handle: match (detached, bit_set(bits, OpOptions::CANCEL_ON_DROP)) {
            (true, _) => HandleKind::Detached,
            (false, false) => HandleKind::Handle,
            (false, true) => HandleKind::CancelOnDrop,
        },
        repairs: bit_set(bits, OpOptions::REPAIR),
        profiled,
        name: opts.name,
    }
}
