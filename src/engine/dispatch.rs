//! The one module that knows the topology: which pool runs an op of a given
//! device and lane, and how ops run on the current thread.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, OnceLock};

use super::config::{Config, EngineKind};
use super::graves;
use crate::device::{Device, Lane};
use crate::op::{Exec, Shell, TaskRef};
use crate::pool::{Held, Pool};
use crate::small::SmallList;

pub(crate) struct Dispatcher {
    naive: bool,
    cpu_workers: usize,
    priority_workers: usize,
    thread_name: String,
    /// One normal pool per CPU device, started on first use.
    cpu: Vec<OnceLock<Pool>>,
    /// The shared pool of prioritized CPU ops.
    priority: OnceLock<Pool>,
    /// The engine's open bulk segment, for idle CPU workers to push.
    held: Option<Arc<dyn Held>>,
}

impl Dispatcher {
    pub(crate) fn new(config: &Config, held: Option<Arc<dyn Held>>) -> Self {
        Self {
            naive: config.kind == EngineKind::Naive,
            cpu_workers: config.cpu_workers,
            priority_workers: config.priority_workers,
            thread_name: config.thread_name.clone(),
            cpu: (0..config.cpu_devices).map(|_| OnceLock::new()).collect(),
            priority: OnceLock::new(),
            held,
        }
    }

    /// The pool that runs `task`; `None` if it runs on the thread that made
    /// it ready (inline placement, the naive engine).
    fn pool_for(&self, task: &TaskRef) -> Option<&Pool> {
        let meta = &task.header().meta;
        (meta.exec == Exec::Pool && !self.naive).then(|| self.pool(meta.device(), meta.lane))
    }

    /// Runs an op that became ready inside its push: on its pool, or here.
    pub(crate) fn dispatch_pushed(&self, task: TaskRef) {
        match self.pool_for(&task) {
            Some(pool) => pool.submit(task),
            None => run_here(task, true),
        }
    }

    /// Runs the ops one completion made ready: the first pool op may go to
    /// this worker's next slot; the others for one pool are queued
    /// together, with one look for parked workers to wake.
    pub(crate) fn dispatch_successors(&self, tasks: impl Iterator<Item = TaskRef>) {
        let mut slot_offered = false;
        let mut batch: Option<(&Pool, SmallList<TaskRef, 8>)> = None;
        for task in tasks {
            let Some(pool) = self.pool_for(&task) else {
                run_here(task, false);
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

    fn pool(&self, device: Device, lane: Lane) -> &Pool {
        let cell = match (device, lane) {
            (_, Lane::Prioritized) => &self.priority,
            (Device::Cpu(i), _) => &self.cpu[i],
            (Device::Gpu(_), _) => unreachable!("gpu placement is refused at push"),
        };
        cell.get_or_init(|| {
            let prefix = &self.thread_name;
            let (name, workers, held) = match (device, lane) {
                (_, Lane::Prioritized) => (format!("{prefix}-prio"), self.priority_workers, None),
                (Device::Cpu(i), _) => (format!("{prefix}-cpu{i}"), self.cpu_workers, self.held.clone()),
                (Device::Gpu(_), _) => unreachable!("gpu placement is refused at push"),
            };
            Pool::start(&name, workers, held)
                .unwrap_or_else(|e| panic!("cannot start {name} worker threads: {e}"))
        })
    }

    /// Whether every worker of `device`'s normal pool is parking (see
    /// [`Pool::all_parked`]); starts the pool if it has not started.
    /// `false` for a device the engine does not have (its push is refused).
    pub(crate) fn all_parked(&self, device: Device) -> bool {
        match device {
            Device::Cpu(i) if i < self.cpu.len() => self.pool(device, Lane::Normal).all_parked(),
            _ => false,
        }
    }

    fn pools(&self) -> impl Iterator<Item = &Pool> {
        self.cpu.iter().chain(std::iter::once(&self.priority)).filter_map(OnceLock::get)
    }

    /// Tells every worker to exit once idle.
    pub(crate) fn stop(&self) {
        self.pools().for_each(Pool::stop);
    }

    /// Stops every worker and waits for the threads to exit.
    pub(crate) fn stop_and_join(&self) {
        self.stop();
        self.pools().for_each(Pool::join);
    }
}

thread_local! {
    /// Whether this thread is running ops through [`run_here`].
    static ACTIVE: Cell<bool> = const { Cell::new(false) };
    /// Ops queued to run on this thread after the one it is running.
    static LOCAL: RefCell<VecDeque<TaskRef>> = const { RefCell::new(VecDeque::new()) };
}

/// Runs `task` on this thread.
///
/// An op made ready while this thread already runs one (a successor released
/// by its completion) is queued and run after it, so chains of inline ops
/// never recurse. One made ready by a push runs at once (`now`), even inside
/// another op: the pusher may wait for it.
pub(crate) fn run_here(task: TaskRef, now: bool) {
    if ACTIVE.with(Cell::get) {
        if now {
            execute(task);
        } else {
            LOCAL.with(|local| local.borrow_mut().push_back(task));
        }
        return;
    }
    run_first(|| execute(task));
}

/// Runs `first`, then the ops queued on this thread meanwhile (see
/// [`run_here`]); the caller runs no op already.
fn run_first(first: impl FnOnce()) {
    struct Reset;
    impl Drop for Reset {
        fn drop(&mut self) {
            ACTIVE.with(|active| active.set(false));
            // Only if a panic escaped `execute`: the queued ops are dropped.
            LOCAL.with(|local| local.borrow_mut().clear());
        }
    }
    ACTIVE.with(|active| active.set(true));
    let _reset = Reset;
    first();
    while let Some(next) = LOCAL.with(|local| local.borrow_mut().pop_front()) {
        execute(next);
    }
}

/// Runs a ready op on a pool worker. If the worker then holds the op's last
/// reference, the record is stripped (see `graves`) and its shell kept in
/// `shells`, buried in the engine's graveyard every [`graves::BATCH`] ops.
pub(crate) fn run_on_worker(task: TaskRef, shells: &mut Vec<Shell>) {
    debug_assert!(!ACTIVE.with(Cell::get), "a worker runs one op at a time");
    // On the worker's reference: if it is the last one, the record is
    // reused below.
    run_first(|| run(&task));
    keep_shell(task, shells);
    if shells.len() >= graves::BATCH {
        bury(shells);
    }
}

/// Strips a finished op's record and adds its shell to `shells` if `task`
/// is its last reference; else drops the reference. Dropping what the
/// record holds may run a user destructor (a result nobody took):
/// contained like the op itself.
#[inline]
pub(crate) fn keep_shell(task: TaskRef, shells: &mut Vec<Shell>) {
    match Shell::strip(task) {
        Ok(shell) => {
            debug_assert!(
                shells.first().is_none_or(|s| Arc::ptr_eq(&s.header().shared, &shell.header().shared)),
                "shells of one engine"
            );
            shells.push(shell);
        }
        // Not the last reference: its holder frees the record.
        Err((_, None)) => {}
        Err((record, Some(payload))) => {
            tracing::error!(
                target: "depengine",
                "a panic escaped a destructor run when an op finished: {}",
                crate::error::panic_message(&*payload)
            );
            contain(move || drop(record));
        }
    }
}

/// Buries a worker's shells in their engine's graveyard.
pub(crate) fn bury(shells: &mut Vec<Shell>) {
    if let Some(first) = shells.first() {
        let shared = first.header().shared.clone();
        shared.graves.bury(shells);
    }
}

/// Executes an op and drops the reference; a panic that escapes either (a
/// user destructor run by the engine, such as a result dropped with a
/// detached handle) is logged and contained, so the thread, and the ops
/// queued on it, live on.
fn execute(task: TaskRef) {
    contain(move || {
        task.execute(&task);
        drop(task);
    });
}

/// Executes an op on the caller's reference (see [`execute`]).
fn run(task: &TaskRef) {
    contain(|| task.execute(task));
}

fn contain(f: impl FnOnce()) {
    if let Err(payload) = catch_unwind(AssertUnwindSafe(f)) {
        tracing::error!(
            target: "depengine",
            "a panic escaped an op, outside its body: {}",
            crate::error::panic_message(&*payload)
        );
    }
}
