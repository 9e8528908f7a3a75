//! GPU ops: `run_gpu` of the op builder.

use super::{Body, GroupSlot, OpBuilder};
use crate::device::Device;
use crate::engine::OpHandle;
use crate::error::{BoxError, Error};
use crate::gpu::GpuContext;
use crate::op::access::Item;
use crate::op::job::GpuJob;

impl<Rd: Item, Wr: Item, G: GroupSlot> OpBuilder<'_, Rd, Wr, G> {
    /// Pushes a GPU op, to be placed on a GPU with
    /// [`device`](Self::device)`(Device::Gpu(i))` (and a copy lane with
    /// [`lane`](Self::lane) for transfers). The body receives the guards
    /// and a [`GpuContext`] with its worker's stream; it only *enqueues*
    /// work there and returns. The engine records an event behind that work
    /// and the device's poller completes the op when the event completes:
    /// the handle, `wait_for_var` and CPU ops that use its vars see the
    /// work done. No thread waits on the GPU meanwhile.
    ///
    /// Besides the refusals of any push ([`OpHandle::pushed`]): a device
    /// that is not a GPU or the inline lane ([`Error::is_invalid_argument`]),
    /// a GPU that cannot be used ([`Error::is_gpu_unavailable`], naming what
    /// is missing), a GPU with a sticky fault ([`Error::is_gpu`]).
    ///
    /// # Examples
    ///
    /// A round trip through a (simulated) GPU's copy lanes:
    ///
    /// ```
    /// # fn main() -> depengine::Result<()> {
    /// use depengine::{Device, Engine, Lane};
    /// let engine = Engine::builder().simulated_gpus(1).build()?;
    /// let gpu = engine.gpu(0)?;
    /// let host = engine.var(gpu.host_buffer(&[1.0f32, 2.0, 3.0])?);
    /// let dev = engine.var(gpu.buffer(&[0.0f32; 3])?);
    /// let back = engine.var(gpu.host_buffer(&[0.0f32; 3])?);
    /// engine.op("up").read(&host).write(&dev).device(Device::Gpu(0)).lane(Lane::CopyToGpu)
    ///     .run_gpu(|(h,), (mut d,), ctx| Ok(ctx.copy_to_gpu(&h, &mut d)?));
    /// engine.op("down").read(&dev).write(&back).device(Device::Gpu(0)).lane(Lane::CopyFromGpu)
    ///     .run_gpu(|(d,), (mut h,), ctx| Ok(ctx.copy_to_host(&d, &mut h)?));
    /// // A CPU op that reads `back` runs once the copy has completed.
    /// let got = engine.op("check").read(&back).run(|(h,), ()| Ok(h.to_vec()?)).blocking_wait()?;
    /// assert_eq!(got, [1.0, 2.0, 3.0]);
    /// # Ok(()) }
    /// ```
    pub fn run_gpu<R, F>(self, body: F) -> OpHandle<R>
    where
        F: FnOnce(Rd::Guard, Wr::Guard, &GpuContext<'_>) -> Result<R, BoxError> + Send + 'static,
        R: Send + 'static,
    {
        let (device, lane, name) = (self.opts.device, self.opts.lane, self.opts.name.clone());
        self.push(
            move |reads, writes, shared| {
                if !matches!(device, Device::Gpu(_)) {
                    return Err(Error::invalid(format!(
                        "op `{name}` is a GPU op (run_gpu) placed on {device}; choose a GPU with .device(Device::Gpu(i))"
                    )));
                }
                let lane = shared.dispatcher.gpu_lane(device, lane)?;
                Ok(GpuJob { reads, writes, body, lane })
            },
            Body::Gpu,
        )
    }
}
