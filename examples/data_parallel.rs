//! Data-parallel training of a small multi-layer perceptron: every rank
//! of an MPI world trains the same model on its share of each batch, and
//! the gradients are summed across ranks by all-reduces pushed as engine
//! ops (feature `mpi`).
//!
//! ```sh
//! cargo build --release --features mpi --example data_parallel
//! target/release/examples/data_parallel                      # a world of one
//! mpirun -np 2 target/release/examples/data_parallel         # (tests/mpi/run.sh has the environment)
//! mpirun -np 4 target/release/examples/data_parallel --comm-after-backward
//! mpirun -np 2 target/release/examples/data_parallel --profile /tmp   # each rank's last step, traced
//! ```
//!
//! Each step pushes, as ops: the batch's share of this rank, the forward
//! pass layer by layer, the loss, then the backward pass from the last
//! layer to the first, with each layer's all-reduce pushed as soon as
//! that layer's backward is, so that it overlaps the backward of the
//! layers below; then the updates, the first layers' first (priority), as
//! the next step's forward needs them first. `--comm-after-backward`
//! instead waits for the whole backward before pushing any all-reduce.
//!
//! It prints the loss per epoch, the time per step, and how much of the
//! collectives' time overlapped compute (from the engine's profile), and
//! exits non-zero unless the final weights are the same, bit for bit, on
//! every rank, and equal, within 1e-9 relative, to one process training
//! on the whole batch without the engine (the sums are taken in another
//! order).

#[path = "shared/overlap.rs"]
mod overlap;

use std::time::Instant;

use depengine::mpi::{Collectives, Reduce};
use depengine::{Engine, Var};

/// Layer widths: input, two hidden layers, output.
const WIDTHS: [usize; 4] = [32, 64, 64, 1];
const LAYERS: usize = WIDTHS.len() - 1;
/// Samples in a batch, over all ranks.
const BATCH: usize = 64;
const STEPS_PER_EPOCH: usize = 50;
const EPOCHS: usize = 6;
const RATE: f64 = 0.05;

/// A deterministic stream of numbers in [-1, 1).
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> f64 {
        self.0 = self.0.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        ((self.0 >> 11) as f64 / (1u64 << 53) as f64) * 2.0 - 1.0
    }
}

/// Batch `step`'s rows `rows` (inputs, targets): a smooth function of the
/// inputs to learn.
fn batch(step: usize, rows: std::ops::Range<usize>) -> (Vec<f64>, Vec<f64>) {
    let mut rng = Lcg(step as u64 * 7919 + 1);
    let (mut xs, mut ys) = (Vec::new(), Vec::new());
    for row in 0..BATCH {
        let x: Vec<f64> = (0..WIDTHS[0]).map(|_| rng.next()).collect();
        if rows.contains(&row) {
            let y = (x[0] * 2.0).sin() + x[1] * x[2] - 0.5 * x[3];
            xs.extend(x);
            ys.push(y);
        }
    }
    (xs, ys)
}

/// The initial parameters of layer `l`: weights (out × in, row-major),
/// then biases.
fn initial(l: usize) -> Vec<f64> {
    let (inp, out) = (WIDTHS[l], WIDTHS[l + 1]);
    let mut rng = Lcg(100 + l as u64);
    let scale = 1.0 / (inp as f64).sqrt();
    (0..out * inp + out).map(|k| if k < out * inp { rng.next() * scale } else { 0.0 }).collect()
}

/// `a` (n × in) times layer `l`'s weights, plus its biases; `tanh` but
/// for the last layer.
fn forward(l: usize, params: &[f64], a: &[f64]) -> Vec<f64> {
    let (inp, out) = (WIDTHS[l], WIDTHS[l + 1]);
    let n = a.len() / inp;
    let mut z = vec![0.0; n * out];
    for r in 0..n {
        for o in 0..out {
            let w = &params[o * inp..(o + 1) * inp];
            let s: f64 = w.iter().zip(&a[r * inp..(r + 1) * inp]).map(|(w, x)| w * x).sum();
            let v = s + params[out * inp + o];
            z[r * out + o] = if l + 1 < LAYERS { v.tanh() } else { v };
        }
    }
    z
}

/// The output layer's error, divided by the whole batch (so that summing
/// the ranks' gradients gives the batch's mean), and the squared error.
fn output_delta(y_hat: &[f64], y: &[f64]) -> (Vec<f64>, f64) {
    let delta = y_hat.iter().zip(y).map(|(p, t)| (p - t) / BATCH as f64).collect();
    let loss = y_hat.iter().zip(y).map(|(p, t)| (p - t) * (p - t)).sum::<f64>() / (2.0 * BATCH as f64);
    (delta, loss)
}

/// Layer `l`'s gradient (weights, then biases) from its error `delta`
/// (n × out) and its input `a` (n × in); and the error of its input
/// (through `tanh`), unless `l` is the first layer.
fn backward(l: usize, params: &[f64], delta: &[f64], a: &[f64]) -> (Vec<f64>, Option<Vec<f64>>) {
    let (inp, out) = (WIDTHS[l], WIDTHS[l + 1]);
    let n = delta.len() / out;
    let mut grad = vec![0.0; out * inp + out];
    for r in 0..n {
        for o in 0..out {
            let d = delta[r * out + o];
            for i in 0..inp {
                grad[o * inp + i] += d * a[r * inp + i];
            }
            grad[out * inp + o] += d;
        }
    }
    let below = (l > 0).then(|| {
        let mut e = vec![0.0; n * inp];
        for r in 0..n {
            for i in 0..inp {
                let s: f64 = (0..out).map(|o| delta[r * out + o] * params[o * inp + i]).sum();
                let x = a[r * inp + i];
                e[r * inp + i] = s * (1.0 - x * x);
            }
        }
        e
    });
    (grad, below)
}

fn update(params: &mut [f64], grad: &[f64]) {
    params.iter_mut().zip(grad).for_each(|(p, g)| *p -= RATE * g);
}

/// One process, the whole batch, no engine: the reference.
fn reference() -> Vec<Vec<f64>> {
    let mut params: Vec<Vec<f64>> = (0..LAYERS).map(initial).collect();
    for step in 0..EPOCHS * STEPS_PER_EPOCH {
        let (x, y) = batch(step, 0..BATCH);
        let mut acts = vec![x];
        for (l, p) in params.iter().enumerate() {
            acts.push(forward(l, p, &acts[l]));
        }
        let (mut delta, _) = output_delta(&acts[LAYERS], &y);
        let mut grads = vec![Vec::new(); LAYERS];
        for l in (0..LAYERS).rev() {
            let (g, below) = backward(l, &params[l], &delta, &acts[l]);
            grads[l] = g;
            if let Some(below) = below {
                delta = below;
            }
        }
        params.iter_mut().zip(&grads).for_each(|(p, g)| update(p, g));
    }
    params
}

struct Model {
    params: Vec<Var<Vec<f64>>>,
    grads: Vec<Var<Vec<f64>>>,
    /// Activations: the input, then each layer's output.
    acts: Vec<Var<Vec<f64>>>,
    /// The error of each layer's output.
    deltas: Vec<Var<Vec<f64>>>,
    targets: Var<Vec<f64>>,
    loss: Var<Vec<f64>>,
}

/// Pushes one step's ops; the loss of this rank's share lands in
/// `model.loss`.
fn push_step(engine: &Engine, mpi: &Collectives, m: &Model, step: usize, comm_after_backward: bool) {
    let share = BATCH / mpi.size();
    let rows = mpi.rank() * share..(mpi.rank() + 1) * share;
    engine
        .op("batch")
        .write(&m.acts[0])
        .write(&m.targets)
        .run_detached(move |(), (mut x, mut y)| {
            (*x, *y) = batch(step, rows);
            Ok(())
        })
        .expect("push");
    for l in 0..LAYERS {
        engine
            .op(format!("forward {l}"))
            .read(&m.params[l])
            .read(&m.acts[l])
            .write(&m.acts[l + 1])
            .run_detached(move |(p, a), (mut z,)| {
                *z = forward(l, &p, &a);
                Ok(())
            })
            .expect("push");
    }
    engine
        .op("loss")
        .read(&m.acts[LAYERS])
        .read(&m.targets)
        .write(&m.deltas[LAYERS - 1])
        .write(&m.loss)
        .run_detached(|(y_hat, y), (mut delta, mut loss)| {
            let (d, l) = output_delta(&y_hat, &y);
            (*delta, *loss) = (d, vec![l]);
            Ok(())
        })
        .expect("push");
    for l in (0..LAYERS).rev() {
        let op = engine.op(format!("backward {l}")).read(&m.params[l]).read(&m.acts[l]).read(&m.deltas[l]);
        if l > 0 {
            op.write(&m.grads[l]).write(&m.deltas[l - 1]).run_detached(
                move |(p, a, d), (mut g, mut below)| {
                    let (grad, e) = backward(l, &p, &d, &a);
                    (*g, *below) = (grad, e.expect("a layer below"));
                    Ok(())
                },
            )
        } else {
            op.write(&m.grads[l]).run_detached(move |(p, a, d), (mut g,)| {
                *g = backward(l, &p, &d, &a).0;
                Ok(())
            })
        }
        .expect("push");
        if !comm_after_backward {
            drop(mpi.all_reduce(&m.grads[l], Reduce::Sum));
        }
    }
    if comm_after_backward {
        engine.wait_for_all().blocking_wait().expect("backward");
        for l in (0..LAYERS).rev() {
            drop(mpi.all_reduce(&m.grads[l], Reduce::Sum));
        }
    }
    for l in 0..LAYERS {
        engine
            .op(format!("update {l}"))
            .priority(-(l as i32))
            .read(&m.grads[l])
            .write(&m.params[l])
            .run_detached(|(g,), (mut p,)| {
                update(&mut p, &g);
                Ok(())
            })
            .expect("push");
    }
}

/// The share of the communication's time during which a compute op ran.
fn overlap(profile: &depengine::profile::Profile) -> f64 {
    overlap::overlapped(profile, |name| name.starts_with("all_reduce"), |_| true)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let comm_after_backward = args.iter().any(|a| a == "--comm-after-backward");
    // `--profile DIR`: the last step's profile of each rank, as a Chrome
    // trace and an SVG timeline, `DIR/data_parallel.rankN.{json,svg}`.
    let profile_dir = args.iter().position(|a| a == "--profile").and_then(|k| args.get(k + 1)).cloned();
    let engine = Engine::from_env();
    let mpi = Collectives::new(&engine).expect("MPI");
    let (rank, size) = (mpi.rank(), mpi.size());
    assert!(BATCH.is_multiple_of(size), "the batch of {BATCH} is shared evenly by 1, 2, 4, 8… ranks");
    let vars = |n: usize| (0..n).map(|_| engine.var(Vec::new())).collect::<Vec<_>>();
    let model = Model {
        params: (0..LAYERS).map(|l| engine.var_named(format!("params {l}"), initial(l))).collect(),
        grads: (0..LAYERS)
            .map(|l| engine.var_named(format!("grad {l}"), vec![0.0; initial(l).len()]))
            .collect(),
        acts: vars(LAYERS + 1),
        deltas: vars(LAYERS),
        targets: engine.var(Vec::new()),
        loss: engine.var_named("loss", vec![0.0]),
    };
    let mut step_times = Vec::new();
    let mut overlaps = Vec::new();
    for epoch in 0..EPOCHS {
        let mut loss = 0.0;
        for s in 0..STEPS_PER_EPOCH {
            let step = epoch * STEPS_PER_EPOCH + s;
            let profiled = s == STEPS_PER_EPOCH - 1;
            if profiled {
                engine.profiler().start();
            }
            let start = Instant::now();
            push_step(&engine, &mpi, &model, step, comm_after_backward);
            // The loss of the batch: this rank's share, summed over ranks.
            mpi.all_reduce(&model.loss, Reduce::Sum).blocking_wait().expect("the step ran");
            engine.wait_for_all().blocking_wait().expect("the step ran");
            step_times.push(start.elapsed().as_secs_f64());
            if profiled {
                let profile = engine.profiler().stop();
                overlaps.push(overlap(&profile));
                if let (Some(dir), true) = (&profile_dir, epoch + 1 == EPOCHS) {
                    let path =
                        |ext: &str| std::path::Path::new(dir).join(format!("data_parallel.rank{rank}.{ext}"));
                    profile.write_chrome_trace(path("json")).expect("write the trace");
                    std::fs::write(path("svg"), profile.svg()).expect("write the timeline");
                }
            }
            loss += futures::executor::block_on(model.loss.read()).expect("loss")[0];
        }
        if rank == 0 {
            println!("epoch {epoch}: loss {:.6}", loss / STEPS_PER_EPOCH as f64);
        }
    }
    step_times.sort_by(f64::total_cmp);
    let final_params: Vec<f64> = model
        .params
        .iter()
        .flat_map(|p| futures::executor::block_on(p.read()).expect("params").clone())
        .collect();
    // Every rank's weights, gathered, must be this rank's bit for bit.
    let mine = engine.var(final_params.clone());
    let all = engine.var(Vec::new());
    mpi.all_gather(&mine, &all).blocking_wait().expect("gather the weights");
    let all = futures::executor::block_on(all.read()).expect("weights").clone();
    let same = all
        .chunks(final_params.len())
        .all(|w| w.iter().zip(&final_params).all(|(a, b)| a.to_bits() == b.to_bits()));
    let reference: Vec<f64> = reference().concat();
    let worst = final_params
        .iter()
        .zip(&reference)
        .map(|(a, b)| (a - b).abs() / b.abs().max(1e-3))
        .fold(0.0f64, f64::max);
    if rank == 0 {
        println!(
            "np={size} mode={} median_step_us={:.1} comm_overlapped={:.0}% ranks_identical={same} max_rel_diff_vs_one_process={worst:.2e}",
            if comm_after_backward { "comm-after-backward" } else { "overlap" },
            step_times[step_times.len() / 2] * 1e6,
            overlaps.iter().sum::<f64>() / overlaps.len() as f64 * 100.0,
        );
    }
    drop(mpi);
    if !same || worst > 1e-9 {
        eprintln!(
            "rank {rank}: weights differ (identical across ranks: {same}; worst relative difference {worst:.2e})"
        );
        std::process::exit(1);
    }
}
