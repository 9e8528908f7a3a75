//! Time during which an op was ready while a worker of its pool ran none:
//! what a scheduler should never leave for longer than a wake-up takes.

use std::collections::{BTreeMap, BTreeSet};

use super::{Profile, ProfiledOp};
use crate::device::{Device, Lane};

/// A stretch of time during which some op of a pool was ready (its vars
/// free, queued) while fewer of the pool's workers ran ops than it has.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct IdleGap {
    /// The pool's device.
    pub device: Device,
    /// The pool's lane.
    pub lane: Lane,
    /// When it began, on the profile's clock.
    pub start: u64,
    /// When it ended.
    pub end: u64,
}

pub(super) fn compute(profile: &Profile) -> Vec<IdleGap> {
    let pushers: BTreeSet<&str> = profile.ops().iter().map(|op| op.pushed_by.as_str()).collect();
    let mut pools: BTreeMap<(String, String), Vec<&ProfiledOp>> = BTreeMap::new();
    for op in profile.ops() {
        pools.entry((op.device.to_string(), format!("{:?}", op.lane))).or_default().push(op);
    }
    let mut gaps = Vec::new();
    for ops in pools.values() {
        // The pool's workers: threads that ran its ops and pushed none (a
        // pushing thread that ran ops itself is not one).
        let workers: BTreeSet<&str> =
            ops.iter().filter_map(|op| op.thread.as_deref()).filter(|t| !pushers.contains(t)).collect();
        if workers.is_empty() {
            continue;
        }
        // +1/−1 events: workers busy, ops ready.
        let mut events: Vec<(u64, i32, i32)> = Vec::new();
        for op in ops {
            let (Some(start), Some(end)) = (op.start, op.end) else { continue };
            if op.thread.as_deref().is_some_and(|t| workers.contains(t)) {
                events.push((start, 1, 0));
                events.push((end, -1, 0));
            }
            if let Some(ready) = op.ready.filter(|r| *r < start) {
                events.push((ready, 0, 1));
                events.push((start, 0, -1));
            }
        }
        events.sort_unstable();
        let (mut busy, mut ready) = (0i32, 0i32);
        let mut since: Option<u64> = None;
        let all = workers.len() as i32;
        for (t, db, dr) in events {
            busy += db;
            ready += dr;
            let idle_ready = ready > 0 && busy < all;
            match (since, idle_ready) {
                (None, true) => since = Some(t),
                (Some(s), false) => {
                    if t > s {
                        gaps.push(IdleGap { device: ops[0].device, lane: ops[0].lane, start: s, end: t });
                    }
                    since = None;
                }
                _ => {}
            }
        }
    }
    gaps.sort_by_key(|g| g.start);
    gaps
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::Outcome;

    fn op(seq: u64, thread: &str, ready: u64, start: u64, end: u64) -> ProfiledOp {
        ProfiledOp {
            seq,
            name: "op".into(),
            device: Device::Cpu(0),
            lane: Lane::Normal,
            priority: 0,
            thread: Some(thread.into()),
            completed_on: thread.into(),
            pushed_by: "main".into(),
            pushed: 0,
            push_end: Some(1),
            ready: Some(ready),
            start: Some(start),
            end: Some(end),
            done: end,
            reads: Vec::new(),
            writes: Vec::new(),
            released: Vec::new(),
            outcome: Outcome::Ok,
        }
    }

    #[test]
    fn a_ready_op_beside_an_idle_worker_is_a_gap() {
        // w1 runs 0..30 then idles; w0 runs 0..100. B is ready at 50 and
        // waits for w0 until 100: a gap 50..100 (w1 idle).
        let ops = vec![
            op(1, "w0", 0, 0, 100),
            op(2, "w1", 0, 0, 30),
            op(3, "w0", 50, 100, 120),
            // Run by the pushing thread: not a worker, no gap of its own.
            op(4, "main", 130, 200, 210),
        ];
        let gaps = compute(&Profile::new(ops, 0));
        assert_eq!(gaps.len(), 2, "{gaps:?}");
        assert_eq!((gaps[0].start, gaps[0].end), (50, 100));
        // Op 4 waited 130..200 with both workers idle.
        assert_eq!((gaps[1].start, gaps[1].end), (130, 200));
    }

    #[test]
    fn busy_workers_leave_no_gap() {
        let ops = vec![op(1, "w0", 0, 0, 100), op(2, "w1", 0, 0, 100), op(3, "w0", 10, 100, 150)];
        assert!(compute(&Profile::new(ops, 0)).is_empty());
    }
}
