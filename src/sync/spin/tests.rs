use super::*;
use std::sync::Arc;

/// Threads incrementing a plain counter under the lock, all starting
/// at once, lose no update and never find another holder inside.
#[test]
fn holders_exclude_each_other() {
    const THREADS: usize = 4;
    const ROUNDS: usize = if cfg!(miri) { 200 } else { 50_000 };
    let lock = Arc::new(SpinLock::new((0usize, false)));
    let start = Arc::new(std::sync::Barrier::new(THREADS));
    let threads: Vec<_> = (0..THREADS)
        .map(|_| {
            let (lock, start) = (lock.clone(), start.clone());
            std::thread::spawn(move || {
                start.wait();
                for _ in 0..ROUNDS {
                    let mut state = lock.lock();
                    assert!(!state.1, "two holders at once");
                    state.1 = true;
                    // Read, wait a little, write: an update made by
                    // another holder meanwhile would be lost.
                    let seen = std::hint::black_box(state.0);
                    for _ in 0..8 {
                        std::hint::spin_loop();
                    }
                    state.0 = seen + 1;
                    state.1 = false;
                }
            })
        })
        .collect();
    threads.into_iter().for_each(|t| t.join().unwrap());
    assert_eq!(lock.lock().0, THREADS * ROUNDS);
}
