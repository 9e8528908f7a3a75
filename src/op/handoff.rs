//! The handoff between a bulk segment and a member whose guards outlived
//! its body: the segment goes on once the member has completed, whichever
//! of the two threads gets there last.
//!
//! The segment's runner, after the member's body returned, finds the
//! member's live count still above zero; it leaves its continuation here.
//! The thread whose guard drop brings the count to zero marks the member
//! finished here, and runs the continuation if one was left. Both steps
//! hold the member's error lock, so exactly one of them runs it: the
//! runner if the member finished first, the finisher otherwise.

/// A continuation of a bulk segment, run once its member completes.
pub(crate) type Resume = Box<dyn FnOnce() + Send>;

/// Kept under the member's lock.
#[derive(Default)]
pub(crate) struct Handoff {
    finished: bool,
    then: Option<Resume>,
}

impl Handoff {
    /// Leaves `then` to run when the member finishes; hands it back if it
    /// has finished already (the caller runs it, once the lock is released).
    pub(crate) fn then(&mut self, then: Resume) -> Option<Resume> {
        if self.finished {
            return Some(then);
        }
        self.then = Some(then);
        None
    }

    /// Marks the member finished; takes the continuation left meanwhile,
    /// for the caller to run once the lock is released.
    pub(crate) fn finish(&mut self) -> Option<Resume> {
        self.finished = true;
        self.then.take()
    }
}

#[cfg(all(test, depengine_loom))]
mod loom_tests {
    use super::*;
    use crate::loom::lock;
    use crate::loom::sync::Mutex;
    use crate::loom::sync::atomic::{AtomicUsize, Ordering};
    use crate::op::countdown::Countdown;
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
}
