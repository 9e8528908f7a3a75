use super::*;
use crate::device::{Device, Lane};
use crate::profile::Outcome;

fn op(seq: u64) -> OpRecord {
    let thread: std::sync::Arc<str> = "t".into();
    OpRecord {
        seq,
        name: "op".into(),
        group: None,
        device: Device::Cpu(0),
        lane: Lane::Normal,
        priority: 0,
        thread: None,
        completed_on: thread.clone(),
        pushed_by: thread,
        pushed: seq,
        push_end: 0,
        ready: 0,
        start: 0,
        end: 0,
        done: seq,
        deps: Default::default(),
        released: Default::default(),
        outcome: Outcome::Ok,
    }
}

fn seqs(profile: &Profile) -> Vec<u64> {
    profile.ops().iter().map(|op| op.seq).collect()
}

#[test]
fn a_profile_keeps_the_last_ops_and_counts_those_let_go() {
    let recorder = Recorder::new(DEFAULT_KEEP, None);
    for keep in [1, 5, CHUNK - 1, CHUNK, CHUNK + 1, 3 * CHUNK] {
        recorder.keep_last(keep);
        let _ = recorder.profile(true);
        let n = 5 * CHUNK as u64 + 7;
        for seq in 0..n {
            recorder.record(op(seq));
        }
        let snapshot = recorder.profile(false);
        assert_eq!(seqs(&snapshot), (n - keep as u64..n).collect::<Vec<_>>(), "keep {keep}");
        assert_eq!(snapshot.dropped(), n - keep as u64, "keep {keep}");
        recorder.record(op(n));
        let taken = recorder.profile(true);
        assert_eq!(taken.ops().last().map(|op| op.seq), Some(n), "keep {keep}");
        assert_eq!(taken.ops().len(), keep, "keep {keep}");
        assert_eq!(taken.dropped(), n + 1 - keep as u64, "keep {keep}");
        let empty = recorder.profile(true);
        assert!(empty.ops().is_empty() && empty.dropped() == 0, "keep {keep}");
    }
}

#[test]
fn later_engines_write_their_own_trace() {
    let path = Path::new("dir").join("trace.json");
    assert_eq!(numbered(&path, 1), path);
    assert_eq!(numbered(&path, 2), Path::new("dir").join("trace.2.json"));
    assert_eq!(numbered(Path::new("trace"), 3), Path::new("trace.3"));
    let ranked = tagged(&path, "rank1");
    assert_eq!(ranked, Path::new("dir").join("trace.rank1.json"));
    assert_eq!(numbered(&ranked, 2), Path::new("dir").join("trace.rank1.2.json"));
}
