//! The hazard check of the simulated device: vector clocks per stream and
//! for the host, and per buffer the last write and the reads since.

use std::collections::HashMap;

use super::memory::Touch;

#[derive(Default)]
pub(super) struct History {
    write: Option<(usize, u64)>,
    reads: Vec<(usize, u64)>,
}

pub(super) fn join(into: &mut Vec<u64>, other: &[u64]) {
    if into.len() < other.len() {
        into.resize(other.len(), 0);
    }
    for (a, b) in into.iter_mut().zip(other) {
        *a = (*a).max(*b);
    }
}

/// Flags each touch of a work item starting on stream `s` that is not
/// ordered after a conflicting touch by another stream, then records it.
pub(super) fn check_hazards(
    history: &mut HashMap<u64, History>,
    hazards: &mut Vec<String>,
    clock: &[u64],
    s: usize,
    name: &str,
    touches: &[Touch],
) {
    let tick = clock[s] + 1;
    let ordered = |(t, at): (usize, u64)| t == s || clock.get(t).copied().unwrap_or(0) >= at;
    for touch in touches {
        let id = touch.buffer.id;
        let history = history.entry(id).or_default();
        let mut unordered: Vec<usize> =
            history.write.into_iter().filter(|&w| !ordered(w)).map(|w| w.0).collect();
        if touch.write {
            unordered.extend(history.reads.iter().copied().filter(|&r| !ordered(r)).map(|r| r.0));
            history.write = Some((s, tick));
            history.reads.clear();
        } else {
            history.reads.push((s, tick));
        }
        if !unordered.is_empty() {
            let what = if touch.write { "writes" } else { "reads" };
            hazards.push(format!(
                "`{name}` on stream {s} {what} buffer #{id} without an event after stream(s) {unordered:?} touched it"
            ));
        }
    }
}
