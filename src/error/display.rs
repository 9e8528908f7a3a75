//! How an error reads: `Display` says what happened at the error's own
//! level (`{:#}` adds every cause, on one line), `source` hands the cause
//! on, and `Debug` is the whole chain.

use std::fmt;

use super::{Error, Kind};

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.fmt_alone(f)?;
        if f.alternate() {
            let mut cause = std::error::Error::source(self);
            while let Some(err) = cause {
                write!(f, ": {err}")?;
                cause = err.source();
            }
        }
        Ok(())
    }
}

impl Error {
    fn fmt_alone(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.detail() {
            Kind::Failed { op, .. } => write!(f, "op `{op}` failed"),
            Kind::Panicked { op, message, .. } => write!(f, "op `{op}` panicked: {message}"),
            Kind::CompletionDropped { op } => {
                write!(f, "op `{op}` failed: its completion was dropped without being signalled")
            }
            Kind::Skipped { op, .. } => write!(f, "op `{op}` skipped: a var it uses carries an error"),
            Kind::Cancelled { op, reason } => write!(f, "op `{op}` cancelled: {reason}"),
            Kind::Shutdown => f.write_str("engine is shut down"),
            Kind::VarDeleted { var } => write!(f, "var {var} has been deleted"),
            Kind::InvalidArgument(msg) => write!(f, "invalid argument: {msg}"),
            Kind::Unsupported(msg) => write!(f, "unsupported: {msg}"),
            Kind::NoRuntime => {
                f.write_str("no tokio runtime: build the engine inside one or pass EngineBuilder::runtime")
            }
            Kind::BlockingInRuntime { what, instead } => {
                write!(
                    f,
                    "{what} blocks, and was called in async code, where it would stall a tokio runtime's tasks; {instead}"
                )
            }
            Kind::WouldDeadlock { what, why } => write!(f, "{what} would never return: {why}"),
            Kind::PoolUnavailable { pool, reason } => {
                write!(f, "cannot start the worker threads of pool `{pool}`: {reason}")
            }
            Kind::Full { limit } => write!(
                f,
                "the engine holds its limit of {limit} ops in flight (EngineBuilder::max_in_flight); \
                 try later, or wait for room with Engine::reserve"
            ),
            Kind::GpuUnavailable { device, reason } => write!(f, "gpu({device}) is unavailable: {reason}"),
            Kind::Gpu { op, device, fault, sticky } => {
                match op {
                    Some(op) => write!(f, "op `{op}` failed on gpu({device}): {fault}")?,
                    None => write!(f, "gpu({device}) failed: {fault}")?,
                }
                if *sticky {
                    write!(f, " (a sticky fault: the device takes no more work)")?;
                }
                Ok(())
            }
        }
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Error({self:#})")
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self.detail() {
            Kind::Failed { source, .. } => Some(source.as_ref()),
            Kind::Skipped { root, .. } => Some(root.root()),
            _ => None,
        }
    }
}
