use super::super::this_thread::feeds_alive;
use super::*;
use crate::ShutdownMode;

/// Takes `ops` ops from sources that always (or never) hold ops, as
/// `has_ops` says: the source of each op taken, and how many looks at
/// a source that took.
fn takes(turns: &mut SourceTurn, has_ops: &[bool], ops: usize) -> (Vec<usize>, usize) {
    let mut taken = Vec::new();
    let mut looks = 0;
    for _ in 0..ops {
        let op = turns.look(has_ops.len(), |k, _| {
            looks += 1;
            has_ops[k].then_some((k, 0))
        });
        taken.push(op.expect("a source holds ops"));
    }
    (taken, looks)
}

/// With ops in every source, each gives SOURCE_STREAK in a row, in turn.
#[test]
fn sources_take_turns_while_all_hold_ops() {
    let streak = SOURCE_STREAK as usize;
    let (taken, _) = takes(&mut SourceTurn::default(), &[true, true, true], 6 * streak);
    let runs: Vec<(usize, usize)> = taken.chunk_by(|a, b| a == b).map(|run| (run[0], run.len())).collect();
    assert_eq!(runs, [(0, streak), (1, streak), (2, streak), (0, streak), (1, streak), (2, streak)]);
}

/// Takes that bring more ops along (up to 7, as much as the streak's
/// room allows) still give each source SOURCE_STREAK ops in a row.
#[test]
fn ops_taken_along_count_in_the_streak() {
    let mut turns = SourceTurn::default();
    let mut taken = Vec::new();
    while taken.len() < 6 * SOURCE_STREAK as usize {
        let mut more = 0;
        let op = turns.look(3, |k, room| {
            more = room.min(7);
            Some((k, more))
        });
        taken.extend(std::iter::repeat_n(op.unwrap(), more as usize + 1));
    }
    let streak = SOURCE_STREAK as usize;
    let runs: Vec<(usize, usize)> = taken.chunk_by(|a, b| a == b).map(|run| (run[0], run.len())).collect();
    assert_eq!(runs, [(0, streak), (1, streak), (2, streak), (0, streak), (1, streak), (2, streak)]);
}

/// With ops in one source only, a worker looks at the empty ones once
/// per SOURCE_STREAK ops, not before every op once a streak is over.
#[test]
fn a_streak_starts_over_when_the_others_are_empty() {
    let ops = 10 * SOURCE_STREAK as usize;
    let (taken, looks) = takes(&mut SourceTurn::default(), &[true, false], ops);
    assert!(taken.iter().all(|&k| k == 0));
    assert_eq!(looks - ops, ops / SOURCE_STREAK as usize - 1, "looks at the empty source");
    // A source list that shrank leaves no turn past its end.
    let mut turns = SourceTurn { turn: 5, streak: 3 };
    assert_eq!(takes(&mut turns, &[false, true], 1).0, [1]);
}

/// A thread that pushed to many engines, one after the other, keeps a
/// feed only for pools that still exist. (Bulk execution off: an op
/// held in a segment reaches its pool through a worker, not a feed.)
#[test]
fn a_thread_keeps_no_feeds_of_pools_that_are_gone() {
    for _ in 0..20 {
        let engine = crate::EngineBuilder::from_env().cpu_workers(1).bulk_size(1).build().unwrap();
        engine.op("op").run(|(), ()| Ok(())).blocking_wait().unwrap();
        assert!(feeds_alive().1);
        engine.blocking_shutdown(ShutdownMode::Drain).unwrap();
        drop(engine);
        assert!(feeds_alive().0 <= 2, "feeds of dropped pools are kept");
    }
}
