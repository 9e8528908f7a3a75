//! What went wrong on a GPU device, as a type: a caller tells a CUDA
//! error from a driver that cannot be used, and reads the error's code,
//! without parsing a message.

use std::fmt;

/// A fault of a GPU device: the call that failed, and how.
///
/// An [`Error`](crate::Error) of [`is_gpu`](crate::Error::is_gpu) carries
/// one ([`Error::gpu_fault`](crate::Error::gpu_fault)); a device with a
/// sticky fault shows it (`Gpu::fault`).
///
/// # Examples
///
/// ```
/// use depengine::{Device, gpu::GpuFault};
/// let engine = depengine::Engine::builder().simulated_gpus(1).build()?;
/// let gpu = engine.gpu(0)?;
/// gpu.sim().unwrap().fail_next("bad kernel");
/// let err = engine.op("bad kernel").device(Device::Gpu(0)).run_gpu(|(), (), ctx| {
///     let stream = ctx.sim_stream().unwrap();
///     stream.launch("bad kernel", std::time::Duration::ZERO, Vec::new(), || {})?;
///     Ok(())
/// }).blocking_wait().unwrap_err();
/// let fault = err.gpu_fault().unwrap();
/// assert!(matches!(fault, GpuFault::Simulated { .. }));
/// assert_eq!(fault.cuda_error(), Some("CUDA_ERROR_ILLEGAL_ADDRESS"));
/// assert_eq!(gpu.fault().as_ref(), Some(fault)); // sticky: the device takes no more work
/// # Ok::<(), depengine::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum GpuFault {
    /// A driver call returned a CUDA error.
    Cuda {
        /// The call, as `cuEventRecord`.
        call: &'static str,
        /// The error's name as the driver spells it, as `CUDA_ERROR_LAUNCH_FAILED`.
        error: String,
    },
    /// The driver library could not be used for the call: it failed to
    /// load, or lacks a function its bindings need (which panic then).
    Driver {
        /// The call.
        call: &'static str,
        /// The bindings' panic message.
        why: String,
    },
    /// A call that watches the device's work panicked: the device's work
    /// can no longer be seen to complete.
    Panicked {
        /// The call.
        call: &'static str,
        /// The panic's message.
        message: String,
    },
    /// An event of one device's backend met a stream of another: a bug of
    /// the engine, reported rather than acted on.
    ForeignEvent {
        /// The call that would have mixed them.
        call: &'static str,
    },
    /// A simulated device's fault.
    Simulated {
        /// The CUDA error it stands for.
        error: &'static str,
        /// What caused it: a work item made to fail, or one that panicked.
        why: String,
    },
}

impl GpuFault {
    /// The CUDA error's name (`CUDA_ERROR_ILLEGAL_ADDRESS`), where the
    /// driver, or the simulator in its stead, gave one.
    pub fn cuda_error(&self) -> Option<&str> {
        match self {
            Self::Cuda { error, .. } => Some(error),
            Self::Simulated { error, .. } => Some(error),
            Self::Driver { .. } | Self::Panicked { .. } | Self::ForeignEvent { .. } => None,
        }
    }

    /// The driver call that failed, where one did.
    pub fn call(&self) -> Option<&'static str> {
        match self {
            Self::Cuda { call, .. }
            | Self::Driver { call, .. }
            | Self::Panicked { call, .. }
            | Self::ForeignEvent { call } => Some(call),
            Self::Simulated { .. } => None,
        }
    }
}

impl fmt::Display for GpuFault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Cuda { call, error } => write!(f, "{call}: {error}"),
            Self::Driver { call, why } => write!(f, "{call}: the CUDA driver could not be used ({why})"),
            Self::Panicked { call, message } => write!(f, "{call} panicked: {message}"),
            Self::ForeignEvent { call } => write!(f, "{call}: an event of another device's backend"),
            Self::Simulated { error, why } => write!(f, "{error} (simulated: {why})"),
        }
    }
}

impl std::error::Error for GpuFault {}
