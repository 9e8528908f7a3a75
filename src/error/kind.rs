//! What kind of failure an error is, for callers to `match` on.

/// What kind of failure an [`Error`](crate::Error) is
/// ([`Error::kind`](crate::Error::kind)). New kinds may be added: a `match`
/// needs a `_` arm.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The op's body returned an error (its [`source`](std::error::Error::source)).
    Failed,
    /// The op's body panicked ([`Error::try_into_panic`](crate::Error::try_into_panic)).
    Panicked,
    /// An async op's completion was dropped without being signalled.
    CompletionDropped,
    /// The op did not run: a var it uses carries an earlier failure (its
    /// `source`, and [`Error::root`](crate::Error::root)).
    Skipped,
    /// The op was cancelled (a cancelling shutdown, its handle dropped with
    /// `cancel_on_drop`, its runtime gone).
    Cancelled,
    /// The engine is shut down and takes no more work.
    Shutdown,
    /// A var was used after its deletion.
    VarDeleted,
    /// Bad arguments at push or configuration time.
    InvalidArgument,
    /// Something this build or engine does not offer.
    Unsupported,
    /// A future op was pushed with no Tokio runtime to run it.
    NoRuntime,
    /// A blocking call ran in an async task, on a thread that runs a Tokio
    /// runtime's tasks.
    BlockingInRuntime,
    /// A wait that could never end where it was called.
    WouldDeadlock,
    /// A worker pool could not start its threads.
    PoolUnavailable,
    /// A GPU device cannot be used.
    GpuUnavailable,
    /// The engine holds its limit of ops in flight.
    Full,
    /// A GPU fault.
    Gpu,
}
