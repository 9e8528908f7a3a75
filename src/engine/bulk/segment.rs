//! A segment running its members: one after the other, in push order, on
//! one worker, with the var gate's rules applied between them. A member
//! that uses a var whose error an earlier member (or an earlier op) left is
//! skipped, and each var the segment writes is left with the error of the
//! members that wrote it. A member whose guards outlive its body holds the
//! segment back until they are dropped (the handoff of `op::nest`); the
//! rest of the segment then runs on a worker again. Versions count every
//! member's write.

use std::sync::Arc;

use super::Members;
use super::index::VarIndex;
use crate::engine::shared::Shared;
use crate::error::{Error, Kind};
use crate::op::job::{Job, Running};
use crate::op::slot::SlotRef;
use crate::op::{DepList, Header, TaskRef};
use crate::sync::small::SmallList;
use crate::var::Access;

/// The body of a segment: its members, in push order.
pub(super) struct Segment {
    members: Members,
    /// Its engine, where the rest of the segment is sent to run after a
    /// member's guards held it back.
    shared: Arc<Shared>,
}

impl Segment {
    pub(super) fn new(members: Members, shared: Arc<Shared>) -> Self {
        Self { members, shared }
    }
}

impl Job for Segment {
    type Output = ();

    /// The segment will not run (`err`: why): each member completes with
    /// that cause, as an op skipped for it, or cancelled with it.
    fn vetoed(mut self, err: &Error) {
        for member in self.members.drain(..) {
            let op = member.header().meta.name.clone();
            let own = if err.is_cancelled() {
                let reason = "its bulk segment was cancelled";
                Error::new(Kind::Cancelled { op, reason })
            } else {
                Error::new(Kind::Skipped { op, root: err.clone() })
            };
            member.abandon(own);
            member.publish();
        }
    }

    fn start(mut self, op: Running<'_, ()>) {
        let members = std::mem::take(&mut self.members);
        let errors = op.header().take_seen_on_vars();
        let done = Members::new();
        Run {
            rest: members.into_iter(),
            done,
            errors,
            writes: SmallList::new(),
            written: VarIndex::default(),
            segment: Some(op.to_owned()),
            shared: self.shared.clone(),
        }
        .go();
    }
}

impl Drop for Segment {
    /// Members of a segment that never ran complete with an error.
    fn drop(&mut self) {
        for member in self.members.drain(..) {
            abandon(&member);
            member.publish();
        }
    }
}

fn abandon(member: &TaskRef) {
    let op = member.header().meta.name.clone();
    let reason = "its bulk segment could not run";
    member.abandon(Error::new(Kind::Cancelled { op, reason }));
}

/// A segment running its members.
struct Run {
    rest: smallvec::IntoIter<[TaskRef; 16]>,
    /// Members run, published once the segment has released its vars: a
    /// member's handle resolves once its effects on its vars (version,
    /// error) are visible, as any op's does.
    done: Members,
    /// The error each var carries at this point of the segment.
    errors: Vec<(u64, Error)>,
    /// Writes of each var by the members run so far…
    writes: SmallList<(u64, u64), 4>,
    /// …and where each var is in that list.
    written: VarIndex,
    /// The segment, until it has stored its result.
    segment: Option<SlotRef<()>>,
    shared: Arc<Shared>,
}

impl Run {
    fn go(mut self) {
        while let Some(member) = self.rest.next() {
            let header = member.header();
            if !self.errors.is_empty() {
                let seen = header.deps.iter().find_map(|d| error_of(&self.errors, d.var.id()));
                if let Some(err) = seen {
                    header.see(err.clone());
                }
            }
            member.execute();
            self.absorb(header);
            let finished = header.nested_done();
            self.done.push(member);
            if !finished {
                // A guard outlived the body: the rest runs once it is gone.
                let member = self.done.last().expect("just pushed").clone();
                let run = self;
                member.header().nested_then(Box::new(move || run.resume()));
                return;
            }
        }
        self.finish();
    }

    /// Takes in what a member that stored its result leaves on its vars.
    fn absorb(&mut self, member: &Header) {
        for dep in member.deps.iter().filter(|d| d.access == Access::Write) {
            let id = dep.var.id();
            let carry = member.leaves_on(id);
            let writes = &mut self.writes;
            match self.written.position(writes.len(), |k| writes[k].0, id) {
                Some(k) => writes[k].1 += 1,
                None => writes.push((id, 1)),
            }
            if let Some(err) = &carry {
                match self.errors.iter_mut().find(|(var, _)| *var == id) {
                    Some((_, e)) => *e = err.clone(),
                    None => self.errors.push((id, err.clone())),
                }
            }
        }
    }

    /// Runs the rest on a worker of the segment's pool.
    fn resume(self) {
        let Some(segment) = &self.segment else { return };
        let header = segment.header();
        let (meta, engine) = (header.meta.clone(), header.engine.clone());
        let shared = self.shared.clone();
        // The segment's placement; it is run, never completed, as a task
        // (dropped unrun, the run completes its members with an error).
        let task =
            TaskRef::continuation(Header::new(meta, DepList::new(), engine), Box::new(move || self.go()));
        shared.dispatcher.dispatch_pushed(task);
    }

    /// Completes the segment: versions, errors, result.
    fn finish(&mut self) {
        let Some(segment) = self.segment.take() else { return };
        let header = segment.header();
        for &(id, n) in self.writes.iter().filter(|(_, n)| *n > 1) {
            if let Some(dep) = header.deps.iter().find(|d| d.var.id() == id) {
                dep.var.cell().add_writes(n - 1);
            }
        }
        header.carry_on_vars(std::mem::take(&mut self.errors));
        // The segment has no guards of its own: storing its result
        // completes it here, its vars first.
        segment.store(Ok(()));
        for member in &self.done {
            member.publish();
        }
        // What the members' records held may run user destructors (results
        // nobody took): contained, as a worker contains its ops'.
        self.done.drain(..).for_each(crate::op::let_go);
    }
}

impl Drop for Run {
    /// A segment dropped before its end (its continuation never ran)
    /// completes its members with an error, then itself.
    fn drop(&mut self) {
        if self.segment.is_some() {
            let Self { rest, done, .. } = self;
            for member in rest.by_ref() {
                abandon(&member);
                done.push(member);
            }
            self.finish();
        }
    }
}

fn error_of(errors: &[(u64, Error)], var: u64) -> Option<&Error> {
    errors.iter().find(|(id, _)| *id == var).map(|(_, err)| err)
}
