//! A GPU op's job: the body enqueues work on its worker's stream and
//! returns; an event is recorded behind that work, and the device's poller
//! completes the op when the event completes. No thread waits on the GPU.

use std::panic::{AssertUnwindSafe, catch_unwind};

use super::access::{Item, OpToken};
use super::job::{Job, Running, in_body, op_result};
use super::life::release_vars_early;
use crate::error::{BoxError, Error};
use crate::gpu::{GpuContext, GpuLane, InFlight};
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
        for event in lane.fences.gpu_waits(deps(), device.ordinal, stream.id) {
            if let Err(err) = stream.wait(event.raw()) {
                return op.store(Err(Error::gpu(Some(op.header().meta.name.clone()), device.ordinal, err)));
            }
        }
        let caught = catch_unwind(AssertUnwindSafe(|| {
            let reads = reads.guard(OpToken(op.task));
            let writes = writes.guard(OpToken(op.task));
            let ctx = GpuContext { stream: &stream, gpu: &lane.gpu, lane: lane.lane };
            in_body(op.header(), || body(reads, writes, &ctx))
        }));
        // A body that failed may have enqueued work before it did: the op
        // completes, with its error, only once that work has run.
        let result = op_result(op.header(), caught);
        let recorded = device.event().and_then(|event| stream.record(event.raw()).map(|()| event));
        let event = match recorded {
            Ok(event) => event,
            Err(err) => {
                return op.store(Err(Error::gpu(Some(op.header().meta.name.clone()), device.ordinal, err)));
            }
        };
        // Early release: a successful op lets its vars go now, its work
        // fenced on them, so that the next GPU op of this device is ordered
        // behind it on the GPU; everything else waits for the event.
        let early = lane.early && result.is_ok() && {
            let fault = device.fault_cell().clone();
            let flight = InFlight { device: device.ordinal, fault, stream: stream.id, event: event.clone() };
            lane.fences.add(deps(), &flight);
            release_vars_early(op.task)
        };
        let slot = op.to_owned();
        let fences = lane.fences.clone();
        let ordinal = device.ordinal;
        let watched = event.clone();
        device.after(
            &stream,
            event,
            Box::new(move |polled| {
                let result = match polled {
                    Ok(()) => {
                        if early {
                            fences.remove(slot.header().deps.iter().map(|d| d.var.id()), &watched);
                        }
                        result
                    }
                    // The fences stay: the device's fault fails whoever
                    // comes for those vars.
                    Err(fault) => Err(Error::gpu(Some(slot.header().meta.name.clone()), ordinal, fault)),
                };
                // Let go of the event before the op completes: whoever
                // waits for the op then finds it back in the pool.
                drop(watched);
                slot.store_owned(result);
            }),
        );
    }
}
