//! The pools of a GPU device: compute workers, a copy-to-GPU lane, a
//! copy-from-GPU lane and a prioritized lane, each worker owning its own
//! stream and binding the device's context once, as it starts.

use std::sync::Arc;

use super::place::Topology;
use super::pool::{Pool, ThreadInit};
use crate::device::Lane;
use crate::error::Error;
use crate::gpu::{self, Fences, GpuDevice, GpuLane};
use crate::op::TaskRef;

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
