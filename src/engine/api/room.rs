//! The engine's bound on ops in flight, as its handle shows it (see
//! `engine/limit.rs`).

use super::Engine;
use crate::engine::reserve::Reservation;

impl Engine {
    /// Waits for room among the ops in flight (see
    /// [`EngineBuilder::max_in_flight`](crate::EngineBuilder::max_in_flight)) and holds it: the op built from
    /// the reservation is pushed without being refused as full. Cancel
    /// safe: dropping the wait, or the reservation unused, gives the room
    /// back. Immediate on an engine without a bound.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> depengine::Result<()> {
    /// let engine = depengine::Engine::builder().max_in_flight(64).build()?;
    /// let v = engine.var(0u64);
    /// for _ in 0..1000 {
    ///     // Never refused: each push first waits for one of the 64 slots.
    ///     let mut room = engine.reserve().await;
    ///     room.op("add").write(&v).run(|(), (mut v,)| {
    ///         *v += 1;
    ///         Ok(())
    ///     });
    /// }
    /// assert_eq!(*v.read().await?, 1000);
    /// # Ok(()) }
    /// ```
    pub async fn reserve(&self) -> Reservation {
        Reservation::new(self.shared()).await
    }
}
