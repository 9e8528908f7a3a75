//! Helpers shared by the integration tests.
#![allow(dead_code)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use depengine::Engine;

/// Runs `f`, failing the test after 30 s.
pub async fn timed<F: std::future::Future>(f: F) -> F::Output {
    tokio::time::timeout(Duration::from_secs(30), f).await.expect("test timed out")
}

/// Holds a one-worker engine's worker until the returned sender sends.
pub fn hold_worker(engine: &Engine) -> (std::sync::mpsc::Sender<()>, depengine::OpHandle<()>) {
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let blocker = engine.op("block").run(move |(), ()| {
        rx.recv_timeout(Duration::from_secs(10)).unwrap();
        Ok(())
    });
    (tx, blocker)
}

/// A value that counts its drops.
pub struct Counted(pub Arc<AtomicUsize>);

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}
