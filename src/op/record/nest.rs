//! Nested ops: the one hook of bulk execution in the op layer.
//!
//! A nested op is run by a parent op instead of by the engine (a bulk
//! segment runs its members, see `engine::bulk`). It is built as any op
//! (its handle, its count in its `wait_for_all` epoch), but it is appended
//! to no var: its parent holds its vars. So it differs from an ordinary op
//! in three places, all behind `Meta::nested`:
//!
//! * **completion** (`OpCell::complete`): it releases no var and publishes
//!   nothing; its parent publishes it once the parent has released its own
//!   vars, so that its handle resolves once its effects are visible, as any
//!   op's does;
//! * **its guards**: a guard that outlives its body holds the parent back:
//!   the parent must not run its next op on the same data meanwhile. The
//!   parent leaves its continuation here ([`Header::nested_then`]) and the
//!   thread whose guard drop completes the op runs it (the handoff below);
//! * **waiting on its handle** asks the engine to push what it holds back
//!   (`EngineCore::wait(Wait::OnNested)`): the parent may not have been pushed yet.
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
//! lock (in its cold box, `cold.rs`), so exactly one of them runs it: the runner if the op finished
//! first, the finisher otherwise.

use super::Header;
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
        self.state.live() == 0
    }

    /// Of a nested op that had not completed when its body returned: runs
    /// `then` once it has, on the thread that completes it (here if it has
    /// meanwhile).
    pub(crate) fn nested_then(&self, then: Resume) {
        let back = lock(&self.cold().errors).handoff.then(then);
        if let Some(then) = back {
            then();
        }
    }

    /// Of a nested op completing after its guards: marks it completed and
    /// takes what its parent does next, if it waits for it.
    pub(in crate::op) fn nested_finished(&self) -> Option<Resume> {
        lock(&self.cold().errors).handoff.finish()
    }
}

#[cfg(all(test, depengine_loom))]
mod loom_tests;
