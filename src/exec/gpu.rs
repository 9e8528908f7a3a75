//! The pools of a GPU device: compute workers, a copy-to-GPU lane, a
//! copy-from-GPU lane and a prioritized lane, each worker owning its own
//! stream and binding the device's context once, as it starts.

use std::sync::Arc;

use super::place::{Dispatcher, Topology};
use super::pool::{Pool, ThreadInit, lock};
use crate::device::{Device, Lane};
use crate::error::Error;
use crate::gpu::{self, Fences, GpuDevice, GpuLane, Held as Fenced, MAX_GPU_DEVICES};
use crate::op::{Exec, TaskRef};

/// The lanes of a GPU device, in the order of `GpuPools::lanes`.
const LANES: [(Lane, &str); 4] = [
    (Lane::Normal, "compute"),
    (Lane::CopyToGpu, "h2d"),
    (Lane::CopyFromGpu, "d2h"),
    (Lane::Prioritized, "prio"),
];

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
    pub(super) fn start(ordinal: usize, topology: &Topology, fences: &Arc<Fences>) -> Result<Self, Error> {
        let name = format!("{}-gpu{ordinal}", topology.thread_name);
        let simulated = ordinal < topology.simulated_gpus;
        let device = GpuDevice::open(ordinal, simulated, &name, topology.spin)
            .map_err(|reason| Error::gpu_unavailable(ordinal, reason))?;
        let mut pools = Self { device: device.clone(), lanes: Vec::with_capacity(LANES.len()) };
        for (lane, suffix) in LANES {
            let workers = match lane {
                Lane::Normal => topology.gpu_workers,
                Lane::CopyToGpu | Lane::CopyFromGpu => topology.gpu_copy_workers,
                _ => 1,
            };
            match start_lane(&device, lane, &format!("{name}-{suffix}"), workers, topology, fences) {
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
    topology: &Topology,
    fences: &Arc<Fences>,
) -> Result<(Pool, GpuLane), Error> {
    let unavailable = |reason: String| Error::gpu_unavailable(device.ordinal, reason);
    let streams =
        (0..workers).map(|_| device.new_stream()).collect::<Result<Vec<_>, _>>().map_err(unavailable)?;
    let fallback = streams[0].clone();
    let owner = device.clone();
    let init: ThreadInit = Arc::new(move |k| gpu::become_worker(&owner, lane, streams[k].clone()));
    let pool = Pool::start(name, workers, None, topology.spin, Some(init))
        .map_err(|e| Error::pool_unavailable(name, &e))?;
    Ok((pool, GpuLane::new(device.clone(), lane, fallback, fences.clone(), topology.gpu_early_release)))
}

/// The GPU side of placement and dispatch.
impl Dispatcher {
    /// Places a GPU op: on its device's lane pool (started now), also on
    /// the naive engine, whose GPU work completes through the poller too.
    pub(super) fn place_gpu(&self, name: &str, device: Device, lane: Lane) -> Result<Exec, Error> {
        if lane == Lane::Inline {
            return Err(Error::invalid(format!(
                "op `{name}`: a GPU op runs on a worker owning a stream; lane Inline is for CPU ops"
            )));
        }
        self.gpu_lane(device, lane)?;
        Ok(Exec::Pool)
    }

    /// The lane of GPU `device` an op of `lane` runs on, the device opened
    /// and its pools started if they had not.
    ///
    /// # Errors
    ///
    /// No such device ([`Error::is_gpu_unavailable`]), its sticky fault
    /// ([`Error::is_gpu`]), or pools that cannot start.
    pub(crate) fn gpu_lane(&self, device: Device, lane: Lane) -> Result<GpuLane, Error> {
        let Device::Gpu(i) = device else {
            return Err(Error::invalid(format!("{device} is not a GPU")));
        };
        let pools = self.gpu_pools(i)?;
        if let Some(fault) = pools.device().fault() {
            return Err(Error::gpu(
                None,
                i,
                format!("{fault} (a sticky fault: the device takes no more work)"),
            ));
        }
        let (_, gpu_lane) =
            pools.lane(lane).ok_or_else(|| Error::invalid(format!("a GPU has no lane {lane:?}")))?;
        Ok(gpu_lane.clone())
    }

    /// GPU `i`, opened (its pools started) if it had not been.
    ///
    /// # Errors
    ///
    /// As for [`gpu_lane`](Self::gpu_lane), but for the sticky fault.
    pub(crate) fn gpu(&self, i: usize) -> Result<crate::gpu::Gpu, Error> {
        let pools = self.gpu_pools(i)?;
        Ok(crate::gpu::Gpu { device: pools.device().clone() })
    }

    /// The pools of GPU `i`, started if they had not.
    pub(super) fn gpu_pools(&self, i: usize) -> Result<&GpuPools, Error> {
        let cell = self.gpu.get(i).ok_or_else(|| {
            Error::gpu_unavailable(i, format!("an engine uses at most {MAX_GPU_DEVICES} GPU devices"))
        })?;
        if let Some(pools) = cell.get() {
            return Ok(pools);
        }
        let _starting = lock(&self.starting);
        if let Some(pools) = cell.get() {
            return Ok(pools);
        }
        let pools = GpuPools::start(i, &self.topology, &self.fences)?;
        Ok(cell.get_or_init(|| pools))
    }

    /// The pool of GPU `i`'s `lane`, started when the op was pushed.
    #[cold]
    pub(super) fn gpu_pool(&self, i: usize, lane: Lane) -> Option<&Pool> {
        let pools = self.gpu[i].get().expect("a GPU op's pools are started when it is pushed");
        pools.lane(lane).map(|(pool, _)| pool)
    }

    /// [`dispatch_pushed`](Self::dispatch_pushed) while GPU work is in flight.
    #[cold]
    pub(super) fn dispatch_fenced(&self, task: TaskRef) {
        let Some(task) = self.fenced(task) else { return };
        match self.pool_for(&task) {
            Some(pool) => pool.submit(task),
            None => self.run_here(task, true),
        }
    }

    /// [`unfenced`](Self::unfenced) while GPU work is in flight.
    #[cold]
    pub(super) fn fenced(&self, task: TaskRef) -> Option<TaskRef> {
        let header = task.header();
        let on = match header.meta.device() {
            Device::Gpu(i) => Some(i),
            Device::Cpu(_) => None,
        };
        let deps = header.deps.iter().map(|d| (d.var.id(), d.access == crate::var::Access::Write));
        match self.fences.held(deps, on) {
            Fenced::Free => Some(task),
            Fenced::Fault(ordinal, fault) => {
                if !header.meta.deletes {
                    let err = Error::gpu(Some(header.meta.name.clone()), ordinal, fault);
                    task.resolve_early(&task, err, true);
                }
                Some(task)
            }
            Fenced::Wait(ordinal, events) => {
                let pools = self.gpu[ordinal].get().expect("a device with work in flight has started");
                pools.device().after_all(
                    events,
                    Box::new(move |_| {
                        let host = task.header().host.clone();
                        let mut ready = crate::op::ReadyList::new();
                        ready.push(task);
                        host.dispatch_ready(&mut ready);
                    }),
                );
                None
            }
        }
    }
}
