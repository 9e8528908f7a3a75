//! The Chrome trace-event format (the JSON object form): metadata events
//! name a process per device and a thread per worker; `X` events are op
//! bodies; `s`/`f` pairs are flow arrows; `C` events are counters; `i`
//! events mark completions on another thread (a GPU op's poller).

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::{Profile, ProfiledOp};

/// Microseconds, as the format counts time, from the profile's origin.
fn us(ns: u64, origin: u64) -> f64 {
    ns.saturating_sub(origin) as f64 / 1000.0
}

/// Process and thread ids: a process per device, a thread per thread name.
struct Ids {
    pids: BTreeMap<String, u64>,
    tids: BTreeMap<(u64, String), u64>,
}

impl Ids {
    fn pid(&mut self, device: String) -> u64 {
        let n = self.pids.len() as u64 + 1;
        *self.pids.entry(device).or_insert(n)
    }

    fn tid(&mut self, pid: u64, thread: &str) -> u64 {
        let n = self.tids.len() as u64 + 1;
        *self.tids.entry((pid, thread.to_owned())).or_insert(n)
    }
}

pub(super) fn render(profile: &Profile) -> String {
    let origin = profile.origin();
    let mut ids = Ids { pids: BTreeMap::new(), tids: BTreeMap::new() };
    let mut events = Vec::new();
    // Where each op ran, for the flow arrows.
    let mut at: BTreeMap<u64, (u64, u64, &ProfiledOp)> = BTreeMap::new();
    for op in profile.ops() {
        let pid = ids.pid(op.device.to_string());
        let thread = op.thread.as_deref().unwrap_or(&op.completed_on);
        let tid = ids.tid(pid, thread);
        at.insert(op.seq, (pid, tid, op));
        let vars = |v: &[super::VarRef]| v.iter().map(super::VarRef::label).collect::<Vec<_>>();
        // What is usual is left out: a 50,000-op trace stays a few tens
        // of bytes per op smaller.
        let mut args = json!({"seq": op.seq, "reads": vars(&op.reads), "writes": vars(&op.writes)});
        if let Some(wait) = op.queue_wait_ns() {
            args["queue_wait_us"] = json!(wait as f64 / 1000.0);
        }
        if op.priority != 0 {
            args["priority"] = json!(op.priority);
        }
        if op.lane != crate::device::Lane::Normal {
            args["lane"] = json!(format!("{:?}", op.lane));
        }
        if op.outcome != super::Outcome::Ok {
            args["outcome"] = json!(op.outcome.as_str());
        }
        if let Some(group) = &op.group {
            args["group"] = json!(group);
        }
        let (start, end) = match (op.start, op.end) {
            (Some(s), Some(e)) => (s, e),
            // Never run (skipped or cancelled before a thread took it):
            // shown where it completed.
            _ => (op.done, op.done),
        };
        events.push(json!({
            "name": op.name, "cat": "op", "ph": "X", "pid": pid, "tid": tid,
            "ts": us(start, origin), "dur": us(end, origin) - us(start, origin), "args": args,
        }));
        if op.thread.as_deref().is_some_and(|t| t != op.completed_on) {
            let done_tid = ids.tid(pid, &op.completed_on);
            events.push(json!({
                "name": format!("{} completed", op.name), "cat": "completion", "ph": "i", "s": "t",
                "pid": pid, "tid": done_tid, "ts": us(op.done, origin), "args": {"seq": op.seq},
            }));
        }
    }
    pushes(profile, &mut ids, origin, &mut events);
    idle_marks(profile, &mut ids, origin, &mut events);
    flows(&at, origin, &mut events);
    queue_depth(profile, &mut ids, origin, &mut events);
    for (name, pid) in &ids.pids {
        events.push(json!({"name": "process_name", "ph": "M", "pid": pid, "args": {"name": name}}));
    }
    for ((pid, name), tid) in &ids.tids {
        events
            .push(json!({"name": "thread_name", "ph": "M", "pid": pid, "tid": tid, "args": {"name": name}}));
    }
    json!({"traceEvents": events, "displayTimeUnit": "ns"}).to_string()
}

/// Each push, a span on its pushing thread's track.
fn pushes(profile: &Profile, ids: &mut Ids, origin: u64, events: &mut Vec<Value>) {
    let pid = ids.pid("pushing threads".to_owned());
    for op in profile.ops() {
        let Some(end) = op.push_end else { continue };
        let tid = ids.tid(pid, &op.pushed_by);
        events.push(json!({
            "name": "push", "cat": "push", "ph": "X", "pid": pid, "tid": tid,
            "ts": us(op.pushed, origin), "dur": us(end, origin) - us(op.pushed, origin),
        }));
    }
}

/// Where an op was ready while a worker of its pool idled: a span on a
/// track of its device's.
fn idle_marks(profile: &Profile, ids: &mut Ids, origin: u64, events: &mut Vec<Value>) {
    for gap in profile.idle_while_ready().into_iter().filter(|g| g.end - g.start >= super::MIN_IDLE_MARK_NS) {
        let pid = ids.pid(gap.device.to_string());
        let tid = ids.tid(pid, &format!("idle while ready ({:?})", gap.lane));
        events.push(json!({
            "name": "idle while ready", "cat": "idle", "ph": "X", "pid": pid, "tid": tid,
            "ts": us(gap.start, origin), "dur": us(gap.end, origin) - us(gap.start, origin),
        }));
    }
}

/// An arrow from the end of each op to the start of each op whose last
/// dependency it released (both profiled).
fn flows(at: &BTreeMap<u64, (u64, u64, &ProfiledOp)>, origin: u64, events: &mut Vec<Value>) {
    let mut id = 0u64;
    for &(pid, tid, op) in at.values() {
        for next in &op.released {
            let Some(&(npid, ntid, next)) = at.get(next) else { continue };
            id += 1;
            let from = op.end.unwrap_or(op.done).min(op.done);
            let to = next.start.unwrap_or(next.done).max(from);
            events.push(json!({
                "name": "released", "cat": "dependency", "ph": "s", "id": id,
                "pid": pid, "tid": tid, "ts": us(from, origin),
            }));
            events.push(json!({
                "name": "released", "cat": "dependency", "ph": "f", "bp": "e", "id": id,
                "pid": npid, "tid": ntid, "ts": us(to, origin),
            }));
        }
    }
}

/// A counter per device: ops ready and not yet started, at each change.
fn queue_depth(profile: &Profile, ids: &mut Ids, origin: u64, events: &mut Vec<Value>) {
    let mut changes: BTreeMap<String, Vec<(u64, i64)>> = BTreeMap::new();
    for op in profile.ops() {
        if let (Some(ready), Some(start)) = (op.ready, op.start) {
            let c = changes.entry(op.device.to_string()).or_default();
            c.push((ready, 1));
            c.push((start, -1));
        }
    }
    for (device, mut c) in changes {
        let pid = ids.pid(device);
        c.sort();
        let mut depth = 0i64;
        // One value per microsecond at most (the last one in it): the
        // counter holds the same picture for a fraction of the events.
        let mut last: Option<(u64, i64)> = None;
        let emit = |(t, depth): (u64, i64), events: &mut Vec<Value>| {
            events.push(json!({
                "name": "ready ops waiting", "ph": "C", "pid": pid, "ts": us(t, origin), "args": {"ops": depth},
            }));
        };
        for (t, d) in c {
            depth += d;
            match last {
                Some((lt, _)) if t / 1000 == lt / 1000 => last = Some((lt, depth)),
                Some(prev) => {
                    emit(prev, events);
                    last = Some((t, depth));
                }
                None => last = Some((t, depth)),
            }
        }
        if let Some(prev) = last {
            emit(prev, events);
        }
    }
}
