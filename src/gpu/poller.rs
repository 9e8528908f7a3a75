//! One poller thread per GPU device turns event completions into
//! callbacks: it queries the oldest pending event of each stream (events
//! of one stream complete in order), spins briefly while work is pending,
//! backs off, and, with nothing pending, watches for a registration for
//! the same spin before it parks; a registration wakes it.
//! It never blocks on the GPU. A query that fails is the device's sticky
//! fault: every pending callback then gets it, and so does every later one.

use std::collections::{HashMap, VecDeque};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::backend::Backend;
use super::blocking;
use super::event::Event;
use crate::error::GpuFault;

/// What to do once an event completed (`Ok`) or the device faulted.
pub(crate) type Done = Box<dyn FnOnce(Result<(), GpuFault>) + Send>;

/// A callback to run, with what it is told.
type Called = (Done, Result<(), GpuFault>);

/// The longest sleep between two polls while work is pending: how late, at
/// most, the poller sees a long kernel end.
const MAX_BACKOFF: Duration = Duration::from_micros(200);
const FIRST_BACKOFF: Duration = Duration::from_micros(10);

pub(crate) struct Poller {
    shared: Arc<Shared>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

struct Shared {
    state: Mutex<State>,
    /// Registrations so far: what an idle poller watches before it parks.
    arrivals: AtomicU64,
    wake: Condvar,
    backend: Backend,
    fault: Arc<OnceLock<GpuFault>>,
    spin: Duration,
}

#[derive(Default)]
struct State {
    /// Per stream id, its pending events in record order.
    streams: HashMap<usize, VecDeque<(Event, Done)>>,
    /// Callbacks waiting for several events, of any streams.
    waiters: Vec<(Vec<Event>, Done)>,
    pending: usize,
    /// The poller sleeps on `wake` (parked or backing off).
    sleeping: bool,
    stopping: bool,
    /// Callbacks of single events (op completions) run so far.
    completed: u64,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Poller {
    pub(crate) fn start(
        name: &str,
        backend: Backend,
        fault: Arc<OnceLock<GpuFault>>,
        spin: Duration,
    ) -> std::io::Result<Self> {
        let arrivals = AtomicU64::new(0);
        let shared = Arc::new(Shared {
            state: Mutex::default(),
            arrivals,
            wake: Condvar::new(),
            backend,
            fault,
            spin,
        });
        let run = shared.clone();
        let thread = std::thread::Builder::new().name(format!("{name}-poll")).spawn(move || run.run())?;
        Ok(Self { shared, thread: Mutex::new(Some(thread)) })
    }

    /// Calls `done` once `event`, the latest recorded on stream `stream`,
    /// has completed.
    pub(crate) fn after(&self, stream: usize, event: Event, done: Done) {
        let mut state = lock(&self.shared.state);
        if let Some(fault) = self.shared.fault.get() {
            drop(state);
            return done(Err(fault.clone()));
        }
        state.streams.entry(stream).or_default().push_back((event, done));
        self.shared.added(state);
    }

    /// Calls `done` once every one of `events` has completed.
    pub(crate) fn after_all(&self, events: Vec<Event>, done: Done) {
        let mut state = lock(&self.shared.state);
        if let Some(fault) = self.shared.fault.get() {
            drop(state);
            return done(Err(fault.clone()));
        }
        state.waiters.push((events, done));
        self.shared.added(state);
    }

    /// Events of ops observed complete so far.
    pub(crate) fn completed(&self) -> u64 {
        lock(&self.shared.state).completed
    }

    /// Stops the thread once nothing is pending; with `join`, waits for
    /// it to exit (unless called on it).
    pub(crate) fn stop(&self, join: bool) {
        lock(&self.shared.state).stopping = true;
        self.shared.wake.notify_all();
        if !join {
            return;
        }
        let thread = lock(&self.thread).take();
        if let Some(thread) = thread.filter(|t| t.thread().id() != std::thread::current().id()) {
            let _ = thread.join();
        }
    }
}

impl Shared {
    fn added(&self, mut state: MutexGuard<'_, State>) {
        state.pending += 1;
        self.arrivals.fetch_add(1, Ordering::Release);
        let sleeping = state.sleeping;
        drop(state);
        if sleeping {
            self.wake.notify_one();
        }
    }

    fn run(&self) {
        blocking::mark_engine_thread();
        if let Err(err) = self.backend.bind() {
            let _ = self.fault.set(err);
        }
        let mut last_progress = Instant::now();
        let mut backoff = FIRST_BACKOFF;
        let mut state = lock(&self.state);
        loop {
            let (done, ops) = self.poll(&mut state);
            if !done.is_empty() {
                state.completed += ops;
                state.pending -= done.len();
                drop(state);
                for (f, r) in done {
                    // What a completion runs (successors made ready, data
                    // dropped) may panic: the poller survives it, or every
                    // later GPU op of the device would hang.
                    if let Err(payload) = catch_unwind(AssertUnwindSafe(move || f(r))) {
                        let message = crate::error::panic_message(&*payload);
                        tracing::error!(target: "depengine", "a panic escaped a GPU completion: {message}");
                    }
                }
                last_progress = Instant::now();
                backoff = FIRST_BACKOFF;
                state = lock(&self.state);
                continue;
            }
            if state.pending == 0 {
                if state.stopping {
                    return;
                }
                // Idle: watch for a registration a while before parking,
                // so that a steady run of GPU ops pays no wake-ups.
                if last_progress.elapsed() < self.spin {
                    let seen = self.arrivals.load(Ordering::Acquire);
                    drop(state);
                    while self.arrivals.load(Ordering::Acquire) == seen && last_progress.elapsed() < self.spin
                    {
                        std::hint::spin_loop();
                    }
                    state = lock(&self.state);
                    continue;
                }
                state.sleeping = true;
                state = self.wake.wait(state).unwrap_or_else(|e| e.into_inner());
                state.sleeping = false;
                last_progress = Instant::now();
                backoff = FIRST_BACKOFF;
            } else if last_progress.elapsed() < self.spin {
                drop(state);
                std::hint::spin_loop();
                state = lock(&self.state);
            } else {
                state.sleeping = true;
                let (s, timeout) = self.wake.wait_timeout(state, backoff).unwrap_or_else(|e| e.into_inner());
                state = s;
                state.sleeping = false;
                // A registration resets the backoff: its work may be short.
                backoff = if timeout.timed_out() { (backoff * 2).min(MAX_BACKOFF) } else { FIRST_BACKOFF };
            }
        }
    }

    /// Takes the callbacks whose events completed (all of them, with the
    /// fault, once the device faulted), and how many were of single events.
    fn poll(&self, state: &mut State) -> (Vec<Called>, u64) {
        let mut out = Vec::new();
        if self.fault.get().is_none() {
            'streams: for queue in state.streams.values_mut() {
                while let Some((event, _)) = queue.front() {
                    match self.is_complete(event) {
                        Ok(true) => {
                            let (_, done) = queue.pop_front().expect("the head was just seen");
                            out.push((done, Ok(())));
                        }
                        Ok(false) => break,
                        Err(err) => {
                            let _ = self.fault.set(err);
                            break 'streams;
                        }
                    }
                }
            }
        }
        let ops = out.len() as u64;
        if self.fault.get().is_none() {
            let mut i = 0;
            while i < state.waiters.len() {
                match state.waiters[i]
                    .0
                    .iter()
                    .try_fold(true, |all, e| Ok::<_, GpuFault>(all && self.is_complete(e)?))
                {
                    Ok(true) => out.push((state.waiters.swap_remove(i).1, Ok(()))),
                    Ok(false) => i += 1,
                    Err(err) => {
                        let _ = self.fault.set(err);
                        break;
                    }
                }
            }
        }
        if let Some(fault) = self.fault.get() {
            for (_, done) in state.streams.values_mut().flat_map(std::mem::take) {
                out.push((done, Err(fault.clone())));
            }
            for (_, done) in state.waiters.drain(..) {
                out.push((done, Err(fault.clone())));
            }
        }
        (out, ops)
    }

    fn is_complete(&self, event: &Event) -> Result<bool, GpuFault> {
        if event.is_done() {
            return Ok(true);
        }
        // A driver binding may panic (cudarc does when the driver lacks a
        // function): that is the device's fault, not the poller's end,
        // which would leave every GPU op of the device pending for ever.
        let query = catch_unwind(AssertUnwindSafe(|| self.backend.query(event.raw())));
        let done = query.unwrap_or_else(|payload| {
            Err(GpuFault::Panicked { call: "cuEventQuery", message: crate::error::panic_message(&*payload) })
        })?;
        if done {
            event.set_done();
        }
        Ok(done)
    }
}
