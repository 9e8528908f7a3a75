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
mod tests;
