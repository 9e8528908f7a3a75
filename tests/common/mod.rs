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

/// The result of `f` on a thread of its own, or a failure naming `what`
/// after `secs` seconds: a call that hangs fails its test instead.
pub fn bounded<T: Send + 'static>(secs: u64, what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(Duration::from_secs(secs)).unwrap_or_else(|_| panic!("{what} hung"))
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

/// A seeded generator (splitmix64): the same programs for the same seed.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        mix(self.0, 0)
    }

    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    pub fn chance(&mut self, percent: usize) -> bool {
        self.below(100) < percent
    }
}

/// Mixes two words into one (splitmix64's finaliser).
pub fn mix(a: u64, b: u64) -> u64 {
    let mut z = a ^ b.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Threads of this process whose name starts with `prefix`, where the
/// platform tells (Linux; names are cut to 15 bytes there).
pub fn threads_named(prefix: &str) -> Option<usize> {
    let tasks = std::fs::read_dir("/proc/self/task").ok()?;
    let count = tasks
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .filter(|name| name.starts_with(prefix))
        .count();
    Some(count)
}

/// Threads of this process whose name starts with `prefix`, once threads
/// already joined have left the system's list: a joined thread may stay
/// listed for a moment while the system finishes its exit, so this waits
/// up to a second for the count to reach zero (`None` where the platform
/// does not tell).
pub fn threads_left(prefix: &str) -> Option<usize> {
    let deadline = std::time::Instant::now() + Duration::from_secs(1);
    loop {
        let n = threads_named(prefix)?;
        if n == 0 || std::time::Instant::now() > deadline {
            return Some(n);
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}
