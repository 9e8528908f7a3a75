//! Prepared ops (MXNet's `NewOperator` / `Push(op)` / `DeleteOperator`):
//! an op's declarations, placement and options settled once, then pushed
//! many times with a new body each time.

use std::sync::Arc;

use super::op_builder::OpBuilder;
use super::shared::{OpOptions, Shared};
use crate::error::{BoxError, Error};
use crate::op::access::Item;
use crate::op::job::SyncJob;
use crate::op::op_handle::OpHandle;
use crate::op::{DepList, Exec};

/// An op declared once and pushed many times: its vars (sorted and
/// merged), its placement (its pool started) and its options are settled
/// when it is prepared, so a push does only what every push must: take
/// its slot among the ops in flight, count it, build its record (reusing a
/// finished one) and append it to its vars. Each push takes a new body;
/// pushes of one prepared op, as any pushes, take effect in push order.
///
/// From [`OpBuilder::prepare`]. Cheap to keep; dropping it releases its
/// vars (ops pushed from it still run).
///
/// # Examples
///
/// ```
/// # fn main() -> depengine::Result<()> {
/// let engine = depengine::Engine::new();
/// let (x, sum) = (engine.var(2u64), engine.var(0u64));
/// let add = engine.op("add").read(&x).write(&sum).prepare()?;
/// for i in 0..10 {
///     add.run_detached(move |(x,), (mut sum,)| {
///         *sum += *x * i;
///         Ok(())
///     })?;
/// }
/// engine.wait_for_all().blocking_wait()?;
/// assert_eq!(*futures::executor::block_on(sum.read())?, 90);
/// # Ok(()) }
/// ```
pub struct PreparedOp<Rd = (), Wr = ()> {
    shared: Arc<Shared>,
    opts: OpOptions,
    exec: Exec,
    deps: DepList,
    reads: Rd,
    writes: Wr,
}

impl<Rd: Item, Wr: Item> OpBuilder<'_, Rd, Wr> {
    /// Settles the op's declarations, placement and options, for pushes
    /// with a sync body ([`PreparedOp::run`], [`PreparedOp::run_detached`]).
    /// A builder from a [`Reservation`](super::Reservation) gives its room
    /// back: each push of the prepared op takes a slot of its own.
    ///
    /// # Errors
    ///
    /// The refusals of a push ([`OpHandle::pushed`]), but for a closed
    /// engine or a deleted var, which each push reports.
    ///
    /// # Examples
    ///
    /// ```
    /// let engine = depengine::Engine::new();
    /// let v = engine.var(0u64);
    /// let inc = engine.op("inc").write(&v).prepare()?; // checked once, pushed many times
    /// for _ in 0..100 {
    ///     inc.run_detached(|(), (mut v,)| { *v += 1; Ok(()) })?;
    /// }
    /// assert_eq!(*v.read().blocking_wait()?, 100);
    /// # Ok::<(), depengine::Error>(())
    /// ```
    pub fn prepare(mut self) -> Result<PreparedOp<Rd, Wr>, Error> {
        self.give_room_back();
        let (shared, opts, deps, reads, writes) = self.declared();
        let (exec, deps) = shared.prepare(&opts, deps)?;
        Ok(PreparedOp { shared: shared.clone(), opts, exec, deps, reads, writes })
    }
}

impl<Rd: Item, Wr: Item> PreparedOp<Rd, Wr> {
    /// Pushes the op with `body`, run to completion on a worker of its
    /// lane (see [`OpBuilder::run`]).
    ///
    /// # Examples
    ///
    /// ```
    /// let engine = depengine::Engine::new();
    /// let (x, y) = (engine.var(3), engine.var(0));
    /// let square = engine.op("square").read(&x).write(&y).prepare()?;
    /// let results: Vec<_> = (0..3).map(|i| square.run(move |(x,), (mut y,)| { *y = *x * *x + i; Ok(*y) })).collect();
    /// let got: Vec<i32> = results.into_iter().map(|h| h.blocking_wait()).collect::<Result<_, _>>()?;
    /// assert_eq!(got, [9, 10, 11]);
    /// # Ok::<(), depengine::Error>(())
    /// ```
    pub fn run<R, F>(&self, body: F) -> OpHandle<R>
    where
        F: FnOnce(Rd::Guard, Wr::Guard) -> Result<R, BoxError> + Send + 'static,
        R: Send + 'static,
    {
        match self.push(body, false) {
            Ok(record) => {
                OpHandle::of_slot(record.expect("a record for the handle of an op pushed with one"))
            }
            Err(err) => OpHandle::refused(err),
        }
    }

    /// Pushes the op with `body` and no handle (see
    /// [`OpBuilder::run_detached`]).
    ///
    /// # Errors
    ///
    /// A refused push: the engine is closed, a var was deleted, or the
    /// engine holds its limit of ops in flight.
    ///
    /// # Examples
    ///
    /// ```
    /// let engine = depengine::Engine::new();
    /// let log = engine.var(Vec::new());
    /// let append = engine.op("append").write(&log).prepare()?;
    /// for i in 0..5 {
    ///     append.run_detached(move |(), (mut log,)| { log.push(i); Ok(()) })?;
    /// }
    /// assert_eq!(*log.read().blocking_wait()?, [0, 1, 2, 3, 4]);
    /// # Ok::<(), depengine::Error>(())
    /// ```
    pub fn run_detached<F>(&self, body: F) -> Result<(), Error>
    where
        F: FnOnce(Rd::Guard, Wr::Guard) -> Result<(), BoxError> + Send + 'static,
    {
        self.push(body, true).map(drop)
    }

    fn push<R, F>(&self, body: F, detached: bool) -> Result<Option<crate::op::op_cell::SlotRef<R>>, Error>
    where
        F: FnOnce(Rd::Guard, Wr::Guard) -> Result<R, BoxError> + Send + 'static,
        R: Send + 'static,
    {
        let job = SyncJob { reads: self.reads.duplicate(), writes: self.writes.duplicate(), body };
        self.shared.push_prepared(self.opts.clone(), self.exec, self.deps.clone(), job, detached)
    }
}

impl<Rd, Wr> std::fmt::Debug for PreparedOp<Rd, Wr> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PreparedOp").field("options", &self.opts).field("vars", &self.deps.len()).finish()
    }
}
