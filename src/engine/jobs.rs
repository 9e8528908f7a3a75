//! The bodies of the engine's own ops: `wait_for_var` and `delete_var`.

use crate::op::job::{Job, Running};
use crate::var::Var;

/// The body of `wait_for_var`: returns the error it took from the var.
pub(super) struct WaitJob;

impl Job for WaitJob {
    type Output = ();

    fn start(self, op: Running<'_, ()>) {
        let result = op.header().seen_error().map_or(Ok(()), Err);
        op.store(result);
    }
}

/// The body of `delete_var`: takes the data out of the var.
pub(super) struct DeleteJob<T> {
    pub(super) var: Var<T>,
}

impl<T: Send + Sync + 'static> Job for DeleteJob<T> {
    type Output = T;

    fn start(self, op: Running<'_, T>) {
        let guard = self.var.into_write_guard(crate::op::LiveRef::new(op.task));
        let value = guard.take();
        op.store(Ok(value));
    }
}
