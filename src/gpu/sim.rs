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
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::blocking;

static NEXT_BUFFER: AtomicU64 = AtomicU64::new(1);

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A simulated GPU: its streams, its GPU thread, its hazard log.
pub struct SimGpu {
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
    fault: Option<String>,
    /// Work items whose name contains this fail, once.
    fail_next: Option<String>,
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
struct History {
    write: Option<(usize, u64)>,
    reads: Vec<(usize, u64)>,
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

/// A buffer a work item touches, and how.
#[derive(Clone, Debug)]
pub struct Touch {
    buffer: Arc<Mem>,
    write: bool,
}

impl Touch {
    /// What it adds to its buffer's count of queued touches.
    fn weight(&self) -> u64 {
        if self.write { 1 << 32 } else { 1 }
    }
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
        let gpu = Arc::new(Self { state: Mutex::default(), cv: Condvar::new(), thread: Mutex::new(None) });
        let weak = Arc::downgrade(&gpu);
        let thread = std::thread::Builder::new().name(format!("{name}-sim")).spawn(move || run(&weak))?;
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

    /// The sticky fault, once one happened.
    pub fn fault(&self) -> Option<String> {
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
        if let Some(thread) = thread {
            if thread.thread().id() != std::thread::current().id() {
                let _ = thread.join();
            }
        }
    }

    fn enqueue(&self, stream: usize, mut item: Item) -> Result<(), String> {
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
    pub(crate) fn record(&self, event: &Arc<SimEvent>, stream: usize) -> Result<(), String> {
        let seq = {
            let mut seqs = lock(&event.seqs);
            seqs.recorded += 1;
            seqs.recorded
        };
        self.enqueue(stream, Item::Record { event: event.clone(), seq })
    }

    /// Makes `stream` wait for the last record of `event`.
    pub(crate) fn wait(&self, event: &Arc<SimEvent>, stream: usize) -> Result<(), String> {
        let seq = lock(&event.seqs).recorded;
        self.enqueue(stream, Item::Wait { event: event.clone(), seq })
    }

    /// Whether the GPU passed the last record of `event` (an event never
    /// recorded is complete, as in CUDA); the sticky fault once there is one.
    pub(crate) fn query(&self, event: &SimEvent) -> Result<bool, String> {
        let mut state = lock(&self.state);
        if let Some(fault) = &state.fault {
            return Err(fault.clone());
        }
        let seqs = lock(&event.seqs);
        let done = seqs.passed >= seqs.recorded;
        if done {
            join(&mut state.host, &seqs.clock(seqs.recorded));
        }
        Ok(done)
    }

    /// Blocks until `stream` is empty (a host-side synchronize).
    fn synchronize(&self, stream: usize) -> Result<(), String> {
        blocking::check("SimStream::synchronize");
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
    ) -> Result<(), String> {
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
    pub fn synchronize(&self) -> Result<(), String> {
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

/// The memory of a simulated buffer: behind a lock, so that a hazard is a
/// logged ordering error, never a data race.
#[derive(Debug)]
pub(crate) struct Mem {
    id: u64,
    /// Queued work touching it: reads in the low half, writes in the high.
    pending: AtomicU64,
    gpu: Weak<SimGpu>,
    data: Mutex<Box<dyn std::any::Any + Send>>,
}

/// A buffer of `T` in a simulated GPU's memory (or in pinned host memory:
/// the simulation does not tell them apart).
pub struct SimBuffer<T> {
    mem: Arc<Mem>,
    len: usize,
    _t: std::marker::PhantomData<fn() -> T>,
}

impl<T> std::fmt::Debug for SimBuffer<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SimBuffer(#{}, len {})", self.mem.id, self.len)
    }
}

impl<T> SimBuffer<T> {
    /// Elements in the buffer.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the buffer is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl<T: Clone + Send + 'static> SimBuffer<T> {
    pub(crate) fn new(gpu: &Arc<SimGpu>, data: Vec<T>) -> Self {
        let len = data.len();
        let mem = Mem {
            id: NEXT_BUFFER.fetch_add(1, Ordering::Relaxed),
            pending: AtomicU64::new(0),
            gpu: Arc::downgrade(gpu),
            data: Mutex::new(Box::new(data)),
        };
        Self { mem: Arc::new(mem), len, _t: std::marker::PhantomData }
    }

    /// A read of this buffer by a work item: its touch, and access to the
    /// data once the item runs.
    pub fn reader(&self) -> (Touch, SimRead<T>) {
        let touch = Touch { buffer: self.mem.clone(), write: false };
        (touch, SimRead(self.mem.clone(), std::marker::PhantomData))
    }

    /// A write of this buffer by a work item.
    pub fn writer(&mut self) -> (Touch, SimWrite<T>) {
        let touch = Touch { buffer: self.mem.clone(), write: true };
        (touch, SimWrite(self.mem.clone(), std::marker::PhantomData))
    }

    /// A copy of the data, read by the host (flagged as a hazard if queued
    /// GPU work still touches the buffer).
    pub fn to_vec(&self) -> Vec<T> {
        if let Some(gpu) = self.mem.gpu.upgrade() {
            gpu.host_touch(&self.mem, "read");
        }
        SimRead::<T>(self.mem.clone(), std::marker::PhantomData).with(<[T]>::to_vec)
    }

    /// Overwrites the data from the host (flagged as a hazard if queued GPU
    /// work still touches the buffer).
    pub fn copy_from_slice(&mut self, src: &[T]) {
        if let Some(gpu) = self.mem.gpu.upgrade() {
            gpu.host_touch(&self.mem, "write");
        }
        SimWrite::<T>(self.mem.clone(), std::marker::PhantomData).with(|d| d.clone_from_slice(src));
    }
}

/// Read access to a simulated buffer, for the work item that declared it.
pub struct SimRead<T>(Arc<Mem>, std::marker::PhantomData<fn() -> T>);

/// Write access to a simulated buffer, for the work item that declared it.
pub struct SimWrite<T>(Arc<Mem>, std::marker::PhantomData<fn() -> T>);

impl<T: 'static> SimRead<T> {
    /// Calls `f` with the data.
    pub fn with<R>(&self, f: impl FnOnce(&[T]) -> R) -> R {
        let data = lock(&self.0.data);
        f(data.downcast_ref::<Vec<T>>().expect("a simulated buffer holds the type it was made with"))
    }
}

impl<T: 'static> SimWrite<T> {
    /// Calls `f` with the data.
    pub fn with<R>(&self, f: impl FnOnce(&mut [T]) -> R) -> R {
        let mut data = lock(&self.0.data);
        f(data.downcast_mut::<Vec<T>>().expect("a simulated buffer holds the type it was made with"))
    }
}

impl<T> std::fmt::Debug for SimRead<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SimRead(#{})", self.0.id)
    }
}

impl<T> std::fmt::Debug for SimWrite<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SimWrite(#{})", self.0.id)
    }
}

/// The GPU thread: runs stream heads until stopped and every stream is empty.
fn run(gpu: &Weak<SimGpu>) {
    blocking::mark_engine_thread();
    loop {
        let Some(gpu) = gpu.upgrade() else { return };
        let mut state = lock(&gpu.state);
        let (finished, next, moved) = step(&mut state);
        if finished.is_empty() && !moved {
            let idle = state.streams.iter().all(|q| q.items.is_empty());
            if state.stopping && (idle || state.fault.is_some()) {
                return;
            }
            let wait =
                next.map_or(Duration::from_millis(50), |t| t.saturating_duration_since(Instant::now()));
            drop(gpu.cv.wait_timeout(state, wait).unwrap_or_else(|e| e.into_inner()));
            continue;
        }
        drop(state);
        for work in finished {
            (work.run)();
            work.touches.iter().for_each(|t| {
                t.buffer.pending.fetch_sub(t.weight(), Ordering::AcqRel);
            });
        }
        gpu.cv.notify_all();
    }
}

/// Moves every stream on as far as it can now: passes records and satisfied
/// waits, starts head work items (checking hazards), and returns the work
/// items that ended, the earliest time one will end, and whether a record
/// or a wait passed (which may let another stream go on).
fn step(state: &mut State) -> (Vec<Work>, Option<Instant>, bool) {
    let now = Instant::now();
    let mut finished = Vec::new();
    let mut next: Option<Instant> = None;
    let mut moved = false;
    if state.fault.is_some() {
        return (finished, None, false);
    }
    for s in 0..state.streams.len() {
        loop {
            let queue = &mut state.streams[s];
            match queue.items.front() {
                None => break,
                Some(Item::Record { event, seq }) => {
                    let mut seqs = lock(&event.seqs);
                    seqs.passed = seqs.passed.max(*seq);
                    seqs.clocks.push_back((*seq, queue.clock.clone()));
                    if seqs.clocks.len() > KEPT_CLOCKS {
                        seqs.clocks.pop_front();
                    }
                    drop(seqs);
                    queue.items.pop_front();
                    moved = true;
                }
                Some(Item::Wait { event, seq }) => {
                    let seqs = lock(&event.seqs);
                    if seqs.passed < *seq {
                        break;
                    }
                    let clock = seqs.clock(*seq);
                    drop(seqs);
                    join(&mut queue.clock, &clock);
                    queue.items.pop_front();
                    moved = true;
                }
                Some(Item::Work(_)) => match queue.busy_until {
                    None => {
                        let Some(Item::Work(work)) = queue.items.front() else { unreachable!() };
                        let (touches, duration) = (work.touches.clone(), work.duration);
                        let host = work.host.clone();
                        join(&mut queue.clock, &host);
                        queue.busy_until = Some(now + duration);
                        let name = work.name.clone();
                        check_hazards(state, s, &name, &touches);
                    }
                    Some(end) if end <= now => {
                        queue.busy_until = None;
                        let Some(Item::Work(work)) = queue.items.pop_front() else { unreachable!() };
                        queue.clock[s] += 1;
                        state.done += 1;
                        if state.fail_next.as_ref().is_some_and(|n| work.name.contains(n.as_str())) {
                            state.fail_next = None;
                            state.fault = Some(format!(
                                "CUDA_ERROR_ILLEGAL_ADDRESS (simulated fault in `{}` on stream {s})",
                                work.name
                            ));
                            return (finished, None, true);
                        }
                        finished.push(work);
                        // What follows on this stream (a record) passes only
                        // once the work's effect is in place.
                        break;
                    }
                    Some(end) => {
                        next = Some(next.map_or(end, |n: Instant| n.min(end)));
                        break;
                    }
                },
            }
        }
    }
    let busy = state.streams.iter().filter(|q| q.busy_until.is_some()).count();
    state.overlap = state.overlap.max(busy);
    (finished, next, moved)
}

fn join(into: &mut Vec<u64>, other: &[u64]) {
    if into.len() < other.len() {
        into.resize(other.len(), 0);
    }
    for (a, b) in into.iter_mut().zip(other) {
        *a = (*a).max(*b);
    }
}

/// Flags each touch of a work item starting on stream `s` that is not
/// ordered after a conflicting touch by another stream, then records it.
fn check_hazards(state: &mut State, s: usize, name: &str, touches: &[Touch]) {
    let clock = state.streams[s].clock.clone();
    let tick = clock[s] + 1;
    let ordered = |(t, at): (usize, u64)| t == s || clock.get(t).copied().unwrap_or(0) >= at;
    for touch in touches {
        let id = touch.buffer.id;
        let history = state.history.entry(id).or_default();
        let mut unordered: Vec<usize> =
            history.write.into_iter().filter(|&w| !ordered(w)).map(|w| w.0).collect();
        if touch.write {
            unordered.extend(history.reads.iter().copied().filter(|&r| !ordered(r)).map(|r| r.0));
            history.write = Some((s, tick));
            history.reads.clear();
        } else {
            history.reads.push((s, tick));
        }
        if !unordered.is_empty() {
            let what = if touch.write { "writes" } else { "reads" };
            state.hazards.push(format!(
                "`{name}` on stream {s} {what} buffer #{id} without an event after stream(s) {unordered:?} touched it"
            ));
        }
    }
}
