//! Early release: a GPU op lets its vars go at *enqueue*, before its work
//! has run, and the work in flight is recorded per var beside the gates
//! (`README.md` beside this file, *Early release*, has the argument). The
//! whole protocol is here:
//!
//! * [`follow_in_flight`]: a GPU op about to run orders its stream behind
//!   the same-device work in flight on its vars (`cuStreamWaitEvent`);
//! * [`release_at_enqueue`]: once its work is enqueued, it records that
//!   work on its vars, then lets them go through the op layer's one hook
//!   (`op::op_cell::release_vars_early`); [`Released::completed`] forgets the
//!   work once the poller saw it run;
//! * [`Fences::held`]: any other consumer (a CPU op, a wait, an acquire, a
//!   deletion, another device's op) is held back until that work completes,
//!   by the executor's one hook (`exec`'s `fenced`), or fails with the
//!   device's sticky fault.
//!
//! Per var id, the fences keep the event of the last GPU write and those
//! of the GPU reads since, each with its device and stream. An entry goes
//! once its events are observed complete.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use super::GpuLane;
use super::backend::Stream;
use super::event::Event;
use crate::error::GpuFault;
use crate::sync::atomic::{AtomicUsize, Ordering};
use crate::sync::{Mutex, MutexGuard, lock};

/// One GPU access in flight: the device (its ordinal and its sticky
/// fault), the stream, the event behind it.
#[derive(Clone)]
pub(crate) struct InFlight {
    pub(crate) device: usize,
    pub(crate) fault: Arc<OnceLock<GpuFault>>,
    pub(crate) stream: usize,
    pub(crate) event: Event,
}

#[derive(Default)]
struct VarFence {
    write: Option<InFlight>,
    reads: Vec<InFlight>,
}

impl VarFence {
    /// What an access must follow: the last write, and for a write also
    /// the reads since.
    fn followed_by(&self, writes: bool) -> impl Iterator<Item = &InFlight> {
        self.write.iter().chain(self.reads.iter().filter(move |_| writes))
    }
}

/// The fences of one engine's vars.
pub(crate) struct Fences {
    map: Mutex<HashMap<u64, VarFence>>,
    /// Entries in `map`: zero on an engine with no GPU work in flight, so
    /// that other ops pay one load for the check.
    live: AtomicUsize,
}

/// What holds an op back: nothing, GPU work to wait for, or a device fault.
pub(crate) enum FenceWait {
    Free,
    /// Events of device `.0` to wait for (its poller waits; once they
    /// complete, the op is looked at again, and waits for another device's
    /// work if it still has some to wait for).
    Wait(usize, Vec<Event>),
    /// A var's GPU work failed with the device's sticky fault.
    Fault(usize, GpuFault),
}

impl Default for Fences {
    fn default() -> Self {
        Self { map: Mutex::new(HashMap::new()), live: AtomicUsize::new(0) }
    }
}

impl Fences {
    fn lock(&self) -> MutexGuard<'_, HashMap<u64, VarFence>> {
        lock(&self.map)
    }

    /// Whether any var has GPU work in flight.
    #[inline]
    pub(crate) fn any(&self) -> bool {
        self.live.load(Ordering::Acquire) != 0
    }

    /// The in-flight GPU work an op with `deps` (var id, writes?) must be
    /// ordered after: for a read, the var's last GPU write; for a write,
    /// that and the GPU reads since. `on`: the op's own device and stream,
    /// if it is a GPU op (its own device's work is left to the GPU: see
    /// [`gpu_waits`](Self::gpu_waits)).
    pub(crate) fn held(&self, deps: impl Iterator<Item = (u64, bool)>, on: Option<usize>) -> FenceWait {
        let map = self.lock();
        let mut wait: Option<(usize, Vec<Event>)> = None;
        for (id, writes) in deps {
            let Some(fence) = map.get(&id) else { continue };
            for f in fence.followed_by(writes) {
                if f.event.is_done() || Some(f.device) == on {
                    continue;
                }
                if let Some(fault) = f.fault.get() {
                    return FenceWait::Fault(f.device, fault.clone());
                }
                // One device's events at a time: its poller queries them
                // with its own context current. Once they completed, the
                // op is looked at again and finds the next device's.
                match &mut wait {
                    Some((device, events)) if *device == f.device => events.push(f.event.clone()),
                    Some(_) => {}
                    None => wait = Some((f.device, vec![f.event.clone()])),
                }
            }
        }
        wait.map_or(FenceWait::Free, |(device, events)| FenceWait::Wait(device, events))
    }

    /// The events a GPU op on `device`'s stream `stream` makes its stream
    /// wait for: the same-device work in flight it must follow, but for
    /// its own stream's (already in order).
    pub(crate) fn gpu_waits(
        &self,
        deps: impl Iterator<Item = (u64, bool)>,
        device: usize,
        stream: usize,
    ) -> Vec<Event> {
        let map = self.lock();
        let mut events: Vec<Event> = Vec::new();
        for (id, writes) in deps {
            let Some(fence) = map.get(&id) else { continue };
            for f in fence.followed_by(writes) {
                let own = f.device == device && f.stream == stream;
                if !own && !f.event.is_done() && !events.iter().any(|e| e.same(&f.event)) {
                    events.push(f.event.clone());
                }
            }
        }
        events
    }

    /// Records `flight` on each var of `deps`, before the op lets them go:
    /// a write replaces the var's fence (its stream waited for the old
    /// one), a read joins it.
    pub(crate) fn add(&self, deps: impl Iterator<Item = (u64, bool)>, flight: &InFlight) {
        let mut map = self.lock();
        for (id, writes) in deps {
            let fence = map.entry(id).or_default();
            if writes {
                *fence = VarFence { write: Some(flight.clone()), reads: Vec::new() };
            } else {
                fence.reads.push(flight.clone());
            }
        }
        self.live.store(map.len(), Ordering::Release);
    }

    /// Forgets every fence of the vars of `deps`: their work failed with
    /// a sticky fault, and a `wait_for_var` took that error (clearing it,
    /// as it clears a var's error), so the vars are usable again.
    pub(crate) fn clear(&self, deps: impl Iterator<Item = u64>) {
        let mut map = self.lock();
        for id in deps {
            map.remove(&id);
        }
        self.live.store(map.len(), Ordering::Release);
    }

    /// Forgets `event` on each var of `deps` once it completed.
    pub(crate) fn remove(&self, deps: impl Iterator<Item = u64>, event: &Event) {
        let mut map = self.lock();
        for id in deps {
            let Some(fence) = map.get_mut(&id) else { continue };
            if fence.write.as_ref().is_some_and(|f| f.event.same(event)) {
                fence.write = None;
            }
            fence.reads.retain(|f| !f.event.same(event));
            if fence.write.is_none() && fence.reads.is_empty() {
                map.remove(&id);
            }
        }
        self.live.store(map.len(), Ordering::Release);
    }
}

/// Orders the stream of a GPU op about to run behind the same-device GPU
/// work still in flight on its vars (`vars`: id, writes?): the stream waits
/// for those events on the GPU; no thread waits.
pub(crate) fn follow_in_flight(
    lane: &GpuLane,
    stream: &Stream,
    vars: impl Iterator<Item = (u64, bool)>,
) -> Result<(), GpuFault> {
    for event in lane.fences.gpu_waits(vars, lane.gpu.device.ordinal, stream.id) {
        stream.wait(event.raw())?;
    }
    Ok(())
}

/// A GPU op's vars let go at enqueue: what its completion undoes.
pub(crate) struct Released {
    fences: Arc<Fences>,
    event: Event,
}

impl Released {
    /// The op's work has run (its event was seen complete): its fences on
    /// `vars` go. Not called when the device faulted: the fences stay, so
    /// that the fault fails whoever comes for those vars.
    pub(crate) fn completed(self, vars: impl Iterator<Item = u64>) {
        self.fences.remove(vars, &self.event);
    }
}

/// Lets a GPU op's vars go now that its work is enqueued, where its lane
/// releases early: records that work (`event`, behind it on `stream`) on
/// each var of `vars`, *then* calls `release_vars`, the op layer's hook
/// that lets the vars go (the order is what the argument needs). That hook
/// refuses (false) for an op that carries an error to its vars: its fences
/// are taken back, and it lets its vars go at completion, as any op.
pub(crate) fn release_at_enqueue<I: Iterator<Item = (u64, bool)>>(
    lane: &GpuLane,
    stream: &Stream,
    event: &Event,
    vars: impl Fn() -> I,
    release_vars: impl FnOnce() -> bool,
) -> Option<Released> {
    if !lane.early {
        return None;
    }
    let device = &lane.gpu.device;
    let fault = device.fault_cell().clone();
    let flight = InFlight { device: device.ordinal, fault, stream: stream.id, event: event.clone() };
    lane.fences.add(vars(), &flight);
    if release_vars() {
        return Some(Released { fences: lane.fences.clone(), event: event.clone() });
    }
    lane.fences.remove(vars().map(|(id, _)| id), event);
    None
}

#[cfg(all(test, depengine_loom))]
mod loom_tests;
