//! Ops: the erased op record every var queue holds, and its life cycle.
//!
//! An op is one allocation (`cell.rs`): a [`Header`] the engine reads, plus the
//! typed body and result slot. Its life:
//!
//! 1. **push** — the header is built with the op's deduplicated deps; the
//!    op is appended to every var at once (`var::cell::append_all`).
//! 2. **ready** — `pending` reaches zero: every dep was let through. The
//!    dispatcher runs it on its lane.
//! 3. **execute** — the body runs with guards for its vars, or is skipped
//!    (a var carries an error) or cancelled (shutdown).
//! 4. **finalize** — once the body has stored its result and every guard is
//!    dropped (`live` reaches zero): each var is completed, successors are
//!    dispatched, the handle's result is published, the epoch is released.

pub(crate) mod access;
pub(crate) mod builder;
pub(crate) mod cell;
pub(crate) mod countdown;
pub(crate) mod handle;
pub(crate) mod handoff;
pub(crate) mod slot;

use std::borrow::Cow;
use std::ptr::NonNull;
use std::sync::Arc;

use crate::device::{Device, Lane};
use crate::engine::Shared;
use crate::error::{Error, Kind};
use crate::loom::lock;
use crate::loom::sync::Mutex;
use crate::loom::sync::atomic::{AtomicBool, Ordering};
use crate::op::access::Decl;
use crate::var::cell::Grant;
use crate::var::inbox::{Link, Linked};
use countdown::Countdown;

/// A shared reference to an erased op.
pub(crate) type TaskRef = Arc<dyn Task>;

/// Where an op's body runs once it is ready.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Exec {
    /// On a worker of the pool for the op's device and lane.
    Pool,
    /// On the thread that made it ready (engine-internal bodies, inline ops,
    /// future ops whose start only spawns).
    Inline,
}

/// A device in 8 bytes (ordinals beyond `u32::MAX` are refused at push).
#[derive(Clone, Copy, Debug)]
pub(crate) struct PackedDevice {
    gpu: bool,
    ordinal: u32,
}

/// What the engine knows of an op, whatever its body. The name, read only
/// for messages, comes last (see [`Header`] for the layout).
#[derive(Clone, Debug)]
#[repr(C)]
pub(crate) struct Meta {
    pub(crate) device: PackedDevice,
    pub(crate) priority: i32,
    pub(crate) lane: Lane,
    pub(crate) exec: Exec,
    /// Runs even if a var it uses carries an error.
    pub(crate) no_skip: bool,
    /// Takes (clears) the error of the var it reads: `wait_for_var`.
    pub(crate) clears_error: bool,
    /// Cancelled, not run, by a cancelling shutdown.
    pub(crate) cancellable: bool,
    /// Deletes its one (written) var: appended with `append_delete`.
    pub(crate) deletes: bool,
    /// Pushed without a handle: nobody will read its result.
    pub(crate) detached: bool,
    /// A member of a bulk segment (see `engine::bulk`): run by its segment,
    /// which holds its vars, so it completes none itself.
    pub(crate) member: bool,
    /// A bulk segment: its vars may carry different errors.
    pub(crate) segment: bool,
    pub(crate) name: Cow<'static, str>,
}

/// An op's declarations; after normalisation, its deps: sorted by var id,
/// one per var. Inline for up to four vars.
pub(crate) type DepList = crate::small::SmallList<Decl, 4>;

/// The erased part of every op.
///
/// Laid out in declaration order: what a worker completing another op reads
/// and writes on this one when it lets it through (the counts, the flags,
/// the inbox link, the placement) sits in its first 64 bytes, right after
/// the record's reference counts, so that releasing a successor and sending
/// it to its pool touch one or two cache lines of it instead of three.
#[repr(C)]
pub(crate) struct Header {
    /// Deps not yet let through (see [`submit`]).
    pending: Countdown,
    /// One for the body until it stores its result, plus one per live guard.
    live: Countdown,
    /// Whether `errors` holds anything: the common, error-free path never
    /// takes its lock.
    has_errors: AtomicBool,
    /// Its place in a var's inbox, if it has one var (see `var::inbox`):
    /// read by the worker that takes it out, which then lets it through.
    link: Link<TaskRef>,
    pub(crate) meta: Meta,
    pub(crate) deps: DepList,
    pub(crate) shared: Arc<Shared>,
    /// The first var error seen when a dep was let through, and the error
    /// this op passes on to the vars it writes.
    errors: Mutex<OpErrors>,
    /// The op's span, only while a subscriber wants it.
    span: Option<Box<tracing::Span>>,
}

impl Meta {
    /// The op's device.
    pub(crate) fn device(&self) -> Device {
        let PackedDevice { gpu, ordinal } = self.device;
        let ordinal = ordinal as usize;
        if gpu { Device::Gpu(ordinal) } else { Device::Cpu(ordinal) }
    }

    /// Packs a device; `None` if its ordinal does not fit in 32 bits.
    pub(crate) fn pack_device(device: Device) -> Option<PackedDevice> {
        let (gpu, ordinal) = match device {
            Device::Cpu(i) => (false, i),
            Device::Gpu(i) => (true, i),
        };
        Some(PackedDevice { gpu, ordinal: u32::try_from(ordinal).ok()? })
    }
}

impl Header {
    pub(crate) fn new(meta: Meta, deps: DepList, shared: Arc<Shared>) -> Self {
        Self {
            pending: Countdown::new(deps.len()),
            live: Countdown::new(1),
            has_errors: AtomicBool::new(false),
            link: Link::new(),
            span: op_span(&meta),
            meta,
            deps,
            shared,
            errors: Mutex::new(OpErrors::default()),
        }
    }

    /// Makes a stripped header (see [`strip`](Self::strip)) the header of a
    /// new op of the same engine: its engine reference stays as it is.
    pub(crate) fn rebuild(&mut self, meta: Meta, deps: DepList) {
        debug_assert!(self.deps.is_empty() && self.span.is_none(), "only a stripped header is rebuilt");
        self.pending = Countdown::new(deps.len());
        self.live = Countdown::new(1);
        self.has_errors = AtomicBool::new(false);
        self.meta = meta;
        // The stripped fields hold nothing: what they are replaced with is
        // not dropped (a drop call each, for nothing, on every push).
        let span = std::mem::replace(&mut self.span, op_span(&self.meta));
        std::mem::forget(span);
        crate::small::discard(std::mem::replace(&mut self.deps, deps));
    }

    /// Drops the var references, span and errors (see [`Task::strip`]).
    /// Fields that hold nothing are left alone.
    pub(crate) fn strip(&mut self) {
        if !self.deps.is_empty() {
            self.deps = DepList::new();
        }
        if let Some(span) = self.span.take() {
            drop(span);
        }
        // Errors are stored only with `has_errors` set; a bulk member's
        // handoff state without it.
        let errors = self.errors.get_mut().unwrap_or_else(std::sync::PoisonError::into_inner);
        if self.has_errors.load(Ordering::Relaxed) || errors.more.is_some() {
            *errors = OpErrors::default();
        }
    }

    /// The op's span, if a subscriber wants it.
    pub(crate) fn span(&self) -> Option<&tracing::Span> {
        self.span.as_deref()
    }

    /// Runs `f` inside the op's span, if it has one.
    pub(crate) fn in_span<R>(&self, f: impl FnOnce() -> R) -> R {
        match &self.span {
            Some(span) => span.in_scope(f),
            None => f(),
        }
    }

    /// Why the body must not run, if it must not.
    pub(crate) fn veto(&self) -> Option<Error> {
        if self.meta.cancellable && self.shared.is_cancelling() {
            let reason = "the engine was shut down in cancel mode";
            return Some(Error::new(Kind::Cancelled { op: self.meta.name.clone(), reason }));
        }
        if self.meta.no_skip || self.meta.clears_error || !self.has_errors.load(Ordering::Acquire) {
            return None;
        }
        let seen = lock(&self.errors).seen.clone()?;
        Some(Error::new(Kind::Skipped { op: self.meta.name.clone(), root: seen }))
    }

    /// The error a var carried when this op was let through (for
    /// `wait_for_var`: the error it took).
    pub(crate) fn seen_error(&self) -> Option<Error> {
        if !self.has_errors.load(Ordering::Acquire) {
            return None;
        }
        lock(&self.errors).seen.clone()
    }

    /// The error this op passes on to the vars it writes.
    pub(crate) fn carry(&self) -> Option<Error> {
        if !self.has_errors.load(Ordering::Acquire) {
            return None;
        }
        lock(&self.errors).more.as_ref().and_then(|more| more.carry.clone())
    }

    /// [`carry`](Self::carry), and, of a bulk segment, the error each var
    /// it writes is left with, which then decides (the members that wrote
    /// a var decide its error).
    #[allow(clippy::type_complexity)]
    fn carries(&self) -> (Option<Error>, Option<Vec<(u64, Error)>>) {
        if !self.has_errors.load(Ordering::Acquire) {
            return (None, None);
        }
        let errors = lock(&self.errors);
        let Some(more) = &errors.more else { return (None, None) };
        let each = if self.meta.segment { Some(more.carry_on.clone()) } else { None };
        (more.carry.clone(), each)
    }

    /// Records the op's outcome for propagation: the error it passes to the
    /// vars it writes is the one it saw, else its own failure.
    pub(crate) fn record_outcome(&self, result: Result<(), &Error>) {
        if result.is_ok() && !self.has_errors.load(Ordering::Acquire) {
            return;
        }
        let mut errors = lock(&self.errors);
        let carry = match (&errors.seen, result) {
            (Some(seen), _) if !self.meta.clears_error => seen.clone(),
            (_, Err(own)) => own.clone(),
            _ => return,
        };
        errors.more().carry.get_or_insert(carry);
        self.has_errors.store(true, Ordering::Release);
    }
}

impl Grant for TaskRef {
    fn on_grant(&self, var: u64, error: &mut Option<Error>) {
        let header = self.header();
        let seen = if header.meta.clears_error { error.take() } else { error.clone() };
        if let Some(err) = seen {
            let mut errors = lock(&header.errors);
            if header.meta.segment {
                errors.more().seen_on.push((var, err.clone()));
            }
            errors.seen.get_or_insert(err);
            header.has_errors.store(true, Ordering::Release);
        }
    }

    fn next_in_line(&self) {
        prefetch(self);
    }
}

impl Linked for TaskRef {
    fn link(&self) -> &Link<Self> {
        &self.header().link
    }

    fn sole_access(&self) -> crate::var::Access {
        let deps = &self.header().deps;
        debug_assert_eq!(deps.len(), 1, "only ops with one var go through an inbox");
        deps[0].access
    }
}

/// The op's span, boxed, if a subscriber wants it.
fn op_span(meta: &Meta) -> Option<Box<tracing::Span>> {
    let span = tracing::debug_span!(
        target: "depengine::op",
        "op",
        name = %meta.name,
        device = %meta.device(),
        lane = ?meta.lane,
    );
    if span.is_disabled() { None } else { Some(Box::new(span)) }
}

/// An op's errors: the one it saw on a var, and, boxed, the rest. The box
/// keeps the header small (the per-op memory budget: see `size_tests`); only
/// ops that fail or see an error, bulk segments and their members fill it.
#[derive(Default)]
struct OpErrors {
    seen: Option<Error>,
    more: Option<Box<MoreErrors>>,
}

impl OpErrors {
    fn more(&mut self) -> &mut MoreErrors {
        self.more.get_or_insert_with(Box::default)
    }
}

pub(crate) use handoff::Resume;

/// The rarely used part of an op's error state.
#[derive(Default)]
struct MoreErrors {
    /// The error the op passes on to the vars it writes.
    carry: Option<Error>,
    /// Of a segment: each var's error when it was let through.
    seen_on: Vec<(u64, Error)>,
    /// Of a segment: the error each var it writes is left with.
    carry_on: Vec<(u64, Error)>,
    /// Of a member whose guards outlived its body: its handoff with its
    /// segment.
    handoff: handoff::Handoff,
}

impl Header {
    /// Of a segment: takes the errors its vars carried when let through.
    pub(crate) fn take_seen_on_vars(&self) -> Vec<(u64, Error)> {
        if !self.has_errors.load(Ordering::Acquire) {
            return Vec::new();
        }
        lock(&self.errors).more.as_mut().map(|more| std::mem::take(&mut more.seen_on)).unwrap_or_default()
    }

    /// Of a segment: the error each var it writes is left with (set before
    /// its result is stored).
    pub(crate) fn carry_on_vars(&self, carry: Vec<(u64, Error)>) {
        if carry.is_empty() {
            return;
        }
        lock(&self.errors).more().carry_on = carry;
        self.has_errors.store(true, Ordering::Release);
    }

    /// Of a member: an error a var it uses carried, as if its segment had
    /// let it through with it.
    pub(crate) fn see(&self, err: Error) {
        lock(&self.errors).seen.get_or_insert(err);
        self.has_errors.store(true, Ordering::Release);
    }

    /// Of a member whose body has stored its result: whether it has
    /// completed (no guard outlived the body, or the last one is gone).
    pub(crate) fn member_done(&self) -> bool {
        self.live.get() == 0
    }

    /// Of a member that had not completed when its body returned: runs
    /// `then` once it has, on the thread that completes it (here if it has
    /// meanwhile).
    pub(crate) fn member_then(&self, then: Resume) {
        let back = lock(&self.errors).more().handoff.then(then);
        if let Some(then) = back {
            then();
        }
    }

    /// Of a member completing after its guards: marks it completed and
    /// takes what its segment does next, if it waits for it.
    fn member_finished(&self) -> Option<Resume> {
        lock(&self.errors).more().handoff.finish()
    }
}

/// The typed side of an op, as the engine sees it.
pub(crate) trait Task: std::any::Any + Send + Sync {
    fn header(&self) -> &Header;

    /// Runs the body, or stores the veto as its result. Called once, when
    /// the op is ready, on the thread its `Exec` chose, by the holder of
    /// `this`, a reference to this very record: a sync body runs on the
    /// caller's reference, so running an op takes none of its own.
    fn execute(&self, this: &TaskRef);

    /// Makes the stored result visible to the handle and wakes it, then
    /// releases the op's count in its epoch. Called once, after the op's
    /// vars are released.
    fn publish(&self);

    /// Drops everything the record holds that anyone could observe (var
    /// references, the result, the span, errors), leaving a shell whose
    /// drop only frees memory. Called by the holder of the last reference.
    fn strip(&mut self);

    /// Completes an op that will not run with `err`, instead of
    /// [`execute`](Self::execute): a bulk member whose segment could not be
    /// pushed.
    fn abandon(&self, this: &TaskRef, err: Error);
}

/// Submits a built op: appends it to all its vars at once, then dispatches
/// it if every dep was let through. On error nothing was appended (the op's
/// epoch count goes with the record). `shared` is the op's engine.
///
/// `pending` starts at the number of deps; each let-through releases one.
/// Those let through at once are released here, after every append: if all
/// were, nothing else can reach the count, and it is left alone. An op with
/// one var may be left in its inbox: the reference moves there, and this
/// call does not touch the op again.
pub(crate) fn submit(task: TaskRef, shared: &Shared) -> Result<(), Error> {
    let header = task.header();
    debug_assert!(std::ptr::eq(shared, &*header.shared), "an op is submitted to its own engine");
    header.in_span(|| tracing::debug!(target: "depengine::op", "pushed"));
    let deps = header.deps.len();
    if deps == 0 {
        shared.dispatch_pushed(task);
        return Ok(());
    }
    // Ops of earlier pushes that this one let through, found in an inbox.
    let mut others: crate::small::SmallList<TaskRef, 4> = crate::small::SmallList::new();
    let mut collect = |op| others.push(op);
    let ready = match deps {
        1 if !header.meta.deletes => {
            let dep = &header.deps[0];
            let (cell, access): (*const _, _) = (dep.var.cell(), dep.access);
            // SAFETY: the record `task` refers to holds the var, so the cell
            // lives as long as `task` does; the call does not need it to
            // live any longer.
            #[allow(unsafe_code)]
            unsafe {
                crate::var::cell::VarCell::append_one(cell, access, task, &mut collect)?
            }
        }
        _ => {
            let granted = if header.meta.deletes {
                let dep = header.deps.first().expect("a deletion has its var");
                dep.var.cell().append_delete(task.clone(), &mut collect).map(usize::from)
            } else {
                let cells = header.deps.iter().map(|d| (d.var.cell(), d.access));
                crate::var::cell::append_all(cells, &task, &mut collect)
            }?;
            (granted == deps || header.pending.release(granted)).then_some(task)
        }
    };
    if others.is_empty() {
        crate::small::discard(others);
    } else {
        for op in others {
            if op.header().pending.release(1) {
                shared.dispatch_pushed(op);
            }
        }
    }
    if let Some(task) = ready {
        shared.dispatch_pushed(task);
    }
    Ok(())
}

/// Releases the body's live count, once its result is stored: the call
/// that reaches zero completes the op. `task` is a reference to the op
/// held by the caller until this returns.
///
/// If guards are still alive, one of them completes the op: the live count
/// then owns a reference to the record, which the [`LiveRef`] whose drop
/// reaches zero takes back (so a guard holds no reference of its own). It is
/// taken here before the release, so that the guard cannot take back one not
/// yet given. Without guards, nothing but this call can reach the count
/// (no guard can be made once the body has returned), so it releases it
/// with a plain store.
pub(crate) fn release_body(task: &TaskRef) {
    let live = &task.header().live;
    // Acquire: the writes made through guards already dropped happen
    // before the completion below.
    if live.get() > 1 {
        let passed = Arc::into_raw(task.clone());
        if !live.release(1) {
            return;
        }
        // SAFETY: the guards were dropped meanwhile, and this call reached
        // zero, so no `LiveRef` took back `passed` (the reference made
        // just above by `Arc::into_raw`): it is still this call's to drop.
        #[allow(unsafe_code)]
        drop(unsafe { Arc::from_raw(passed) });
        finalize(task, true);
    } else {
        live.release_sole();
        finalize(task, false);
    }
}

/// Completes an op whose body has finished and whose guards are gone.
/// `after_guards`: a guard outlived the body (so a bulk segment may be
/// waiting for this member).
fn finalize(task: &TaskRef, after_guards: bool) {
    let header = task.header();
    if header.meta.member {
        // Published by its segment, once the segment's vars are released.
        header
            .in_span(|| tracing::debug!(target: "depengine::op", ok = header.carry().is_none(), "finished"));
        if let Some(then) = after_guards.then(|| header.member_finished()).flatten() {
            then();
        }
        return;
    }
    let (carry, each) = header.carries();
    let carry = carry.as_ref();
    if !header.deps.is_empty() {
        let mut ready: crate::small::SmallList<TaskRef, 4> = crate::small::SmallList::new();
        for dep in header.deps.iter() {
            let carry = match &each {
                Some(each) => each.iter().find(|(var, _)| *var == dep.var.id()).map(|(_, err)| err),
                None => carry,
            };
            dep.var.cell().complete(dep.access, carry, &mut |op| ready.push(op));
        }
        let runnable = ready.drain(..).filter(|next| next.header().pending.release(1));
        header.shared.dispatch_successors(runnable);
        crate::small::discard(ready);
    }
    header.in_span(|| tracing::debug!(target: "depengine::op", ok = carry.is_none(), "finished"));
    task.publish();
}

/// What a caught panic carries.
pub(crate) type PanicPayload = Box<dyn std::any::Any + Send>;

/// A stripped op record that nothing else references (see
/// `engine::graves`): a push rebuilds it in place without looking at its
/// reference counts again. Not `Clone`, and it lends out no `TaskRef`, so it
/// stays the only reference to its record.
pub(crate) struct Shell(TaskRef);

impl Shell {
    /// Strips `task` and makes it a shell if it is the only reference to
    /// its record; else hands it back. Stripping drops what the record
    /// held, which may run user code (a result nobody took): a panic there
    /// is caught and handed back with the record, for the caller to drop
    /// once the unwinding is over.
    pub(crate) fn strip(mut task: TaskRef) -> Result<Self, (TaskRef, Option<PanicPayload>)> {
        let Some(op) = Arc::get_mut(&mut task) else {
            return Err((task, None));
        };
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| op.strip())) {
            Ok(()) => Ok(Self(task)),
            Err(payload) => Err((task, Some(payload))),
        }
    }

    pub(crate) fn header(&self) -> &Header {
        self.0.header()
    }

    /// Where the record is.
    #[cfg(all(test, not(depengine_loom)))]
    pub(crate) fn addr(&self) -> *const () {
        Arc::as_ptr(&self.0).cast()
    }

    /// Fetches the record for writing (see [`prefetch`]).
    pub(crate) fn prefetch(&self) {
        prefetch(&self.0);
    }

    /// The record as a `T`, to be rebuilt in place; `None` (the shell
    /// freed) if it is of another type.
    pub(crate) fn downcast<T: Task>(self) -> Option<Unique<T>> {
        let any: Arc<dyn std::any::Any + Send + Sync> = self.0;
        any.downcast::<T>().ok().map(Unique)
    }
}

/// The only reference to a record (made from a [`Shell`]).
pub(crate) struct Unique<T>(Arc<T>);

impl<T> Unique<T> {
    #[allow(unsafe_code)]
    pub(crate) fn get_mut(&mut self) -> &mut T {
        // SAFETY: this is the only reference to the record (`Shell`'s
        // invariant: `Arc::get_mut` succeeded when it was made, and no
        // reference was made from it since), so nothing else reads or
        // writes it while the borrow lasts; `Arc::as_ptr` derives the
        // pointer from the `Arc`'s own, with its mutable provenance, as
        // `Arc::get_mut` does.
        unsafe { &mut *Arc::as_ptr(&self.0).cast_mut() }
    }

    pub(crate) fn into_arc(self) -> Arc<T> {
        self.0
    }
}

/// Fetches an op's record for writing, all its lines at once, reference
/// counts included (they precede the value in an `Arc`'s allocation).
pub(crate) fn prefetch(task: &TaskRef) {
    let value = Arc::as_ptr(task);
    let counts = 2 * std::mem::size_of::<usize>();
    crate::prefetch::for_write(
        value.cast::<u8>().wrapping_sub(counts),
        counts + std::mem::size_of_val(&**task),
    );
}

/// Keeps an op from completing until dropped: the op completes only once
/// its body has finished and every `LiveRef` is gone. Held by guards.
///
/// It holds no reference count of its own, and needs none: while the body
/// has not stored its result, whoever will store it holds a reference (the
/// job's slot, a `Completion`); after that, the body's reference belongs to
/// the live count ([`release_body`]), and the `LiveRef` whose drop brings
/// the count to zero takes it back. Either way the record outlives every
/// `LiveRef`.
pub(crate) struct LiveRef(NonNull<dyn Task>);

// SAFETY: a `LiveRef` only reads the record's header (`Sync`) and, once,
// takes back a `TaskRef` (`Send`): what a `TaskRef` may do on any thread.
#[allow(unsafe_code)]
unsafe impl Send for LiveRef {}
// SAFETY: `&LiveRef` gives access to nothing but `Debug`, which reads the
// header (`Sync`).
#[allow(unsafe_code)]
unsafe impl Sync for LiveRef {}

impl LiveRef {
    /// Takes one more live count on `task`; its holder must keep the op
    /// from completing meanwhile (the body has not stored its result).
    pub(crate) fn new(task: &TaskRef) -> Self {
        task.header().live.add(1);
        let record = NonNull::new(Arc::as_ptr(task).cast_mut()).expect("an Arc's pointer is not null");
        Self(record)
    }

    #[allow(unsafe_code)]
    fn header(&self) -> &Header {
        // SAFETY: this live count keeps the record alive (see the type's
        // doc), and the reference borrows `self`.
        unsafe { self.0.as_ref() }.header()
    }
}

impl Drop for LiveRef {
    #[allow(unsafe_code)]
    fn drop(&mut self) {
        if self.header().live.release(1) {
            // SAFETY: the count reached zero here, so the body had released
            // its own count: `release_body` made its reference the live
            // count's (`Arc::into_raw` of a `TaskRef` to this record, whose
            // pointer `Arc::as_ptr` gave this `LiveRef`), and only the
            // release that reaches zero takes it back.
            let task = unsafe { Arc::from_raw(self.0.as_ptr().cast_const()) };
            finalize(&task, true);
        }
    }
}

impl std::fmt::Debug for LiveRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "LiveRef({})", self.header().meta.name)
    }
}
