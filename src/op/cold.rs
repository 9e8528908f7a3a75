//! The cold box: what only some ops carry (their errors, a nested op's
//! handoff with its parent, their span, their profile, their group), in
//! one allocation made only when an op has one of them. An op that has
//! none carries one null pointer in its header and runs no instruction of
//! any of them: the error path is entered on the state word's `SAW_ERROR`
//! bit, the span and the profile on the flags read at push.
//!
//! The cell is filled at push (span, profile: the pusher holds the record
//! alone) or later by whichever thread first needs the errors (a var's
//! completion granting it with an error, the op's own failure, a nested
//! op's handoff): one `compare_exchange` on a null pointer publishes the
//! box, and the loser of a race drops its own. It is freed only with the
//! record.
//!
//! Errors (docs/semantics.md §3): the error a var carried when the op was
//! let through on it, whether that vetoes its body, and the error it leaves
//! on the vars it writes; only ops on an error path take the box's lock.
//! The profile (`crate::profile` has what it becomes): when the op was
//! pushed, made ready, started and ended, on which thread, the ops whose
//! last dependency it released, and its outcome.
//!
//! Why `unsafe`: the cell is one pointer, 8 bytes, where a `OnceLock` of
//! the box took 16; those 8 take a one-var op's record from 200 bytes to
//! 192, a slab slot of three cache lines instead of four (PERFORMANCE.md,
//! *The lean record*). Checked by Miri (`op::` unit tests, which fill and
//! race it through the error paths).

#![allow(unsafe_code)]

use std::cell::RefCell;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU8, AtomicU64};
use std::sync::{Arc, OnceLock};

use super::engine_core::Handoff;
use super::group::GroupLink;
use super::task_ref::SAW_ERROR;
use super::{Header, Meta};
use crate::error::{Error, Kind};
use crate::profile::{Dep, OpRecord, Outcome};
use crate::sync::atomic::{AtomicPtr, Ordering};
use crate::sync::{Mutex, lock};

/// The header's cell for the cold box: null, or the box it owns.
pub(crate) struct ColdCell(AtomicPtr<Cold>);

impl ColdCell {
    fn empty() -> Self {
        Self(AtomicPtr::new(std::ptr::null_mut()))
    }

    fn holding(cold: Box<Cold>) -> Self {
        Self(AtomicPtr::new(Box::into_raw(cold)))
    }

    /// The box, if one was made. `Acquire`: what was written into it before
    /// it was published is visible.
    #[inline]
    pub(super) fn get(&self) -> Option<&Cold> {
        let cold = NonNull::new(self.0.load(Ordering::Acquire))?;
        // SAFETY: a published box lives as long as the cell (freed only by
        // its drop, with the record's), and is only read through it.
        Some(unsafe { cold.as_ref() })
    }

    /// The box, made by `make` now if there is none yet.
    pub(super) fn get_or_init(&self, make: impl FnOnce() -> Box<Cold>) -> &Cold {
        if let Some(cold) = self.get() {
            return cold;
        }
        let mine = Box::into_raw(make());
        let null = std::ptr::null_mut();
        let published = match self.0.compare_exchange(null, mine, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => mine,
            Err(theirs) => {
                // SAFETY: `mine` was never published: still this call's.
                drop(unsafe { Box::from_raw(mine) });
                theirs
            }
        };
        // SAFETY: published, it lives as long as the cell (see `get`).
        unsafe { &*published }
    }
}

impl Drop for ColdCell {
    fn drop(&mut self) {
        // `&mut self`: the record's drop, ordered after every use of it by
        // its count's last release (a plain load, on loom's atomics too).
        let cold = self.0.load(Ordering::Relaxed);
        if !cold.is_null() {
            // SAFETY: the cell owns its box, and nothing else reaches it.
            drop(unsafe { Box::from_raw(cold) });
        }
    }
}

/// What only some ops carry.
pub(crate) struct Cold {
    /// The op's span, while a subscriber wants it (set at push).
    span: Option<tracing::Span>,
    /// Its profile, while the profiler records it (set at push).
    profile: Option<OpProfile>,
    /// The errors it saw on its vars and the one it passes on
    /// (`cold.rs`), and a nested op's handoff (`engine_core.rs`).
    pub(super) errors: Mutex<OpErrors>,
    /// Its group, if it joined one at push (`group.rs`).
    pub(super) group: OnceLock<GroupLink>,
}

impl Default for Cold {
    fn default() -> Self {
        Self { span: None, profile: None, errors: Mutex::new(OpErrors::default()), group: OnceLock::new() }
    }
}

impl Header {
    /// The op's cold box, made now if it has none yet. Out of the hot
    /// path: only the error path and nesting call it.
    pub(super) fn cold(&self) -> &Cold {
        self.cold.get_or_init(Box::default)
    }

    /// The op's span, if a subscriber wants it.
    #[inline]
    pub(crate) fn span(&self) -> Option<&tracing::Span> {
        self.cold.get().and_then(|c| c.span.as_ref())
    }

    /// The op's profile, if the profiler records it.
    #[inline]
    pub(crate) fn profile(&self) -> Option<&OpProfile> {
        self.cold.get().and_then(|c| c.profile.as_ref())
    }

    /// Runs `f` inside the op's span, if it has one. Inlined, with `f`,
    /// into each step of an op's life: most ops have no span.
    #[inline(always)]
    pub(crate) fn in_span<R>(&self, f: impl FnOnce() -> R) -> R {
        match self.span() {
            Some(span) => span.in_scope(f),
            None => f(),
        }
    }
}

/// The cold box of a new op: its span if a subscriber wants it, its
/// profile if its push chose to profile it (`Meta::profiled`); empty for
/// neither. A group joins after the record is built (`group.rs`).
#[inline(always)]
pub(super) fn at_push(meta: &Meta) -> ColdCell {
    // Asked first: with tracing's `log` feature on (axum's default
    // features turn it on), a span that no subscriber wants is still built
    // and its fields formatted for the `log` crate, on every push.
    let span = tracing::enabled!(target: "depengine::op", tracing::Level::TRACE);
    if !span && !meta.profiled() {
        return ColdCell::empty();
    }
    watched(meta, span)
}

#[cold]
#[inline(never)]
fn watched(meta: &Meta, span: bool) -> ColdCell {
    let span = if span { op_span(meta) } else { None };
    let profile = meta.profiled().then(OpProfile::new);
    if span.is_none() && profile.is_none() {
        return ColdCell::empty();
    }
    ColdCell::holding(Box::new(Cold { span, profile, ..Cold::default() }))
}

/// The op's span, if a subscriber wants it.
fn op_span(meta: &Meta) -> Option<tracing::Span> {
    let span = tracing::trace_span!(
        target: "depengine::op",
        "op",
        name = %meta.name,
        device = %meta.device(),
        lane = ?meta.lane,
    );
    if span.is_disabled() { None } else { Some(span) }
}

/// An op's errors, in its cold box (`cold.rs`): the first it saw on a var,
/// and, boxed again, the rest, which only ops that fail or see an error
/// fill (a nested op's box, made for its handoff, stays small).
#[derive(Default)]
pub(crate) struct OpErrors {
    pub(super) seen: Option<Error>,
    pub(super) rare: Option<Box<ErrorDetail>>,
    /// Of a nested op: its handoff with its parent (`engine_core.rs`).
    pub(in crate::op) handoff: Handoff,
}

impl OpErrors {
    pub(in crate::op) fn rare(&mut self) -> &mut ErrorDetail {
        self.rare.get_or_insert_with(Box::default)
    }
}

/// The rarely used part of an op's error state.
#[derive(Default)]
pub(crate) struct ErrorDetail {
    /// The error the op passes on to the vars it writes.
    pub(super) carry: Option<Error>,
    /// Each var's error when the op was let through on it.
    pub(super) seen_on: Vec<(u64, Error)>,
    /// The error each var it writes is left with, where the op decided it
    /// var by var (an op that runs others: a bulk segment).
    pub(super) carry_on: Vec<(u64, Error)>,
    /// Vars whose write guard was dropped during a panic, with the error
    /// each carries unless the op leaves another there.
    pub(super) poisoned: Vec<(u64, Error)>,
}

impl Header {
    /// Notes the error slot of `var` as the op is let through on it
    /// (called under the var's lock): a `wait_for_var` takes the error, any
    /// other op sees it.
    pub(in crate::op) fn on_grant(&self, var: u64, error: &mut Option<Error>) {
        if error.is_some() && self.meta.repairs() && self.writes(var) {
            // A repair takes the error; it runs whatever it was.
            *error = None;
            return;
        }
        let seen = if self.meta.clears_error() { error.take() } else { error.clone() };
        if let Some(err) = seen {
            let mut errors = lock(&self.cold().errors);
            errors.rare().seen_on.push((var, err.clone()));
            errors.seen.get_or_insert(err);
            self.state.set(SAW_ERROR, Ordering::Release);
        }
    }

    /// Whether the op writes `var`.
    #[cold]
    fn writes(&self, var: u64) -> bool {
        self.deps.iter().any(|d| d.var.id() == var && d.access == crate::var::Access::Write)
    }

    /// Why the body must not run, if it must not: on the common path, no
    /// engine of the process cancelling and no error seen, two loads.
    #[inline]
    pub(crate) fn veto(&self) -> Option<Error> {
        let maybe_cancelled = self.meta.cancellable() && super::any_cancelling();
        if !maybe_cancelled && !self.state.has(SAW_ERROR) {
            return None;
        }
        self.veto_checked()
    }

    /// [`veto`](Self::veto), every case asked.
    #[cold]
    #[inline(never)]
    fn veto_checked(&self) -> Option<Error> {
        if self.meta.cancellable() && self.engine.is_cancelling() {
            let reason = "the engine was shut down in cancel mode";
            return Some(Error::new(Kind::Cancelled { op: self.meta.name.clone(), reason }));
        }
        if self.meta.no_skip() || self.meta.clears_error() || !self.state.has(SAW_ERROR) {
            return None;
        }
        let seen = lock(&self.cold().errors).seen.clone()?;
        Some(Error::new(Kind::Skipped { op: self.meta.name.clone(), root: seen }))
    }

    /// The error a var carried when this op was let through (for
    /// `wait_for_var`: the error it took).
    pub(crate) fn seen_error(&self) -> Option<Error> {
        if !self.state.has(SAW_ERROR) {
            return None;
        }
        lock(&self.cold().errors).seen.clone()
    }

    /// Takes the errors its vars carried when it was let through, var by
    /// var (for an op that runs others: a bulk segment).
    pub(crate) fn take_seen_on_vars(&self) -> Vec<(u64, Error)> {
        if !self.state.has(SAW_ERROR) {
            return Vec::new();
        }
        lock(&self.cold().errors)
            .rare
            .as_mut()
            .map(|rare| std::mem::take(&mut rare.seen_on))
            .unwrap_or_default()
    }

    /// Notes `err` as if a var it uses had carried it when it was let
    /// through (for an op run by another, which holds its vars).
    pub(crate) fn see(&self, err: Error) {
        lock(&self.cold().errors).seen.get_or_insert(err);
        self.state.set(SAW_ERROR, Ordering::Release);
    }

    /// The error this op passes on to the vars it writes.
    pub(crate) fn carry(&self) -> Option<Error> {
        if !self.state.has(SAW_ERROR) {
            return None;
        }
        lock(&self.cold().errors).rare.as_ref().and_then(|rare| rare.carry.clone())
    }

    /// The error this op leaves on var `var` (one it writes): what it
    /// passes on, else the poison of a write guard dropped in a panic.
    pub(crate) fn leaves_on(&self, var: u64) -> Option<Error> {
        self.left_on_vars().and_then(|left_on_vars| left_on_vars.on(var).cloned())
    }

    /// Sets the error each var it writes is left with, var by var, instead
    /// of one for all (set before its result is stored).
    pub(crate) fn carry_on_vars(&self, carry: Vec<(u64, Error)>) {
        if carry.is_empty() {
            return;
        }
        lock(&self.cold().errors).rare().carry_on = carry;
        self.state.set(SAW_ERROR, Ordering::Release);
    }

    /// What its completion leaves on the vars it writes: `None` if nothing,
    /// else the error for each var.
    /// A write guard of `var` was dropped while its thread panicked (see
    /// `LiveRef::poison`); recorded for `wait_for_all` too.
    pub(in crate::op) fn poison(&self, var: u64) {
        let label =
            self.deps.iter().find(|d| d.var.id() == var).map_or_else(|| format!("#{var}"), |d| d.var.label());
        let message = format!("a write guard of var {label} was dropped while its thread panicked");
        let err = Error::panicked_without_payload(self.meta.name.clone(), message);
        self.engine.keep_failure(&err);
        lock(&self.cold().errors).rare().poisoned.push((var, err));
        self.state.set(SAW_ERROR, Ordering::Release);
    }

    /// Whether the op saw or holds an error: the one bit the error-free
    /// path reads.
    #[inline]
    pub(in crate::op) fn has_errors(&self) -> bool {
        self.state.has(SAW_ERROR)
    }

    #[inline]
    pub(in crate::op) fn left_on_vars(&self) -> Option<Box<LeftOnVars>> {
        if !self.state.has(SAW_ERROR) {
            return None;
        }
        self.left_on_vars_locked()
    }

    #[cold]
    fn left_on_vars_locked(&self) -> Option<Box<LeftOnVars>> {
        let errors = lock(&self.cold().errors);
        let rare = errors.rare.as_ref()?;
        Some(Box::new(LeftOnVars {
            carry: rare.carry.clone(),
            each: rare.carry_on.clone(),
            poisoned: rare.poisoned.clone(),
        }))
    }

    /// Records the op's outcome for propagation: the error it passes to the
    /// vars it writes is the one it saw (but for a repair, which passes on
    /// none), else its own failure (unless it does not poison: then its own
    /// failure stays with its handle and `wait_for_all`).
    pub(crate) fn record_outcome(&self, result: Result<(), &Error>) {
        if result.is_ok() && !self.state.has(SAW_ERROR) {
            return;
        }
        let mut errors = lock(&self.cold().errors);
        let carry = match (&errors.seen, result) {
            (Some(seen), _) if !self.meta.clears_error() && !self.meta.repairs() => seen.clone(),
            (_, Err(own)) if self.meta.poisons() => own.clone(),
            _ => return,
        };
        errors.rare().carry.get_or_insert(carry);
        self.state.set(SAW_ERROR, Ordering::Release);
    }
}

/// The errors a completing op leaves on its vars.
pub(in crate::op) struct LeftOnVars {
    carry: Option<Error>,
    each: Vec<(u64, Error)>,
    poisoned: Vec<(u64, Error)>,
}

impl LeftOnVars {
    /// The error var `id` is left with.
    pub(in crate::op) fn on(&self, id: u64) -> Option<&Error> {
        let own = if self.each.is_empty() {
            self.carry.as_ref()
        } else {
            self.each.iter().find(|(var, _)| *var == id).map(|(_, err)| err)
        };
        own.or_else(|| self.poisoned.iter().find(|(var, _)| *var == id).map(|(_, err)| err))
    }

    /// Whether the op completes with no error to pass on.
    pub(in crate::op) fn is_ok(&self) -> bool {
        self.carry.is_none() && self.poisoned.is_empty()
    }
}

/// The profiler's clock: nanoseconds since the first look at it in this
/// process, so that the ops of every engine share one time line.
pub(crate) fn now_ns() -> u64 {
    static ORIGIN: OnceLock<std::time::Instant> = OnceLock::new();
    ORIGIN.get_or_init(std::time::Instant::now).elapsed().as_nanos() as u64
}

static NEXT_SEQ: AtomicU64 = AtomicU64::new(1);

thread_local! {
    /// This thread's name for profiles, made once.
    static THREAD: RefCell<Option<Arc<str>>> = const { RefCell::new(None) };
}

/// The calling thread's name (or its id, for a thread without one).
pub(crate) fn thread_label() -> Arc<str> {
    THREAD.with(|t| {
        t.borrow_mut()
            .get_or_insert_with(|| {
                let me = std::thread::current();
                match me.name() {
                    Some(name) => name.into(),
                    None => format!("{:?}", me.id()).into(),
                }
            })
            .clone()
    })
}

/// The watched op's steps (profiled, in a group, or both), out of line:
/// called only for an op whose flags say it is watched (`Flags::WATCHED`).
impl Header {
    #[cold]
    #[inline(never)]
    pub(crate) fn watch_started(&self) {
        if let Some(p) = self.profile() {
            p.started();
        }
        self.group_started();
    }

    /// Its body returned, or stored its result (`err`: how it failed).
    #[cold]
    #[inline(never)]
    pub(crate) fn watch_ended(&self, err: Option<&crate::error::Error>) {
        if let Some(p) = self.profile() {
            p.ended();
            if let Some(err) = err {
                p.outcome(Outcome::of(err));
            }
        }
        if let Some(err) = err {
            self.group_ended(err);
        }
    }

    /// It completed: its record goes to the engine, its group counts it
    /// out.
    #[cold]
    #[inline(never)]
    pub(crate) fn watch_finished(&self) {
        if let Some(p) = self.profile() {
            self.engine.profiled(p.finish(self));
        }
        self.group_finished();
    }
}

/// An op's profile while it is in the engine.
pub(crate) struct OpProfile {
    /// Its number in the profile (the order of pushes, across engines).
    pub(crate) seq: u64,
    pushed: u64,
    /// The pushing thread.
    pushed_by: Arc<str>,
    /// Times in `now_ns`, 0 until they happen.
    push_end: AtomicU64,
    ready: AtomicU64,
    start: AtomicU64,
    end: AtomicU64,
    outcome: AtomicU8,
    thread: Mutex<Option<Arc<str>>>,
    /// The ops whose last dependency this one released, by `seq`.
    released: Mutex<smallvec::SmallVec<[u64; 2]>>,
}

impl OpProfile {
    pub(crate) fn new() -> Self {
        Self {
            seq: NEXT_SEQ.fetch_add(1, Ordering::Relaxed),
            pushed: now_ns(),
            pushed_by: thread_label(),
            push_end: AtomicU64::new(0),
            ready: AtomicU64::new(0),
            start: AtomicU64::new(0),
            end: AtomicU64::new(0),
            outcome: AtomicU8::new(Outcome::Ok as u8),
            thread: Mutex::new(None),
            released: Mutex::new(smallvec::SmallVec::new()),
        }
    }

    /// Its push has appended it to its vars (on the pushing thread).
    pub(crate) fn push_ended(&self) {
        let _ = self.push_end.compare_exchange(0, now_ns(), Ordering::Relaxed, Ordering::Relaxed);
    }

    /// When it was pushed, and when its body started (if it did), on the
    /// profiler's clock.
    pub(crate) fn times(&self) -> (u64, Option<u64>) {
        let start = self.start.load(Ordering::Relaxed);
        (self.pushed, (start != 0).then_some(start))
    }

    /// It is queued on a pool, ready (the first time counts).
    pub(crate) fn ready(&self) {
        let _ = self.ready.compare_exchange(0, now_ns(), Ordering::Relaxed, Ordering::Relaxed);
    }

    /// Its body starts on this thread.
    pub(crate) fn started(&self) {
        let now = now_ns();
        let _ = self.ready.compare_exchange(0, now, Ordering::Relaxed, Ordering::Relaxed);
        self.start.store(now, Ordering::Relaxed);
        *lock(&self.thread) = Some(thread_label());
    }

    /// Its body returned, or stored its result (the first time counts: a
    /// sync body stores its result as it returns, and the op may complete
    /// inside that store; an async body returns before its token stores).
    pub(crate) fn ended(&self) {
        let _ = self.end.compare_exchange(0, now_ns(), Ordering::Relaxed, Ordering::Relaxed);
    }

    /// Its result is stored: how it ended.
    pub(crate) fn outcome(&self, outcome: Outcome) {
        self.outcome.store(outcome as u8, Ordering::Relaxed);
    }

    /// It released the last dependency of op `seq`.
    pub(crate) fn released(&self, seq: u64) {
        lock(&self.released).push(seq);
    }

    /// The record of the op, as it completes on this thread.
    pub(crate) fn finish(&self, header: &Header) -> OpRecord {
        let deps = header.deps.iter().map(|d| Dep {
            id: d.var.id(),
            write: d.access == crate::var::Access::Write,
            name: d.var.name_shared().cloned(),
        });
        let (ready, start, done) =
            (self.ready.load(Ordering::Relaxed), self.start.load(Ordering::Relaxed), now_ns());
        // An op may complete before its push returns (another thread let
        // it through and ran it): its push had appended it by the time it
        // was ready, the closest mark there is then.
        let push_end = [self.push_end.load(Ordering::Relaxed), ready, start, done]
            .into_iter()
            .find(|t| *t != 0)
            .unwrap_or(done);
        OpRecord {
            seq: self.seq,
            name: header.meta.name.clone(),
            group: header.group().map(|link| link.core.name.clone()),
            device: header.meta.device(),
            lane: header.meta.lane,
            priority: header.meta.priority,
            thread: lock(&self.thread).clone(),
            completed_on: thread_label(),
            pushed_by: self.pushed_by.clone(),
            pushed: self.pushed,
            push_end,
            ready,
            start,
            end: self.end.load(Ordering::Relaxed),
            done,
            deps: deps.collect(),
            released: std::mem::take(&mut *lock(&self.released)),
            outcome: Outcome::from_u8(self.outcome.load(Ordering::Relaxed)),
        }
    }
}
