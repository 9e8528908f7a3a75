//! The engine's only waits on the GPU, each on a thread of its own, never
//! on a worker or a poller.
//!
//! The way out for a GPU op whose event could not be recorded behind its
//! work. Its body enqueued work, and without an event nothing tells when
//! that work ends; completing the op at once would let its vars go (and a
//! deletion free their buffers) while its kernels may still run. So the op
//! completes once its stream has drained: a thread of its own (not an
//! engine thread: no worker or poller ever waits on the GPU) synchronizes
//! the stream and then calls back. A synchronize that fails is the device's
//! sticky fault: it becomes the device's, so every later op of the device
//! is refused with it. This is a failure path only; an op that recorded its
//! event never comes here.

use std::sync::Arc;

use super::backend::Stream;
use super::gpu_device::GpuDevice;
use super::poller::Done;

impl GpuDevice {
    /// Calls `done` once the work enqueued on `stream` so far has run, or
    /// with the device's fault. Waits on a thread of its own; where the
    /// OS gives none, on this thread (the only wait left that is safe).
    pub(crate) fn after_drained(self: &Arc<Self>, stream: Stream, done: Done) {
        let device = self.clone();
        let wait = move || {
            let drained = device.backend.bind().and_then(|()| stream.synchronize());
            if let Err(fault) = &drained {
                let _ = device.fault_cell().set(fault.clone());
            }
            // What the completion runs (successors made ready) may panic;
            // the thread ends either way.
            if let Err(payload) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| done(drained))) {
                let message = crate::error::panic_message(&*payload);
                tracing::error!(target: "depengine", "a panic escaped a GPU completion: {message}");
            }
        };
        let shared = Arc::new(std::sync::Mutex::new(Some(wait)));
        let spawned = {
            let shared = shared.clone();
            std::thread::Builder::new()
                .name(format!("gpu{}-drain", self.ordinal))
                .spawn(move || take(&shared).map(|wait| wait()))
        };
        if spawned.is_err()
            && let Some(wait) = take(&shared)
        {
            wait();
        }
    }
}

fn take<T>(cell: &std::sync::Mutex<Option<T>>) -> Option<T> {
    cell.lock().unwrap_or_else(|e| e.into_inner()).take()
}
