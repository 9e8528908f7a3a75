//! A GPU op's job: the body enqueues work on its worker's stream and
//! returns; an event is recorded behind that work, and the device's poller
//! completes the op when the event completes. No thread waits on the GPU.

use std::panic::{AssertUnwindSafe, catch_unwind};

use super::access::{Item, OpToken};
use super::body::in_body;
use super::job::{Job, Running, op_result};
use super::op_cell::release_vars_early;
use super::op_handle::SlotRef;
use crate::error::GpuFault;
use crate::error::{BoxError, Error};
use crate::gpu::early_release::{self, Released};
use crate::gpu::{Event, GpuContext, GpuLane, Stream};
use crate::var::Access;

pub(crate) struct GpuJob<Rd, Wr, F> {
    pub(crate) reads: Rd,
    pub(crate) writes: Wr,
    pub(crate) body: F,
    pub(crate) lane: GpuLane,
}

impl<Rd, Wr, F, R> Job for GpuJob<Rd, Wr, F>
where
    Rd: Item,
    Wr: Item,
    F: FnOnce(Rd::Guard, Wr::Guard, &GpuContext<'_>) -> Result<R, BoxError> + Send + 'static,
    R: Send + 'static,
{
    type Output = R;

    fn start(self, op: Running<'_, R>) {
        let Self { reads, writes, body, lane } = self;
        let stream = lane.stream();
        let device = lane.gpu.device.clone();
        let deps = || op.header().deps.iter().map(|d| (d.var.id(), d.access == Access::Write));
        // Same-device GPU work still in flight on the op's vars (their ops
        // let them go at enqueue): ordered on the GPU, not waited for here.
        if let Err(err) = early_release::follow_in_flight(&lane, &stream, deps()) {
            return op.store(Err(Error::gpu(Some(op.header().meta.name.clone()), device.ordinal, err)));
        }
        let caught = catch_unwind(AssertUnwindSafe(|| {
            let reads = reads.guard(OpToken(op.task));
            let writes = writes.guard(OpToken(op.task));
            let ctx = GpuContext { stream: &stream, gpu: &lane.gpu, lane: lane.lane };
            in_body(op.header(), || body(reads, writes, &ctx))
        }));
        // A body that failed may have enqueued work before it did: the op
        // completes, with its error, only once that work has run.
        let result = op_result(|| op.header(), caught);
        let event = match device.record(&stream) {
            Ok(event) => event,
            // Its work is enqueued, and nothing tells when it ends: the op
            // keeps its vars until its stream has drained (`gpu/drain.rs`).
            Err(err) => {
                let (slot, ordinal) = (op.to_owned(), device.ordinal);
                let err = Error::gpu(Some(op.header().meta.name.clone()), ordinal, err);
                return device.after_drained(stream, Box::new(move |_| slot.store(Err(err))));
            }
        };
        // Early release: a successful op lets its vars go now, its work
        // fenced on them, so that the next GPU op of this device is ordered
        // behind it on the GPU; everything else waits for the event.
        let released = match result {
            Ok(_) => early_release::release_at_enqueue(&lane, &stream, &event, deps, || {
                release_vars_early(op.task)
            }),
            Err(_) => None,
        };
        complete_after(op.to_owned(), &lane, &stream, event, result, released);
    }
}

/// Has the device's poller complete the op once `event` completes: with
/// `result`, or with the device's fault.
fn complete_after<R: Send + 'static>(
    slot: SlotRef<R>,
    lane: &GpuLane,
    stream: &Stream,
    event: Event,
    result: Result<R, Error>,
    released: Option<Released>,
) {
    let device = &lane.gpu.device;
    let ordinal = device.ordinal;
    let done = move |polled: Result<(), GpuFault>| {
        let result = match polled {
            Ok(()) => {
                if let Some(released) = released {
                    released.completed(slot.header().deps.iter().map(|d| d.var.id()));
                }
                result
            }
            // The fences stay: the device's fault fails whoever comes for
            // those vars. (Their event goes back to the pool with the
            // `released` dropped here, before the op completes: whoever
            // waits for the op then finds it there.)
            Err(fault) => {
                drop(released);
                Err(Error::gpu(Some(slot.header().meta.name.clone()), ordinal, fault))
            }
        };
        slot.store(result);
    };
    device.after(stream, event, Box::new(done));
}
