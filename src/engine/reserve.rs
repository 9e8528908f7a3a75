//! [`Reservation`]: room among the ops in flight, waited for before the
//! op is built (see `limit.rs`).

use std::sync::Arc;

use tokio::sync::OwnedSemaphorePermit;

use super::builder::OpBuilder;
use super::limit::Reserved;
use super::shared::Shared;

/// Room for one op, held until that op is pushed (then the op holds it
/// until it completes) or until this is dropped (then it goes back). From
/// [`Engine::reserve`](crate::Engine::reserve).
#[must_use = "a reservation holds a slot until it is used or dropped"]
pub struct Reservation<'e> {
    shared: &'e Arc<Shared>,
    permit: Option<OwnedSemaphorePermit>,
}

impl std::fmt::Debug for Reservation<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reservation").field("holds_a_slot", &self.permit.is_some()).finish()
    }
}

impl<'e> Reservation<'e> {
    pub(super) async fn new(shared: &'e Arc<Shared>) -> Reservation<'e> {
        let permit = match shared.limit() {
            Some(limit) => Some(limit.wait().await),
            None => None,
        };
        Self { shared, permit }
    }

    /// Starts building the op that uses this room: its push takes no slot
    /// of its own, and cannot be refused as full. A builder dropped
    /// unpushed gives the room back.
    pub fn op(self, name: impl Into<std::borrow::Cow<'static, str>>) -> OpBuilder<'e, (), (), Reserved> {
        OpBuilder::reserved(self.shared, name.into(), Reserved(self.permit))
    }
}
