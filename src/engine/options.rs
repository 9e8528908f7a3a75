//! What the builders hand the push: an op's placement and policy
//! ([`OpOptions`]), what its body is ([`Body`]) and what it is to the engine
//! ([`Role`]).

use std::borrow::Cow;

use crate::device::{Device, Lane};

#[inline]
pub(super) fn bit_set(bits: u8, bit: u8) -> bool {
    bits & bit != 0
}

/// Placement and policy of an op, as given to the builder.
#[derive(Clone, Debug)]
pub(crate) struct OpOptions {
    pub(crate) name: Cow<'static, str>,
    pub(crate) device: Device,
    pub(crate) lane: Lane,
    pub(crate) priority: i32,
    /// Yes/no choices, one bit each (`OpOptions::NO_SKIP` …): in one byte,
    /// the options fill 48 bytes, which every push moves.
    bits: u8,
}

impl OpOptions {
    pub(crate) fn new(name: Cow<'static, str>) -> Self {
        Self { name, device: Device::Cpu(0), lane: Lane::Normal, priority: 0, bits: 0 }
    }

    /// Runs even if a var it uses carries an error.
    pub(crate) const NO_SKIP: u8 = 1;
    /// Cancelled if its handle is dropped before it starts.
    pub(crate) const CANCEL_ON_DROP: u8 = 1 << 1;
    /// Its own failure is not left on the vars it writes.
    pub(crate) const NO_POISON: u8 = 1 << 2;
    /// Its slot among the ops in flight was taken by a reservation.
    pub(crate) const RESERVED: u8 = 1 << 3;
    /// Recorded by the profiler even when it records only ops that opt in.
    pub(crate) const PROFILE: u8 = 1 << 4;
    /// Never recorded by the profiler.
    pub(crate) const NO_PROFILE: u8 = 1 << 5;
    /// Repairs the vars it writes: runs whatever they carry, and clears
    /// their errors.
    pub(crate) const REPAIR: u8 = 1 << 6;
    /// Runs on the pushing thread when ready at push and its pool is idle.
    pub(crate) const INLINE_WHEN_IDLE: u8 = 1 << 7;

    /// Sets `bit` to `on`.
    pub(crate) fn set(&mut self, bit: u8, on: bool) {
        if on {
            self.bits |= bit;
        } else {
            self.bits &= !bit;
        }
    }

    /// The yes/no choices, as bits.
    #[inline]
    pub(super) fn bits(&self) -> u8 {
        self.bits
    }

    /// Whether `bit` is set.
    #[inline]
    pub(crate) fn has(&self, bit: u8) -> bool {
        bit_set(self.bits, bit)
    }

    /// Options of an engine-internal op: run where it becomes ready.
    pub(super) fn internal(name: &'static str) -> Self {
        Self { lane: Lane::Inline, ..Self::new(name.into()) }
    }
}

/// What an op's body does, as far as the push is concerned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Body {
    /// A closure run to completion on a worker of its lane; it may join a
    /// bulk segment.
    Sync,
    /// A body that completes later (a completion token), on its lane.
    Async,
    /// A body that only hands work on (a future spawned, guards handed
    /// out): it runs where the op becomes ready.
    Hands,
    /// A GPU op's body: it enqueues work on its worker's stream, and the op
    /// completes when the event recorded behind that work completes.
    Gpu,
}

/// What engine-internal ops do besides user ops.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Role {
    User,
    /// A user's acquire: as a user op, but not counted among the ops in
    /// flight (it is a wait).
    Acquire,
    WaitForVar,
    Delete,
    /// A user op run by a bulk segment (a nested op).
    Member,
    /// A bulk segment.
    Segment,
}
