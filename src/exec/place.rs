//! The one module that knows the topology: which devices and lanes exist,
//! which pool runs an op of a given device and lane, and whether a ready op
//! goes to a pool or runs on the thread that made it ready.

use std::sync::Arc;

use super::gpu_pools::{GpuSettings, Gpus};
use super::lazy::Lazy;
use super::pool::{HeldBack, Pool, ThreadHooks};
use super::this_thread;
use crate::device::{Device, Lane};
use crate::error::Error;
use crate::gpu::{Gpu, GpuLane};
use crate::metrics::PoolMetrics;
use crate::op::{Exec, ReadyList, TaskRef};
use crate::sync::small::SmallList;

/// Whether a ready op may run on the thread that pushed it when that
/// thread's feed is crowded, as far as the op tells: an op of `Cpu(0)`'s
/// normal lane (an op placed elsewhere asked for its pool's threads), of
/// priority 0 (only those go to a thread's own feed). Read on every push.
#[inline(always)]
fn may_run_on_pusher(task: &TaskRef) -> bool {
    let meta = &task.header().meta;
    meta.lane == Lane::Normal && meta.priority == 0 && matches!(meta.device(), Device::Cpu(0))
}

/// Whether this thread may run `task`, crowded, now: not inside a body
/// (which may wait for what it pushes) and not on a Tokio runtime's
/// thread, which must not run user code it did not ask for (an op pushed
/// with `inline_when_idle` asked).
#[cold]
fn may_run_here_now(task: &TaskRef) -> bool {
    !crate::op::job::in_user_body()
        && (task.header().meta.exec == Exec::InlineWhenIdle || tokio::runtime::Handle::try_current().is_err())
}

/// The pools an engine may start, as configured.
#[derive(Clone, Debug)]
pub(crate) struct Topology {
    /// Every op runs on the thread that makes it ready (the naive engine).
    pub(crate) naive: bool,
    pub(crate) cpu_devices: usize,
    pub(crate) cpu_workers: usize,
    pub(crate) priority_workers: usize,
    pub(crate) thread_name: String,
    /// How long an idle worker watches its queues before it parks.
    pub(crate) spin: std::time::Duration,
    /// Whether workers measure queue waits and run times (metrics).
    pub(crate) timing: bool,
    /// Ops of a pushing thread queued on a pool and not yet taken at which
    /// that thread runs its next ready ops itself; 0: never.
    pub(crate) pusher_runs_at: usize,
    /// The GPU devices' settings.
    pub(crate) gpu: GpuSettings,
    /// What the program runs on each worker thread, and its stack size.
    pub(crate) hooks: ThreadHooks,
}

/// What an op's body is, as far as its placement goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Runs {
    /// On a worker of its lane (or inline, if its lane says so).
    OnWorker,
    /// It only hands work on (a future op spawns, an acquire hands out
    /// guards): where the op becomes ready.
    WhereReady,
    /// A GPU op: on a worker of its GPU lane, owning a stream.
    OnGpu,
}

pub(crate) struct Dispatcher {
    topology: Topology,
    /// One normal pool per CPU device, started on first use.
    cpu: Vec<Lazy<Pool>>,
    /// The shared pool of prioritized CPU ops.
    priority: Lazy<Pool>,
    /// The GPU devices, opened on first use.
    gpu: Gpus,
    /// What the engine holds back, for idle CPU workers to push.
    held: Option<Arc<dyn HeldBack>>,
}

impl Dispatcher {
    /// Runs the ops a completion made ready (leaving `ready` empty) where
    /// their placement says: the engine's hook for the op layer.
    pub(crate) fn dispatch_ready(&self, ready: &mut ReadyList) {
        self.dispatch_successors(ready.drain(..));
    }

    pub(crate) fn new(topology: Topology, held: Option<Arc<dyn HeldBack>>) -> Self {
        let cpu = (0..topology.cpu_devices).map(|_| Lazy::default()).collect();
        let gpu = Gpus::new(
            topology.gpu.clone(),
            topology.thread_name.clone(),
            topology.timing,
            topology.hooks.clone(),
        );
        Self { topology, cpu, priority: Lazy::default(), gpu, held }
    }

    /// Checks an op's device and lane; decides where its body starts once
    /// it is ready. `runs`: what the body is (see [`Runs`]); `when_idle`:
    /// the op asks to run on the pushing thread while its pool is idle
    /// (only an op of a CPU device's normal lane may: see [`Exec::InlineWhenIdle`]).
    #[inline]
    pub(crate) fn place(
        &self,
        name: &str,
        device: Device,
        lane: Lane,
        runs: Runs,
        when_idle: bool,
    ) -> Result<Exec, Error> {
        // The common op, a CPU op for the normal lane of a CPU device whose
        // pool runs, goes to that pool: decided without the checks below.
        if let (Device::Cpu(i), Lane::Normal, Runs::OnWorker, false) = (device, lane, runs, when_idle)
            && self.cpu.get(i).is_some_and(|pool| pool.get().is_some())
        {
            return Ok(Exec::Pool);
        }
        self.place_checked(name, device, lane, runs, when_idle)
    }

    /// [`place`](Self::place), every case checked.
    #[inline(never)]
    fn place_checked(
        &self,
        name: &str,
        device: Device,
        lane: Lane,
        runs: Runs,
        when_idle: bool,
    ) -> Result<Exec, Error> {
        match (device, runs) {
            (Device::Gpu(_), Runs::OnGpu) => {
                // Pooled on the naive engine too: GPU work completes through
                // the poller there as well.
                self.gpu.place(name, device, lane)?;
                return Ok(Exec::Pool);
            }
            (Device::Gpu(i), _) => {
                return Err(Error::invalid(format!(
                    "op `{name}` targets gpu({i}) with a CPU body; GPU ops are pushed with run_gpu"
                )));
            }
            (Device::Cpu(i), Runs::OnGpu) => {
                return Err(Error::invalid(format!(
                    "op `{name}` is a GPU op (run_gpu) placed on cpu({i}); choose a GPU with .device(Device::Gpu(i))"
                )));
            }
            (Device::Cpu(i), _) if i >= self.topology.cpu_devices => {
                return Err(Error::invalid(format!(
                    "op `{name}` targets cpu({i}), but the engine has {} cpu device(s); see EngineBuilder::cpu_devices",
                    self.topology.cpu_devices
                )));
            }
            (Device::Cpu(_), _) => {}
        }
        match lane {
            Lane::CopyToGpu | Lane::CopyFromGpu | Lane::Collective => Err(Error::invalid(format!(
                "op `{name}`: lane {lane:?} is a GPU lane and needs a GPU device"
            ))),
            Lane::Inline => Ok(Exec::Inline),
            _ if runs == Runs::WhereReady => Ok(Exec::Inline),
            _ if self.topology.naive => Ok(Exec::Pool),
            _ => {
                // Started here, before the op reaches its vars: a pool that
                // cannot start refuses the push and leaves them untouched.
                self.pool(device, lane)?;
                let when_idle = when_idle && lane == Lane::Normal && runs == Runs::OnWorker;
                Ok(if when_idle { Exec::InlineWhenIdle } else { Exec::Pool })
            }
        }
    }

    /// The pool that runs `task`; `None` if it runs on the thread that made
    /// it ready (inline placement, the naive engine but for GPU ops).
    #[inline(always)]
    fn pool_for(&self, task: &TaskRef) -> Option<&Pool> {
        let meta = &task.header().meta;
        if meta.exec == Exec::Inline {
            return None;
        }
        match meta.device() {
            Device::Cpu(i) => (!self.topology.naive).then(|| {
                let cell = if meta.lane == Lane::Prioritized { &self.priority } else { &self.cpu[i] };
                cell.get().expect("an op's pool is started when it is pushed")
            }),
            Device::Gpu(i) => self.gpu.pool(i, meta.lane),
        }
    }

    /// Whether a ready op may run on this thread out of turn, taken by a
    /// wait for its group: on a worker, an op of that worker's own pool; on
    /// any other thread, one the pushing thread may run
    /// ([`may_run_on_pusher`]); and never while GPU work in flight may
    /// hold ready ops back (`gpu/early_release.rs`).
    pub(crate) fn may_run_out_of_turn(&self, task: &TaskRef) -> bool {
        if self.gpu.in_flight() || task.header().meta.exec != Exec::Pool || task.header().meta.nested() {
            return false;
        }
        match self.pool_for(task) {
            Some(pool) if pool.is_own_worker() => true,
            Some(_) => !crate::may_block::is_engine_thread() && may_run_on_pusher(task),
            None => false,
        }
    }

    /// Runs an op that became ready inside its push: on its pool, or here.
    pub(crate) fn dispatch_pushed(&self, task: TaskRef) {
        if self.gpu.in_flight() {
            return self.dispatch_fenced(task);
        }
        let Some(pool) = self.pool_for(&task) else {
            return self.run_here(task, true);
        };
        if task.header().meta.exec == Exec::InlineWhenIdle {
            return self.here_when_idle(pool, task);
        }
        self.to_pool(pool, task);
    }

    /// Queues an op made ready by its push on `pool`, or, if the pushing
    /// thread's own queue there is crowded, runs it here (see
    /// [`here_when_crowded`](Self::here_when_crowded)).
    #[inline(always)]
    fn to_pool(&self, pool: &Pool, task: TaskRef) {
        if self.topology.pusher_runs_at > 0 && may_run_on_pusher(&task) {
            if let Some(task) = pool.offer(task) {
                self.here_when_crowded(pool, task);
            }
        } else {
            pool.submit(task);
        }
    }

    /// Runs an op the pushing thread's feed handed back, crowded (its
    /// workers far behind): here, as libomp's pushing thread runs new
    /// tasks once its queue is full, unless this thread must not (see
    /// [`may_run_here_now`]); then on the pool after all.
    #[cold]
    fn here_when_crowded(&self, pool: &Pool, task: TaskRef) {
        if may_run_here_now(&task) {
            self.run_here(task, true);
        } else {
            pool.submit(task);
        }
    }

    /// Runs an op that asks to run on the pushing thread while its pool is
    /// idle here, if every worker of `pool` is parked (handing it over
    /// would cost a wake-up, more than a short op's run) and no other
    /// thread runs such an op now. Two callers running
    /// ops at once mean load: the pool's workers take it then, off the
    /// callers' threads. (A worker of the pool pushing from a body is not
    /// parked: its ops go to the pool.)
    /// Else the op goes to the pool as any op.
    #[cold]
    fn here_when_idle(&self, pool: &Pool, task: TaskRef) {
        let Some(claim) = pool.claim_caller() else {
            return self.to_pool(pool, task);
        };
        self.run_here(task, true);
        drop(claim);
    }

    /// The op, if no GPU work in flight on its vars holds it back; else
    /// `None`, and it is dispatched again once that work completes (see
    /// `gpu/early_release.rs`). Work of a device with a sticky fault resolves it
    /// with the fault at once (but for a deletion), and it goes on.
    #[inline(always)]
    fn unfenced(&self, task: TaskRef) -> Option<TaskRef> {
        if self.gpu.in_flight() { self.gpu.fenced(task) } else { Some(task) }
    }

    /// [`dispatch_pushed`](Self::dispatch_pushed) while GPU work is in flight.
    #[cold]
    fn dispatch_fenced(&self, task: TaskRef) {
        let Some(task) = self.gpu.fenced(task) else { return };
        match self.pool_for(&task) {
            Some(pool) => pool.submit(task),
            None => self.run_here(task, true),
        }
    }

    /// The lane of GPU `device` an op of `lane` runs on, the device opened
    /// and its pools started if they had not.
    ///
    /// # Errors
    ///
    /// No such device ([`Error::is_gpu_unavailable`]), its sticky fault
    /// ([`Error::is_gpu`]), or pools that cannot start.
    pub(crate) fn gpu_lane(&self, device: Device, lane: Lane) -> Result<GpuLane, Error> {
        self.gpu.lane(device, lane)
    }

    /// GPU `i`, opened (its pools started) if it had not been.
    ///
    /// # Errors
    ///
    /// As for [`gpu_lane`](Self::gpu_lane), but for the sticky fault.
    pub(crate) fn gpu(&self, i: usize) -> Result<Gpu, Error> {
        self.gpu.gpu(i)
    }

    /// Runs an op on this thread (see `thread::run_here`), unless the
    /// thread is unwinding from a panic: user code does not run inside
    /// someone else's unwinding, so the op goes to its device's pool
    /// (started now, even on the naive engine) and runs here only if that
    /// pool cannot start.
    fn run_here(&self, task: TaskRef, now: bool) {
        if std::thread::panicking() {
            let device = task.header().meta.device();
            let pool = match device {
                Device::Gpu(i) => {
                    self.gpu.pools(i).map(|p| &p.lane(Lane::Normal).expect("a GPU has a compute lane").0)
                }
                Device::Cpu(_) => self.pool(device, Lane::Normal),
            };
            match pool {
                Ok(pool) => return pool.submit(task),
                Err(err) => {
                    tracing::error!(target: "depengine", "{err}; running the op on an unwinding thread")
                }
            }
        }
        this_thread::run_here(task, now);
    }

    /// Runs the ops one completion made ready: the first pool op may go to
    /// this worker's next slot; the others for one pool are queued
    /// together, with one look for parked workers to wake.
    pub(crate) fn dispatch_successors(&self, tasks: impl Iterator<Item = TaskRef>) {
        let mut slot_offered = false;
        let mut batch: Option<(&Pool, SmallList<TaskRef, 8>)> = None;
        for task in tasks {
            let Some(task) = self.unfenced(task) else { continue };
            let Some(pool) = self.pool_for(&task) else {
                self.run_here(task, false);
                continue;
            };
            if !slot_offered {
                slot_offered = true;
                pool.submit_successor(task);
                continue;
            }
            match &mut batch {
                Some((p, list)) if std::ptr::eq(*p, pool) => list.push(task),
                _ => {
                    if let Some((p, mut list)) = batch.take() {
                        p.submit_all(list.drain(..));
                    }
                    let mut list = SmallList::new();
                    list.push(task);
                    batch = Some((pool, list));
                }
            }
        }
        if let Some((p, mut list)) = batch {
            p.submit_all(list.drain(..));
        }
    }

    #[inline]
    fn cell(&self, device: Device, lane: Lane) -> &Lazy<Pool> {
        match (device, lane) {
            (_, Lane::Prioritized) => &self.priority,
            (Device::Cpu(i), _) => &self.cpu[i],
            (Device::Gpu(_), _) => unreachable!("GPU pools are kept per device"),
        }
    }

    /// The pool for `device` and `lane`, started if it has not started.
    ///
    /// # Errors
    ///
    /// Its threads cannot start ([`Error::is_pool_unavailable`]); those
    /// that did are stopped, and a push after a back-off tries again
    /// (`lazy.rs`).
    #[inline(always)]
    fn pool(&self, device: Device, lane: Lane) -> Result<&Pool, Error> {
        match self.cell(device, lane).get() {
            Some(pool) => Ok(pool),
            None => self.start(device, lane),
        }
    }

    /// Starts the pool for `device` and `lane` (see [`pool`](Self::pool)).
    #[cold]
    fn start(&self, device: Device, lane: Lane) -> Result<&Pool, Error> {
        let Topology { thread_name: prefix, cpu_workers, priority_workers, .. } = &self.topology;
        let (name, workers, held) = match (device, lane) {
            (_, Lane::Prioritized) => (format!("{prefix}-prio"), *priority_workers, None),
            (Device::Cpu(i), _) => (format!("{prefix}-cpu{i}"), *cpu_workers, self.held.clone()),
            (Device::Gpu(_), _) => unreachable!("GPU pools are kept per device"),
        };
        let start = || {
            let tuning = (self.topology.spin, self.topology.timing, self.topology.pusher_runs_at);
            Pool::start(&name, workers, held, tuning, None, &self.topology.hooks)
                .map_err(|e| Error::pool_unavailable(&name, &e))
        };
        self.cell(device, lane).get_or_start(start, |_| true)
    }

    /// Whether every worker of `device`'s normal pool is parking (see
    /// [`Pool::all_parked`]); starts the pool if it has not started.
    /// `false` for a device the engine does not have (its push is refused).
    pub(crate) fn all_parked(&self, device: Device) -> bool {
        match device {
            Device::Cpu(i) if i < self.cpu.len() => {
                self.pool(device, Lane::Normal).is_ok_and(Pool::all_parked)
            }
            _ => false,
        }
    }

    /// Whether no worker of any CPU pool runs an op or looks for one:
    /// nothing in the engine makes progress by itself now.
    pub(crate) fn all_idle(&self) -> bool {
        self.pools().all(Pool::all_parked)
    }

    fn pools(&self) -> impl Iterator<Item = &Pool> {
        self.cpu.iter().chain(std::iter::once(&self.priority)).filter_map(Lazy::get)
    }

    /// The metrics of every pool started.
    pub(crate) fn pool_metrics(&self) -> Vec<PoolMetrics> {
        let mut all = Vec::new();
        let mut add = |device: Device, lane: Lane, pool: &Pool| {
            let sums = pool.sums();
            all.push(PoolMetrics {
                device,
                lane,
                name: pool.name().to_owned(),
                workers: pool.workers(),
                queued: pool.queued(),
                running: sums.running,
                ops_run: sums.ran,
                busy: sums.busy,
                queue_wait: sums.queue_wait,
                run_time: sums.run_time,
            });
        };
        for (i, cell) in self.cpu.iter().enumerate() {
            if let Some(pool) = cell.get() {
                add(Device::Cpu(i), Lane::Normal, pool);
            }
        }
        if let Some(pool) = self.priority.get() {
            add(Device::Cpu(0), Lane::Prioritized, pool);
        }
        self.gpu.each_pool(&mut add);
        all
    }

    /// Calls `f` on every op queued on a pool (see [`Pool::each_queued`]).
    pub(crate) fn each_queued(&self, mut f: impl FnMut(&TaskRef)) {
        self.pools().for_each(|pool| pool.each_queued(&mut f));
        self.gpu.each_queued(&mut f);
    }

    /// The feeds listed on `Cpu(0)`'s normal pool (0 if it has not started).
    #[cfg(all(test, not(depengine_loom)))]
    pub(crate) fn feeds_listed(&self) -> usize {
        self.cpu[0].get().map_or(0, Pool::feeds_listed)
    }

    /// Tells every worker to exit once idle.
    pub(crate) fn stop(&self) {
        self.pools().for_each(Pool::stop);
        self.gpu.stop();
    }

    /// Stops every worker and waits for the threads to exit.
    pub(crate) fn stop_and_join(&self) {
        self.pools().for_each(Pool::stop);
        self.pools().for_each(Pool::join);
        self.gpu.stop_and_join();
    }
}
