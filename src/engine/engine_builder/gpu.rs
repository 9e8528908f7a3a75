//! The builder's GPU settings.

use std::time::Duration;

use super::EngineBuilder;
use crate::engine::config::DEFAULT_GPU_SPIN;

impl EngineBuilder {
    /// The most GPU devices an engine may use.
    ///
    /// # Examples
    ///
    /// ```
    /// use depengine::EngineBuilder;
    /// let err = EngineBuilder::default().simulated_gpus(EngineBuilder::MAX_GPU_DEVICES + 1).build().unwrap_err();
    /// assert!(err.is_invalid_argument());
    /// ```
    pub const MAX_GPU_DEVICES: usize = crate::gpu::MAX_GPU_DEVICES;
    /// How long an idle GPU worker or poller watches for work before it
    /// parks, by default: a GPU op's round trip (launch, the GPU, the event
    /// seen complete, the waiter woken) is some tens of microseconds, and a
    /// thread that parks between two such ops costs each a wake-up.
    ///
    /// # Examples
    ///
    /// ```
    /// use depengine::EngineBuilder;
    /// let engine = EngineBuilder::default().build()?;
    /// # if std::env::var_os("DEPENGINE_GPU_SPIN_US").is_none() {
    /// assert_eq!(engine.settings().gpu_spin, EngineBuilder::DEFAULT_GPU_SPIN);
    /// # }
    /// # Ok::<(), depengine::Error>(())
    /// ```
    pub const DEFAULT_GPU_SPIN: Duration = DEFAULT_GPU_SPIN;

    /// Compute workers per GPU device, each owning its own stream, at most
    /// [`MAX_WORKERS`](Self::MAX_WORKERS). Environment: `DEPENGINE_GPU_WORKERS`. Default: 1.
    ///
    /// # Examples
    ///
    /// ```
    /// let engine = depengine::Engine::builder().simulated_gpus(1).gpu_workers(2).build()?;
    /// assert_eq!(engine.settings().gpu_workers, 2);
    /// # Ok::<(), depengine::Error>(())
    /// ```
    pub fn gpu_workers(mut self, n: usize) -> Self {
        self.choices.gpu_workers = Some(n);
        self
    }

    /// Workers per GPU device for each copy lane ([`Lane::CopyToGpu`](crate::Lane),
    /// [`Lane::CopyFromGpu`](crate::Lane)), each owning its own stream, at
    /// most [`MAX_WORKERS`](Self::MAX_WORKERS). Environment: `DEPENGINE_GPU_COPY_WORKERS`.
    /// Default: 1.
    ///
    /// # Examples
    ///
    /// ```
    /// let engine = depengine::Engine::builder().simulated_gpus(1).gpu_copy_workers(2).build()?;
    /// assert_eq!(engine.settings().gpu_copy_workers, 2);
    /// # Ok::<(), depengine::Error>(())
    /// ```
    pub fn gpu_copy_workers(mut self, n: usize) -> Self {
        self.choices.gpu_copy_workers = Some(n);
        self
    }

    /// Simulates GPUs `Gpu(0)` to `Gpu(n - 1)` (see [`SimGpu`](crate::gpu::sim::SimGpu))
    /// instead of opening them through CUDA; at most
    /// [`MAX_GPU_DEVICES`](crate::EngineBuilder::MAX_GPU_DEVICES). Environment:
    /// `DEPENGINE_SIM_GPUS`. Default: 0.
    ///
    /// # Examples
    ///
    /// ```
    /// use depengine::Device;
    /// use std::time::Duration;
    /// let engine = depengine::Engine::builder().simulated_gpus(1).build()?;
    /// let gpu = engine.gpu(0)?;
    /// let x = engine.var(gpu.sim_buffer(vec![1.0f32, 2.0, 3.0])?);
    /// engine.op("scale").device(Device::Gpu(0)).write(&x).run_gpu(|(), (mut x,), ctx| {
    ///     let (touch, w) = x.sim_mut().unwrap().writer();
    ///     let stream = ctx.sim_stream().unwrap();
    ///     stream.launch("scale", Duration::from_micros(5), vec![touch], move || {
    ///         w.with(|v| v.iter_mut().for_each(|e| *e *= 2.0))
    ///     })?;
    ///     Ok(())
    /// });
    /// assert_eq!(x.read().blocking_wait()?.sim().unwrap().to_vec(), vec![2.0, 4.0, 6.0]);
    /// # Ok::<(), depengine::Error>(())
    /// ```
    pub fn simulated_gpus(mut self, n: usize) -> Self {
        self.choices.simulated_gpus = Some(n);
        self
    }

    /// How long an idle GPU worker or a GPU's poller watches for work
    /// before it parks, at most [`MAX_SPIN`](Self::MAX_SPIN): the GPU's counterpart of
    /// [`spin`](Self::spin), longer by default, since a GPU op's round trip
    /// outlasts a CPU op's and a GPU has few such threads. Environment:
    /// `DEPENGINE_GPU_SPIN_US` (microseconds). Default: [`DEFAULT_GPU_SPIN`](Self::DEFAULT_GPU_SPIN).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// let engine = depengine::Engine::builder().gpu_spin(Duration::from_micros(20)).build()?;
    /// assert_eq!(engine.settings().gpu_spin, Duration::from_micros(20));
    /// # Ok::<(), depengine::Error>(())
    /// ```
    pub fn gpu_spin(mut self, spin: Duration) -> Self {
        self.choices.gpu_spin = Some(spin);
        self
    }

    /// Whether a GPU op lets its vars go as soon as its work is enqueued
    /// (early release, the default), so that the next GPU op of the same
    /// device is ordered behind it on the GPU (`cuStreamWaitEvent`) instead
    /// of waiting for its completion; CPU consumers, handles and
    /// `wait_for_var` still wait for completion. Off: every GPU op lets its
    /// vars go at completion (for comparison and debugging).
    ///
    /// # Examples
    ///
    /// ```
    /// // Every GPU op holds its vars until the GPU has run it.
    /// let engine = depengine::Engine::builder().simulated_gpus(1).gpu_early_release(false).build()?;
    /// # drop(engine);
    /// # Ok::<(), depengine::Error>(())
    /// ```
    pub fn gpu_early_release(mut self, on: bool) -> Self {
        self.choices.gpu_early_release = Some(on);
        self
    }
}
