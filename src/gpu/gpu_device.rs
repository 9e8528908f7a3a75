//! One GPU device of an engine: its backend, its event pool, its poller
//! and its sticky fault.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use super::backend::{Backend, Stream};
use super::event::{Event, EventPool};
use super::poller::{Done, Poller};
use super::sim::SimGpu;
use crate::error::GpuFault;

pub(crate) struct GpuDevice {
    pub(crate) ordinal: usize,
    pub(crate) backend: Backend,
    events: Arc<EventPool>,
    poller: Poller,
    /// The device's sticky fault, once a query saw one.
    fault: Arc<OnceLock<GpuFault>>,
    next_stream: AtomicUsize,
    /// The stream buffers are made on (`Gpu::buffer`), made at the first.
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    setup: Mutex<Option<Stream>>,
    /// Events created (not taken from the pool).
    created: AtomicUsize,
}

impl GpuDevice {
    /// Opens device `ordinal`: simulated, or through CUDA.
    ///
    /// # Errors
    ///
    /// Why the device cannot be used (no driver, no such device, no thread).
    pub(crate) fn open(
        ordinal: usize,
        simulated: bool,
        name: &str,
        spin: Duration,
    ) -> Result<Arc<Self>, String> {
        let backend = if simulated {
            Backend::Sim(
                SimGpu::start(name).map_err(|e| format!("cannot start the simulated GPU's thread: {e}"))?,
            )
        } else {
            real(ordinal)?
        };
        let fault = Arc::new(OnceLock::new());
        let poller = Poller::start(name, backend.clone(), fault.clone(), spin).map_err(|e| {
            backend.stop(true);
            format!("cannot start the poller thread: {e}")
        })?;
        let events = Arc::new(Mutex::new(Vec::new()));
        Ok(Arc::new(Self {
            ordinal,
            backend,
            events,
            poller,
            fault,
            next_stream: AtomicUsize::new(0),
            setup: Mutex::new(None),
            created: AtomicUsize::new(0),
        }))
    }

    /// A stream; `prioritized`: of the device's greatest priority (the
    /// prioritized lane's).
    pub(crate) fn new_stream(&self, prioritized: bool) -> Result<Stream, GpuFault> {
        self.backend.new_stream(self.next_stream.fetch_add(1, Ordering::Relaxed), prioritized)
    }

    /// The device's setup stream, where buffers are made: one for all of
    /// them (a stream per buffer was many idle streams, each a buffer's
    /// free ordered after nothing).
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    pub(crate) fn setup_stream(&self) -> Result<Stream, GpuFault> {
        let mut setup = self.setup.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(stream) = &*setup {
            return Ok(stream.clone());
        }
        let stream = self.new_stream(false)?;
        *setup = Some(stream.clone());
        Ok(stream)
    }

    /// An event from the pool, or a new one.
    pub(crate) fn event(&self) -> Result<Event, GpuFault> {
        let pooled = self.events.lock().unwrap_or_else(|e| e.into_inner()).pop();
        let raw = match pooled {
            Some(raw) => raw,
            None => {
                self.created.fetch_add(1, Ordering::Relaxed);
                self.backend.new_event()?
            }
        };
        Ok(Event::new(raw, &self.events))
    }

    /// An event recorded behind the work enqueued on `stream` so far: a
    /// pooled one, or a new one where recording that fails (the pooled
    /// event may be what is wrong). The first error where both fail.
    pub(crate) fn record(&self, stream: &Stream) -> Result<Event, GpuFault> {
        let event = self.event()?;
        let Err(first) = stream.record(event.raw()) else { return Ok(event) };
        // Never recorded, it is destroyed rather than pooled.
        drop(event);
        self.created.fetch_add(1, Ordering::Relaxed);
        let event = Event::new(self.backend.new_event().map_err(|_| first.clone())?, &self.events);
        stream.record(event.raw()).map(|()| event).map_err(|_| first)
    }

    /// Events created so far (the others were taken from the pool).
    pub(crate) fn events_created(&self) -> usize {
        self.created.load(Ordering::Relaxed)
    }

    /// Events in the pool, ready to be recorded again.
    pub(crate) fn pooled_events(&self) -> usize {
        self.events.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// Where the sticky fault goes: fences keep it beside their events.
    pub(crate) fn fault_cell(&self) -> &Arc<OnceLock<GpuFault>> {
        &self.fault
    }

    /// The sticky fault, once the device had one.
    pub(crate) fn fault(&self) -> Option<&GpuFault> {
        self.fault.get()
    }

    /// Calls `done` once `event`, just recorded on `stream`, completed.
    pub(crate) fn after(&self, stream: &Stream, event: Event, done: Done) {
        self.poller.after(stream.id, event, done);
    }

    /// Calls `done` once all of `events` completed.
    pub(crate) fn after_all(&self, events: Vec<Event>, done: Done) {
        self.poller.after_all(events, done);
    }

    /// Callbacks the poller has run.
    pub(crate) fn completions(&self) -> u64 {
        self.poller.completed()
    }

    /// The simulated GPU, if this device is one.
    pub(crate) fn sim(&self) -> Option<&Arc<SimGpu>> {
        match &self.backend {
            Backend::Sim(gpu) => Some(gpu),
            #[cfg(feature = "cuda")]
            Backend::Cuda(_) => None,
        }
    }

    /// Stops the poller (once nothing is pending) and the simulated GPU;
    /// with `join`, waits for their threads to exit.
    pub(crate) fn stop(&self, join: bool) {
        self.poller.stop(join);
        self.backend.stop(join);
    }
}

#[cfg(feature = "cuda")]
fn real(ordinal: usize) -> Result<Backend, String> {
    super::cuda::open(ordinal).map(Backend::Cuda)
}

#[cfg(not(feature = "cuda"))]
fn real(ordinal: usize) -> Result<Backend, String> {
    Err(format!(
        "gpu({ordinal}) needs CUDA, and this build of depengine has no `cuda` feature; \
         build with `--features cuda`, or simulate GPUs with EngineBuilder::simulated_gpus"
    ))
}
