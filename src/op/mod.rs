//! Ops: what an op is, whatever its body, and its life from push to
//! completion. `README.md` beside this file has the states, who owns the
//! record in each, its state word, and when it may be reused.
//!
//! This file holds the erased part of every op record, what the engine
//! reads whatever the body ([`Header`]): its placement and policy
//! ([`Meta`]), its deps, its state word, its place in a var's inbox and its
//! cold box; and what an op's steps tell the layers above besides its
//! engine's core (the ops a completion made ready, why a thread waits on a
//! handle and what its help found, whether any engine is cancelling).
//!
//! The files, each naming only files listed above it but for this one
//! (`tests/check_architecture.rs` keeps the layers):
//!
//! * `task_ref.rs`: the one reference to a record ([`TaskRef`]), its
//!   type's static vtable, the record's memory in the slab, and the state
//!   word ([`State`]);
//! * `engine_core.rs`: the one way up, to the engine that pushed the op,
//!   and nested ops (bulk execution's hook);
//! * `group.rs`: an op's part in its group;
//! * `cold.rs`: the box for what only some ops carry: errors, the nested
//!   handoff, span, profile, group link;
//! * `access.rs`: what an op declares, and its declarations' list;
//! * `slot.rs`: the result slot, the handle's typed reference and the
//!   completion token;
//! * `life.rs`: submit, the guards' [`LiveRef`], and the completion on the
//!   vars;
//! * `job.rs`: the typed body, the user API's bodies, and the op whose body
//!   runs on this thread;
//! * `op_cell.rs`: the typed record: its run, its store, its completion
//!   and its early resolution.

pub(crate) mod access;
mod cold;
pub(crate) mod engine_core;
mod group;
pub(crate) mod job;
mod life;
pub(crate) mod op_cell;
pub(crate) mod slot;
pub(crate) mod task_ref;

pub(crate) use access::{Decl, DepList};
pub(in crate::op) use cold::LeftOnVars;
pub(crate) use cold::now_ns;
pub(crate) use engine_core::{EngineCore, EngineRef, Hooks};
pub(crate) use group::{GroupCore, REASON as GROUP_REASON};
pub(crate) use life::{LiveRef, submit};
pub(crate) use task_ref::{MAX_DECLS, State, TaskRef, TaskVtable, dealloc, let_go};

use self::cold::ColdCell;
use crate::device::{Device, Lane};
use crate::sync::atomic::{AtomicU32, Ordering};
use crate::sync::small::SmallList;
use crate::var::Access;
use crate::var::inbox::{Link, Linked};
use std::borrow::Cow;

/// Where an op's body runs once it is ready.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Exec {
    /// On a worker of the pool for the op's device and lane.
    Pool,
    /// On the thread that made it ready (engine-internal bodies, inline ops,
    /// future ops whose start only spawns).
    Inline,
    /// On the thread that pushed it, if it is ready at push and every
    /// worker of its pool is parked; else on a worker of its pool (an op
    /// pushed with `inline_when_idle`).
    InlineWhenIdle,
}

/// A device in 4 bytes: the ordinal, with the top bit set for a GPU
/// (ordinals of 2^31 and above are refused at push).
#[derive(Clone, Copy, Debug)]
pub(crate) struct PackedDevice(u32);

const GPU: u32 = 1 << 31;

impl PackedDevice {
    /// Packs a device; `None` if its ordinal does not fit.
    #[inline]
    pub(crate) fn new(device: Device) -> Option<Self> {
        let (gpu, ordinal) = match device {
            Device::Cpu(i) => (0, i),
            Device::Gpu(i) => (GPU, i),
        };
        let ordinal = u32::try_from(ordinal).ok().filter(|&o| o < GPU)?;
        Some(Self(gpu | ordinal))
    }

    #[inline]
    pub(crate) fn get(self) -> Device {
        let ordinal = (self.0 & !GPU) as usize;
        if self.0 & GPU != 0 { Device::Gpu(ordinal) } else { Device::Cpu(ordinal) }
    }
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
    /// What kind of op it is, as bits (see [`Flags`]).
    pub(crate) flags: Flags,
    /// Who reads its result.
    pub(crate) handle: HandleKind,
    /// It takes (clears) the error of each var it writes as it is let
    /// through there, and passes on none it saw: it repairs them (see
    /// `cold.rs`). Rarely set, and read only on the error paths: a byte
    /// of padding, not a bit of `flags`, whose byte is full.
    pub(crate) repairs: bool,
    /// Recorded by the profiler (its cold box holds its profile; its
    /// `WATCHED` bit is set). Padding too.
    pub(crate) profiled: bool,
    pub(crate) name: Cow<'static, str>,
}

/// An op's yes/no properties, one bit each: they fit the bytes left before
/// the name.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Flags(u8);

impl Flags {
    /// Runs even if a var it uses carries an error.
    pub(crate) const NO_SKIP: u8 = 1;
    /// Takes (clears) the error of the var it reads: `wait_for_var`.
    pub(crate) const CLEARS_ERROR: u8 = 1 << 1;
    /// A user op: cancelled, not run, by a cancelling shutdown.
    pub(crate) const CANCELLABLE: u8 = 1 << 2;
    /// Deletes its one (written) var: appended with `append_delete`.
    pub(crate) const DELETES: u8 = 1 << 3;
    /// Run by a parent op, which holds its vars and publishes it (see
    /// `engine_core.rs`).
    pub(crate) const NESTED: u8 = 1 << 4;
    /// Its own failure is not left on the vars it writes (it promises it
    /// left them consistent).
    pub(crate) const NO_POISON: u8 = 1 << 5;
    /// Counted against the engine's limit of ops in flight: gives its slot
    /// back when it is published.
    pub(crate) const COUNTED: u8 = 1 << 6;
    /// Its steps are told to its cold box: it is profiled (`Meta::profiled`)
    /// or in a group (`group.rs`), or both. The one bit an op in neither
    /// pays for.
    pub(crate) const WATCHED: u8 = 1 << 7;

    /// The flags whose bits are set in `bits`.
    pub(crate) const fn new(bits: u8) -> Self {
        Self(bits)
    }

    /// `bit` set if `on`.
    pub(crate) const fn with(self, bit: u8, on: bool) -> Self {
        if on { Self(self.0 | bit) } else { Self(self.0 & !bit) }
    }

    #[inline]
    const fn has(self, bit: u8) -> bool {
        self.0 & bit != 0
    }
}

/// Who reads an op's result.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum HandleKind {
    /// Pushed without a handle: nobody will.
    Detached,
    /// Its handle; dropped, the handle detaches the op, which still runs.
    Handle,
    /// Its handle; dropped before the op starts, it cancels the op.
    CancelOnDrop,
}

impl Meta {
    /// Runs even if a var it uses carries an error.
    #[inline]
    pub(crate) fn no_skip(&self) -> bool {
        self.flags.has(Flags::NO_SKIP)
    }

    /// Takes (clears) the error of the var it reads: `wait_for_var`.
    #[inline]
    pub(crate) fn clears_error(&self) -> bool {
        self.flags.has(Flags::CLEARS_ERROR)
    }

    /// Repairs the vars it writes (see the field).
    #[inline]
    pub(crate) fn repairs(&self) -> bool {
        self.repairs
    }

    /// A user op: cancelled, not run, by a cancelling shutdown.
    #[inline]
    pub(crate) fn cancellable(&self) -> bool {
        self.flags.has(Flags::CANCELLABLE)
    }

    /// Deletes its one (written) var.
    #[inline]
    pub(crate) fn deletes(&self) -> bool {
        self.flags.has(Flags::DELETES)
    }

    /// Run by a parent op (see `engine_core.rs`).
    #[inline]
    pub(crate) fn nested(&self) -> bool {
        self.flags.has(Flags::NESTED)
    }

    /// Counted against the engine's limit of ops in flight.
    #[inline]
    pub(crate) fn counted(&self) -> bool {
        self.flags.has(Flags::COUNTED)
    }

    /// Recorded by the profiler.
    #[inline]
    pub(crate) fn profiled(&self) -> bool {
        self.profiled
    }

    /// Profiled, or in a group: its steps are told to its cold box.
    #[inline]
    pub(crate) fn watched(&self) -> bool {
        self.flags.has(Flags::WATCHED)
    }

    /// Its own failure is left on the vars it writes (the default).
    #[inline]
    pub(crate) fn poisons(&self) -> bool {
        !self.flags.has(Flags::NO_POISON)
    }

    /// Whether the op was pushed without a handle.
    #[inline]
    pub(crate) fn detached(&self) -> bool {
        self.handle == HandleKind::Detached
    }

    /// The op's device.
    #[inline]
    pub(crate) fn device(&self) -> Device {
        self.device.get()
    }
}

/// The erased part of every op, at the start of its record.
///
/// Laid out in declaration order: what a worker completing another op reads
/// and writes on this one when it lets it through (the reference count, the
/// counts, the flags, the inbox link, the placement) sits in its first 64
/// bytes, so that releasing a successor and sending it to its pool touch one
/// or two cache lines of it instead of three.
#[repr(C)]
pub(crate) struct Header {
    /// Its flags and its counts: deps not yet let through, the body's and
    /// the guards' live counts, the [`TaskRef`]s to it (`task_ref.rs`).
    pub(crate) state: State,
    /// The record type's functions, set as the record is placed.
    vtable: &'static TaskVtable,
    /// Until the op is ready, when it was pushed, on the explainer's
    /// coarse clock (`sync::coarse`, milliseconds, wrapping); once it is
    /// queued on a pool, when that was, in the pool's ticks, while timing
    /// metrics are on (`exec::stats`). In the padding too.
    pub(super) ready_at: AtomicU32,
    /// Its place in a var's inbox, if it has one var (see `var::inbox`):
    /// read by the worker that takes it out, which then lets it through.
    link: Link<TaskRef>,
    pub(crate) meta: Meta,
    pub(crate) deps: DepList,
    /// The engine: the way up (see `engine_core.rs`).
    pub(crate) engine: EngineRef,
    /// What only some ops carry (errors, a nested op's handoff, span,
    /// profile), allocated only when an op has one (`cold.rs`).
    pub(super) cold: ColdCell,
}

impl Header {
    #[inline(always)]
    pub(crate) fn new(meta: Meta, deps: DepList, engine: EngineRef) -> Self {
        Self {
            state: State::new(deps.len()),
            vtable: &task_ref::UNPLACED,
            ready_at: AtomicU32::new(crate::sync::coarse::now_ms() as u32),
            link: Link::new(),
            cold: cold::at_push(&meta),
            meta,
            deps,
            engine,
        }
    }

    /// Stamps the op as queued at `tick` (timing metrics).
    #[inline]
    pub(crate) fn set_ready_at(&self, tick: u32) {
        self.ready_at.store(tick, Ordering::Relaxed);
    }

    /// When the op was queued (timing metrics): ordered before the worker's
    /// read by the queue that handed the op over. Before the op is ready,
    /// when it was pushed (see the field).
    #[inline]
    pub(crate) fn ready_at(&self) -> u32 {
        self.ready_at.load(Ordering::Relaxed)
    }

    /// A GPU op let its vars go at enqueue (`op_cell::release_vars_early`):
    /// its completion leaves them alone. `Relaxed`: read by whoever
    /// completes the op, after the poller saw the event that the setter
    /// registered after setting it.
    #[inline]
    pub(in crate::op) fn vars_gone(&self) -> bool {
        self.state.load(Ordering::Relaxed) & task_ref::VARS_GONE != 0
    }
}

/// A header of a CPU op of the test engine named `name`, with no deps and
/// no flag set (unit tests and models of the record alone).
#[cfg(test)]
pub(crate) fn test_header(name: &'static str) -> Header {
    let meta = Meta {
        device: PackedDevice::new(Device::Cpu(0)).expect("CPU 0 packs"),
        priority: 0,
        lane: Lane::Normal,
        exec: Exec::Inline,
        flags: Flags::new(0),
        handle: HandleKind::Detached,
        repairs: false,
        profiled: false,
        name: name.into(),
    };
    Header::new(meta, DepList::new(), engine_core::test_engine())
}

impl Linked for TaskRef {
    #[inline]
    fn link(&self) -> &Link<Self> {
        &self.header().link
    }

    #[inline]
    fn sole_access(&self) -> Access {
        let deps = &self.header().deps;
        debug_assert_eq!(deps.len(), 1, "only ops with one var go through an inbox");
        deps.first().expect("one var").access
    }
}

/// Fetches the lines of an op's record that letting it through and sending
/// it to its pool touch: the header's hot prefix, two lines (see
/// [`Header`]'s layout), with no look at the record's size.
#[inline]
pub(crate) fn prefetch_hot(task: &TaskRef) {
    crate::sync::prefetch::for_write(task.as_ptr().as_ptr().cast::<u8>(), 64);
}

/// Ops a completion made ready, in the order their vars let them through.
pub(crate) type ReadyList = SmallList<TaskRef, 4>;

/// Why a thread waiting on an op's handle calls `EngineCore::wait`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Wait {
    /// A nested op's handle is waited on: its parent may still be held
    /// back by the engine, which is to push it now (see `engine_core.rs`).
    OnNested,
    /// A thread blocks on the handle: run one op this thread may run
    /// meanwhile (one it queued to run after its current op; on a worker,
    /// one of its pool's queue, where the op waited for may be), and say
    /// what it found.
    Blocked,
}

/// What `EngineCore::wait` found to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Help {
    /// It ran an op.
    Ran,
    /// Nothing now; this thread is a worker, whose pool may get work that
    /// nobody will wake it for: look again soon.
    Later,
    /// Nothing, ever, until this thread's wait ends: park until woken.
    Nothing,
}

/// Engines of this process that have begun a cancelling shutdown (ever):
/// while there are none, an op's start does not ask its own engine whether
/// it is cancelling. A static, so std's atomic
/// even under loom: it orders nothing (the start that misses a shutdown
/// begun meanwhile is one that raced with it, as reading the engine's own
/// flag could).
static CANCELLING: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// An engine begins a cancelling shutdown: from now on every op's start
/// asks its engine.
pub(crate) fn note_cancelling() {
    CANCELLING.fetch_add(1, std::sync::atomic::Ordering::Release);
}

/// Whether any engine of this process has begun a cancelling shutdown.
#[inline]
pub(crate) fn any_cancelling() -> bool {
    CANCELLING.load(std::sync::atomic::Ordering::Acquire) != 0
}
