//! The turns of a slot's distributions, on transfers that only say whose
//! they are.

use std::sync::{Arc, Mutex};

use mpi::topology::SimpleCommunicator;

use super::super::flight::Transfer;
use super::super::raw::Code;
use super::{Turns, Verdict};

/// A transfer that records what became of it.
struct Fake {
    turn: (u32, u32),
    n: u32,
    log: Arc<Mutex<Vec<String>>>,
}

impl Transfer for Fake {
    fn turn(&self) -> (u32, u32) {
        self.turn
    }
    fn start(&mut self, _: &SimpleCommunicator, _: u64) -> Result<(), Code> {
        unreachable!("not started here")
    }
    fn test(&mut self) -> Result<bool, Code> {
        Ok(true)
    }
    fn finish(self: Box<Self>, _: Result<(), Code>) {}
    fn close(self: Box<Self>) {
        self.log.lock().unwrap().push(format!("closed {}", self.n));
    }
    fn abandon(self: Box<Self>, _: &str) -> Option<Box<dyn Transfer>> {
        self.log.lock().unwrap().push(format!("given up {}", self.n));
        None
    }
}

fn fake(slot: u32, dist: u32, n: u32, log: &Arc<Mutex<Vec<String>>>) -> Box<dyn Transfer> {
    Box::new(Fake { turn: (slot, dist), n, log: Arc::clone(log) })
}

fn number(t: &dyn Transfer) -> (u32, u32) {
    t.turn()
}

/// A drop's two words, its count and then the ranks' verdict: what they
/// released.
fn drop_dist(
    turns: &mut Turns,
    slot: u32,
    dist: u32,
    transfers: u64,
    diverged: Option<(String, u64)>,
) -> Vec<((u32, u32), Option<String>)> {
    let mut out = turns.close(slot, dist, transfers);
    out.extend(turns.verdict(slot, dist, diverged));
    out.iter().map(|(t, why)| (number(t.as_ref()), why.clone())).collect()
}

/// Hands `transfer` over and, if it may start, starts it (it leaves the
/// queues); what it released, with the verdict.
fn hand(turns: &mut Turns, transfer: Box<dyn Transfer>) -> (&'static str, Vec<(u32, u32)>) {
    match turns.arrive(transfer) {
        Verdict::Start(t) => {
            let (slot, dist) = t.turn();
            ("started", turns.left(slot, dist).iter().map(|(t, _)| number(t.as_ref())).collect())
        }
        Verdict::GiveUp(t, _) => {
            let (slot, dist) = t.turn();
            ("given up", turns.left(slot, dist).iter().map(|(t, _)| number(t.as_ref())).collect())
        }
        Verdict::Parked => ("parked", Vec::new()),
    }
}

#[test]
fn a_later_distribution_on_a_slot_waits_for_the_earlier_ones_transfers() {
    let log = Arc::default();
    let mut turns = Turns::default();
    assert_eq!(hand(&mut turns, fake(3, 0, 1, &log)).0, "started");
    // Distribution 0 is dropped having handed over 2: one is still to come.
    assert!(drop_dist(&mut turns, 3, 0, 2, None).is_empty());
    assert!(turns.owed());
    // Distribution 5 took the slot again: its transfers wait.
    assert_eq!(hand(&mut turns, fake(3, 5, 2, &log)).0, "parked");
    // Another slot is not held up.
    assert_eq!(hand(&mut turns, fake(4, 6, 3, &log)).0, "started");
    // The earlier one's last transfer starts, and lets the later one's go.
    assert_eq!(hand(&mut turns, fake(3, 0, 4, &log)), ("started", vec![(3, 5)]));
    assert!(!turns.owed());
}

#[test]
fn a_transfer_handed_over_but_not_started_holds_the_next_distribution() {
    let log = Arc::default();
    let mut turns = Turns::default();
    // Queued, not started yet (its op ran, MPI has not seen it).
    assert!(matches!(turns.arrive(fake(0, 1, 1, &log)), Verdict::Start(_)));
    assert!(
        drop_dist(&mut turns, 0, 1, 1, None).is_empty(),
        "all handed over, but one has not left the queue"
    );
    assert_eq!(hand(&mut turns, fake(0, 2, 2, &log)).0, "parked");
    let released: Vec<_> =
        turns.left(0, 1).iter().map(|(t, why)| (number(t.as_ref()), why.clone())).collect();
    assert_eq!(released, [((0, 2), None)]);
    // Now the first: its transfers start as they come.
    assert_eq!(hand(&mut turns, fake(0, 2, 3, &log)).0, "started");
}

#[test]
fn the_numbers_after_a_distribution_whose_programs_differed_move_past_its() {
    let log = Arc::default();
    let mut turns = Turns::default();
    assert_eq!(hand(&mut turns, fake(7, 1, 1, &log)).0, "started");
    assert_eq!(hand(&mut turns, fake(7, 2, 2, &log)).0, "parked");
    assert_eq!(turns.shift(7), 0);
    // Distribution 1's programs differed; a rank had 5 transfers in it.
    let released = drop_dist(&mut turns, 7, 1, 1, Some(("programs differ".into(), 5)));
    assert_eq!(released, [((7, 2), None)]);
    assert_eq!(turns.shift(7), 5, "distribution 2's numbers start past the 5 of distribution 1");
    assert_eq!(hand(&mut turns, fake(7, 2, 3, &log)).0, "started");
    assert!(drop_dist(&mut turns, 7, 2, 2, None).is_empty());
    assert_eq!(turns.shift(7), 5, "a distribution whose programs agreed moves nothing on");
    assert_eq!(turns.shift(8), 0, "other slots are not moved");
    // Transfers of a distribution whose programs differ are given up.
    assert!(turns.diverge(7, 9, "differ").is_empty());
    assert_eq!(hand(&mut turns, fake(7, 9, 4, &log)).0, "given up");
}

#[test]
fn a_forgotten_distributions_parked_transfers_are_left_over() {
    let log = Arc::default();
    let mut turns = Turns::default();
    assert_eq!(hand(&mut turns, fake(1, 1, 1, &log)).0, "started");
    assert_eq!(hand(&mut turns, fake(1, 2, 2, &log)).0, "parked");
    assert!(!turns.owed(), "no drop has said what it owes");
    assert_eq!(turns.leftovers().len(), 1);
}

#[test]
fn a_drop_holds_the_slot_until_the_ranks_have_compared_its_programs() {
    let log = Arc::default();
    let mut turns = Turns::default();
    // Distribution 1 handed nothing over here; its drop says so at once,
    // before distribution 2 (the slot's next) hands anything over.
    assert!(turns.close(5, 1, 0).is_empty());
    assert!(turns.owed(), "its verdict is still to come");
    assert_eq!(hand(&mut turns, fake(5, 2, 1, &log)).0, "parked");
    let released: Vec<_> = turns.verdict(5, 1, None).iter().map(|(t, _)| number(t.as_ref())).collect();
    assert_eq!(released, [(5, 2)]);
    assert!(!turns.owed());
}
