//! The one error type of the crate.

use std::borrow::Cow;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

mod display;
mod gpu_fault;
mod kind;

pub use gpu_fault::GpuFault;
pub use kind::ErrorKind;

/// A boxed error as returned by op bodies; `?` converts any error into it.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// The result type of every fallible engine call and of every op handle.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// An engine error.
///
/// Cheap to clone: one failure reaches many vars and waiters, so the error is
/// shared behind an `Arc`. Use the `is_*` helpers to tell kinds apart and
/// [`root`](Error::root) to reach the failure that started a chain of skipped
/// ops.
#[derive(Clone)]
pub struct Error {
    inner: Arc<Repr>,
}

struct Repr {
    kind: Kind,
    /// Handed to the user through an op's handle (a `wait_for_var`'s
    /// included): a shutdown does not report it again.
    seen: AtomicBool,
}

pub(crate) enum Kind {
    /// The op's body returned an error.
    Failed { op: Cow<'static, str>, source: BoxError },
    /// The op's body panicked: its message, and its payload until
    /// [`Error::try_into_panic`] takes it.
    Panicked {
        op: Cow<'static, str>,
        message: String,
        payload: std::sync::Mutex<Option<Box<dyn std::any::Any + Send>>>,
    },
    /// An async op's completion token was dropped without being signalled.
    CompletionDropped { op: Cow<'static, str> },
    /// The op was not run because a var it uses carries an error.
    Skipped { op: Cow<'static, str>, root: Error },
    /// The op was cancelled: a cancelling shutdown before it ran, or its
    /// runtime dropped it.
    Cancelled { op: Cow<'static, str>, reason: &'static str },
    /// The engine is closed and takes no more work.
    Shutdown,
    /// A var was used after `delete_var`.
    VarDeleted { var: String },
    /// Bad arguments at push or configuration time.
    InvalidArgument(String),
    /// The operation needs something this build or engine does not offer.
    Unsupported(String),
    /// A future op was pushed with no Tokio runtime to run it on.
    NoRuntime,
    /// A blocking call was made in async code; `instead` says what to do.
    BlockingInRuntime { what: &'static str, instead: &'static str },
    /// A wait that could never end where it was called.
    WouldDeadlock { what: &'static str, why: &'static str },
    /// A worker pool could not start its threads.
    PoolUnavailable { pool: String, reason: String },
    /// A GPU device cannot be used (no driver, no such device).
    GpuUnavailable { device: usize, reason: String },
    /// The engine holds its limit of ops in flight.
    Full { limit: usize },
    /// A GPU fault: from enqueueing an op's work, from the query of its
    /// event, or the device's sticky fault (`sticky`: a push refused for it).
    Gpu { op: Option<Cow<'static, str>>, device: usize, fault: GpuFault, sticky: bool },
}

impl Error {
    pub(crate) fn new(kind: Kind) -> Self {
        Self { inner: Arc::new(Repr { kind, seen: AtomicBool::new(false) }) }
    }

    /// Notes that the user was handed this failure (through a handle).
    pub(crate) fn mark_seen(&self) {
        self.inner.seen.store(true, Ordering::Relaxed);
    }

    /// Whether the user was handed this failure.
    pub(crate) fn is_seen(&self) -> bool {
        self.inner.seen.load(Ordering::Relaxed)
    }

    pub(crate) fn invalid(msg: impl Into<String>) -> Self {
        Self::new(Kind::InvalidArgument(msg.into()))
    }

    pub(crate) fn unsupported(msg: impl Into<String>) -> Self {
        Self::new(Kind::Unsupported(msg.into()))
    }

    pub(crate) fn would_deadlock(what: &'static str, why: &'static str) -> Self {
        Self::new(Kind::WouldDeadlock { what, why })
    }

    pub(crate) fn blocking_in_runtime(what: &'static str, instead: &'static str) -> Self {
        Self::new(Kind::BlockingInRuntime { what, instead })
    }

    pub(crate) fn pool_unavailable(pool: &str, reason: &std::io::Error) -> Self {
        Self::new(Kind::PoolUnavailable { pool: pool.to_owned(), reason: reason.to_string() })
    }

    pub(crate) fn full(limit: usize) -> Self {
        Self::new(Kind::Full { limit })
    }

    pub(crate) fn gpu_unavailable(device: usize, reason: String) -> Self {
        Self::new(Kind::GpuUnavailable { device, reason })
    }

    pub(crate) fn gpu(op: Option<Cow<'static, str>>, device: usize, fault: GpuFault) -> Self {
        Self::new(Kind::Gpu { op, device, fault, sticky: false })
    }

    /// A push refused because its device has the sticky `fault`.
    pub(crate) fn gpu_sticky(device: usize, fault: GpuFault) -> Self {
        Self::new(Kind::Gpu { op: None, device, fault, sticky: true })
    }

    pub(crate) fn detail(&self) -> &Kind {
        &self.inner.kind
    }

    /// What kind of failure this is, to `match` on (the `is_*` helpers
    /// ask the same one kind at a time).
    ///
    /// # Examples
    ///
    /// ```
    /// use depengine::ErrorKind;
    /// let engine = depengine::Engine::new();
    /// let v = engine.var(0);
    /// let failed = engine.op("update").write(&v).run(|(), _| -> depengine::Result<(), _> { Err("disk full".into()) });
    /// let skipped = engine.op("request").read(&v).run(|(v,), ()| Ok(*v));
    /// let (failed, skipped) = (failed.blocking_wait().unwrap_err(), skipped.blocking_wait().unwrap_err());
    /// let status = |err: &depengine::Error| match err.kind() {
    ///     ErrorKind::Full | ErrorKind::Shutdown | ErrorKind::Skipped => 503,
    ///     _ => 500,
    /// };
    /// assert_eq!((status(&failed), status(&skipped)), (500, 503));
    /// # let _ = engine.wait_for_all().blocking_wait();
    /// ```
    pub fn kind(&self) -> ErrorKind {
        match self.detail() {
            Kind::Failed { .. } => ErrorKind::Failed,
            Kind::Panicked { .. } => ErrorKind::Panicked,
            Kind::CompletionDropped { .. } => ErrorKind::CompletionDropped,
            Kind::Skipped { .. } => ErrorKind::Skipped,
            Kind::Cancelled { .. } => ErrorKind::Cancelled,
            Kind::Shutdown => ErrorKind::Shutdown,
            Kind::VarDeleted { .. } => ErrorKind::VarDeleted,
            Kind::InvalidArgument(_) => ErrorKind::InvalidArgument,
            Kind::Unsupported(_) => ErrorKind::Unsupported,
            Kind::NoRuntime => ErrorKind::NoRuntime,
            Kind::BlockingInRuntime { .. } => ErrorKind::BlockingInRuntime,
            Kind::WouldDeadlock { .. } => ErrorKind::WouldDeadlock,
            Kind::PoolUnavailable { .. } => ErrorKind::PoolUnavailable,
            Kind::GpuUnavailable { .. } => ErrorKind::GpuUnavailable,
            Kind::Full { .. } => ErrorKind::Full,
            Kind::Gpu { .. } => ErrorKind::Gpu,
        }
    }

    /// The payload of the panic this error reports (an op's body, or an
    /// acquire's, panicked), as `std::panic::catch_unwind` caught it: to
    /// resume the panic (`std::panic::resume_unwind`) or inspect it. The
    /// error is shared by its clones (every waiter of a failed op holds
    /// one): the first to ask takes the payload; it is `Err(self)` for the
    /// others, for any other kind of error, and for a panic reported
    /// without a payload (a write guard dropped while its thread panicked).
    /// `Display` keeps the panic's message either way. Tokio's
    /// `JoinError::try_into_panic`.
    ///
    /// # Examples
    ///
    /// ```
    /// let engine = depengine::Engine::new();
    /// let h = engine.op("boom").run(|(), ()| -> depengine::Result<(), depengine::BoxError> { std::panic::panic_any(42u32) });
    /// let err = h.blocking_wait().unwrap_err();
    /// let payload = err.try_into_panic().unwrap();
    /// assert_eq!(payload.downcast_ref::<u32>(), Some(&42));
    /// # let _ = engine.wait_for_all().blocking_wait();
    /// ```
    ///
    /// # Errors
    ///
    /// `self`, where there is no payload to take (see above).
    pub fn try_into_panic(self) -> std::result::Result<Box<dyn std::any::Any + Send + 'static>, Error> {
        let taken = match self.detail() {
            Kind::Panicked { payload, .. } => {
                payload.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take()
            }
            _ => None,
        };
        taken.ok_or(self)
    }

    /// The payload of the panic this error reports, as
    /// [`try_into_panic`](Self::try_into_panic) gives it, for an error known
    /// to hold one: Tokio's `JoinError::into_panic`.
    ///
    /// # Examples
    ///
    /// ```
    /// let engine = depengine::Engine::new();
    /// let h = engine.op("boom").run(|(), ()| -> depengine::Result<(), depengine::BoxError> { panic!("no") });
    /// let err = h.blocking_wait().unwrap_err();
    /// if err.is_panic() {
    ///     let payload = err.into_panic();
    ///     assert_eq!(payload.downcast_ref::<&str>(), Some(&"no"));
    /// }
    /// # let _ = engine.wait_for_all().blocking_wait();
    /// ```
    ///
    /// # Panics
    ///
    /// Where `try_into_panic` gives `Err`: the error is not a panic, or
    /// its payload was taken (through a clone) or never kept.
    #[track_caller]
    pub fn into_panic(self) -> Box<dyn std::any::Any + Send + 'static> {
        self.try_into_panic().unwrap_or_else(|err| {
            panic!("`Error::into_panic` on an error that holds no panic payload: {err}")
        })
    }

    /// An op's (or an acquire's) body panicked with `payload`.
    pub(crate) fn panicked(op: Cow<'static, str>, payload: Box<dyn std::any::Any + Send>) -> Self {
        let message = panic_message(&*payload);
        Self::new(Kind::Panicked { op, message, payload: std::sync::Mutex::new(Some(payload)) })
    }

    /// A panic reported without a payload to hand back.
    pub(crate) fn panicked_without_payload(op: Cow<'static, str>, message: String) -> Self {
        Self::new(Kind::Panicked { op, message, payload: std::sync::Mutex::new(None) })
    }

    /// The failure at the start of a chain of skipped ops, or `self`.
    ///
    /// # Examples
    ///
    /// ```
    /// let engine = depengine::Engine::new();
    /// let v = engine.var(0);
    /// let failed = engine.op("update").write(&v).run(|(), _| -> depengine::Result<(), _> { Err("bad input".into()) });
    /// let skipped = engine.op("request").read(&v).run(|(v,), ()| Ok(*v));
    /// let (failed, skipped) = (failed.blocking_wait().unwrap_err(), skipped.blocking_wait().unwrap_err());
    /// assert!(skipped.is_skipped());
    /// assert_eq!(skipped.root().op_name(), Some("update")); // where the chain began
    /// # let _ = engine.wait_for_all().blocking_wait();
    /// ```
    pub fn root(&self) -> &Error {
        match self.detail() {
            Kind::Skipped { root, .. } => root.root(),
            _ => self,
        }
    }

    /// The op's body returned an error ([`source`](std::error::Error::source)
    /// gives it).
    ///
    /// # Examples
    ///
    /// ```
    /// let engine = depengine::Engine::new();
    /// let v = engine.var(0);
    /// let failed = engine.op("update").write(&v).run(|(), _| -> depengine::Result<(), _> { Err("bad input".into()) });
    /// let skipped = engine.op("request").read(&v).run(|(v,), ()| Ok(*v));
    /// let (failed, skipped) = (failed.blocking_wait().unwrap_err(), skipped.blocking_wait().unwrap_err());
    /// assert!(failed.is_failed());
    /// assert_eq!(std::error::Error::source(&failed).unwrap().to_string(), "bad input");
    /// # let _ = engine.wait_for_all().blocking_wait();
    /// ```
    pub fn is_failed(&self) -> bool {
        matches!(self.detail(), Kind::Failed { .. })
    }

    /// The op's body panicked (the panic was caught; no worker died).
    ///
    /// # Examples
    ///
    /// ```
    /// let engine = depengine::Engine::new();
    /// let h = engine.op("oops").run(|(), ()| -> depengine::Result<(), _> { panic!("index out of range") });
    /// assert!(h.blocking_wait().unwrap_err().is_panic()); // the worker lives on
    /// # let _ = engine.wait_for_all().blocking_wait();
    /// ```
    pub fn is_panic(&self) -> bool {
        matches!(self.detail(), Kind::Panicked { .. })
    }

    /// An async op's completion token (`engine::Completion`) was dropped
    /// unsignalled.
    ///
    /// # Examples
    ///
    /// ```
    /// let engine = depengine::Engine::new();
    /// let h = engine.op("forgot").run_async(|(), (), done: depengine::engine::Completion<()>| drop(done));
    /// assert!(h.blocking_wait().unwrap_err().is_completion_dropped());
    /// ```
    pub fn is_completion_dropped(&self) -> bool {
        matches!(self.detail(), Kind::CompletionDropped { .. })
    }

    /// The op was skipped because a var it uses carries an error.
    ///
    /// # Examples
    ///
    /// ```
    /// let engine = depengine::Engine::new();
    /// let v = engine.var(0);
    /// let failed = engine.op("update").write(&v).run(|(), _| -> depengine::Result<(), _> { Err("bad input".into()) });
    /// let skipped = engine.op("request").read(&v).run(|(v,), ()| Ok(*v));
    /// let (failed, skipped) = (failed.blocking_wait().unwrap_err(), skipped.blocking_wait().unwrap_err());
    /// assert!(skipped.is_skipped() && !failed.is_skipped());
    /// # let _ = engine.wait_for_all().blocking_wait();
    /// ```
    pub fn is_skipped(&self) -> bool {
        matches!(self.detail(), Kind::Skipped { .. })
    }

    /// The op was cancelled by [`ShutdownMode::Cancel`](crate::ShutdownMode)
    /// before it ran, or its future was dropped by a Tokio runtime shutting down.
    ///
    /// # Examples
    ///
    /// ```
    /// let engine = depengine::Engine::new();
    /// let v = engine.var(0);
    /// let gate = v.write().blocking_wait()?;
    /// let h = engine.op("queued").read(&v).run(|(v,), ()| Ok(*v));
    /// h.abort();
    /// drop(gate);
    /// assert!(h.blocking_wait().unwrap_err().is_cancelled());
    /// # Ok::<(), depengine::Error>(())
    /// ```
    pub fn is_cancelled(&self) -> bool {
        matches!(self.detail(), Kind::Cancelled { .. })
    }

    /// The engine is closed.
    ///
    /// # Examples
    ///
    /// ```
    /// use depengine::ShutdownMode;
    /// let engine = depengine::Engine::new();
    /// engine.blocking_shutdown(ShutdownMode::Drain)?;
    /// assert!(engine.op("late").run(|(), ()| Ok(())).pushed().unwrap_err().is_shutdown());
    /// # Ok::<(), depengine::Error>(())
    /// ```
    pub fn is_shutdown(&self) -> bool {
        matches!(self.detail(), Kind::Shutdown)
    }

    /// A deleted var was used.
    ///
    /// # Examples
    ///
    /// ```
    /// let engine = depengine::Engine::new();
    /// let v = engine.var(0);
    /// engine.delete_var(&v).blocking_wait()?;
    /// assert!(engine.op("use").read(&v).run(|_, ()| Ok(())).pushed().unwrap_err().is_var_deleted());
    /// # Ok::<(), depengine::Error>(())
    /// ```
    pub fn is_var_deleted(&self) -> bool {
        matches!(self.detail(), Kind::VarDeleted { .. })
    }

    /// Invalid arguments were given.
    ///
    /// # Examples
    ///
    /// ```
    /// let engine = depengine::Engine::new();
    /// let v = engine.var(0);
    /// let twice = engine.op("twice").read(&v).write(&v).run(|_, _| Ok(()));
    /// assert!(twice.pushed().unwrap_err().is_invalid_argument());
    /// ```
    pub fn is_invalid_argument(&self) -> bool {
        matches!(self.detail(), Kind::InvalidArgument(_))
    }

    /// The request needs a feature or device this engine does not have.
    ///
    /// # Examples
    ///
    /// ```
    /// let engine = depengine::Engine::builder().simulated_gpus(1).build()?;
    /// // A simulated device has no driver to hand out.
    /// assert!(engine.gpu(0)?.driver_version().unwrap_err().is_unsupported());
    /// # Ok::<(), depengine::Error>(())
    /// ```
    pub fn is_unsupported(&self) -> bool {
        matches!(self.detail(), Kind::Unsupported(_))
    }

    /// A future op needs a Tokio runtime and none was available.
    ///
    /// # Examples
    ///
    /// ```
    /// let engine = depengine::Engine::new(); // built outside any Tokio runtime
    /// let h = engine.op("future").spawn(|(), ()| async { Ok(()) });
    /// assert!(h.pushed().unwrap_err().is_no_runtime());
    /// ```
    pub fn is_no_runtime(&self) -> bool {
        matches!(self.detail(), Kind::NoRuntime)
    }

    /// A blocking call (`blocking_*`, `depengine::scope`) was refused
    /// because it ran in async code (a task, the future of a `block_on`),
    /// where it would stall the runtime's tasks. Inside
    /// `tokio::task::spawn_blocking`, `tokio::task::block_in_place` and on
    /// plain threads it is allowed.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let engine = depengine::Engine::new();
    /// let err = engine.op("x").run(|(), ()| Ok(())).blocking_wait().unwrap_err();
    /// assert!(err.is_blocking_in_runtime()); // `.await` it instead
    /// # }
    /// ```
    pub fn is_blocking_in_runtime(&self) -> bool {
        matches!(self.detail(), Kind::BlockingInRuntime { .. })
    }

    /// A wait was refused because, where it was called, it could never end:
    /// a `blocking_*` wait inside an op body or on an engine worker that
    /// the wait needs, or an engine-wide wait inside a future op.
    pub fn is_would_deadlock(&self) -> bool {
        matches!(self.detail(), Kind::WouldDeadlock { .. })
    }

    /// A worker pool could not start its threads (the OS refused them):
    /// the push that needed it was refused and left its vars untouched;
    /// pushes within a back-off (50 ms, doubling with each failure in a
    /// row, up to 5 s) get the same error without asking the OS again, and
    /// a later push tries again.
    pub fn is_pool_unavailable(&self) -> bool {
        matches!(self.detail(), Kind::PoolUnavailable { .. })
    }

    /// The push was refused: the engine holds its limit of ops in flight
    /// ([`EngineBuilder::max_in_flight`](crate::EngineBuilder::max_in_flight)).
    /// Nothing was pushed. Try later, or wait for room with
    /// [`Engine::reserve`](crate::Engine::reserve); a service answers 503.
    ///
    /// # Examples
    ///
    /// ```
    /// let engine = depengine::Engine::builder().max_in_flight(1).build()?;
    /// let v = engine.var(0);
    /// let gate = v.write().blocking_wait()?;
    /// let first = engine.op("first").read(&v).run(|_, ()| Ok(()));
    /// assert!(engine.op("second").run(|(), ()| Ok(())).pushed().unwrap_err().is_full());
    /// drop(gate);
    /// first.blocking_wait()?;
    /// # Ok::<(), depengine::Error>(())
    /// ```
    pub fn is_full(&self) -> bool {
        matches!(self.detail(), Kind::Full { .. })
    }

    /// A GPU device cannot be used: no CUDA driver, no such device, a build
    /// without the `cuda` feature. The message names what is missing.
    ///
    /// # Examples
    ///
    /// ```
    /// let engine = depengine::Engine::builder().simulated_gpus(1).build()?;
    /// // Gpu(0) is simulated; there is no Gpu(1).
    /// let err = engine.gpu(1).unwrap_err();
    /// assert!(err.is_gpu_unavailable());
    /// # Ok::<(), depengine::Error>(())
    /// ```
    pub fn is_gpu_unavailable(&self) -> bool {
        matches!(self.detail(), Kind::GpuUnavailable { .. })
    }

    /// A CUDA error failed the op (enqueueing its work, or the query of its
    /// event), or the device had a sticky fault, which fails every pending
    /// op of the device and refuses later pushes to it. The message has the
    /// CUDA error's name.
    pub fn is_gpu(&self) -> bool {
        matches!(self.detail(), Kind::Gpu { .. })
    }

    /// The GPU fault of an error of [`is_gpu`](Self::is_gpu), typed (see
    /// [`GpuFault`]).
    ///
    /// # Examples
    ///
    /// ```
    /// use depengine::Device;
    /// let engine = depengine::Engine::builder().simulated_gpus(1).build()?;
    /// engine.gpu(0)?.sim().unwrap().fail_next("step");
    /// let err = engine.op("step").device(Device::Gpu(0)).run_gpu(|(), (), ctx| {
    ///     ctx.sim_stream().unwrap().launch("step", std::time::Duration::ZERO, Vec::new(), || {})?;
    ///     Ok(())
    /// }).blocking_wait().unwrap_err();
    /// assert_eq!(err.gpu_fault().and_then(|f| f.cuda_error()), Some("CUDA_ERROR_ILLEGAL_ADDRESS"));
    /// # Ok::<(), depengine::Error>(())
    /// ```
    pub fn gpu_fault(&self) -> Option<&GpuFault> {
        match self.detail() {
            Kind::Gpu { fault, .. } => Some(fault),
            _ => None,
        }
    }

    /// The name of the op this error belongs to, if any.
    ///
    /// # Examples
    ///
    /// ```
    /// let engine = depengine::Engine::new();
    /// let v = engine.var(0);
    /// let failed = engine.op("update").write(&v).run(|(), _| -> depengine::Result<(), _> { Err("bad input".into()) });
    /// let skipped = engine.op("request").read(&v).run(|(v,), ()| Ok(*v));
    /// let (failed, skipped) = (failed.blocking_wait().unwrap_err(), skipped.blocking_wait().unwrap_err());
    /// assert_eq!(failed.op_name(), Some("update"));
    /// assert_eq!(skipped.op_name(), Some("request"));
    /// # let _ = engine.wait_for_all().blocking_wait();
    /// ```
    pub fn op_name(&self) -> Option<&str> {
        match self.detail() {
            Kind::Failed { op, .. }
            | Kind::Panicked { op, .. }
            | Kind::CompletionDropped { op }
            | Kind::Skipped { op, .. }
            | Kind::Cancelled { op, .. } => Some(op),
            Kind::Gpu { op, .. } => op.as_deref(),
            _ => None,
        }
    }

    /// Whether two errors are the same shared failure (not just equal text).
    ///
    /// # Examples
    ///
    /// ```
    /// let engine = depengine::Engine::new();
    /// let v = engine.var(0);
    /// let failed = engine.op("update").write(&v).run(|(), _| -> depengine::Result<(), _> { Err("bad input".into()) });
    /// let skipped = engine.op("request").read(&v).run(|(v,), ()| Ok(*v));
    /// let (failed, skipped) = (failed.blocking_wait().unwrap_err(), skipped.blocking_wait().unwrap_err());
    /// assert!(skipped.root().same_as(&failed));
    /// assert!(!skipped.same_as(&failed));
    /// # let _ = engine.wait_for_all().blocking_wait();
    /// ```
    pub fn same_as(&self, other: &Error) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }
}

/// `{}` writes this error alone: its cause is its
/// [`source`](std::error::Error::source), which a report (anyhow's, eyre's)
/// prints next, so that each cause is printed once. `{:#}` writes the whole
/// chain on one line, each cause after a colon, for a log.
/// Text of a caught panic payload.
pub(crate) fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic payload".to_owned()
    }
}

#[cfg(test)]
mod tests;
