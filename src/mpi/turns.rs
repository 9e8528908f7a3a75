//! Whose turn a tag slot's transfers have.
//!
//! Distributions alive at once have tag slots of their own; one made after
//! another's drop may take its slot again (`distributed/header.rs`). Its
//! transfers must then reach MPI after all of the earlier one's on this
//! rank: MPI matches the messages of one source and tag in the order they
//! were started, and the earlier one's may still be queued in the engine
//! when the drop returns (the drop does not wait for them). So the comm
//! thread starts the transfers of one slot one distribution after another:
//! a later one's are parked until the earlier one's drop has said how many
//! it handed over on this rank, all of them have left the comm thread's
//! queues (started, or given up), and the ranks have compared their
//! programs. If the programs differed, the earlier one may
//! have left sends that no rank will receive, which would match the later
//! one's receives: the slot is then poisoned, and every later transfer on
//! it is given up at once, on every rank alike (every rank reaches the same
//! verdict).

use std::collections::VecDeque;

use super::flight::Transfer;

#[derive(Default)]
pub(super) struct Turns {
    /// By slot (fewer than `distributed::MAX_LIVE`).
    slots: Vec<Slot>,
}

#[derive(Default)]
struct Slot {
    /// Its distributions, in the order they were made: the first one's
    /// transfers start as they come.
    gens: VecDeque<Gen>,
    /// How far the numbers of the slot's transfers that start now are moved
    /// on in their tags.
    shift: u64,
}

struct Gen {
    dist: u32,
    /// Its transfers handed over so far.
    handed: u64,
    /// Those of them that left the comm thread's queues: started, or given
    /// up.
    left: u64,
    /// Its drop's word: how many it handed over in all.
    expected: Option<u64>,
    /// Whether the ranks have compared its programs (at its drop).
    judged: bool,
    /// Why its transfers are given up: the ranks' programs differ.
    diverged: Option<String>,
    /// The most transfers a rank had in it, if the programs differed.
    span: u64,
    parked: Vec<Box<dyn Transfer>>,
}

/// What becomes of a transfer handed over.
pub(super) enum Verdict {
    /// Start it now.
    Start(Box<dyn Transfer>),
    /// Give it up, and why.
    GiveUp(Box<dyn Transfer>, String),
    /// Parked until its turn.
    Parked,
}

impl Slot {
    fn turn_of(&mut self, dist: u32) -> &mut Gen {
        let at = match self.gens.iter().position(|g| g.dist == dist) {
            Some(at) => at,
            None => {
                let turn = Gen {
                    dist,
                    handed: 0,
                    left: 0,
                    expected: None,
                    judged: false,
                    diverged: None,
                    span: 0,
                    parked: Vec::new(),
                };
                self.gens.push_back(turn);
                self.gens.len() - 1
            }
        };
        &mut self.gens[at]
    }
}

impl Turns {
    fn slot(&mut self, slot: u32) -> &mut Slot {
        let at = slot as usize;
        if self.slots.len() <= at {
            self.slots.resize_with(at + 1, Slot::default);
        }
        &mut self.slots[at]
    }

    /// A transfer its op handed over. The caller queues one to start, and
    /// says when it [`left`](Self::left) the queue; one given up has left.
    pub(super) fn arrive(&mut self, transfer: Box<dyn Transfer>) -> Verdict {
        let (slot, dist) = transfer.turn();
        let slot = self.slot(slot);
        let first = slot.gens.front().is_none_or(|g| g.dist == dist);
        let turn = slot.turn_of(dist);
        turn.handed += 1;
        if let Some(why) = turn.diverged.clone() {
            return Verdict::GiveUp(transfer, why);
        }
        if first {
            return Verdict::Start(transfer);
        }
        turn.parked.push(transfer);
        Verdict::Parked
    }

    /// The ranks' programs differ for distribution `dist`: its transfers to
    /// come are given up (the caller gives up those in flight).
    pub(super) fn diverge(&mut self, slot: u32, dist: u32, why: &str) -> Vec<Box<dyn Transfer>> {
        let turn = self.slot(slot).turn_of(dist);
        turn.diverged = Some(why.to_owned());
        std::mem::take(&mut turn.parked)
    }

    /// One of distribution `dist`'s transfers left the comm thread's
    /// queues. Returns the transfers whose turn has come, each with why it
    /// is given up, if it is.
    pub(super) fn left(&mut self, slot: u32, dist: u32) -> Vec<(Box<dyn Transfer>, Option<String>)> {
        self.slot(slot).turn_of(dist).left += 1;
        self.advance(slot)
    }

    /// How far the numbers of `slot`'s transfers that start now are moved
    /// on in their tags.
    pub(super) fn shift(&mut self, slot: u32) -> u64 {
        self.slot(slot).shift
    }

    /// Distribution `dist` was dropped, having handed over `transfers` on
    /// this rank. Returns as [`left`](Self::left) does.
    pub(super) fn close(
        &mut self,
        slot: u32,
        dist: u32,
        transfers: u64,
    ) -> Vec<(Box<dyn Transfer>, Option<String>)> {
        self.slot(slot).turn_of(dist).expected = Some(transfers);
        self.advance(slot)
    }

    /// The ranks compared distribution `dist`'s programs at its drop: they
    /// differed (why, and the most transfers a rank had) or not. Returns as
    /// [`left`](Self::left) does.
    pub(super) fn verdict(
        &mut self,
        slot: u32,
        dist: u32,
        diverged: Option<(String, u64)>,
    ) -> Vec<(Box<dyn Transfer>, Option<String>)> {
        let mut out = Vec::new();
        if let Some((why, span)) = &diverged {
            out.extend(self.diverge(slot, dist, why).into_iter().map(|t| (t, Some(why.clone()))));
            self.slot(slot).turn_of(dist).span = *span;
        }
        self.slot(slot).turn_of(dist).judged = true;
        out.extend(self.advance(slot));
        out
    }

    /// Ends the slot's first distributions whose transfers have all left,
    /// and lets the next one's start.
    fn advance(&mut self, slot: u32) -> Vec<(Box<dyn Transfer>, Option<String>)> {
        let mut out = Vec::new();
        let entry = self.slot(slot);
        while let Some(front) = entry.gens.front()
            && front.judged
            && front.expected.is_some_and(|n| front.left >= n)
        {
            let done = entry.gens.pop_front().expect("the front");
            if done.diverged.is_some() {
                // Its sends may never be received: no later number on the
                // slot meets theirs.
                entry.shift = entry.shift.wrapping_add(done.span);
            }
            let Some(next) = entry.gens.front_mut() else { break };
            let why = next.diverged.clone();
            out.extend(std::mem::take(&mut next.parked).into_iter().map(|t| (t, why.clone())));
        }
        out
    }

    /// Whether a dropped distribution still has transfers to hand over
    /// here, or its verdict to come: the comm thread waits for them before
    /// it stops.
    pub(super) fn owed(&self) -> bool {
        self.slots
            .iter()
            .flat_map(|s| &s.gens)
            .any(|g| g.expected.is_some_and(|n| g.handed < n) || g.expected.is_some() && !g.judged)
    }

    /// The transfers parked for distributions never dropped (forgotten):
    /// closed when the comm thread stops.
    pub(super) fn leftovers(&mut self) -> Vec<Box<dyn Transfer>> {
        self.slots
            .iter_mut()
            .flat_map(|s| s.gens.iter_mut())
            .flat_map(|g| std::mem::take(&mut g.parked))
            .collect()
    }
}

#[cfg(test)]
mod tests;
