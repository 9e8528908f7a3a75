//! A simulated GPU, for tests and machines without one: streams are FIFOs
//! of work items, events are sequence numbers, and one thread plays the
//! GPU. A stream's head runs only once the waits queued before it are
//! satisfied; work items of different streams overlap in time, each taking
//! the duration it was given and taking effect when it ends.
//!
//! Two checks come with it. The *hazard check* keeps a vector clock per
//! stream (advanced by each work item, passed on by an event record and a
//! wait) and flags two work items of different streams that touch one
//! buffer, one of them writing, without an event between them; the host
//! reading or writing a buffer that queued work still touches is flagged
//! too. *Fault injection* makes a chosen work item fail with a sticky
//! device fault, as a kernel's illegal address does on a real device:
//! from then on every query and every enqueue fails.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::blocking;

mod clock;
mod gpu_thread;
mod memory;

use crate::error::GpuFault;
use clock::{History, join};
pub(crate) use memory::Mem;
pub use memory::{SimBuffer, SimRead, SimWrite, Touch};

pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A simulated GPU: its streams, its GPU thread, its hazard log.
pub struct SimGpu {
    /// Unique among simulated GPUs: an event belongs to the GPU that
    /// recorded it, as a CUDA event to its context.
    id: u64,
    state: Mutex<State>,
    /// Wakes the GPU thread (new work) and blocking host waits (progress).
    cv: Condvar,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl std::fmt::Debug for SimGpu {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = lock(&self.state);
        f.debug_struct("SimGpu")
            .field("streams", &state.streams.len())
            .field("done", &state.done)
            .field("fault", &state.fault)
            .finish_non_exhaustive()
    }
}

#[derive(Default)]
struct State {
    streams: Vec<Queue>,
    /// Per buffer: the last write and the reads since, as (stream, clock).
    history: HashMap<u64, History>,
    hazards: Vec<String>,
    fault: Option<GpuFault>,
    /// Work items whose name contains this fail, once.
    fail_next: Option<String>,
    /// The next query panics.
    panic_next_query: bool,
    stopping: bool,
    /// Work items run.
    done: u64,
    /// Most streams busy at once so far.
    overlap: usize,
    /// What the host has seen complete (joined from the events its queries
    /// found complete): work enqueued later is ordered after all of it.
    host: Vec<u64>,
}

#[derive(Default)]
struct Queue {
    items: VecDeque<Item>,
    /// When the work item at the head ends, once started.
    busy_until: Option<Instant>,
    clock: Vec<u64>,
}

enum Item {
    Work(Work),
    Record { event: Arc<SimEvent>, seq: u64 },
    Wait { event: Arc<SimEvent>, seq: u64 },
}

struct Work {
    /// The host's clock when the work was enqueued.
    host: Vec<u64>,
    name: String,
    duration: Duration,
    touches: Vec<Touch>,
    run: Box<dyn FnOnce() + Send>,
}

/// A simulated stream: work enqueued on it runs in order.
#[derive(Clone)]
pub struct SimStream {
    gpu: Arc<SimGpu>,
    index: usize,
}

impl std::fmt::Debug for SimStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SimStream({})", self.index)
    }
}

/// A simulated event: the sequence number of its last record and of the
/// last record the GPU passed.
#[derive(Debug, Default)]
pub(crate) struct SimEvent {
    seqs: Mutex<EventSeqs>,
}

#[derive(Debug, Default)]
struct EventSeqs {
    /// The GPU of the last record.
    gpu: u64,
    recorded: u64,
    passed: u64,
    /// The recording stream's clock when the GPU passed each of the last
    /// records, by sequence number: a wait joins the clock of the record
    /// it was enqueued behind, as `cuStreamWaitEvent` is unaffected by a
    /// later record of the same event (an event back in its pool).
    clocks: VecDeque<(u64, Vec<u64>)>,
}

/// Records whose clocks an event keeps.
const KEPT_CLOCKS: usize = 1024;

impl EventSeqs {
    /// The clock of record `seq`, or of the oldest kept (a later one, so
    /// more than the wait needs: never a missed hazard, maybe a false one).
    fn clock(&self, seq: u64) -> Vec<u64> {
        let kept = self.clocks.iter().find(|(s, _)| *s >= seq);
        kept.map(|(_, c)| c.clone()).unwrap_or_default()
    }
}

impl SimGpu {
    /// A new simulated GPU with its GPU thread running.
    pub(crate) fn start(name: &str) -> std::io::Result<Arc<Self>> {
        static IDS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        let id = IDS.fetch_add(1, Ordering::Relaxed);
        let gpu =
            Arc::new(Self { id, state: Mutex::default(), cv: Condvar::new(), thread: Mutex::new(None) });
        let weak = Arc::downgrade(&gpu);
        let thread =
            std::thread::Builder::new().name(format!("{name}-sim")).spawn(move || gpu_thread::run(&weak))?;
        *lock(&gpu.thread) = Some(thread);
        Ok(gpu)
    }

    /// A new stream.
    pub(crate) fn new_stream(self: &Arc<Self>) -> SimStream {
        let mut state = lock(&self.state);
        state.streams.push(Queue::default());
        let n = state.streams.len();
        for q in &mut state.streams {
            q.clock.resize(n, 0);
        }
        SimStream { gpu: self.clone(), index: n - 1 }
    }

    /// Makes the next work item whose name contains `name` fail with a
    /// sticky device fault.
    pub fn fail_next(&self, name: &str) {
        lock(&self.state).fail_next = Some(name.to_owned());
    }

    /// Makes the next event query panic, as a driver binding does when
    /// the driver lacks a function it needs (cudarc panics then): the
    /// poller must survive it.
    pub fn panic_next_query(&self) {
        lock(&self.state).panic_next_query = true;
    }

    /// The sticky fault, once one happened.
    pub fn fault(&self) -> Option<GpuFault> {
        lock(&self.state).fault.clone()
    }

    /// The hazards flagged so far: two streams touching one buffer without
    /// an event between them, or the host touching a buffer that queued
    /// work still touches.
    pub fn hazards(&self) -> Vec<String> {
        lock(&self.state).hazards.clone()
    }

    /// Work items run so far.
    pub fn work_done(&self) -> u64 {
        lock(&self.state).done
    }

    /// The most streams that were busy at once.
    pub fn max_overlap(&self) -> usize {
        lock(&self.state).overlap
    }

    /// Stops the GPU thread once every stream is empty; with `join`, waits
    /// for it to exit.
    pub(crate) fn stop(&self, join: bool) {
        lock(&self.state).stopping = true;
        self.cv.notify_all();
        if !join {
            return;
        }
        let thread = lock(&self.thread).take();
        if let Some(thread) = thread
            && thread.thread().id() != std::thread::current().id()
        {
            let _ = thread.join();
        }
    }

    fn enqueue(&self, stream: usize, mut item: Item) -> Result<(), GpuFault> {
        let mut state = lock(&self.state);
        if let Some(fault) = &state.fault {
            return Err(fault.clone());
        }
        if let Item::Work(work) = &mut item {
            work.host.clone_from(&state.host);
        }
        state.streams[stream].items.push_back(item);
        drop(state);
        self.cv.notify_all();
        Ok(())
    }

    /// Records `event` on `stream`.
    pub(crate) fn record(&self, event: &Arc<SimEvent>, stream: usize) -> Result<(), GpuFault> {
        let seq = {
            let mut seqs = lock(&event.seqs);
            seqs.gpu = self.id;
            seqs.recorded += 1;
            seqs.recorded
        };
        self.enqueue(stream, Item::Record { event: event.clone(), seq })
    }

    /// Makes `stream` wait for the last record of `event`.
    pub(crate) fn wait(&self, event: &Arc<SimEvent>, stream: usize) -> Result<(), GpuFault> {
        let seq = {
            let seqs = lock(&event.seqs);
            self.foreign(&seqs, "a stream's wait");
            seqs.recorded
        };
        self.enqueue(stream, Item::Wait { event: event.clone(), seq })
    }

    /// Whether the GPU passed the last record of `event` (an event never
    /// recorded is complete, as in CUDA); the sticky fault once there is one.
    pub(crate) fn query(&self, event: &SimEvent) -> Result<bool, GpuFault> {
        let mut state = lock(&self.state);
        if let Some(fault) = &state.fault {
            return Err(fault.clone());
        }
        if std::mem::take(&mut state.panic_next_query) {
            drop(state);
            panic!("the simulated driver lacks cuEventQuery");
        }
        let seqs = lock(&event.seqs);
        let done = seqs.passed >= seqs.recorded;
        if seqs.recorded > 0 && seqs.gpu != self.id {
            drop(state);
            self.foreign(&seqs, "a query");
        } else if done {
            join(&mut state.host, &seqs.clock(seqs.recorded));
        }
        Ok(done)
    }

    /// Flags an event of another simulated GPU reaching this one: the
    /// clocks of two GPUs count different streams, and the engine reaches
    /// an event only through its own device (a poller has only its own
    /// device's context current).
    fn foreign(&self, seqs: &EventSeqs, what: &str) {
        if seqs.recorded > 0 && seqs.gpu != self.id {
            lock(&self.state).hazards.push(format!(
                "{what} on simulated GPU #{} of an event recorded on simulated GPU #{}",
                self.id, seqs.gpu
            ));
        }
    }

    /// Blocks until `stream` is empty (a host-side synchronize).
    fn synchronize(&self, stream: usize) -> Result<(), GpuFault> {
        blocking::check("SimStream::synchronize");
        self.drain(stream)
    }

    /// [`synchronize`](Self::synchronize), for the engine's one thread
    /// that may block (`gpu/drain.rs`).
    pub(crate) fn drain(&self, stream: usize) -> Result<(), GpuFault> {
        let mut state = lock(&self.state);
        loop {
            if let Some(fault) = &state.fault {
                return Err(fault.clone());
            }
            if state.streams[stream].items.is_empty() {
                return Ok(());
            }
            state = self.cv.wait(state).unwrap_or_else(|e| e.into_inner());
        }
    }

    fn host_touch(&self, buffer: &Mem, what: &str) {
        let pending = buffer.pending.load(Ordering::Acquire);
        // A host read conflicts with queued writes only; a host write with any.
        let conflict = if what == "read" { pending >> 32 != 0 } else { pending != 0 };
        if conflict {
            let msg = format!("host {what} of buffer #{} while queued GPU work touches it", buffer.id);
            lock(&self.state).hazards.push(msg);
        }
    }
}

impl SimStream {
    /// Enqueues a work item that takes `duration` on the GPU, touches the
    /// buffers named in `touches`, and runs `work` when it ends.
    ///
    /// # Errors
    ///
    /// The device's sticky fault, once there is one.
    pub fn launch(
        &self,
        name: &str,
        duration: Duration,
        touches: Vec<Touch>,
        work: impl FnOnce() + Send + 'static,
    ) -> Result<(), GpuFault> {
        for t in &touches {
            t.buffer.pending.fetch_add(t.weight(), Ordering::AcqRel);
        }
        let item = Item::Work(Work {
            host: Vec::new(),
            name: name.to_owned(),
            duration,
            touches,
            run: Box::new(work),
        });
        let pending = match &item {
            Item::Work(w) => w.touches.clone(),
            _ => Vec::new(),
        };
        self.gpu.enqueue(self.index, item).inspect_err(|_| {
            pending.iter().for_each(|t| {
                t.buffer.pending.fetch_sub(t.weight(), Ordering::AcqRel);
            });
        })
    }

    /// Blocks the calling thread until everything enqueued on this stream
    /// has run. Engine threads must never call it (checked in debug builds).
    ///
    /// # Errors
    ///
    /// The device's sticky fault.
    pub fn synchronize(&self) -> Result<(), GpuFault> {
        self.gpu.synchronize(self.index)
    }

    /// The simulated GPU this stream belongs to.
    pub fn gpu(&self) -> &Arc<SimGpu> {
        &self.gpu
    }

    pub(crate) fn index(&self) -> usize {
        self.index
    }
}
