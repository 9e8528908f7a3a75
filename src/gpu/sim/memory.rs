//! The memory of the simulated device: buffers behind a lock (a hazard is
//! a logged ordering error, never a data race), the touches work items
//! declare, and the access a work item gets when it runs.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

use super::{SimGpu, lock};

static NEXT_BUFFER: AtomicU64 = AtomicU64::new(1);

/// A buffer a work item touches, and how.
#[derive(Clone, Debug)]
pub struct Touch {
    pub(super) buffer: Arc<Mem>,
    pub(super) write: bool,
}

impl Touch {
    /// What it adds to its buffer's count of queued touches.
    pub(super) fn weight(&self) -> u64 {
        if self.write { 1 << 32 } else { 1 }
    }
}

/// The memory of a simulated buffer: behind a lock, so that a hazard is a
/// logged ordering error, never a data race.
#[derive(Debug)]
pub(crate) struct Mem {
    pub(super) id: u64,
    /// Queued work touching it: reads in the low half, writes in the high.
    pub(super) pending: AtomicU64,
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
