//! Nested ops: the one hook of bulk execution in the op layer.
//!
//! A nested op is run by a parent op instead of by the engine (a bulk
//! segment runs its members, see `engine::bulk`). It is built as any op
//! (its handle, its count in its `wait_for_all` epoch), but it is appended
//! to no var: its parent holds its vars. So it differs from an ordinary op
//! in three places, all behind `Meta::nested`:
//!
//! * **completion** (`life::finalize`): it releases no var and publishes
//!   nothing; its parent publishes it once the parent has released its own
//!   vars, so that its handle resolves once its effects are visible, as any
//!   op's does;
//! * **its guards**: a guard that outlives its body holds the parent back:
//!   the parent must not run its next op on the same data meanwhile. The
//!   parent leaves its continuation here ([`Header::nested_then`]) and the
//!   thread whose guard drop completes the op runs it (the handoff below);
//! * **waiting on its handle** asks the engine to push what it holds back
//!   (`Host::release_held`): the parent may not have been pushed yet.
//!
//! The parent, for its part, applies the var gate's error rules between
//! the ops it runs: it takes the errors its vars carried when it was let
//! through (`Header::take_seen_on_vars`), lets a nested op see the error of
//! a var it uses (`Header::see`) and leaves each var it writes with the
//! error of the last op that wrote it (`Header::carry_on_vars`).
//!
//! The handoff: the parent's runner, after the op's body returned, finds
//! its live count still above zero; it leaves its continuation. The thread
//! whose guard drop brings the count to zero marks the op finished, and
//! runs the continuation if one was left. Both steps hold the op's error
//! lock, so exactly one of them runs it: the runner if the op finished
//! first, the finisher otherwise.

use super::record::Header;
use crate::sync::lock;

/// A parent's continuation, run once its nested op completes.
pub(crate) type Resume = Box<dyn FnOnce() + Send>;

/// Kept under the nested op's error lock.
#[derive(Default)]
pub(crate) struct Handoff {
    finished: bool,
    then: Option<Resume>,
}

impl Handoff {
    /// Leaves `then` to run when the op finishes; hands it back if it has
    /// finished already (the caller runs it, once the lock is released).
    pub(crate) fn then(&mut self, then: Resume) -> Option<Resume> {
        if self.finished {
            return Some(then);
        }
        self.then = Some(then);
        None
    }

    /// Marks the op finished; takes the continuation left meanwhile, for
    /// the caller to run once the lock is released.
    pub(crate) fn finish(&mut self) -> Option<Resume> {
        self.finished = true;
        self.then.take()
    }
}

impl Header {
    /// Of a nested op whose body has stored its result: whether it has
    /// completed (no guard outlived the body, or the last one is gone).
    pub(crate) fn nested_done(&self) -> bool {
        self.live.get() == 0
    }

    /// Of a nested op that had not completed when its body returned: runs
    /// `then` once it has, on the thread that completes it (here if it has
    /// meanwhile).
    pub(crate) fn nested_then(&self, then: Resume) {
        let back = lock(&self.errors).rare().handoff.then(then);
        if let Some(then) = back {
            then();
        }
    }

    /// Of a nested op completing after its guards: marks it completed and
    /// takes what its parent does next, if it waits for it.
    pub(super) fn nested_finished(&self) -> Option<Resume> {
        lock(&self.errors).rare().handoff.finish()
    }
}

#[cfg(all(test, depengine_loom))]
mod loom_tests {
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
}
