//! The pools of a GPU device: compute workers, a copy-to-GPU lane, a
//! copy-from-GPU lane, a prioritized lane and a collectives lane, each worker owning its own
//! stream and binding the device's context once, as it starts.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use super::lazy::Lazy;
use super::pool::{Pool, ThreadHooks, ThreadInit};
use crate::device::{Device, Lane};
use crate::error::{Error, GpuFault};
use crate::gpu::{self, FenceWait as Fenced, Fences, Gpu, GpuDevice, GpuLane, MAX_GPU_DEVICES};
use crate::op::TaskRef;

/// The lanes of a GPU device, in the order of `GpuPools::lanes`.
const LANES: [(Lane, &str); 5] = [
    (Lane::Normal, "compute"),
    (Lane::CopyToGpu, "h2d"),
    (Lane::CopyFromGpu, "d2h"),
    (Lane::Prioritized, "prio"),
    (Lane::Collective, "coll"),
];

/// The engine's GPU settings, as configured.
#[derive(Clone, Debug)]
pub(crate) struct GpuSettings {
    /// Compute workers per GPU device.
    pub(crate) workers: usize,
    /// Workers per GPU device and copy lane.
    pub(crate) copy_workers: usize,
    /// GPUs `0..simulated` are simulated.
    pub(crate) simulated: usize,
    /// GPU ops let their vars go at enqueue (see `gpu/README.md`).
    pub(crate) early_release: bool,
    /// How long idle GPU workers and pollers watch for work.
    pub(crate) spin: Duration,
}

/// The GPU devices of an engine, opened on first use, and the record of
/// GPU work in flight per var.
pub(super) struct Gpus {
    settings: GpuSettings,
    /// Thread names' prefix, and the workers' and pollers' spin.
    thread_name: String,
    spin: Duration,
    /// Whether workers measure queue waits and run times (metrics).
    timing: bool,
    /// What the program runs on each worker thread.
    hooks: ThreadHooks,
    /// Each opened on first use; a device whose pools cannot start is
    /// tried again only after a back-off (`lazy.rs`).
    devices: Vec<Lazy<GpuPools>>,
    /// GPU work in flight per var, after GPU ops let their vars go at
    /// enqueue: what other ops are held back for (see `gpu/early_release.rs`).
    fences: Arc<Fences>,
    /// Devices opened.
    opened: AtomicUsize,
}

pub(super) struct GpuPools {
    device: Arc<GpuDevice>,
    lanes: Vec<(Pool, GpuLane)>,
}

/// The index of `lane` in `LANES`; `None` for a lane a GPU has not.
fn index(lane: Lane) -> Option<usize> {
    LANES.iter().position(|(l, _)| *l == lane)
}

impl GpuPools {
    /// Opens GPU `ordinal` and starts its pools.
    fn start(ordinal: usize, gpus: &Gpus) -> Result<Self, Error> {
        let name = format!("{}-gpu{ordinal}", gpus.thread_name);
        let simulated = ordinal < gpus.settings.simulated;
        let device = GpuDevice::open(ordinal, simulated, &name, gpus.spin)
            .map_err(|reason| Error::gpu_unavailable(ordinal, reason))?;
        let mut pools = Self { device: device.clone(), lanes: Vec::with_capacity(LANES.len()) };
        for (lane, suffix) in LANES {
            let workers = match lane {
                Lane::Normal => gpus.settings.workers,
                Lane::CopyToGpu | Lane::CopyFromGpu => gpus.settings.copy_workers,
                _ => 1,
            };
            match start_lane(&device, lane, &format!("{name}-{suffix}"), workers, gpus) {
                Ok(started) => pools.lanes.push(started),
                Err(err) => {
                    pools.stop_and_join();
                    return Err(err);
                }
            }
        }
        Ok(pools)
    }

    /// The pool and lane of `lane`.
    pub(super) fn lane(&self, lane: Lane) -> Option<&(Pool, GpuLane)> {
        index(lane).and_then(|i| self.lanes.get(i))
    }

    pub(super) fn device(&self) -> &Arc<GpuDevice> {
        &self.device
    }

    pub(super) fn pools(&self) -> impl Iterator<Item = &Pool> {
        self.lanes.iter().map(|(pool, _)| pool)
    }

    pub(super) fn each_queued(&self, f: &mut impl FnMut(&TaskRef)) {
        self.pools().for_each(|pool| pool.each_queued(&mut *f));
    }

    pub(super) fn stop(&self) {
        self.pools().for_each(Pool::stop);
        self.device.stop(false);
    }

    pub(super) fn stop_and_join(&self) {
        self.pools().for_each(Pool::stop);
        self.pools().for_each(Pool::join);
        self.device.stop(true);
    }
}

fn start_lane(
    device: &Arc<GpuDevice>,
    lane: Lane,
    name: &str,
    workers: usize,
    gpus: &Gpus,
) -> Result<(Pool, GpuLane), Error> {
    let unavailable = |fault: GpuFault| Error::gpu_unavailable(device.ordinal, fault.to_string());
    let streams =
        (0..workers).map(|_| device.new_stream(lane == Lane::Prioritized)).collect::<Result<Vec<_>, _>>();
    let streams = streams.map_err(unavailable)?;
    let fallback = streams[0].clone();
    let owner = device.clone();
    let init: ThreadInit = Arc::new(move |k| gpu::become_worker(&owner, lane, streams[k].clone()));
    // GPU ops never run on the thread that pushes them.
    let pool = Pool::start(name, workers, None, (gpus.spin, gpus.timing, 0), Some(init), &gpus.hooks)
        .map_err(|e| Error::pool_unavailable(name, &e))?;
    let early = gpus.settings.early_release;
    Ok((pool, GpuLane::new(device.clone(), lane, fallback, gpus.fences.clone(), early)))
}

impl Gpus {
    pub(super) fn new(settings: GpuSettings, thread_name: String, timing: bool, hooks: ThreadHooks) -> Self {
        let spin = settings.spin;
        let devices = (0..MAX_GPU_DEVICES).map(|_| Lazy::default()).collect();
        let (fences, opened) = (Arc::default(), AtomicUsize::new(0));
        Self { settings, thread_name, spin, timing, hooks, devices, fences, opened }
    }

    /// Whether any var has GPU work in flight (one load: see `gpu/early_release.rs`).
    #[inline(always)]
    pub(super) fn in_flight(&self) -> bool {
        self.fences.any()
    }

    /// Checks a GPU op's lane and opens its device (see [`lane`](Self::lane)).
    pub(super) fn place(&self, name: &str, device: Device, lane: Lane) -> Result<(), Error> {
        if lane == Lane::Inline {
            return Err(Error::invalid(format!(
                "op `{name}`: a GPU op runs on a worker owning a stream; lane Inline is for CPU ops"
            )));
        }
        self.lane_ref(device, lane).map(drop)
    }

    /// The lane of GPU `device` an op of `lane` runs on, the device opened
    /// and its pools started if they had not.
    ///
    /// # Errors
    ///
    /// No such device ([`Error::is_gpu_unavailable`]), its sticky fault
    /// ([`Error::is_gpu`]), or pools that cannot start.
    pub(super) fn lane(&self, device: Device, lane: Lane) -> Result<GpuLane, Error> {
        self.lane_ref(device, lane).cloned()
    }

    /// [`lane`](Self::lane), borrowed.
    fn lane_ref(&self, device: Device, lane: Lane) -> Result<&GpuLane, Error> {
        let Device::Gpu(i) = device else {
            return Err(Error::invalid(format!("{device} is not a GPU")));
        };
        let pools = self.pools(i)?;
        if let Some(fault) = pools.device().fault() {
            return Err(Error::gpu_sticky(i, fault.clone()));
        }
        let (_, gpu_lane) =
            pools.lane(lane).ok_or_else(|| Error::invalid(format!("a GPU has no lane {lane:?}")))?;
        Ok(gpu_lane)
    }

    /// GPU `i`, opened if it had not been (see [`lane`](Self::lane)).
    pub(super) fn gpu(&self, i: usize) -> Result<Gpu, Error> {
        Ok(Gpu { device: self.pools(i)?.device().clone() })
    }

    /// The pools of GPU `i`, started if they had not.
    pub(super) fn pools(&self, i: usize) -> Result<&GpuPools, Error> {
        let cell = self.devices.get(i).ok_or_else(|| {
            Error::gpu_unavailable(i, format!("an engine uses at most {MAX_GPU_DEVICES} GPU devices"))
        })?;
        if let Some(pools) = cell.get() {
            return Ok(pools);
        }
        let start = || {
            let pools = GpuPools::start(i, self)?;
            self.opened.fetch_add(1, Ordering::Release);
            Ok(pools)
        };
        // Threads the OS refused are not asked for again at once; a device
        // that is absent or faulty is looked at again by the next push.
        cell.get_or_start(start, Error::is_pool_unavailable)
    }

    /// The pool of GPU `i`'s `lane`, started when the op was pushed.
    #[cold]
    pub(super) fn pool(&self, i: usize, lane: Lane) -> Option<&Pool> {
        let pools = self.devices[i].get().expect("a GPU op's pools are started when it is pushed");
        pools.lane(lane).map(|(pool, _)| pool)
    }

    /// The op, if no GPU work in flight on its vars holds it back; else
    /// `None`, and it is dispatched again (through its engine) once that
    /// work completes. Work of a device with a sticky fault resolves it
    /// with the fault at once (but for a deletion), and it goes on.
    #[cold]
    pub(super) fn fenced(&self, task: TaskRef) -> Option<TaskRef> {
        let header = task.header();
        let on = match header.meta.device() {
            // With one device, all work in flight is this op's device's,
            // which orders it on the GPU: nothing to hold it back for.
            Device::Gpu(_) if self.opened.load(Ordering::Acquire) == 1 => return Some(task),
            Device::Gpu(i) => Some(i),
            Device::Cpu(_) => None,
        };
        let deps = header.deps.iter().map(|d| (d.var.id(), d.access == crate::var::Access::Write));
        match self.fences.held(deps, on) {
            Fenced::Free => Some(task),
            Fenced::Fault(ordinal, fault) => {
                if !header.meta.deletes() {
                    let err = Error::gpu(Some(header.meta.name.clone()), ordinal, fault);
                    task.resolve_early(err, true);
                }
                if header.meta.clears_error() {
                    self.fences.clear(header.deps.iter().map(|d| d.var.id()));
                }
                Some(task)
            }
            Fenced::Wait(ordinal, events) => {
                let pools = self.devices[ordinal].get().expect("a device with work in flight has started");
                let again = move |_| {
                    let engine = task.header().engine.clone();
                    let mut ready = crate::op::ReadyList::new();
                    ready.push(task);
                    engine.dispatch_ready(&mut ready);
                };
                pools.device().after_all(events, Box::new(again));
                None
            }
        }
    }

    fn started(&self) -> impl Iterator<Item = &GpuPools> {
        self.devices.iter().filter_map(Lazy::get)
    }

    pub(super) fn each_queued(&self, f: &mut impl FnMut(&TaskRef)) {
        self.started().for_each(|gpu| gpu.each_queued(f));
    }

    /// Calls `f` on every pool of every device opened, with its device and
    /// lane (for metrics).
    pub(super) fn each_pool(&self, f: &mut impl FnMut(Device, Lane, &Pool)) {
        for (i, gpu) in self.devices.iter().enumerate() {
            let Some(gpu) = gpu.get() else { continue };
            for ((pool, _), (lane, _)) in gpu.lanes.iter().zip(LANES) {
                f(Device::Gpu(i), lane, pool);
            }
        }
    }

    pub(super) fn stop(&self) {
        self.started().for_each(GpuPools::stop);
    }

    pub(super) fn stop_and_join(&self) {
        self.started().for_each(GpuPools::stop_and_join);
    }
}
