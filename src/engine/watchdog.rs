//! The hang explainer (`Engine::debug_pending`) and its watchdog: one look
//! at every live var of the engine (each under its lock, briefly) for the
//! ops queued on it and the ops holding it (see `var::cell`'s
//! `VarState::holders`), assembled into `crate::explain::Pending`.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Condvar, Mutex, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::shared::Shared;
use crate::explain::{Pending, PendingOp, PendingVar};
use crate::op::TaskRef;
use crate::op::now_ns;

/// An op's key in a report: its record's address.
fn key(op: &TaskRef) -> usize {
    op.as_ptr().as_ptr() as usize
}

/// One look at the engine's vars.
pub(super) fn pending(shared: &Shared) -> Pending {
    let mut ops: HashMap<usize, PendingOp> = HashMap::new();
    let mut order = Vec::new();
    let mut vars = Vec::new();
    let now = now_ns();
    // `pushed`: when a queued op was pushed, on the coarse clock (0 for a
    // holder: unknown).
    let mut note = |op: &TaskRef, pushed: u32| {
        let k = key(op);
        let entry = ops.entry(k).or_insert_with(|| {
            order.push(k);
            let header = op.header();
            let times = header.profile().map(|p| p.times());
            let ago = |t: u64| Duration::from_nanos(now.saturating_sub(t));
            PendingOp {
                key: k,
                name: header.meta.name.to_string(),
                group: header.group().map(|link| link.core.name.to_string()),
                waits_on: Vec::new(),
                holds: Vec::new(),
                // Exact for a profiled op, else on the coarse clock, below.
                pushed_ago: times.map(|(pushed, _)| ago(pushed)),
                started_ago: times.and_then(|(_, start)| start.map(ago)),
                waited_at_least: None,
                held_for: Vec::new(),
            }
        });
        if entry.pushed_ago.is_none() {
            entry.pushed_ago = crate::sync::coarse::since_u32(pushed);
        }
        k
    };
    shared.visit_vars(|cell, queued| {
        let (holders, reads, write) = cell.holders();
        if queued.is_empty() && holders.is_empty() && reads == 0 && !write {
            return;
        }
        // An op cancelled while queued waits only to leave: counted, not
        // listed as waiting.
        let cancelled = queued.iter().filter(|(op, _)| op.is_resolved_early()).count();
        let queued: Vec<usize> =
            queued.iter().filter(|(op, _)| !op.is_resolved_early()).map(|(op, at)| note(op, *at)).collect();
        let holders: Vec<(usize, Option<Duration>)> =
            holders.iter().map(|(op, since)| (note(op, 0), crate::sync::coarse::since(*since))).collect();
        vars.push((cell.label(), write, reads, holders, queued, cancelled));
    });
    for (label, write, reads, holders, queued, _) in vars.iter() {
        for k in queued {
            ops.get_mut(k).expect("noted").waits_on.push(label.clone());
        }
        for (k, held_for) in holders {
            let op = ops.get_mut(k).expect("noted");
            op.holds.push(label.clone());
            op.held_for.push(*held_for);
        }
        let _ = (write, reads);
    }
    Pending {
        ops: order.into_iter().filter_map(|k| ops.remove(&k)).collect(),
        vars: vars
            .into_iter()
            .map(|(label, write, reads, holders, queued, cancelled)| PendingVar {
                label,
                write,
                reads,
                holders: holders.into_iter().map(|(k, _)| k).collect(),
                queued,
                cancelled,
            })
            .collect(),
    }
}

/// An engine's watchdog thread: every half its threshold, a look at the
/// engine; each op seen waiting for longer than the threshold gets one
/// `tracing` warning naming its chain down to the holder at its end. It
/// sleeps on a condition variable, so that the engine's shutdown or drop
/// wakes it and joins it at once, whatever the threshold.
pub(super) struct Watchdog {
    /// Set to stop; the condition variable wakes the thread.
    stop: Arc<(Mutex<bool>, Condvar)>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl Watchdog {
    /// Starts the watchdog of `engine`, as thread `{name}-watchdog`.
    pub(super) fn start(engine: Weak<Shared>, threshold: Duration, name: &str) -> std::io::Result<Self> {
        let stop = Arc::new((Mutex::new(false), Condvar::new()));
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name(format!("{name}-watchdog"))
            .spawn(move || watch(&engine, threshold, &flag))?;
        Ok(Self { stop, thread: Mutex::new(Some(thread)) })
    }

    /// Stops the thread and waits for it to exit (unless called on it).
    pub(super) fn stop(&self) {
        let (flag, wake) = &*self.stop;
        *flag.lock().unwrap_or_else(|e| e.into_inner()) = true;
        wake.notify_all();
        let Some(thread) = self.thread.lock().unwrap_or_else(|e| e.into_inner()).take() else { return };
        if thread.thread().id() != std::thread::current().id() {
            let _ = thread.join();
        }
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The watchdog's loop, until `stop` is set or the engine is gone.
fn watch(engine: &Weak<Shared>, threshold: Duration, stop: &(Mutex<bool>, Condvar)) {
    let period = (threshold / 2).max(Duration::from_millis(1));
    let _clock = crate::sync::coarse::Keeper::new();
    let mut first_seen: HashMap<usize, Instant> = HashMap::new();
    let mut warned: HashSet<usize> = HashSet::new();
    loop {
        let (flag, wake) = stop;
        let stopped = flag.lock().unwrap_or_else(|e| e.into_inner());
        let (stopped, _) =
            wake.wait_timeout_while(stopped, period, |stopped| !*stopped).unwrap_or_else(|e| e.into_inner());
        if *stopped {
            return;
        }
        drop(stopped);
        crate::sync::coarse::tick();
        let Some(shared) = engine.upgrade() else { return };
        let mut report = pending(&shared);
        let closed = shared.tracker.is_closed();
        drop(shared);
        if closed && report.is_empty() {
            return;
        }
        let now = Instant::now();
        let waiting: HashSet<usize> = report.waiting().map(|op| op.key).collect();
        first_seen.retain(|k, _| waiting.contains(k));
        warned.retain(|k| waiting.contains(k));
        for k in &waiting {
            first_seen.entry(*k).or_insert(now);
        }
        for op in &mut report.ops {
            op.waited_at_least = first_seen.get(&op.key).map(|t| now - *t);
        }
        for op in report.waiting() {
            let waited = op.waited_at_least.unwrap_or_default();
            if waited >= threshold && warned.insert(op.key) {
                tracing::warn!(target: "depengine::watchdog", op = %op.name, ?waited, "{}", report.chain(op));
            }
        }
    }
}
