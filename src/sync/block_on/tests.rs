use std::sync::mpsc;
use std::time::Duration;

use super::block_on;

#[test]
fn a_future_woken_from_another_thread_resolves() {
    let (tx, rx) = tokio::sync::oneshot::channel::<u32>();
    let sender = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(20));
        tx.send(7).unwrap();
    });
    assert_eq!(block_on(rx).unwrap(), 7);
    sender.join().unwrap();
}

#[test]
fn a_ready_future_resolves_at_once_and_spurious_unparks_are_harmless() {
    assert_eq!(block_on(async { 3 }), 3);
    let (done_tx, done_rx) = mpsc::channel();
    let waiter = std::thread::spawn(move || {
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        done_tx.send((std::thread::current(), tx)).unwrap();
        block_on(rx).unwrap();
    });
    let (thread, tx) = done_rx.recv().unwrap();
    for _ in 0..10 {
        thread.unpark();
    }
    tx.send(()).unwrap();
    waiter.join().unwrap();
}
