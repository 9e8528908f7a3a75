//! Model checking of the var cells: concurrent pushes (two-phase locked
//! appends) racing with completions that release successors.
//!
//! Run with:
//! `RUSTFLAGS="--cfg depengine_loom" LOOM_MAX_PREEMPTIONS=2 cargo test --release --lib loom`

use loom::sync::Arc;
use loom::sync::atomic::{AtomicUsize, Ordering};
use loom::thread;

use super::{Grant, VarCell, append_all};
use crate::error::Error;
use crate::sync::Mutex;
use crate::sync::countdown::Countdown;
use crate::sync::lock;
use crate::var::gate::Access;
use crate::var::inbox::{Link, Linked};

const WRITER: usize = usize::MAX;

struct Op {
    name: &'static str,
    deps: Vec<(usize, Access)>,
    pending: Countdown,
    link: Link<Token>,
}

#[derive(Clone)]
struct Token(Arc<Op>);

impl Grant for Token {
    fn on_grant(&self, _var: u64, _error: &mut Option<Error>) {}

    fn name(&self) -> &str {
        self.0.name
    }

    type Holder = usize;

    fn held(&self) -> usize {
        Arc::as_ptr(&self.0) as usize
    }

    unsafe fn from_held(_: usize) -> Self {
        unreachable!("the models do not ask for holders")
    }
}

impl Linked for Token {
    fn link(&self) -> &Link<Self> {
        &self.0.link
    }

    fn sole_access(&self) -> Access {
        self.0.deps[0].1
    }
}

struct World {
    vars: Vec<VarCell<Token>>,
    /// Per var: running readers, or WRITER.
    holders: Vec<AtomicUsize>,
    /// Per var: the order in which ops ran on it.
    logs: Vec<Mutex<Vec<&'static str>>>,
}

impl World {
    fn new(n: usize) -> Arc<Self> {
        Arc::new(Self {
            vars: (0..n as u64).map(|id| VarCell::new(id, None)).collect(),
            holders: (0..n).map(|_| AtomicUsize::new(0)).collect(),
            logs: (0..n).map(|_| Mutex::new(Vec::new())).collect(),
        })
    }

    /// Pushes as `op::submit` does: a one-var op through the var's inbox.
    fn push(&self, name: &'static str, mut deps: Vec<(usize, Access)>) {
        deps.sort_by_key(|d| d.0);
        let pending = Countdown::new(deps.len());
        let tok = Token(Arc::new(Op { name, deps, pending, link: Link::new() }));
        let mut others = Vec::new();
        let ready = if let [(v, access)] = tok.0.deps[..] {
            // SAFETY: the world, and so the cell, outlives the push.
            unsafe { VarCell::append_one(&self.vars[v], access, tok, &mut |op| others.push(op)).unwrap() }
        } else {
            let cells: Vec<_> = tok.0.deps.iter().map(|(v, a)| (&self.vars[*v], *a)).collect();
            let granted = append_all(cells.iter().copied(), &tok, &mut |op| others.push(op)).unwrap();
            (granted == tok.0.deps.len() || tok.0.pending.release(granted)).then_some(tok)
        };
        for op in others {
            if op.0.pending.release(1) {
                self.run(op);
            }
        }
        if let Some(tok) = ready {
            self.run(tok);
        }
    }

    fn run(&self, tok: Token) {
        for &(v, access) in &tok.0.deps {
            let h = &self.holders[v];
            match access {
                Access::Write => assert_eq!(h.swap(WRITER, Ordering::SeqCst), 0, "write overlaps"),
                Access::Read => assert_ne!(h.fetch_add(1, Ordering::SeqCst), WRITER, "read overlaps a write"),
            }
            lock(&self.logs[v]).push(tok.0.name);
        }
        for &(v, access) in &tok.0.deps {
            match access {
                Access::Write => self.holders[v].store(0, Ordering::SeqCst),
                Access::Read => drop(self.holders[v].fetch_sub(1, Ordering::SeqCst)),
            }
        }
        let mut ready = Vec::new();
        for &(v, access) in &tok.0.deps {
            self.vars[v].complete(tok.held(), access, None, &mut |op| ready.push(op));
        }
        for next in ready {
            if next.0.pending.release(1) {
                self.run(next);
            }
        }
    }

    fn log(&self, v: usize) -> Vec<&'static str> {
        lock(&self.logs[v]).clone()
    }
}

/// Two ops over the same two vars, pushed at once from two threads with
/// opposite declaration orders: no deadlock, both run, same order on both.
#[test]
fn loom_opposite_orders_agree() {
    loom::model(|| {
        let world = World::new(2);
        let w = world.clone();
        let t = thread::spawn(move || w.push("a", vec![(0, Access::Write), (1, Access::Write)]));
        world.push("b", vec![(1, Access::Write), (0, Access::Read)]);
        t.join().unwrap();
        let (x, y) = (world.log(0), world.log(1));
        assert_eq!(x.len(), 2);
        assert_eq!(x, y, "ops ordered the same way on both vars");
    });
}

/// A push racing with the completion that frees its var: the read is let
/// through exactly once, never alongside the write.
#[test]
fn loom_push_races_completion() {
    loom::model(|| {
        let world = World::new(1);
        let w = world.clone();
        let t = thread::spawn(move || w.push("w", vec![(0, Access::Write)]));
        world.push("r", vec![(0, Access::Read)]);
        t.join().unwrap();
        let mut log = world.log(0);
        log.sort_unstable();
        assert_eq!(log, ["r", "w"]);
        assert_eq!(world.vars[0].lock().gate.running_reads(), 0);
    });
}

/// Exactly one releaser sees the countdown reach zero.
#[test]
fn loom_countdown_zero_once() {
    loom::model(|| {
        let c = Arc::new(Countdown::new(2));
        let hits = Arc::new(AtomicUsize::new(0));
        let (c2, h2) = (c.clone(), hits.clone());
        let t = thread::spawn(move || {
            if c2.release(1) {
                h2.fetch_add(1, Ordering::SeqCst);
            }
        });
        if c.release(1) {
            hits.fetch_add(1, Ordering::SeqCst);
        }
        t.join().unwrap();
        assert_eq!(hits.load(Ordering::SeqCst), 1);
    });
}

/// Three one-var writes from three threads, each racing the completions
/// of the others: a push to the inbox of a var that a completion opens at
/// the same time is moved to the gate by one of the two, never lost, and
/// the writes never overlap.
#[test]
fn loom_inbox_pushes_race_the_completion_that_opens_the_var() {
    loom::model(|| {
        let world = World::new(1);
        let threads: Vec<_> = ["a", "b"]
            .into_iter()
            .map(|name| {
                let w = world.clone();
                thread::spawn(move || w.push(name, vec![(0, Access::Write)]))
            })
            .collect();
        world.push("c", vec![(0, Access::Write)]);
        threads.into_iter().for_each(|t| t.join().unwrap());
        let mut log = world.log(0);
        log.sort_unstable();
        assert_eq!(log, ["a", "b", "c"]);
        let state = world.vars[0].lock();
        assert!(!state.gate.write_running() && state.gate.queued().next().is_none());
    });
}

/// GPU early release (`gpu/README.md`) over the real gate: a GPU write,
/// let through, fences the var and lets it go at enqueue, while its work
/// completes on the GPU and a read of the var is pushed from another
/// thread. Whether the read is let through by the release or at once by
/// its append (the write gone from the gate already), it finds the write's
/// work done or a fence to wait for: never the var without the work.
#[test]
fn loom_a_read_after_an_early_released_gpu_write_sees_its_work() {
    use std::sync::OnceLock;

    use crate::gpu::backend::RawEvent;
    use crate::gpu::early_release::InFlight;
    use crate::gpu::event::Event;
    use crate::gpu::{FenceWait, Fences};

    /// The read's body: what the dispatcher does before it runs.
    fn consume(fences: &Fences, done: &AtomicUsize) {
        match fences.held([(0, false)].into_iter(), None) {
            FenceWait::Free => {}
            FenceWait::Wait(_, events) => {
                while !events.iter().all(Event::is_done) {
                    thread::yield_now();
                }
            }
            FenceWait::Fault(..) => panic!("no fault was injected"),
        }
        assert_eq!(done.load(Ordering::Relaxed), 1, "the read ran before the GPU write's work");
    }

    loom::model(|| {
        let world = World::new(1);
        let fences = Arc::new(Fences::default());
        let done = Arc::new(AtomicUsize::new(0));
        let pool = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let event = Event::new(RawEvent::Sim(std::sync::Arc::default()), &pool);
        let flight = InFlight { device: 0, fault: std::sync::Arc::new(OnceLock::new()), stream: 0, event };
        // The GPU write, let through at once.
        let write = Token(Arc::new(Op {
            name: "gpu write",
            deps: vec![(0, Access::Write)],
            pending: Countdown::new(1),
            link: Link::new(),
        }));
        let cells = [(&world.vars[0], Access::Write)];
        assert_eq!(append_all(cells.iter().copied(), &write, &mut |_| unreachable!()).unwrap(), 1);
        let worker = {
            let (world, fences, done) = (world.clone(), fences.clone(), done.clone());
            thread::spawn(move || {
                fences.add([(0, true)].into_iter(), &flight);
                // The poller is told once the fence is in; the GPU may end
                // the work any time from then on.
                let gpu = {
                    let (fences, done) = (fences.clone(), done.clone());
                    thread::spawn(move || {
                        done.store(1, Ordering::Relaxed);
                        flight.event.set_done();
                        fences.remove([0].into_iter(), &flight.event);
                    })
                };
                let mut released = Vec::new();
                world.vars[0].complete(write.held(), Access::Write, None, &mut |op| released.push(op));
                for read in released {
                    if read.0.pending.release(1) {
                        consume(&fences, &done);
                    }
                }
                gpu.join().unwrap();
            })
        };
        let read = Token(Arc::new(Op {
            name: "read",
            deps: vec![(0, Access::Read)],
            pending: Countdown::new(1),
            link: Link::new(),
        }));
        let cells = [(&world.vars[0], Access::Read)];
        if append_all(cells.iter().copied(), &read, &mut |_| unreachable!()).unwrap() == 1 {
            consume(&fences, &done);
        }
        worker.join().unwrap();
    });
}

/// The end of a scope (`scope/README.md`) over the real gate: an op that
/// writes a scoped var's view runs on one thread, while the scope's end,
/// on another, appends the var's deletion and, once the deletion is let
/// through, gives the memory back to its owner (who writes it). The op's
/// access and the owner's never race (loom's cell checks it), whether the
/// deletion is let through at its append or by the op's completion.
#[test]
fn loom_a_scope_end_follows_every_op_on_its_var() {
    use loom::cell::UnsafeCell;
    use loom::sync::atomic::AtomicBool;

    loom::model(|| {
        let world = World::new(1);
        let memory = Arc::new(UnsafeCell::new(0u64));
        let deleted = Arc::new(AtomicBool::new(false));
        let op = |name| {
            Token(Arc::new(Op {
                name,
                deps: vec![(0, Access::Write)],
                pending: Countdown::new(1),
                link: Link::new(),
            }))
        };
        // The op, let through at once, runs on a worker.
        let write = op("write the view");
        let cells = [(&world.vars[0], Access::Write)];
        assert_eq!(append_all(cells.iter().copied(), &write, &mut |_| unreachable!()).unwrap(), 1);
        let worker = {
            let (world, memory, deleted) = (world.clone(), memory.clone(), deleted.clone());
            thread::spawn(move || {
                // SAFETY: (a model) the write grant is the op's only access.
                memory.with_mut(|m| unsafe { *m += 1 });
                let mut released = Vec::new();
                world.vars[0].complete(write.held(), Access::Write, None, &mut |op| released.push(op));
                for deletion in released {
                    if deletion.0.pending.release(1) {
                        deleted.store(true, Ordering::Release);
                    }
                }
            })
        };
        // The scope's end: the deletion, then the wait for it.
        let deletion = op("delete");
        if append_all(cells.iter().copied(), &deletion, &mut |_| unreachable!()).unwrap() == 1 {
            deleted.store(true, Ordering::Release);
        }
        while !deleted.load(Ordering::Acquire) {
            thread::yield_now();
        }
        // SAFETY: (a model) the owner's access, after the scope's end.
        memory.with_mut(|m| unsafe { *m += 1 });
        worker.join().unwrap();
        // SAFETY: (a model) both threads are done.
        assert_eq!(memory.with(|m| unsafe { *m }), 2);
    });
}
