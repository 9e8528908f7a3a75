//! Many threads and Tokio tasks pushing at once over shared vars, with
//! waits interleaved: no lost completion, no hang, and every pair of ops
//! ordered the same way on every var they share.

use std::collections::{HashMap, HashSet};
use std::sync::mpsc;
use std::time::Duration;

use depengine::{Engine, OpHandle, Var};

const NVARS: usize = 8;

/// An op's id: (pusher, sequence number within the pusher).
type OpId = (u32, u32);

/// What one op saw of the vars it read: (var, log length).
type Seen = Vec<(usize, usize)>;

struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}

struct Pushed {
    id: OpId,
    reads: Vec<usize>,
    writes: Vec<usize>,
}

/// Pushes one random op that appends its id to the logs it writes and
/// reports the log lengths it reads. Even pushers declare writes in
/// ascending var order, odd ones in descending order.
fn push_one(engine: &Engine, vars: &[Var<Vec<OpId>>], rng: &mut Rng, id: OpId) -> (Pushed, OpHandle<Seen>) {
    let mut writes: Vec<usize> = (0..1 + rng.below(3)).map(|_| rng.below(NVARS)).collect();
    writes.sort_unstable();
    writes.dedup();
    if id.0 % 2 == 1 {
        writes.reverse();
    }
    let mut reads: Vec<usize> =
        (0..rng.below(3)).map(|_| rng.below(NVARS)).filter(|v| !writes.contains(v)).collect();
    reads.sort_unstable();
    reads.dedup();
    let rv: Vec<_> = reads.iter().map(|i| vars[*i].clone()).collect();
    let wv: Vec<_> = writes.iter().map(|i| vars[*i].clone()).collect();
    let read_ids = reads.clone();
    let handle = engine.op("stress").read_all(&rv).write_all(&wv).run(move |(rs,), (mut ws,)| {
        for w in ws.iter_mut() {
            w.push(id);
        }
        Ok(read_ids.iter().zip(rs.iter()).map(|(i, g)| (*i, g.len())).collect())
    });
    (Pushed { id, reads, writes }, handle)
}

fn thread_pusher(engine: Engine, vars: Vec<Var<Vec<OpId>>>, pusher: u32, ops: u32) -> Vec<(Pushed, Seen)> {
    let mut rng = Rng(0x1234_5678 + u64::from(pusher) * 7919);
    let mut pushed = Vec::new();
    for seq in 0..ops {
        pushed.push(push_one(&engine, &vars, &mut rng, (pusher, seq)));
        if seq % 97 == 0 {
            engine.blocking_wait_for_var(&vars[rng.below(NVARS)]).unwrap();
        }
        if seq % 331 == 0 {
            engine.wait_for_all().blocking_wait().unwrap();
        }
    }
    pushed.into_iter().map(|(p, handle)| (p, handle.blocking_wait().unwrap())).collect()
}

async fn task_pusher(
    engine: Engine,
    vars: Vec<Var<Vec<OpId>>>,
    pusher: u32,
    ops: u32,
) -> Vec<(Pushed, Seen)> {
    let mut rng = Rng(0xABCD_EF01 + u64::from(pusher) * 104_729);
    let mut pushed = Vec::new();
    for seq in 0..ops {
        pushed.push(push_one(&engine, &vars, &mut rng, (pusher, seq)));
        if seq % 89 == 0 {
            engine.wait_for_var(&vars[rng.below(NVARS)]).await.unwrap();
        }
        if seq % 257 == 0 {
            engine.wait_for_all().await.unwrap();
        }
        if seq % 16 == 0 {
            tokio::task::yield_now().await;
        }
    }
    let mut out = Vec::new();
    for (p, handle) in pushed {
        out.push((p, handle.await.unwrap()));
    }
    out
}

/// Checks the logs against what every op did and saw.
fn check(logs: &[Vec<OpId>], results: &[(Pushed, Seen)]) {
    // Every write landed exactly once, on exactly the vars declared.
    for (v, log) in logs.iter().enumerate() {
        let expected: HashSet<OpId> =
            results.iter().filter(|(p, _)| p.writes.contains(&v)).map(|(p, _)| p.id).collect();
        let got: HashSet<OpId> = log.iter().copied().collect();
        assert_eq!(got.len(), log.len(), "var {v}: an op wrote twice");
        assert_eq!(got, expected, "var {v}: writers");
    }
    // Ops from one pusher take effect in push order on each var.
    for (v, log) in logs.iter().enumerate() {
        let mut last: HashMap<u32, u32> = HashMap::new();
        for &(pusher, seq) in log {
            if let Some(prev) = last.insert(pusher, seq) {
                assert!(prev < seq, "var {v}: pusher {pusher} ops out of push order");
            }
        }
    }
    // One global order is consistent with every var: the graph of
    // "A before B on some var" edges (writes in log order; a read between
    // the writes it saw and the ones it did not) has no cycle.
    let mut edges: HashMap<OpId, Vec<OpId>> = HashMap::new();
    let mut add = |a: OpId, b: OpId| edges.entry(a).or_default().push(b);
    for log in logs {
        for w in log.windows(2) {
            add(w[0], w[1]);
        }
    }
    for (p, seen) in results {
        assert_eq!(seen.iter().map(|s| s.0).collect::<Vec<_>>(), p.reads, "reads reported");
        for &(v, len) in seen {
            if len > 0 {
                add(logs[v][len - 1], p.id);
            }
            if len < logs[v].len() {
                add(p.id, logs[v][len]);
            }
        }
    }
    let nodes: HashSet<OpId> = results.iter().map(|(p, _)| p.id).collect();
    let mut indegree: HashMap<OpId, usize> = nodes.iter().map(|n| (*n, 0)).collect();
    for targets in edges.values() {
        for t in targets {
            *indegree.get_mut(t).unwrap() += 1;
        }
    }
    let mut ready: Vec<OpId> = indegree.iter().filter(|(_, d)| **d == 0).map(|(n, _)| *n).collect();
    let mut visited = 0;
    while let Some(n) = ready.pop() {
        visited += 1;
        for t in edges.get(&n).into_iter().flatten() {
            let d = indegree.get_mut(t).unwrap();
            *d -= 1;
            if *d == 0 {
                ready.push(*t);
            }
        }
    }
    assert_eq!(visited, nodes.len(), "ops ordered differently on different vars (cycle)");
}

fn run_stress(workers: usize, threads: u32, tasks: u32, ops: u32) {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let engine = depengine::EngineBuilder::from_env()
        .cpu_workers(workers)
        .runtime(rt.handle().clone())
        .build()
        .unwrap();
    let vars: Vec<Var<Vec<OpId>>> = (0..NVARS).map(|_| engine.var(Vec::new())).collect();
    let (tx, rx) = mpsc::channel();
    for pusher in 0..threads {
        let (engine, vars, tx) = (engine.clone(), vars.clone(), tx.clone());
        std::thread::spawn(move || tx.send(thread_pusher(engine, vars, pusher, ops)).unwrap());
    }
    for k in 0..tasks {
        let (engine, vars, tx) = (engine.clone(), vars.clone(), tx.clone());
        rt.spawn(async move { tx.send(task_pusher(engine, vars, threads + k, ops).await).unwrap() });
    }
    let mut results = Vec::new();
    for _ in 0..threads + tasks {
        let batch =
            rx.recv_timeout(Duration::from_secs(120)).expect("pushers hung: lost completion or deadlock");
        results.extend(batch);
    }
    assert_eq!(results.len(), ((threads + tasks) * ops) as usize, "every op completed");
    engine.wait_for_all().blocking_wait().unwrap();
    let logs: Vec<Vec<OpId>> = vars.iter().map(|v| v.read().blocking_wait().unwrap().clone()).collect();
    check(&logs, &results);
    engine.blocking_shutdown(depengine::ShutdownMode::Drain).unwrap();
}

#[test]
fn threads_and_tasks_pushing_at_once_1_worker() {
    run_stress(1, 4, 4, 600);
}

#[test]
fn threads_and_tasks_pushing_at_once_2_workers() {
    run_stress(2, 4, 4, 600);
}

#[test]
fn threads_and_tasks_pushing_at_once_4_workers() {
    run_stress(4, 4, 4, 600);
}

#[test]
fn threads_and_tasks_pushing_at_once_8_workers() {
    run_stress(8, 4, 4, 600);
}

/// Two threads push ops over the same two vars, declared in opposite
/// orders, as fast as they can: the scheme that deadlocks an engine whose
/// push is not atomic.
#[test]
fn opposite_declaration_orders_never_deadlock() {
    let engine = depengine::EngineBuilder::from_env().cpu_workers(2).build().unwrap();
    let x = engine.var(Vec::<u32>::new());
    let y = engine.var(Vec::<u32>::new());
    let (tx, rx) = mpsc::channel();
    for t in 0..2u32 {
        let (engine, x, y, tx) = (engine.clone(), x.clone(), y.clone(), tx.clone());
        std::thread::spawn(move || {
            let (first, second) = if t == 0 { (&x, &y) } else { (&y, &x) };
            let mut last = None;
            for i in 0..5000 {
                let id = t * 1_000_000 + i;
                last = Some(engine.op("xy").write(first).write(second).run(move |(), (mut a, mut b)| {
                    a.push(id);
                    b.push(id);
                    Ok(())
                }));
            }
            tx.send(last.unwrap().blocking_wait()).unwrap();
        });
    }
    for _ in 0..2 {
        rx.recv_timeout(Duration::from_secs(60)).expect("deadlock").unwrap();
    }
    engine.wait_for_all().blocking_wait().unwrap();
    let (xs, ys) = (x.read().blocking_wait().unwrap().clone(), y.read().blocking_wait().unwrap().clone());
    assert_eq!(xs.len(), 10_000);
    assert_eq!(xs, ys, "both vars saw the ops in the same order");
}

/// The checker must be able to fail: swapped writes on one var only.
#[test]
fn checker_detects_inconsistent_order() {
    let result = std::panic::catch_unwind(|| {
        let pushed = |id: OpId| Pushed { id, reads: vec![], writes: vec![0, 1] };
        let results = vec![(pushed((0, 0)), vec![]), (pushed((1, 0)), vec![])];
        check(&[vec![(0, 0), (1, 0)], vec![(1, 0), (0, 0)]], &results);
    });
    assert!(result.is_err());
}

/// A value that counts its drops.
struct Counted(std::sync::Arc<std::sync::atomic::AtomicUsize>);

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }
}

/// Sixteen threads push ops over shared vars while the engine is shut down
/// in the middle (draining or cancelling): every push is refused or its
/// handle resolves (run, or cancelled), every body is dropped exactly once,
/// the ops that ran are exactly those whose writes are counted, and
/// nothing hangs.
#[test]
fn a_storm_of_pushes_with_a_shutdown_in_the_middle() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
    for round in 0..12u64 {
        let mode =
            if round % 2 == 0 { depengine::ShutdownMode::Drain } else { depengine::ShutdownMode::Cancel };
        let engine =
            depengine::EngineBuilder::from_env().cpu_workers(1 + round as usize % 4).build().unwrap();
        let vars: Vec<Var<u64>> = (0..NVARS).map(|_| engine.var(0)).collect();
        let writes: Arc<Vec<AtomicU64>> = Arc::new((0..NVARS).map(|_| AtomicU64::new(0)).collect());
        let dropped = Arc::new(AtomicUsize::new(0));
        let (tx, rx) = mpsc::channel();
        let pushers: Vec<_> = (0..16u64)
            .map(|t| {
                let (engine, vars, writes, dropped) =
                    (engine.clone(), vars.clone(), writes.clone(), dropped.clone());
                let tx = tx.clone();
                std::thread::spawn(move || {
                    let mut rng = Rng(round * 100 + t + 1);
                    let (mut handles, mut refused, mut ops) = (Vec::new(), 0u64, Vec::new());
                    for _ in 0..150 {
                        let mut mine: Vec<usize> = (0..1 + rng.below(3)).map(|_| rng.below(NVARS)).collect();
                        mine.sort_unstable();
                        mine.dedup();
                        let picked: Vec<Var<u64>> = mine.iter().map(|&k| vars[k].clone()).collect();
                        let (counted, writes, ids) = (Counted(dropped.clone()), writes.clone(), mine.clone());
                        // How often the body ran: once, or never if cancelled.
                        let runs = Arc::new(AtomicUsize::new(0));
                        let body_runs = runs.clone();
                        // Some ops are aborted at once, some dropped with a
                        // handle that cancels them, racing the workers.
                        let action = rng.below(8);
                        let pushed = engine
                            .op("storm")
                            .write_all(&picked)
                            .cancel_on_drop(action == 2)
                            .run(move |(), (mut vs,)| {
                                let _keep = &counted;
                                body_runs.fetch_add(1, Ordering::SeqCst);
                                for (v, &k) in vs.iter_mut().zip(&ids) {
                                    **v += 1;
                                    writes[k].fetch_add(1, Ordering::SeqCst);
                                }
                                Ok(())
                            })
                            .pushed();
                        match pushed {
                            Ok(handle) => {
                                ops.push((runs, mine.len() as u64));
                                match action {
                                    0 | 1 => {
                                        let aborted = handle.abort();
                                        handles.push((handle, aborted));
                                    }
                                    2 => drop(handle),
                                    _ => handles.push((handle, false)),
                                }
                            }
                            Err(err) => {
                                assert!(err.is_shutdown(), "{err}");
                                refused += 1;
                            }
                        }
                    }
                    for (handle, aborted) in handles {
                        match handle.blocking_wait() {
                            Ok(()) => assert!(!aborted, "an aborted op ran"),
                            Err(err) => assert!(
                                err.is_cancelled() && (aborted || mode == depengine::ShutdownMode::Cancel),
                                "{err}"
                            ),
                        }
                    }
                    tx.send(()).unwrap();
                    (ops, refused)
                })
            })
            .collect();
        std::thread::sleep(Duration::from_micros(200 * (round % 5)));
        let shut = engine.clone();
        let shutdown = std::thread::spawn(move || shut.blocking_shutdown(mode));
        for _ in 0..16 {
            rx.recv_timeout(Duration::from_secs(30)).expect("a pusher hung");
        }
        let results: Vec<_> = pushers.into_iter().map(|p| p.join().unwrap()).collect();
        // A cancelling shutdown reports its cancellations as the first failure.
        if let Err(err) = shutdown.join().unwrap() {
            assert!(err.is_cancelled() && mode == depengine::ShutdownMode::Cancel, "{err}");
        }
        drop(vars);
        let mut ran = 0;
        for (runs, n) in results.iter().flat_map(|(ops, _)| ops) {
            let runs = runs.load(Ordering::SeqCst);
            assert!(runs <= 1, "round {round}: a body ran {runs} times");
            ran += n * runs as u64;
        }
        assert_eq!(writes.iter().map(|w| w.load(Ordering::SeqCst)).sum::<u64>(), ran, "round {round}");
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while dropped.load(Ordering::SeqCst) < 16 * 150 {
            assert!(
                std::time::Instant::now() < deadline,
                "round {round}: {} bodies dropped",
                dropped.load(Ordering::SeqCst)
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(dropped.load(Ordering::SeqCst), 16 * 150, "round {round}: a body was dropped twice");
    }
}
