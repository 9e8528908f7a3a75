//! Batched submission: ops built one by one (their declarations checked,
//! their records made) and appended to their vars together, with the ops
//! ready at once queued on their pools in runs, one wake-up per run.

use std::sync::Arc;

use super::api::Engine;
use super::shared::Shared;
use crate::error::Error;
use crate::op::TaskRef;

/// Ops to push together: build each with [`OpBuilder::run_in`]
/// (`engine.op(..).read(..).write(..).run_in(&mut batch, body)`), then
/// [`submit`](Batch::submit). Nothing is pushed before the submission (so a
/// batch's ops cannot be waited for before it); the submission appends
/// them to their vars in the order they were built, as single pushes in
/// that order would, and queues those ready at once together. A batch
/// dropped unsubmitted submits.
///
/// For a DAG known up front, such as the tasks of a tiled factorisation.
/// Workers start only once the batch is submitted: submit a large DAG in
/// several batches (a step of the algorithm each) so that work starts
/// early. With bulk execution on, `run_in` pushes at once.
///
/// ```
/// let engine = depengine::Engine::new();
/// let v = engine.var(0u64);
/// let mut batch = depengine::engine::Batch::new(&engine);
/// for _ in 0..100 {
///     engine.op("inc").write(&v).run_in(&mut batch, |(), (mut v,)| {
///         *v += 1;
///         Ok(())
///     })?;
/// }
/// batch.submit()?;
/// engine.wait_for_all().blocking_wait()?;
/// assert_eq!(engine.op("get").read(&v).run(|(v,), ()| Ok(*v)).blocking_wait()?, 100);
/// # Ok::<(), depengine::Error>(())
/// ```
///
/// [`OpBuilder::run_in`]: crate::engine::OpBuilder::run_in
pub struct Batch<'e> {
    shared: &'e Arc<Shared>,
    records: Vec<TaskRef>,
}

impl<'e> Batch<'e> {
    /// An empty batch of `engine`'s.
    ///
    /// # Examples
    ///
    /// ```
    /// let engine = depengine::Engine::new();
    /// let batch = depengine::engine::Batch::new(&engine);
    /// assert!(batch.is_empty());
    /// batch.submit()?;
    /// # Ok::<(), depengine::Error>(())
    /// ```
    pub fn new(engine: &'e Engine) -> Self {
        Self { shared: engine.shared(), records: Vec::new() }
    }

    /// Ops built into the batch and not yet submitted.
    ///
    /// # Examples
    ///
    /// ```
    /// let engine = depengine::Engine::new();
    /// let v = engine.var(0);
    /// let mut batch = depengine::engine::Batch::new(&engine);
    /// engine.op("a").write(&v).run_in(&mut batch, |(), _| Ok(()))?;
    /// engine.op("b").write(&v).run_in(&mut batch, |(), _| Ok(()))?;
    /// assert_eq!(batch.len(), 2);
    /// batch.submit()?;
    /// # Ok::<(), depengine::Error>(())
    /// ```
    pub fn len(&self) -> usize {
        self.records.len()
    }

    /// Whether no op waits in the batch.
    ///
    /// # Examples
    ///
    /// ```
    /// let engine = depengine::Engine::new();
    /// let mut batch = depengine::engine::Batch::new(&engine);
    /// assert!(batch.is_empty());
    /// engine.op("a").run_in(&mut batch, |(), ()| Ok(()))?;
    /// assert!(!batch.is_empty());
    /// # Ok::<(), depengine::Error>(())
    /// ```
    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// The engine the batch's ops are for.
    pub(super) fn shared(&self) -> &'e Arc<Shared> {
        self.shared
    }

    pub(super) fn add(&mut self, record: TaskRef) {
        self.records.push(record);
    }

    /// Appends the batch's ops to their vars, in the order they were
    /// built, and queues those ready at once.
    ///
    /// # Errors
    ///
    /// The first op refused at its append (a deleted var, a closed
    /// engine); the others are pushed all the same.
    ///
    /// # Examples
    ///
    /// ```
    /// let engine = depengine::Engine::new();
    /// let v = engine.var(0);
    /// let mut batch = depengine::engine::Batch::new(&engine);
    /// engine.op("set").write(&v).run_in(&mut batch, |(), (mut v,)| { *v = 5; Ok(()) })?;
    /// assert_eq!(v.version(), 0); // nothing pushed yet
    /// batch.submit()?;
    /// assert_eq!(*v.read().blocking_wait()?, 5);
    /// # Ok::<(), depengine::Error>(())
    /// ```
    pub fn submit(mut self) -> Result<(), Error> {
        self.flush()
    }

    fn flush(&mut self) -> Result<(), Error> {
        let records = std::mem::take(&mut self.records);
        if records.is_empty() {
            return Ok(());
        }
        let mut ready = Vec::with_capacity(records.len());
        let mut refused = None;
        for record in records {
            let kept = record.header().meta.profiled().then(|| record.clone());
            if let Err(err) = crate::op::submit(record, |op| ready.push(op)) {
                self.shared.uncount();
                refused.get_or_insert(err);
            }
            if let Some(profile) = kept.as_ref().and_then(|r| r.header().profile()) {
                profile.push_ended();
            }
        }
        self.shared.dispatcher.dispatch_pushed_all(ready);
        refused.map_or(Ok(()), Err)
    }
}

impl Drop for Batch<'_> {
    fn drop(&mut self) {
        if let Err(err) = self.flush() {
            tracing::warn!(target: "depengine", "an op of a batch dropped unsubmitted was refused: {err}");
        }
    }
}

impl std::fmt::Debug for Batch<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Batch").field("ops", &self.records.len()).finish()
    }
}
