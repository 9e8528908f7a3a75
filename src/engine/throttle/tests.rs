//! The throttle's rule against a simulated engine on a simulated clock: a
//! worker that completes one op every `op` of simulated time, a pusher
//! that spends `push` per push. Nothing here depends on how threads are
//! scheduled, so each case is exact.

use std::cell::{Cell, RefCell};
use std::time::{Duration, Instant};

use super::*;

struct Sim {
    base: Instant,
    clock: Cell<Duration>,
    pushed: Cell<u64>,
    completed: Cell<u64>,
    /// The time one op takes on the worker.
    op: Duration,
    /// The worker completes nothing past this count (a stall).
    cap: Cell<u64>,
    /// Whether the worker stops as a wait begins.
    stall_on_wait: Cell<bool>,
    /// When the worker completes its next op.
    next_done: Cell<Duration>,
    decisions: RefCell<Vec<(Decision, u64)>>,
    /// (simulated time parked, in flight when the wait ended) per park.
    parks: RefCell<Vec<(Duration, u64)>>,
    /// In flight as each wait ended.
    after_waits: RefCell<Vec<u64>>,
}

impl Sim {
    fn new(op: Duration) -> Self {
        Sim {
            base: Instant::now(),
            clock: Cell::new(Duration::ZERO),
            pushed: Cell::new(0),
            completed: Cell::new(0),
            op,
            cap: Cell::new(u64::MAX),
            stall_on_wait: Cell::new(false),
            next_done: Cell::new(op),
            decisions: RefCell::new(Vec::new()),
            parks: RefCell::new(Vec::new()),
            after_waits: RefCell::new(Vec::new()),
        }
    }

    fn in_flight(&self) -> u64 {
        self.pushed.get() - self.completed.get()
    }

    fn may_complete(&self) -> bool {
        self.in_flight() > 0 && self.completed.get() < self.cap.get()
    }

    /// Lets `dt` of simulated time pass, the worker completing ops.
    fn advance(&self, dt: Duration) {
        let end = self.clock.get() + dt;
        while self.may_complete() && self.next_done.get() <= end {
            self.completed.set(self.completed.get() + 1);
            self.next_done.set(self.next_done.get() + self.op);
        }
        if !self.may_complete() {
            // An idle or held worker starts its next op when it gets one.
            self.next_done.set(end + self.op);
        }
        self.clock.set(end);
    }

    /// One push taking `cost`, then the look every `CHECK_EVERY` pushes.
    fn push(&self, cost: Duration, bound: usize) {
        self.advance(cost);
        if !self.may_complete() {
            self.next_done.set(self.clock.get() + self.op);
        }
        self.pushed.set(self.pushed.get() + 1);
        if due() {
            let waits = self.count(Decision::Waited);
            throttle(self, bound);
            if self.count(Decision::Waited) > waits {
                self.after_waits.borrow_mut().push(self.in_flight());
            }
        }
    }

    fn count(&self, decision: Decision) -> usize {
        self.decisions.borrow().iter().filter(|(d, _)| *d == decision).count()
    }
}

impl Progress for Sim {
    fn id(&self) -> usize {
        std::ptr::from_ref(self) as usize
    }
    fn pushed(&self) -> u64 {
        self.pushed.get()
    }
    fn completed(&self) -> u64 {
        self.completed.get()
    }
    fn all_idle(&self) -> bool {
        false
    }
    fn now(&self) -> Instant {
        self.base + self.clock.get()
    }
    /// Parks until `goal` completions or `patience`, whichever comes first.
    fn park(&self, goal: u64, patience: Duration) {
        let start = self.clock.get();
        let step = self.op.min(patience).max(Duration::from_nanos(1));
        while self.completed.get() < goal && self.clock.get() - start < patience {
            self.advance(step.min(patience - (self.clock.get() - start)));
        }
        self.parks.borrow_mut().push((self.clock.get() - start, self.in_flight()));
    }
    fn decided(&self, decision: Decision) {
        if decision == Decision::Waited && self.stall_on_wait.get() {
            self.cap.set(self.completed.get());
        }
        self.decisions.borrow_mut().push((decision, self.in_flight()));
    }
}

const PUSH: Duration = Duration::from_nanos(300);

/// Pushes `n` ops, returning the most in flight any look saw after it.
fn run(sim: &Sim, n: usize, bound: usize) -> u64 {
    let mut most = 0;
    for _ in 0..n {
        sim.push(PUSH, bound);
        most = most.max(sim.in_flight());
    }
    most
}

#[test]
fn a_pusher_ahead_of_a_draining_worker_is_held_near_the_bound() {
    // The worker takes 1 µs an op, the pusher 0.3 µs a push.
    let sim = Sim::new(Duration::from_micros(1));
    let most = run(&sim, 100_000, 4_096);
    assert!(most <= 4_096 + u64::from(CHECK_EVERY), "{most} in flight");
    assert!(sim.count(Decision::Waited) > 10);
    assert_eq!(sim.count(Decision::Passed), 0);
    // Every wait ended at half the bound, woken by the completion that got
    // there: parked for as long as those ops took.
    for &in_flight in sim.after_waits.borrow().iter() {
        assert!(in_flight <= 2_048, "a wait ended at {in_flight} in flight");
    }
    for &(parked, _) in sim.parks.borrow().iter() {
        assert!(parked <= Duration::from_micros(2_400), "parked {parked:?}");
    }
    // The pusher went at the worker's pace: 100,000 ops of 1 µs.
    let total = sim.clock.get();
    assert!(total >= Duration::from_millis(95) && total <= Duration::from_millis(102), "{total:?}");
}

#[test]
fn a_pusher_behind_a_held_worker_never_waits() {
    // The worker is held (by a long op, or one waiting for this thread)
    // for the whole run: the pushes cost what they cost, nothing more.
    let sim = Sim::new(Duration::from_micros(1));
    sim.cap.set(0);
    let most = run(&sim, 100_000, 4_096);
    assert_eq!(most, 100_000);
    assert_eq!(sim.count(Decision::Waited), 0);
    assert!(sim.parks.borrow().is_empty());
    assert_eq!(sim.clock.get(), PUSH * 100_000);
    // Each look past the bound said so once, and cost no time.
    let looks = |pushes: usize| pushes / CHECK_EVERY as usize;
    assert_eq!(sim.count(Decision::Passed), looks(100_000) - looks(4_096));
}

#[test]
fn a_wait_whose_drain_stops_ends_after_the_span_the_ops_ahead_should_take() {
    for op in [Duration::from_micros(1), Duration::from_micros(50)] {
        let sim = Sim::new(op);
        // The worker stops (a body waiting for the pusher) as the wait
        // begins.
        sim.stall_on_wait.set(true);
        run(&sim, 2_048, 1_024);
        assert_eq!(sim.count(Decision::Waited), 1, "{:?}", sim.decisions.borrow());
        let parks = sim.parks.borrow();
        assert_eq!(parks.len(), 1);
        let stalled = parks[0].0;
        // The span: the ops ahead of the target (500 to 800 here) at the
        // pace measured, not a fixed time.
        assert!(stalled >= op * 300 && stalled <= op * 1_300, "{op:?}: gave up after {stalled:?}");
        // Given up, and said so; the next looks see nothing drained.
        assert!(sim.count(Decision::Passed) >= 2);
    }
}

#[test]
fn a_pusher_behind_slow_ops_goes_at_their_pace() {
    // 100 µs ops: most looks (77 µs apart) see none complete and go on;
    // the first that sees one waits, for as long as the ops ahead take.
    let sim = Sim::new(Duration::from_micros(100));
    run(&sim, 20_000, 4_096);
    assert!(sim.count(Decision::Waited) >= 1);
    for &in_flight in sim.after_waits.borrow().iter() {
        assert!(in_flight <= 2_048, "a wait ended at {in_flight} in flight");
    }
    let parked: Duration = sim.parks.borrow().iter().map(|p| p.0).sum();
    assert!(parked >= Duration::from_millis(100), "parked only {parked:?}");
    // At most a look's pushes past the bound for each look that passed.
    let passes = sim.count(Decision::Passed) as u64;
    assert!(sim.in_flight() <= 4_096 + u64::from(CHECK_EVERY) * (1 + passes));
}

#[test]
fn a_look_after_a_stall_waits_again_once_the_workers_move() {
    let sim = Sim::new(Duration::from_micros(1));
    sim.cap.set(0);
    run(&sim, 10_000, 4_096);
    assert_eq!(sim.count(Decision::Waited), 0);
    // The held op completes: the next look that saw ops complete waits.
    sim.cap.set(u64::MAX);
    let most = run(&sim, 10_000, 4_096);
    assert!(sim.count(Decision::Waited) >= 1);
    assert!(most <= 10_000 + u64::from(CHECK_EVERY));
    assert!(sim.in_flight() <= 4_096 + u64::from(CHECK_EVERY));
}

#[test]
fn the_pace_is_the_ops_drained_over_the_time_between_looks() {
    assert_eq!(pace(Duration::from_micros(100), 10, 50), Duration::from_micros(500));
    assert_eq!(pace(Duration::from_secs(1), 0, 3), Duration::from_secs(3));
    assert_eq!(pace(Duration::MAX, 1, u64::MAX), Duration::from_nanos(u64::MAX));
    let base = Instant::now();
    let look = |completed, micros| Look { engine: 1, completed, at: base + Duration::from_micros(micros) };
    // At or under the bound, and past it with nothing drained.
    assert_eq!(judge(Some(look(0, 0)), look(5, 77), 100, 100), Verdict::Go);
    assert_eq!(judge(Some(look(5, 0)), look(5, 77), 200, 100), Verdict::Pass);
    // The first look at an engine, or at another engine, knows no pace.
    assert_eq!(judge(None, look(5, 77), 200, 100), Verdict::Pass);
    let other = Look { engine: 2, ..look(0, 0) };
    assert_eq!(judge(Some(other), look(5, 77), 200, 100), Verdict::Pass);
    // 195 in flight, 50 to go to 145... to half the bound (50): 145.
    let wait = judge(Some(look(0, 0)), look(5, 100), 200, 100);
    assert_eq!(wait, Verdict::Wait { need: 145, patience: Duration::from_micros(2_900) });
}
