//! The comm thread's transfers (`distributed/`): queued in the order their
//! ops handed them over, started a bounded number at a time where that
//! matters, and tested without testing every one on every turn.

use std::collections::VecDeque;

use mpi::topology::SimpleCommunicator;

use super::flight::Transfer;
use super::turns::{Turns, Verdict};

/// How many transfers in flight past the oldest are tested on each turn
/// (see [`Transfers::advance`]).
const ROTATE: usize = 4;

/// The most eager sends in flight at once (see [`Transfers::advance`]).
const EAGER_LIVE: usize = 16;

/// The most receives posted ahead of their ops at once, and the most bytes
/// they post (but for one, which may post more) (see
/// [`Transfers::advance`]).
const AHEAD_LIVE: usize = 64;
const AHEAD_BYTES: usize = 1 << 20;

/// What is given up, and why: a transfer whose turn came while its
/// distribution's programs differed, or its slot's.
type Released = Vec<(Box<dyn Transfer>, Option<String>)>;

#[derive(Default)]
pub(super) struct Transfers {
    /// Handed over, not started yet, in the order they came.
    handed: VecDeque<Box<dyn Transfer>>,
    /// Receives to post ahead of their ops, in push order.
    ahead: VecDeque<Box<dyn Transfer>>,
    /// In flight, in the order they started.
    flying: VecDeque<Box<dyn Transfer>>,
    /// Eager sends, and receives posted ahead, among those in flight.
    eager: usize,
    posted_ahead: usize,
    /// Bytes those receives posted.
    ahead_bytes: usize,
    /// Where the next turn's tests of the later transfers start.
    cursor: usize,
    /// Which distribution's transfers start on each tag slot.
    turns: Turns,
}

impl Transfers {
    /// Whether anything is queued or in flight.
    pub(super) fn busy(&self) -> bool {
        !self.handed.is_empty() || !self.ahead.is_empty() || !self.flying.is_empty()
    }

    /// Whether a dropped distribution still has transfers to hand over.
    pub(super) fn owed(&self) -> bool {
        self.turns.owed()
    }

    /// A transfer its op handed over.
    pub(super) fn take(&mut self, transfer: Box<dyn Transfer>) {
        match self.turns.arrive(transfer) {
            Verdict::Start(transfer) => self.queue(transfer),
            Verdict::GiveUp(transfer, why) => self.route(vec![(transfer, Some(why))]),
            Verdict::Parked => {}
        }
    }

    /// The ranks' programs differ for distribution `dist` (in `slot`): its
    /// transfers are given up.
    pub(super) fn abandon(&mut self, slot: u32, dist: u32, why: &str) {
        let parked = self.turns.diverge(slot, dist, why);
        self.give_up(slot, dist, why, parked);
    }

    /// Distribution `dist` was dropped, having handed over `transfers`.
    pub(super) fn close(&mut self, slot: u32, dist: u32, transfers: u64) {
        let released = self.turns.close(slot, dist, transfers);
        self.route(released);
    }

    /// Distribution `dist`'s drop compared the programs.
    pub(super) fn verdict(&mut self, slot: u32, dist: u32, diverged: Option<(String, u64)>) {
        if let Some((why, _)) = &diverged {
            self.give_up(slot, dist, why, Vec::new());
        }
        let released = self.turns.verdict(slot, dist, diverged);
        self.route(released);
    }

    /// The comm thread stops: what never started fails without MPI.
    pub(super) fn close_all(&mut self) {
        let queued = std::mem::take(&mut self.handed).into_iter().chain(std::mem::take(&mut self.ahead));
        for transfer in queued.chain(self.turns.leftovers()) {
            transfer.close();
        }
    }

    fn queue(&mut self, transfer: Box<dyn Transfer>) {
        if transfer.ahead().is_some() {
            self.ahead.push_back(transfer);
        } else {
            self.handed.push_back(transfer);
        }
    }

    /// Queues the transfers whose turn came, or gives them up; each one
    /// given up has left the queues, which may let more through.
    fn route(&mut self, released: Released) {
        let mut work: VecDeque<_> = released.into();
        while let Some((transfer, why)) = work.pop_front() {
            match why {
                None => self.queue(transfer),
                Some(why) => {
                    let (slot, dist) = transfer.turn();
                    self.flying.extend(transfer.abandon(&why));
                    work.extend(self.turns.left(slot, dist));
                }
            }
        }
    }

    /// Gives up distribution `dist`'s transfers queued and in flight, and
    /// `more` of them.
    fn give_up(&mut self, slot: u32, dist: u32, why: &str, more: Vec<Box<dyn Transfer>>) {
        let split = |queue: &mut VecDeque<Box<dyn Transfer>>| -> (VecDeque<_>, VecDeque<_>) {
            std::mem::take(queue).into_iter().partition(|t| t.turn() == (slot, dist))
        };
        let (queued, handed) = split(&mut self.handed);
        let (early, ahead) = split(&mut self.ahead);
        let (flying, others) = split(&mut self.flying);
        (self.handed, self.ahead, self.flying) = (handed, ahead, others);
        // Those queued or parked leave the queues now.
        let left = queued.len() + early.len() + more.len();
        let given_up =
            queued.into_iter().chain(early).chain(flying).chain(more).filter_map(|t| t.abandon(why));
        self.flying.extend(given_up);
        for _ in 0..left {
            let released = self.turns.left(slot, dist);
            self.route(released);
        }
        self.recount();
    }

    fn recount(&mut self) {
        self.eager = self.flying.iter().filter(|t| t.eager()).count();
        self.posted_ahead = self.flying.iter().filter(|t| t.ahead().is_some()).count();
        self.ahead_bytes = self.flying.iter().filter_map(|t| t.ahead()).sum();
    }

    /// Starts what may start and tests those in flight; finishes those
    /// done. Whether anything started or ended.
    ///
    /// What may start, in the order handed over (a later distribution's
    /// transfers on a slot after an earlier one's: `turns.rs`):
    ///
    /// * eager sends at most [`EAGER_LIVE`] at once: a rank that runs ahead
    ///   would leave MPI thousands of sends to retry on every progress.
    ///   Holding them back cannot deadlock: an eager send needs nothing of
    ///   its receiver but that it poll, which a rank waiting for any
    ///   message does;
    /// * receives posted ahead of their ops at most [`AHEAD_LIVE`] at once,
    ///   and [`AHEAD_BYTES`] (but always one), the earliest pushed first. Nor can that deadlock: the message of
    ///   the earliest receive not done depends only on ops and transfers
    ///   pushed before it, all of which can end.
    ///
    /// Not every transfer in flight is tested on every turn: a test of a
    /// request not done makes MPI progress on everything, which costs far
    /// more than the test. The oldest are tested up to the first not done
    /// (transfers mostly end in the order they started), and then
    /// [`ROTATE`] of the others in turn, so that each is seen within a
    /// bounded number of turns whatever the order in which they end.
    pub(super) fn advance(&mut self, comm: &SimpleCommunicator) -> bool {
        let mut moved = false;
        while let Some(next) = self.handed.front() {
            if next.eager() && self.eager >= EAGER_LIVE {
                break;
            }
            let transfer = self.handed.pop_front().expect("the front");
            self.start(transfer, comm);
            moved = true;
        }
        while let Some(next) = self.ahead.front()
            && (self.posted_ahead == 0
                || self.posted_ahead < AHEAD_LIVE
                    && self.ahead_bytes + next.ahead().unwrap_or(0) <= AHEAD_BYTES)
        {
            let transfer = self.ahead.pop_front().expect("the front");
            self.start(transfer, comm);
            moved = true;
        }
        while let Some(front) = self.flying.front_mut() {
            match front.test() {
                Ok(false) => break,
                result => {
                    let done = self.flying.pop_front().expect("the front");
                    self.finish(done, result);
                    moved = true;
                }
            }
        }
        for _ in 0..ROTATE {
            // The front was tested just above.
            if self.flying.len() < 2 {
                break;
            }
            self.cursor = if self.cursor + 1 < self.flying.len() { self.cursor + 1 } else { 1 };
            let k = self.cursor;
            match self.flying[k].test() {
                Ok(false) => {}
                result => {
                    let done = self.flying.remove(k).expect("in range");
                    self.finish(done, result);
                    moved = true;
                }
            }
        }
        moved
    }

    fn start(&mut self, mut transfer: Box<dyn Transfer>, comm: &SimpleCommunicator) {
        let (slot, dist) = transfer.turn();
        match transfer.start(comm, self.turns.shift(slot)) {
            Ok(()) => {
                self.eager += usize::from(transfer.eager());
                self.posted_ahead += usize::from(transfer.ahead().is_some());
                self.ahead_bytes += transfer.ahead().unwrap_or(0);
                self.flying.push_back(transfer);
            }
            Err(code) => transfer.finish(Err(code)),
        }
        let released = self.turns.left(slot, dist);
        self.route(released);
    }

    fn finish(&mut self, done: Box<dyn Transfer>, result: Result<bool, super::raw::Code>) {
        self.eager -= usize::from(done.eager());
        self.posted_ahead -= usize::from(done.ahead().is_some());
        self.ahead_bytes -= done.ahead().unwrap_or(0);
        done.finish(result.map(drop));
    }
}
