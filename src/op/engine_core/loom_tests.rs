use super::*;
use crate::sync::Mutex;
use crate::sync::atomic::{AtomicUsize, Ordering};
use crate::sync::countdown::Countdown;
use crate::sync::lock;
use loom::sync::Arc;

/// A member's body returns while a guard lives on another thread: the
/// segment goes on exactly once, after the guard is gone, whichever
/// thread gets there last (the runner itself, in the interleavings
/// where the guard goes first).
#[test]
fn the_segment_goes_on_once_after_the_guard() {
    loom::model(|| {
        // The body's count and the guard's.
        let live = Arc::new(Countdown::new(2));
        let handoff = Arc::new(Mutex::new(Handoff::default()));
        let guard_gone = Arc::new(AtomicUsize::new(0));
        let went_on = Arc::new(AtomicUsize::new(0));
        let finish = {
            let handoff = handoff.clone();
            move || {
                let then = lock(&handoff).finish();
                if let Some(then) = then {
                    then();
                }
            }
        };
        let guard = {
            let (live, guard_gone, finish) = (live.clone(), guard_gone.clone(), finish.clone());
            loom::thread::spawn(move || {
                guard_gone.store(1, Ordering::Relaxed);
                if live.release(1) {
                    finish();
                }
            })
        };
        // The runner: the body stores its result, then looks.
        let go_on = {
            let (went_on, guard_gone) = (went_on.clone(), guard_gone.clone());
            move || {
                assert_eq!(guard_gone.load(Ordering::Relaxed), 1, "went on before the guard was gone");
                went_on.fetch_add(1, Ordering::Relaxed);
            }
        };
        if live.release(1) {
            // The guard went first: the body's release completes the member.
            finish();
            go_on();
        } else if live.get() == 0 {
            go_on();
        } else {
            let back = lock(&handoff).then(Box::new(go_on));
            if let Some(then) = back {
                then();
            }
        }
        guard.join().unwrap();
        assert_eq!(went_on.load(Ordering::Relaxed), 1);
    });
}
