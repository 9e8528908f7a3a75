//! The benchmark workloads of docs/benchmarks.md, on the engine and sequentially.
//!
//! ```text
//! cargo run --release --example workloads -- [WORKLOAD] [N] [P] [SPIN] [REPS]
//! ```
//!
//! `WORKLOAD` is one of `w1_indep`, `w1_novars`, `w2_chain`, `w3_fan`,
//! `w4_dag`, `w5_stencil`, or `all` (the default: every workload at its
//! default parameters, `w4_dag` with SPIN 300 and 3000, the `w5_stencil`
//! METG sweep, `roundtrip` and `linetrip`). Two more measurements are not workloads of docs/benchmarks.md:
//! `roundtrip [N]` (push → blocking wait of one op on an idle engine, N
//! times: median and p99) and `memory [N]` (N ops queued behind one held
//! write: resident memory growth per op; run it alone, in its own process),
//! and `linetrip [N]` (the time to hand a cache line from one core to the
//! other, the hardware's floor for any cross-core hand-off). `-` keeps a parameter's default. `--naive` (or
//! `DEPENGINE_TYPE=naive`) runs the naive engine, which runs each op inside
//! its push; other `DEPENGINE_*` variables configure the engine as README
//! says. Ops are pushed detached (`run_detached`: no handle, as MXNet's
//! `PushSync` and OpenMP's tasks have none); `--handles` pushes them with
//! `run` and drops each handle at once instead (`peer=depengine-handles`).
//!
//! Each run prints one line per timed rep:
//!
//! ```text
//! peer=depengine workload=w2_chain ops=100000 n=100000 p=1 spin=0 rep=0 secs=0.000999 ns_per_op=9.99 seq_secs=0.000421 check=6bf0ad6a71b1e4d3 ok=1
//! ```
//!
//! then a `summary` line with the median (`WORKLOADS_PUSH_TIME=1` also
//! prints, on stderr, how long the pushes alone took). `secs` runs from the first push to
//! the end of `wait_for_all`; the op list is built and the vars are created
//! before the clock starts. `seq_secs` is the best of 3 sequential runs of
//! the same op list in this process, before the engine runs; `ok=1` means the
//! hash of the final var values equals the sequential one.

use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::time::Instant;

use depengine::engine::EngineKind;
use depengine::{Engine, Var};

/// Var index meaning "none".
const NONE: u32 = u32::MAX;
/// An operand that is the written var.
const FROM_WRITE: u8 = u8::MAX;

fn mix(a: u64, b: u64) -> u64 {
    let mut z = a ^ b.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// One op of a workload: normalised reads (without the write), at most one
/// write, and the operands its body hashes, in order.
#[derive(Clone, Copy, Debug)]
struct Op {
    arg: u64,
    nreads: u8,
    reads: [u32; 3],
    write: u32,
    nopnd: u8,
    opnd: [u32; 3],
    spin: u32,
}

impl Op {
    fn new(arg: u64, reads: &[u32], write: Option<u32>, opnd: &[u32], spin: u32) -> Self {
        let write = write.unwrap_or(NONE);
        let mut norm = [NONE; 3];
        let mut nreads = 0;
        for &r in reads {
            if r != write && !norm[..nreads].contains(&r) {
                norm[nreads] = r;
                nreads += 1;
            }
        }
        let mut ops = [NONE; 3];
        ops[..opnd.len()].copy_from_slice(opnd);
        Self { arg, nreads: nreads as u8, reads: norm, write, nopnd: opnd.len() as u8, opnd: ops, spin }
    }

    /// Where each operand's value comes from: a read (its index) or the write.
    fn sources(&self) -> [u8; 3] {
        let mut src = [0; 3];
        for (s, &v) in src.iter_mut().zip(&self.opnd[..usize::from(self.nopnd)]) {
            *s = if v == self.write {
                FROM_WRITE
            } else {
                self.reads.iter().position(|&r| r == v).expect("operand is declared") as u8
            };
        }
        src
    }
}

/// The body of an op with a write, on the values of its accesses.
#[inline(always)]
fn body(arg: u64, src: [u8; 3], nopnd: u8, reads: [u64; 3], write: u64, spin: u32) -> u64 {
    let mut x = arg;
    for &s in &src[..usize::from(nopnd)] {
        x = mix(x, if s == FROM_WRITE { write } else { reads[usize::from(s)] });
    }
    for k in 0..spin {
        x = mix(x, u64::from(k));
    }
    x
}

struct Workload {
    name: &'static str,
    n: usize,
    p: usize,
    spin: u32,
    nvars: usize,
    ops: Vec<Op>,
}

fn build(name: &str, n: Option<usize>, p: Option<usize>, spin: Option<u32>) -> Result<Workload, String> {
    let (name, n, p, spin) = match name {
        "w1_indep" => ("w1_indep", n.unwrap_or(200_000), p.unwrap_or(1024), spin.unwrap_or(0)),
        "w1_novars" => ("w1_novars", n.unwrap_or(200_000), p.unwrap_or(0), spin.unwrap_or(0)),
        "w2_chain" => ("w2_chain", n.unwrap_or(100_000), p.unwrap_or(1), spin.unwrap_or(0)),
        "w3_fan" => ("w3_fan", n.unwrap_or(2000), p.unwrap_or(64), spin.unwrap_or(0)),
        "w4_dag" => ("w4_dag", n.unwrap_or(50_000), p.unwrap_or(64), spin.unwrap_or(300)),
        "w5_stencil" => ("w5_stencil", n.unwrap_or(1000), p.unwrap_or(4), spin.unwrap_or(0)),
        other => return Err(format!("unknown workload `{other}`")),
    };
    let mut ops = Vec::new();
    let nvars = match name {
        "w1_indep" | "w2_chain" => {
            if p == 0 {
                return Err(format!("{name} needs P >= 1"));
            }
            for i in 0..n {
                let v = (i % p) as u32;
                ops.push(Op::new(i as u64, &[], Some(v), &[v], spin));
            }
            p
        }
        "w1_novars" => {
            ops.extend((0..n).map(|i| Op::new(i as u64, &[], None, &[], 0)));
            0
        }
        "w3_fan" => {
            for r in 0..n {
                ops.push(Op::new(r as u64, &[], Some(0), &[0], spin));
                for j in 0..p {
                    let pj = 1 + j as u32;
                    ops.push(Op::new((r * p + j) as u64, &[0], Some(pj), &[0, pj], spin));
                }
            }
            1 + p
        }
        "w4_dag" => {
            if p == 0 {
                return Err("w4_dag needs P >= 1".into());
            }
            let mut state: u64 = 42;
            let mut next = || {
                state = state.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
                (state >> 33) as u32
            };
            for i in 0..n {
                let a = next() % p as u32;
                let b = next() % p as u32;
                let w = next() % p as u32;
                ops.push(Op::new(i as u64, &[a, b], Some(w), &[a, b], spin));
            }
            p
        }
        "w5_stencil" => {
            if p == 0 {
                return Err("w5_stencil needs P >= 1".into());
            }
            let w = p;
            for t in 0..n {
                for c in 0..w {
                    let write = ((t % 2) * w + c) as u32;
                    let mut reads = Vec::new();
                    if t > 0 {
                        let base = ((t - 1) % 2) * w;
                        for cc in c.saturating_sub(1)..=(c + 1).min(w - 1) {
                            reads.push((base + cc) as u32);
                        }
                    }
                    ops.push(Op::new((t * w + c) as u64, &reads, Some(write), &reads, spin));
                }
            }
            2 * w
        }
        _ => unreachable!(),
    };
    Ok(Workload { name, n, p, spin, nvars, ops })
}

/// The flags the no-var workload's bodies set: allocated once, reset per rep.
fn done_flags(n: usize) -> &'static [AtomicU8] {
    Box::leak((0..n).map(|_| AtomicU8::new(0)).collect())
}

fn hash_values(values: impl IntoIterator<Item = u64>) -> u64 {
    values.into_iter().fold(0, mix)
}

/// Runs the op list in order on this thread; returns (secs, check).
fn run_sequential(w: &Workload, done: &[AtomicU8]) -> (f64, u64) {
    let mut val: Vec<u64> = (0..w.nvars as u64).collect();
    done.iter().for_each(|d| d.store(0, Ordering::Relaxed));
    let start = Instant::now();
    for op in &w.ops {
        if op.write == NONE {
            done[op.arg as usize].store(1, Ordering::Relaxed);
            continue;
        }
        let mut reads = [0; 3];
        for (r, &v) in reads.iter_mut().zip(&op.reads[..usize::from(op.nreads)]) {
            *r = val[v as usize];
        }
        let wv = op.write as usize;
        val[wv] = body(op.arg, op.sources(), op.nopnd, reads, val[wv], op.spin);
    }
    let secs = start.elapsed().as_secs_f64();
    std::hint::black_box(&val);
    (secs, check(w, &val, done))
}

fn check(w: &Workload, val: &[u64], done: &[AtomicU8]) -> u64 {
    if w.nvars == 0 {
        done.iter().filter(|d| d.load(Ordering::Relaxed) == 1).count() as u64
    } else {
        hash_values(val.iter().copied())
    }
}

/// Whether ops are pushed with a handle (dropped at once) instead of detached.
static HANDLES: AtomicBool = AtomicBool::new(false);

/// Pushes one op on the engine: detached (`run_detached`), or with `run`
/// and its handle dropped at once (`--handles`); either way `wait_for_all`
/// covers it.
fn push(
    engine: &Engine,
    vars: &[Var<u64>],
    op: &Op,
    done: &'static [AtomicU8],
) -> Result<(), depengine::Error> {
    macro_rules! submit {
        ($builder:expr, $body:expr) => {
            if HANDLES.load(Ordering::Relaxed) {
                drop($builder.run($body).pushed()?);
                Ok(())
            } else {
                $builder.run_detached($body)
            }
        };
    }
    let (arg, nopnd, spin, src) = (op.arg, op.nopnd, op.spin, op.sources());
    if op.write == NONE {
        assert_eq!(op.nreads, 0, "ops that read without writing are not part of docs/benchmarks.md");
        return submit!(engine.op("noop"), move |(), ()| {
            done[arg as usize].store(1, Ordering::Relaxed);
            Ok(())
        });
    }
    let w = &vars[op.write as usize];
    let r = |k: usize| &vars[op.reads[k] as usize];
    match op.nreads {
        0 => submit!(engine.op("op").write(w), move |(), (mut w,)| {
            *w = body(arg, src, nopnd, [0; 3], *w, spin);
            Ok(())
        }),
        1 => submit!(engine.op("op").read(r(0)).write(w), move |(a,), (mut w,)| {
            *w = body(arg, src, nopnd, [*a, 0, 0], *w, spin);
            Ok(())
        }),
        2 => submit!(engine.op("op").read(r(0)).read(r(1)).write(w), move |(a, b), (mut w,)| {
            *w = body(arg, src, nopnd, [*a, *b, 0], *w, spin);
            Ok(())
        }),
        _ => {
            submit!(engine.op("op").read(r(0)).read(r(1)).read(r(2)).write(w), move |(a, b, c), (mut w,)| {
                *w = body(arg, src, nopnd, [*a, *b, *c], *w, spin);
                Ok(())
            })
        }
    }
}

/// Runs the op list on the engine; returns (secs, check).
fn run_engine(
    engine: &Engine,
    w: &Workload,
    done: &'static [AtomicU8],
) -> Result<(f64, u64), depengine::Error> {
    let vars: Vec<Var<u64>> = (0..w.nvars as u64).map(|v| engine.var(v)).collect();
    done.iter().for_each(|d| d.store(0, Ordering::Relaxed));
    let start = Instant::now();
    for op in &w.ops {
        push(engine, &vars, op, done)?;
    }
    let pushed = start.elapsed().as_secs_f64();
    engine.wait_for_all().blocking_wait()?;
    let secs = start.elapsed().as_secs_f64();
    if std::env::var_os("WORKLOADS_PUSH_TIME").is_some() {
        eprintln!("push {:.1} ns/op", pushed * 1e9 / w.ops.len() as f64);
    }
    let val: Vec<u64> =
        vars.iter().map(|v| futures::executor::block_on(v.read()).map(|g| *g)).collect::<Result<_, _>>()?;
    Ok((secs, check(w, &val, done)))
}

fn median(xs: &[f64]) -> f64 {
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    let m = v.len() / 2;
    if v.len() % 2 == 1 { v[m] } else { (v[m - 1] + v[m]) / 2.0 }
}

struct Outcome {
    secs: f64,
    seq_secs: f64,
    ok: bool,
}

/// One workload: sequential reference, warm-up, `reps` timed reps.
fn measure(engine: &Engine, peer: &str, w: &Workload, reps: usize) -> Result<Outcome, depengine::Error> {
    let done = done_flags(if w.nvars == 0 { w.n } else { 0 });
    let mut seq_secs = f64::INFINITY;
    let mut seq_check = 0;
    for _ in 0..3 {
        let (secs, c) = run_sequential(w, done);
        seq_secs = seq_secs.min(secs);
        seq_check = c;
    }
    run_engine(engine, w, done)?; // warm-up
    let mut all_ok = true;
    let mut times = Vec::with_capacity(reps);
    for rep in 0..reps {
        let (secs, c) = run_engine(engine, w, done)?;
        let ok = c == seq_check;
        all_ok &= ok;
        times.push(secs);
        println!(
            "peer={peer} workload={} ops={} n={} p={} spin={} rep={rep} secs={secs:.6} ns_per_op={:.2} seq_secs={seq_secs:.6} check={c:x} ok={}",
            w.name,
            w.ops.len(),
            w.n,
            w.p,
            w.spin,
            secs * 1e9 / w.ops.len() as f64,
            u8::from(ok),
        );
    }
    let secs = median(&times);
    Ok(Outcome { secs, seq_secs, ok: all_ok })
}

fn summary(peer: &str, w: &Workload, o: &Outcome) {
    let ops = w.ops.len() as f64;
    println!(
        "summary peer={peer} workload={} spin={} median_ns_per_op={:.1} seq_ns_per_op={:.1} speedup_vs_seq={:.2} ok={}",
        w.name,
        w.spin,
        o.secs * 1e9 / ops,
        o.seq_secs * 1e9 / ops,
        o.seq_secs / o.secs,
        u8::from(o.ok),
    );
}

/// The W5 sweep: one measurement per SPIN = 2^k, then METG(50%).
fn metg_sweep(
    engine: &Engine,
    peer: &str,
    n: Option<usize>,
    p: Option<usize>,
    reps: usize,
) -> Result<bool, String> {
    let cores = std::thread::available_parallelism().map_or(1, usize::from) as f64;
    let mut points = Vec::new(); // (granularity µs, efficiency)
    let mut all_ok = true;
    for k in 0..=14 {
        let w = build("w5_stencil", n, p, Some(1 << k))?;
        let o = measure(engine, peer, &w, reps).map_err(|e| e.to_string())?;
        all_ok &= o.ok;
        let ops = w.ops.len() as f64;
        let gran_us = o.secs * cores / ops * 1e6;
        let eff = o.seq_secs / (o.secs * cores);
        println!(
            "summary peer={peer} workload=w5_stencil spin={} median_ns_per_op={:.1} granularity_us={gran_us:.3} efficiency={eff:.3} ok={}",
            w.spin,
            o.secs * 1e9 / ops,
            u8::from(o.ok)
        );
        points.push((gran_us, eff));
    }
    println!("summary peer={peer} workload=w5_stencil {}", metg(&points));
    Ok(all_ok)
}

/// METG(50%) from sweep points in order of increasing SPIN.
fn metg(points: &[(f64, f64)]) -> String {
    // From the largest task size down: the last point at >= 50% before the
    // first one below it.
    let mut last_ok: Option<(f64, f64)> = None;
    for &(g, e) in points.iter().rev() {
        if e >= 0.5 {
            last_ok = Some((g, e));
            continue;
        }
        return match last_ok {
            None => "metg50_us=never".into(),
            Some((g1, e1)) => {
                let t = (0.5 - e) / (e1 - e);
                let lg = g.ln() + t * (g1.ln() - g.ln());
                format!("metg50_us={:.3}", lg.exp())
            }
        };
    }
    match last_ok {
        Some((g, _)) => format!("metg50_us<={g:.3}"),
        None => "metg50_us=never".into(),
    }
}

/// Push → await of one op on an idle engine, `n` times (blocking waits from
/// this thread): median and 99th percentile.
fn round_trip(engine: &Engine, peer: &str, n: usize) -> Result<(), String> {
    let v = engine.var(0u64);
    let one = || {
        engine.op("one").write(&v).run(|(), (mut v,)| {
            *v += 1;
            Ok(())
        })
    };
    for _ in 0..n / 10 {
        one().blocking_wait().map_err(|e| e.to_string())?;
    }
    let mut lat = Vec::with_capacity(n);
    for _ in 0..n {
        let start = Instant::now();
        one().blocking_wait().map_err(|e| e.to_string())?;
        lat.push(start.elapsed().as_secs_f64() * 1e9);
    }
    lat.sort_by(f64::total_cmp);
    println!(
        "summary peer={peer} workload=roundtrip n={n} median_ns={:.0} p99_ns={:.0}",
        median(&lat),
        lat[lat.len() * 99 / 100]
    );
    Ok(())
}

/// Resident memory of this process, from `/proc/self/statm` (Linux).
fn rss_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * 4096)
}

/// Memory per pending op: `n` ops queued behind one held write, RSS growth.
fn memory(engine: &Engine, peer: &str, n: usize) -> Result<(), String> {
    let v = engine.var(0u64);
    let held = futures::executor::block_on(v.write()).map_err(|e| e.to_string())?;
    let before = rss_bytes().ok_or("cannot read /proc/self/statm")?;
    let start = Instant::now();
    for i in 0..n as u64 {
        drop(engine.op("queued").write(&v).run(move |(), (mut w,)| {
            *w = mix(i, *w);
            Ok(())
        }));
    }
    let pushed = start.elapsed();
    let after = rss_bytes().ok_or("cannot read /proc/self/statm")?;
    drop(held);
    engine.wait_for_all().blocking_wait().map_err(|e| e.to_string())?;
    println!(
        "summary peer={peer} workload=memory n={n} rss_growth_bytes={} bytes_per_pending_op={:.1} push_ns_per_op={:.1}",
        after.saturating_sub(before),
        after.saturating_sub(before) as f64 / n as f64,
        pushed.as_secs_f64() * 1e9 / n as f64
    );
    Ok(())
}

/// The hardware's floor for handing anything from one core to another: two
/// threads take turns writing one cache line, `n` times each; the median
/// over 5 reps of the time per hand-off (one way). A dependent op crosses
/// cores at least once, and its record, queue slot and counters several
/// times: this puts the per-op figures above in units of the machine.
fn line_trip(peer: &str, n: u64) {
    let n = n.max(1);
    #[repr(align(128))]
    struct Line(std::sync::atomic::AtomicU64);
    let samples: Vec<f64> = (0..5)
        .map(|_| {
            let line = std::sync::Arc::new(Line(Default::default()));
            let other = {
                let line = line.clone();
                std::thread::spawn(move || {
                    for i in 0..n {
                        while line.0.load(Ordering::Acquire) != 2 * i + 1 {
                            std::hint::spin_loop();
                        }
                        line.0.store(2 * i + 2, Ordering::Release);
                    }
                })
            };
            let start = Instant::now();
            for i in 0..n {
                line.0.store(2 * i + 1, Ordering::Release);
                while line.0.load(Ordering::Acquire) != 2 * i + 2 {
                    std::hint::spin_loop();
                }
            }
            let secs = start.elapsed().as_secs_f64();
            other.join().expect("the other thread does not panic");
            secs * 1e9 / (2 * n) as f64
        })
        .collect();
    println!("summary peer={peer} workload=linetrip n={n} median_one_way_ns={:.1}", median(&samples));
}

fn parse<T: std::str::FromStr>(arg: Option<&String>, what: &str) -> Result<Option<T>, String> {
    match arg.map(String::as_str) {
        None | Some("-") => Ok(None),
        Some(s) => s.parse().map(Some).map_err(|_| format!("invalid {what}: `{s}`")),
    }
}

fn main() {
    if let Err(e) = run() {
        eprintln!("workloads: {e}");
        std::process::exit(2);
    }
}

fn run() -> Result<(), String> {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let naive = if let Some(i) = args.iter().position(|a| a == "--naive") {
        args.remove(i);
        true
    } else {
        false
    };
    if let Some(i) = args.iter().position(|a| a == "--handles") {
        args.remove(i);
        HANDLES.store(true, Ordering::Relaxed);
    }
    let mut builder = depengine::EngineBuilder::from_env();
    if naive {
        builder = builder.kind(EngineKind::Naive);
    }
    let engine = builder.build().map_err(|e| e.to_string())?;
    let peer = match (engine.settings().kind, HANDLES.load(Ordering::Relaxed)) {
        (EngineKind::Naive, false) => "depengine-naive",
        (EngineKind::Naive, true) => "depengine-naive-handles",
        (_, false) => "depengine",
        (_, true) => "depengine-handles",
    };
    let which = args.first().map_or("all", String::as_str);
    let n = parse(args.get(1), "N")?;
    let p = parse(args.get(2), "P")?;
    let spin = parse(args.get(3), "SPIN")?;
    let reps = parse(args.get(4), "REPS")?.unwrap_or(5);
    if reps == 0 {
        return Err("REPS must be at least 1".into());
    }
    let one = |name: &str, spin: Option<u32>| -> Result<bool, String> {
        let w = build(name, n, p, spin)?;
        let o = measure(&engine, peer, &w, reps).map_err(|e| e.to_string())?;
        summary(peer, &w, &o);
        Ok(o.ok)
    };
    let all_ok = match which {
        "all" => {
            let mut ok = true;
            for name in ["w1_indep", "w1_novars", "w2_chain", "w3_fan"] {
                ok &= one(name, None)?;
            }
            ok &= one("w4_dag", Some(300))?;
            ok &= one("w4_dag", Some(3000))?;
            ok &= metg_sweep(&engine, peer, None, None, reps)?;
            round_trip(&engine, peer, 20_000)?;
            line_trip(peer, 200_000);
            ok
        }
        "w5_stencil" if spin.is_none() => metg_sweep(&engine, peer, n, p, reps)?,
        "roundtrip" => {
            round_trip(&engine, peer, n.unwrap_or(20_000))?;
            true
        }
        "memory" => {
            memory(&engine, peer, n.unwrap_or(1_000_000))?;
            true
        }
        "linetrip" => {
            line_trip(peer, n.unwrap_or(200_000) as u64);
            true
        }
        name => one(name, spin)?,
    };
    if !all_ok {
        return Err("a check did not match the sequential result".into());
    }
    Ok(())
}
