use super::Access::{Read, Write};
use super::*;

/// Applies steps to a fresh gate and checks what each step let through.
enum Step {
    Append(Access, u32, bool),
    Complete(Access, &'static [u32]),
}
use Step::{Append, Complete};

fn run(steps: &[Step]) -> Gate<u32> {
    let mut gate = Gate::new();
    for (i, step) in steps.iter().enumerate() {
        match *step {
            Append(access, op, expect) => {
                let got = gate.append(access, op);
                assert_eq!(got.is_some(), expect, "step {i}: append {access:?} {op}");
            }
            Complete(access, expect) => {
                let mut ready = Vec::new();
                gate.complete(access, &mut |op| ready.push(op));
                assert_eq!(ready, expect, "step {i}: complete {access:?}");
            }
        }
    }
    gate
}

#[test]
fn read_on_idle_var_is_let_through() {
    let gate = run(&[Append(Read, 1, true), Append(Read, 2, true)]);
    assert_eq!(gate.running_reads(), 2);
    assert!(!gate.write_running());
}

#[test]
fn write_on_idle_var_is_let_through() {
    let gate = run(&[Append(Write, 1, true)]);
    assert!(gate.write_running());
    assert_eq!(gate.version(), 0);
}

#[test]
fn write_waits_for_running_reads() {
    run(&[
        Append(Read, 1, true),
        Append(Read, 2, true),
        Append(Write, 3, false),
        Complete(Read, &[]),
        Complete(Read, &[3]),
    ]);
}

#[test]
fn read_behind_queued_write_is_queued() {
    // tokio's write_read_shared_pending shape: two reads granted, a write
    // queued, a later read queued behind the write.
    let gate = run(&[
        Append(Read, 1, true),
        Append(Read, 2, true),
        Append(Write, 3, false),
        Append(Read, 4, false),
        Complete(Read, &[]),
        Complete(Read, &[3]),
        Complete(Write, &[4]),
        Complete(Read, &[]),
    ]);
    assert!(gate.is_idle());
    assert_eq!(gate.version(), 1);
}

#[test]
fn write_completion_releases_read_batch_then_next_write() {
    // w1 running -> w2 queued -> r1, r2 queued -> w3 queued.
    let gate = run(&[
        Append(Write, 1, true),
        Append(Write, 2, false),
        Append(Read, 3, false),
        Append(Read, 4, false),
        Append(Write, 5, false),
        Complete(Write, &[2]),
        Complete(Write, &[3, 4]),
        Complete(Read, &[]),
        Complete(Read, &[5]),
        Complete(Write, &[]),
    ]);
    assert!(gate.is_idle());
    assert_eq!(gate.version(), 3);
}

#[test]
fn write_completion_with_empty_queue_leaves_var_idle() {
    let gate = run(&[Append(Write, 1, true), Complete(Write, &[])]);
    assert!(gate.is_idle());
    assert_eq!(gate.version(), 1);
}

#[test]
fn read_after_idle_again_is_let_through() {
    run(&[
        Append(Write, 1, true),
        Append(Read, 2, false),
        Complete(Write, &[2]),
        Append(Read, 3, true),
        Append(Write, 4, false),
        Append(Read, 5, false),
        Complete(Read, &[]),
        Complete(Read, &[4]),
        Complete(Write, &[5]),
    ]);
}

#[test]
fn read_batch_stops_at_next_write() {
    run(&[
        Append(Write, 1, true),
        Append(Read, 2, false),
        Append(Write, 3, false),
        Append(Read, 4, false),
        Complete(Write, &[2]),
        Complete(Read, &[3]),
        Complete(Write, &[4]),
    ]);
}

#[test]
fn queued_ops_are_visible_in_order() {
    let gate = run(&[Append(Write, 1, true), Append(Read, 2, false), Append(Write, 3, false)]);
    let queued: Vec<_> = gate.queued().copied().collect();
    assert_eq!(queued, [(Read, 2), (Write, 3)]);
}

#[test]
#[should_panic(expected = "write completed but none running")]
fn completing_a_write_that_is_not_running_panics() {
    run(&[Append(Read, 1, true), Complete(Write, &[])]);
}

#[test]
#[should_panic(expected = "read completed but none running")]
fn completing_a_read_that_is_not_running_panics() {
    run(&[Complete(Read, &[])]);
}

/// Every op is let through exactly once and in an order consistent with
/// the reader-writer rules, over all short sequences of appends.
#[test]
fn exhaustive_short_programs_respect_order() {
    for len in 1..=7u32 {
        for mask in 0..(1u32 << len) {
            let ops: Vec<Access> = (0..len).map(|i| if mask >> i & 1 == 1 { Write } else { Read }).collect();
            check_program(&ops);
        }
    }
}

fn check_program(ops: &[Access]) {
    let mut gate = Gate::new();
    let mut running: Vec<usize> = Vec::new();
    let mut started = Vec::new();
    for (i, &a) in ops.iter().enumerate() {
        if let Some(op) = gate.append(a, i) {
            running.push(op);
            started.push(op);
        }
    }
    // Complete the oldest running op each time.
    while let Some(op) = (!running.is_empty()).then(|| running.remove(0)) {
        for &r in &running {
            assert!(ops[r] == Read && ops[op] == Read, "{ops:?}: {op} and {r} overlap");
        }
        let mut ready = Vec::new();
        gate.complete(ops[op], &mut |op| ready.push(op));
        running.extend(&ready);
        started.extend(ready);
    }
    assert_eq!(started, (0..ops.len()).collect::<Vec<_>>(), "{ops:?}");
    assert!(gate.is_idle());
}
