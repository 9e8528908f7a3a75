//! Seeded random programs run on the engine and checked against a
//! sequential model: every var's final value and error, every handle's
//! result, every `wait_for_var` and `wait_for_all`.
//!
//! Programs mix sync, async (completion token) and future ops on all CPU
//! lanes with random priorities, duplicate and overlapping declarations,
//! failing and panicking bodies, dropped completions and no-skip ops. Set
//! `DEPENGINE_DIFF_SEEDS` to run more seeds (from `DEPENGINE_DIFF_SEED_FROM`).
//!
//! With bulk execution on, programs are mostly sync ops on the normal lane
//! (the ops that fuse), some of which hand their guards to another thread
//! that drops them after the body has returned.

mod common;

use std::collections::BTreeSet;
use std::sync::Once;
use std::time::Duration;

use common::{Rng, mix};
use depengine::engine::Completion;
use depengine::engine::EngineKind;
use depengine::{Engine, Error, Lane, OpHandle, Var};

const PLANNED: &str = "planned panic";

fn quiet_planned_panics() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let planned = info.payload().downcast_ref::<&str>().is_some_and(|s| s.starts_with(PLANNED));
            if !planned {
                default(info);
            }
        }));
    });
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Body {
    Sync,
    /// A sync body whose guards are dropped by another thread, later.
    SyncEscape,
    Async,
    Future,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Fail {
    No,
    Err,
    Panic,
    DropCompletion,
}

#[derive(Clone, Debug)]
struct OpSpec {
    id: usize,
    reads: Vec<usize>,
    writes: Vec<usize>,
    /// Untyped reads of vars also written: merged into the write.
    extra_reads: Vec<usize>,
    body: Body,
    fail: Fail,
    lane: Lane,
    priority: i32,
    no_skip: bool,
}

#[derive(Clone, Debug)]
enum Step {
    Op(OpSpec),
    WaitVar(usize),
    WaitAll,
}

/// A random program; `fusing`: mostly sync ops on the normal lane.
fn program(seed: u64, nvars: usize, steps: usize, fusing: bool) -> Vec<Step> {
    let mut rng = Rng(seed);
    (0..steps)
        .map(|id| match rng.below(100) {
            0..=3 => Step::WaitVar(rng.below(nvars)),
            4 => Step::WaitAll,
            _ => {
                let mut writes: Vec<usize> = (0..rng.below(3)).map(|_| rng.below(nvars)).collect();
                writes.sort_unstable();
                writes.dedup();
                let reads =
                    (0..rng.below(4)).map(|_| rng.below(nvars)).filter(|v| !writes.contains(v)).collect();
                let extra_reads = writes.iter().copied().filter(|_| rng.chance(20)).collect();
                let body = match (fusing, rng.below(10)) {
                    (true, 0..=6) | (false, 0..=6) => Body::Sync,
                    (true, 7) => Body::SyncEscape,
                    (_, 7 | 8) => Body::Async,
                    _ => Body::Future,
                };
                let fail = match rng.below(100) {
                    0..=2 => Fail::Err,
                    3 => Fail::Panic,
                    4 if body == Body::Async => Fail::DropCompletion,
                    _ => Fail::No,
                };
                let lane = [Lane::Normal, Lane::Normal, Lane::Prioritized, Lane::Inline][rng.below(4)];
                let lane = if fusing && rng.chance(80) { Lane::Normal } else { lane };
                let priority = rng.below(3) as i32 - 1;
                let priority = if fusing && rng.chance(80) { 0 } else { priority };
                let no_skip = rng.chance(5);
                Step::Op(OpSpec { id, reads, writes, extra_reads, body, fail, lane, priority, no_skip })
            }
        })
        .collect()
}

/// The body's arithmetic: identical in the model and on the engine.
fn compute(id: usize, reads: &[u64]) -> u64 {
    reads.iter().fold(mix(id as u64, 1), |x, r| mix(x, *r))
}

fn new_value(x: u64, old: u64) -> u64 {
    mix(x, old)
}

/// What a handle must resolve to.
#[derive(Debug)]
enum Expect {
    Ok(u64),
    /// Failed by its own body, with this kind.
    Fail(Fail),
    /// Skipped; the root is one of these ops.
    Skipped(BTreeSet<usize>),
}

struct Model {
    vals: Vec<u64>,
    /// Completed writes of each var.
    versions: Vec<u64>,
    errs: Vec<Option<BTreeSet<usize>>>,
    failed_since_wait_all: bool,
}

impl Model {
    fn op(&mut self, op: &OpSpec) -> Expect {
        let vars = op.reads.iter().chain(&op.writes);
        let seen = vars.filter_map(|v| self.errs[*v].clone()).reduce(|a, b| &a | &b);
        let (expect, carry) = if seen.is_some() && !op.no_skip {
            (Expect::Skipped(seen.clone().unwrap()), seen)
        } else if op.fail != Fail::No {
            (Expect::Fail(op.fail), Some(seen.unwrap_or_else(|| BTreeSet::from([op.id]))))
        } else {
            let reads: Vec<u64> = op.reads.iter().map(|r| self.vals[*r]).collect();
            let x = compute(op.id, &reads);
            for w in &op.writes {
                self.vals[*w] = new_value(x, self.vals[*w]);
            }
            (Expect::Ok(x), seen)
        };
        for w in &op.writes {
            self.versions[*w] += 1;
        }
        if let Some(carry) = carry {
            for w in &op.writes {
                self.errs[*w] = Some(carry.clone());
            }
        }
        if !matches!(expect, Expect::Ok(_)) {
            self.failed_since_wait_all = true;
        }
        expect
    }
}

fn root_id(err: &Error) -> usize {
    let name = err.root().op_name().expect("root has an op name");
    name.strip_prefix("op").and_then(|n| n.parse().ok()).unwrap_or_else(|| panic!("bad root {err}"))
}

fn check(expect: &Expect, got: &Result<u64, Error>, what: &str) {
    match (expect, got) {
        (Expect::Ok(x), Ok(y)) => assert_eq!(x, y, "{what}: value"),
        (Expect::Fail(kind), Err(e)) => {
            let ok = match kind {
                Fail::Err => e.is_failed(),
                Fail::Panic => e.is_panic(),
                Fail::DropCompletion => e.is_completion_dropped(),
                Fail::No => false,
            };
            assert!(ok, "{what}: expected {kind:?}, got {e}");
        }
        (Expect::Skipped(roots), Err(e)) => {
            assert!(e.is_skipped(), "{what}: expected skip, got {e}");
            assert!(roots.contains(&root_id(e)), "{what}: root {e} not in {roots:?}");
        }
        _ => panic!("{what}: expected {expect:?}, got {got:?}"),
    }
}

fn finish(op: &OpSpec, reads: &[u64], writes: &mut [&mut u64]) -> Result<u64, depengine::BoxError> {
    match op.fail {
        Fail::Err => return Err(format!("op{} failed", op.id).into()),
        Fail::Panic => panic!("{PLANNED} in op{}", op.id),
        Fail::No | Fail::DropCompletion => {}
    }
    let x = compute(op.id, reads);
    for w in writes.iter_mut() {
        **w = new_value(x, **w);
    }
    Ok(x)
}

fn push(engine: &Engine, vars: &[Var<u64>], op: &OpSpec, opt_in: bool) -> OpHandle<u64> {
    let rvars: Vec<_> = op.reads.iter().map(|r| vars[*r].clone()).collect();
    let wvars: Vec<_> = op.writes.iter().map(|w| vars[*w].clone()).collect();
    let mut b = engine.op(format!("op{}", op.id)).lane(op.lane).priority(op.priority).no_skip(op.no_skip);
    // One op in three may run on the pushing thread (which is a Tokio
    // runtime's: only ops that opt in may), without changing the program.
    if opt_in && common::mix(op.id as u64, 3).is_multiple_of(3) {
        b = b.inline_when_idle(true);
    }
    for e in &op.extra_reads {
        b = b.read_any(&vars[*e].any());
    }
    let b = b.read_all(&rvars).write_all(&wvars);
    let spec = op.clone();
    match op.body {
        Body::Sync => b.run(move |(rs,), (mut ws,)| {
            let reads: Vec<u64> = rs.iter().map(|g| **g).collect();
            let mut writes: Vec<&mut u64> = ws.iter_mut().map(|g| &mut **g).collect();
            finish(&spec, &reads, &mut writes)
        }),
        Body::SyncEscape => b.run(move |(rs,), (mut ws,)| {
            let reads: Vec<u64> = rs.iter().map(|g| **g).collect();
            let mut writes: Vec<&mut u64> = ws.iter_mut().map(|g| &mut **g).collect();
            let result = finish(&spec, &reads, &mut writes);
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_micros(200));
                drop((rs, ws));
            });
            result
        }),
        Body::Async => b.run_async(move |(rs,), (mut ws,), done: Completion<u64>| {
            let on_thread = spec.id.is_multiple_of(2);
            let work = move || {
                if spec.fail == Fail::DropCompletion {
                    drop(done);
                    return;
                }
                let reads: Vec<u64> = rs.iter().map(|g| **g).collect();
                let mut writes: Vec<&mut u64> = ws.iter_mut().map(|g| &mut **g).collect();
                let result = finish(&spec, &reads, &mut writes);
                drop((rs, ws));
                done.complete(result);
            };
            if on_thread {
                std::thread::spawn(work);
            } else {
                work();
            }
        }),
        Body::Future => b.spawn(move |(rs,), (mut ws,)| async move {
            tokio::task::yield_now().await;
            let reads: Vec<u64> = rs.iter().map(|g| **g).collect();
            let mut writes: Vec<&mut u64> = ws.iter_mut().map(|g| &mut **g).collect();
            finish(&spec, &reads, &mut writes)
        }),
    }
}

async fn run_program(engine: Engine, steps: &[Step], nvars: usize, label: &str, opt_in: bool) {
    let init: Vec<u64> = (0..nvars as u64).collect();
    let vars: Vec<Var<u64>> = init.iter().map(|v| engine.var(*v)).collect();
    let mut model =
        Model { vals: init, versions: vec![0; nvars], errs: vec![None; nvars], failed_since_wait_all: false };
    let mut handles = Vec::new();
    for step in steps {
        match step {
            Step::Op(op) => {
                let expect = model.op(op);
                handles.push((op.id, expect, push(&engine, &vars, op, opt_in)));
            }
            Step::WaitVar(v) => {
                let expect = model.errs[*v].take();
                let got = engine.wait_for_var(&vars[*v]).await;
                match (expect, got) {
                    (None, Ok(())) => {}
                    (Some(roots), Err(e)) => assert!(roots.contains(&root_id(&e)), "{label}: wait {v}: {e}"),
                    (expect, got) => panic!("{label}: wait_for_var({v}): expected {expect:?}, got {got:?}"),
                }
            }
            Step::WaitAll => {
                let got = engine.wait_for_all().await;
                assert_eq!(got.is_err(), model.failed_since_wait_all, "{label}: wait_for_all: {got:?}");
                model.failed_since_wait_all = false;
            }
        }
    }
    for (id, expect, h) in handles {
        let got = h.await;
        check(&expect, &got, &format!("{label}: op{id}"));
    }
    assert_eq!(
        engine.wait_for_all().await.is_err(),
        model.failed_since_wait_all,
        "{label}: final wait_for_all"
    );
    for (i, var) in vars.iter().enumerate() {
        let got = engine.op("final").no_skip(true).read(var).run(|(v,), ()| Ok(*v)).await.unwrap();
        assert_eq!(got, model.vals[i], "{label}: var {i} value");
        assert_eq!(var.version(), model.versions[i], "{label}: var {i} version");
        let err = engine.wait_for_var(var).await.err();
        match (&model.errs[i], err) {
            (None, None) => {}
            (Some(roots), Some(e)) => assert!(roots.contains(&root_id(&e)), "{label}: var {i}: {e}"),
            (expect, got) => panic!("{label}: var {i} error: expected {expect:?}, got {got:?}"),
        }
    }
}

/// The seeds to run: `DEPENGINE_DIFF_SEEDS` of them (16 unless set),
/// from `DEPENGINE_DIFF_SEED_FROM` (0 unless set).
fn seeds() -> std::ops::Range<u64> {
    let env = |name: &str, default| std::env::var(name).ok().and_then(|s| s.parse().ok()).unwrap_or(default);
    let from = env("DEPENGINE_DIFF_SEED_FROM", 0);
    from..from + env("DEPENGINE_DIFF_SEEDS", 16)
}

/// Runs the seeds on engines of `kind` with `workers` per pool; with bulk
/// execution on if `bulk`, at sizes 2, 3, 8 and 16 in turn.
fn run_all(kind: EngineKind, workers: usize, bulk: bool) {
    run_seeds(kind, workers, bulk, seeds());
}

fn run_seeds(kind: EngineKind, workers: usize, bulk: bool, seeds: impl IntoIterator<Item = u64>) {
    run_seeds_placed(kind, workers, bulk, seeds, Placed::default());
}

/// Where ops may run besides their pools: the engine's `pusher_runs_at`
/// (its default if `None`), and whether some ops opt in to running on the
/// pushing thread (`inline_when_idle`).
#[derive(Clone, Copy, Default)]
struct Placed {
    pusher_runs_at: Option<usize>,
    opt_in: bool,
}

fn run_seeds_placed(
    kind: EngineKind,
    workers: usize,
    bulk: bool,
    seeds: impl IntoIterator<Item = u64>,
    placed: Placed,
) {
    quiet_planned_panics();
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let _guard = rt.enter();
    // Under Miri (`.ci/run`), short programs, and a limit for its clock,
    // which runs far slower than time: it checks every access they make.
    let (len, limit) = if cfg!(miri) { (30, 3_600) } else { (300, 60) };
    for seed in seeds {
        let nvars = 4 + (seed as usize % 5) * 6;
        let steps = program(seed, nvars, len, bulk);
        let bulk_size = if bulk { [2, 3, 8, 16][seed as usize % 4] } else { 1 };
        let mut builder = depengine::EngineBuilder::from_env()
            .kind(kind)
            .cpu_workers(workers)
            .priority_workers(workers)
            .bulk_size(bulk_size);
        if let Some(at) = placed.pusher_runs_at {
            builder = builder.pusher_runs_at(at);
        }
        let engine = builder.build().unwrap();
        let label = format!(
            "{kind:?} workers={workers} bulk={bulk_size} pusher_runs_at={:?} opt_in={} seed={seed}",
            placed.pusher_runs_at, placed.opt_in
        );
        rt.block_on(async {
            let program = run_program(engine, &steps, nvars, &label, placed.opt_in);
            tokio::time::timeout(Duration::from_secs(limit), program)
                .await
                .unwrap_or_else(|_| panic!("{label}: timed out"))
        });
    }
}

/// Seeds that once failed: a body that dropped its token ran inside the
/// unwinding of an unrelated panic (a guard dropped while its thread
/// unwound made it ready), and was reported as a panic.
#[test]
fn seeds_that_once_ran_a_body_inside_unwinding() {
    for workers in [1, 2, 4, 8] {
        run_seeds(EngineKind::Threaded, workers, false, [27995]);
    }
    run_seeds(EngineKind::Naive, 1, false, [2539, 7862]);
}

#[test]
fn random_programs_threaded_1_worker() {
    run_all(EngineKind::Threaded, 1, false);
}

#[test]
fn random_programs_threaded_2_workers() {
    run_all(EngineKind::Threaded, 2, false);
}

#[test]
fn random_programs_threaded_4_workers() {
    run_all(EngineKind::Threaded, 4, false);
}

#[test]
fn random_programs_threaded_8_workers() {
    run_all(EngineKind::Threaded, 8, false);
}

/// The pushing thread runs ready ops itself as soon as one of its ops is
/// queued and not taken (ops that opt in: the program runs on a Tokio
/// runtime's thread), and while the pool is idle.
#[test]
fn random_programs_pusher_runs_1_worker() {
    let placed = Placed { pusher_runs_at: Some(1), opt_in: true };
    run_seeds_placed(EngineKind::Threaded, 1, false, seeds(), placed);
}

#[test]
fn random_programs_pusher_runs_2_workers() {
    let placed = Placed { pusher_runs_at: Some(1), opt_in: true };
    run_seeds_placed(EngineKind::Threaded, 2, false, seeds(), placed);
}

/// The same ops, and a pushing thread that never runs its ops.
#[test]
fn random_programs_pusher_never_runs() {
    let placed = Placed { pusher_runs_at: Some(0), opt_in: true };
    run_seeds_placed(EngineKind::Threaded, 2, false, seeds(), placed);
}

#[test]
fn random_programs_naive() {
    run_all(EngineKind::Naive, 1, false);
}

#[test]
fn random_programs_bulk_1_worker() {
    run_all(EngineKind::Threaded, 1, true);
}

#[test]
fn random_programs_bulk_2_workers() {
    run_all(EngineKind::Threaded, 2, true);
}

#[test]
fn random_programs_bulk_4_workers() {
    run_all(EngineKind::Threaded, 4, true);
}

/// The model itself must be able to fail: a program whose ops conflict
/// gives a different result if two writes are swapped.
#[test]
fn model_detects_reordering() {
    let op = |id, w: usize| OpSpec {
        id,
        reads: vec![],
        writes: vec![w],
        extra_reads: vec![],
        body: Body::Sync,
        fail: Fail::No,
        lane: Lane::Normal,
        priority: 0,
        no_skip: false,
    };
    let run = |order: &[usize]| {
        let mut m =
            Model { vals: vec![0], versions: vec![0], errs: vec![None], failed_since_wait_all: false };
        for id in order {
            m.op(&op(*id, 0));
        }
        m.vals[0]
    };
    assert_ne!(run(&[1, 2]), run(&[2, 1]));
}
