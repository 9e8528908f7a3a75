//! What the MPI examples print of a profile: the share of the
//! communication ops' time during which a compute op ran on this rank.

use depengine::profile::Profile;

/// The share of the time of the ops `is_comm` names (from its start, which
/// hands it to the comm thread, to its completion) covered by the running
/// time of the ops `is_compute` names; 0 without communication.
pub fn overlapped(
    profile: &Profile,
    is_comm: impl Fn(&str) -> bool,
    is_compute: impl Fn(&str) -> bool,
) -> f64 {
    let mut compute: Vec<(u64, u64)> = Vec::new();
    let mut comm: Vec<(u64, u64)> = Vec::new();
    for op in profile.ops() {
        match (op.start, op.end) {
            (Some(s), _) if is_comm(&op.name) => comm.push((s, op.done)),
            (Some(s), Some(e)) if is_compute(&op.name) => compute.push((s, e)),
            _ => {}
        }
    }
    compute.sort_unstable();
    // Merge the compute intervals, then intersect each communication with them.
    let mut merged: Vec<(u64, u64)> = Vec::new();
    for (s, e) in compute {
        match merged.last_mut() {
            Some(last) if s <= last.1 => last.1 = last.1.max(e),
            _ => merged.push((s, e)),
        }
    }
    let total: u64 = comm.iter().map(|(s, e)| e - s).sum();
    let covered: u64 = comm
        .iter()
        .map(|&(s, e)| merged.iter().map(|&(a, b)| b.min(e).saturating_sub(a.max(s))).sum::<u64>())
        .sum();
    if total == 0 { 0.0 } else { covered as f64 / total as f64 }
}
