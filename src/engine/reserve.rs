//! [`Reservation`]: room among the ops in flight, waited for before the
//! op is built (see `limit.rs`).

use std::sync::Arc;

use tokio::sync::OwnedSemaphorePermit;

use super::op_builder::OpBuilder;
use super::shared::Shared;

/// Room for one op, held until that op is pushed (then the op holds it
/// until it completes) or until this is dropped (then it goes back). From
/// [`Engine::reserve`](crate::Engine::reserve). It owns its hold on the
/// engine, so it can move into a spawned task (as tokio's
/// `OwnedSemaphorePermit` does).
#[must_use = "a reservation holds a slot until it is used or dropped"]
pub struct Reservation {
    shared: Arc<Shared>,
    permit: Option<OwnedSemaphorePermit>,
}

impl std::fmt::Debug for Reservation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reservation").field("holds_a_slot", &self.permit.is_some()).finish()
    }
}

impl Reservation {
    pub(super) async fn new(shared: &Arc<Shared>) -> Reservation {
        let permit = match shared.limit() {
            Some(limit) => Some(limit.wait().await),
            None => None,
        };
        Self { shared: shared.clone(), permit }
    }

    /// Starts building the op that uses this room: its push takes no slot
    /// of its own, and cannot be refused as full. A builder dropped
    /// unpushed gives the room back. The room serves one op: an op built
    /// from a reservation already used takes a slot as any op does.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> depengine::Result<()> {
    /// let engine = depengine::Engine::builder().max_in_flight(8).build()?;
    /// let v = engine.var(1);
    /// let mut room = engine.reserve().await; // waits while 8 ops are in flight
    /// // The reservation owns its hold on the engine: it moves into a task.
    /// let task = tokio::spawn(async move {
    ///     room.op("request").read(&v).run(|(v,), ()| Ok(*v + 1)).await
    /// });
    /// assert_eq!(task.await.unwrap()?, 2);
    /// # Ok(()) }
    /// ```
    pub fn op(&mut self, name: impl Into<std::borrow::Cow<'static, str>>) -> OpBuilder<'_> {
        OpBuilder::reserved(&self.shared, name.into(), self.permit.take())
    }
}
