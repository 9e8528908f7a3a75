//! What a profiled op leaves as it completes: a compact record, its names
//! shared (`Arc`, or the op's own static name) and its vars inline, so
//! that recording costs a completion no string copies. The records become
//! [`ProfiledOp`]s only when a profile is taken.

use std::borrow::Cow;
use std::sync::Arc;

use smallvec::SmallVec;

use super::{Outcome, ProfiledOp, VarRef};
use crate::device::{Device, Lane};

/// A var a recorded op declared.
pub(crate) struct Dep {
    pub(crate) id: u64,
    pub(crate) write: bool,
    pub(crate) name: Option<Arc<str>>,
}

/// A recorded op. Times on the profiler's clock; 0 where a step never
/// happened.
pub(crate) struct OpRecord {
    pub(crate) seq: u64,
    pub(crate) name: Cow<'static, str>,
    pub(crate) group: Option<Cow<'static, str>>,
    pub(crate) device: Device,
    pub(crate) lane: Lane,
    pub(crate) priority: i32,
    pub(crate) thread: Option<Arc<str>>,
    pub(crate) completed_on: Arc<str>,
    pub(crate) pushed_by: Arc<str>,
    pub(crate) pushed: u64,
    pub(crate) push_end: u64,
    pub(crate) ready: u64,
    pub(crate) start: u64,
    pub(crate) end: u64,
    pub(crate) done: u64,
    pub(crate) deps: SmallVec<[Dep; 3]>,
    pub(crate) released: SmallVec<[u64; 2]>,
    pub(crate) outcome: Outcome,
}

impl OpRecord {
    /// The op as a profile shows it.
    pub(crate) fn expand(&self) -> ProfiledOp {
        let at = |t: u64| (t != 0).then_some(t);
        let vars = |write: bool| {
            let deps = self.deps.iter().filter(|d| d.write == write);
            deps.map(|d| VarRef { id: d.id, name: d.name.as_deref().map(str::to_owned) }).collect()
        };
        ProfiledOp {
            seq: self.seq,
            name: self.name.to_string(),
            group: self.group.as_deref().map(str::to_owned),
            device: self.device,
            lane: self.lane,
            priority: self.priority,
            thread: self.thread.as_deref().map(str::to_owned),
            completed_on: self.completed_on.to_string(),
            pushed_by: self.pushed_by.to_string(),
            pushed: self.pushed,
            push_end: at(self.push_end),
            ready: at(self.ready),
            start: at(self.start),
            end: at(self.end),
            done: self.done,
            reads: vars(false),
            writes: vars(true),
            released: self.released.to_vec(),
            outcome: self.outcome,
        }
    }
}
