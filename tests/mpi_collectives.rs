//! Collectives across processes (feature `mpi`), run by every rank of an
//! MPI world: `tests/mpi/run.sh` runs this binary under `mpirun -np 2`
//! and `-np 4`; alone (`cargo test --features mpi`) it is a world of one.
//!
//! MPI is initialised once per process, so this is one program (no test
//! harness) that runs its checks in turn and exits non-zero at the first
//! that fails; every rank runs the same checks in the same order, as the
//! collectives' rule asks.

use std::time::Duration;

use depengine::mpi::{CollectiveError, Collectives, RankFailure, Reduce};
use depengine::{Engine, Error, Var};

#[cfg(feature = "nccl")]
#[path = "mpi/nccl.rs"]
mod nccl;

fn main() {
    let engine = depengine::EngineBuilder::from_env().cpu_workers(2).build().expect("engine");
    let mpi = Collectives::new(&engine).expect("MPI");
    let (rank, size) = (mpi.rank(), mpi.size());
    // Every check is bounded: a rank that hangs is a failure, not a stall.
    std::thread::spawn(|| {
        std::thread::sleep(Duration::from_secs(240));
        eprintln!("mpi_collectives: still running after 240 s");
        std::process::exit(3);
    });
    all_reduce_matches_a_local_sum(&engine, &mpi);
    all_reduce_min_max_and_mean(&engine, &mpi);
    float_min_max_follow_one_rule_at_every_size(&engine, &mpi);
    broadcast_copies_the_root(&engine, &mpi);
    all_gather_and_reduce_scatter(&engine, &mpi);
    a_second_init_is_refused(&engine);
    if size > 1 {
        a_size_mismatch_fails_on_every_rank(&engine, &mpi);
        an_upstream_failure_fails_on_every_rank(&engine, &mpi);
        a_collective_refused_on_one_rank_fails_on_every_rank(&engine, &mpi);
        an_uneven_reduce_scatter_fails_without_blaming_mpi(&engine, &mpi);
        the_explainer_shows_a_collective_waiting_for_other_ranks(&engine, &mpi);
    }
    random_programs_match_a_model_of_every_rank(&engine, &mpi);
    #[cfg(feature = "nccl")]
    nccl::run(&engine, &mpi);
    mpi.barrier().blocking_wait().expect("barrier");
    collectives_in_flight_are_waited_out_at_drop(&engine, mpi);
    println!("mpi_collectives: rank {rank} of {size}: every check passed");
}

fn read<T: Clone + Send + Sync + 'static>(var: &Var<T>) -> T {
    futures::executor::block_on(var.read()).expect("read").clone()
}

fn all_reduce_matches_a_local_sum(engine: &Engine, mpi: &Collectives) {
    let (rank, size) = (mpi.rank(), mpi.size());
    for len in [0usize, 1, 1000, 100_003] {
        let v = engine.var((0..len).map(|i| ((rank + 1) * i) as f64).collect::<Vec<f64>>());
        let w = engine.var((0..len).map(|i| (rank * 7 + i) as i64).collect::<Vec<i64>>());
        let (a, b) = (mpi.all_reduce(&v, Reduce::Sum), mpi.all_reduce(&w, Reduce::Sum));
        a.blocking_wait().expect("f64 sum");
        b.blocking_wait().expect("i64 sum");
        let ranks: f64 = (1..=size).map(|r| r as f64).sum();
        let want: Vec<f64> = (0..len).map(|i| ranks * i as f64).collect();
        assert_eq!(read(&v), want, "f64 sum of {len}");
        let want: Vec<i64> = (0..len).map(|i| (0..size).map(|r| (r * 7 + i) as i64).sum()).collect();
        assert_eq!(read(&w), want, "i64 sum of {len}");
    }
}

fn all_reduce_min_max_and_mean(engine: &Engine, mpi: &Collectives) {
    let (rank, size) = (mpi.rank() as i32, mpi.size());
    let lo = engine.var(vec![rank, -rank, 5]);
    let hi = engine.var(vec![rank, -rank, 5]);
    let mean = engine.var(vec![rank as f32 * 2.0; 3]);
    mpi.all_reduce(&lo, Reduce::Min).blocking_wait().expect("min");
    mpi.all_reduce(&hi, Reduce::Max).blocking_wait().expect("max");
    mpi.all_reduce(&mean, Reduce::Mean).blocking_wait().expect("mean");
    let top = size as i32 - 1;
    assert_eq!(read(&lo), vec![0, -top, 5]);
    assert_eq!(read(&hi), vec![top, 0, 5]);
    assert_eq!(read(&mean), vec![top as f32; 3], "the mean of 0, 2, … 2(n−1)");
    let ints = engine.var(vec![1u32]);
    let refused = mpi.all_reduce(&ints, Reduce::Mean).blocking_wait().expect_err("a mean of integers");
    assert!(refused.is_invalid_argument(), "{refused}");
}

/// A rank's element `i` in the NaN and signed-zero check: rank 0 and the
/// others disagree on NaN against a number and on the sign of zero.
fn awkward(rank: usize, i: usize) -> f64 {
    let first = rank == 0;
    match i % 4 {
        0 => {
            if first {
                0.1
            } else {
                f64::NAN
            }
        }
        1 => {
            if first {
                0.0
            } else {
                -0.0
            }
        }
        2 => {
            if first {
                f64::NAN
            } else {
                0.1
            }
        }
        _ => {
            if first {
                -0.0
            } else {
                0.0
            }
        }
    }
}

/// The rule, as a model: a NaN wins (as the quiet NaN), −0 is below +0.
fn model(max: bool, a: f64, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() {
        f64::NAN
    } else if a == b {
        if (a.is_sign_positive() && max) || (a.is_sign_negative() && !max) { a } else { b }
    } else if (a > b) == max {
        a
    } else {
        b
    }
}

/// `Min` and `Max` over floats give the same bits, by one rule, whether the
/// all-reduce is small enough to be folded in the signature exchange (up to
/// 64 bytes: 16 `f32`, 8 `f64`) or goes through MPI, and in a
/// reduce-scatter.
fn float_min_max_follow_one_rule_at_every_size(engine: &Engine, mpi: &Collectives) {
    let (rank, size) = (mpi.rank(), mpi.size());
    let want = |max: bool, i: usize| (1..size).fold(awkward(0, i), |acc, r| model(max, acc, awkward(r, i)));
    for (op, max) in [(Reduce::Max, true), (Reduce::Min, false)] {
        for len in [16usize, 17, 1000] {
            let v = engine.var((0..len).map(|i| awkward(rank, i) as f32).collect::<Vec<f32>>());
            mpi.all_reduce(&v, op).blocking_wait().expect("f32 all-reduce");
            let got: Vec<u32> = read(&v).iter().map(|x| x.to_bits()).collect();
            let wanted: Vec<u32> = (0..len).map(|i| (want(max, i) as f32).to_bits()).collect();
            assert_eq!(got, wanted, "{op:?} over {len} f32");
        }
        for len in [8usize, 9, 1000] {
            let v = engine.var((0..len).map(|i| awkward(rank, i)).collect::<Vec<f64>>());
            mpi.all_reduce(&v, op).blocking_wait().expect("f64 all-reduce");
            let got: Vec<u64> = read(&v).iter().map(|x| x.to_bits()).collect();
            let wanted: Vec<u64> = (0..len).map(|i| want(max, i).to_bits()).collect();
            assert_eq!(got, wanted, "{op:?} over {len} f64");
        }
        let block = 8;
        let input = engine.var((0..block * size).map(|i| awkward(rank, i)).collect::<Vec<f64>>());
        let output = engine.var(Vec::<f64>::new());
        mpi.reduce_scatter(&input, &output, op).blocking_wait().expect("reduce-scatter");
        let got: Vec<u64> = read(&output).iter().map(|x| x.to_bits()).collect();
        let wanted: Vec<u64> = (rank * block..(rank + 1) * block).map(|i| want(max, i).to_bits()).collect();
        assert_eq!(got, wanted, "{op:?} reduce-scatter");
    }
}

fn broadcast_copies_the_root(engine: &Engine, mpi: &Collectives) {
    let (rank, size) = (mpi.rank(), mpi.size());
    let root = size - 1;
    let v = engine.var(vec![rank as u64 * 1000 + 1; 4096]);
    mpi.broadcast(&v, root).blocking_wait().expect("broadcast");
    assert_eq!(read(&v), vec![root as u64 * 1000 + 1; 4096]);
    let err = mpi.broadcast(&v, size).blocking_wait().expect_err("a root past the world");
    assert!(err.is_invalid_argument(), "{err}");
}

fn all_gather_and_reduce_scatter(engine: &Engine, mpi: &Collectives) {
    let (rank, size) = (mpi.rank(), mpi.size());
    let input = engine.var(vec![rank as u8, rank as u8 + 100, 7]);
    let output = engine.var(Vec::new());
    mpi.all_gather(&input, &output).blocking_wait().expect("all_gather");
    let want: Vec<u8> = (0..size).flat_map(|r| [r as u8, r as u8 + 100, 7]).collect();
    assert_eq!(read(&output), want);
    // Block b of rank r's input is r + b, 4 elements each.
    let input = engine.var((0..size * 4).map(|i| (rank + i / 4) as f64).collect::<Vec<f64>>());
    let block = engine.var(vec![0.0f64; 1]);
    mpi.reduce_scatter(&input, &block, Reduce::Sum).blocking_wait().expect("reduce_scatter");
    let want = (0..size).map(|r| (r + rank) as f64).sum::<f64>();
    assert_eq!(read(&block), vec![want; 4]);
}

fn a_second_init_is_refused(engine: &Engine) {
    let err = Collectives::new(engine).expect_err("MPI is initialised once per process");
    assert!(err.to_string().contains("once per process"), "{err}");
}

fn collective(err: &Error) -> &CollectiveError {
    std::error::Error::source(err)
        .and_then(|s| s.downcast_ref::<CollectiveError>())
        .unwrap_or_else(|| panic!("not a collective's error: {err}"))
}

fn a_size_mismatch_fails_on_every_rank(engine: &Engine, mpi: &Collectives) {
    let rank = mpi.rank();
    let v = engine.var_named("mismatched", vec![1.0f32; if rank == 0 { 10 } else { 11 }]);
    let err = mpi.all_reduce(&v, Reduce::Sum).blocking_wait().expect_err("sizes differ");
    match collective(&err) {
        CollectiveError::Mismatch { mine, theirs, rank: other, .. } => {
            assert_ne!(*other, rank);
            assert!(mine.contains("mismatched") && theirs.contains("of 1"), "{err}");
        }
        other => panic!("not a mismatch: {other}"),
    }
    // The var carries the failure; the collectives after it are in step.
    futures::executor::block_on(engine.wait_for_var(&v)).expect_err("the var carries it");
    let after = engine.var(vec![1u64]);
    mpi.all_reduce(&after, Reduce::Sum).blocking_wait().expect("in step after a mismatch");
    assert_eq!(read(&after), vec![mpi.size() as u64]);
    engine.wait_for_all().blocking_wait().expect_err("wait_for_all reports the failed collective");
}

fn an_upstream_failure_fails_on_every_rank(engine: &Engine, mpi: &Collectives) {
    let rank = mpi.rank();
    let v = engine.var(vec![1.0f64; 8]);
    engine
        .op("fails on rank 1")
        .write(&v)
        .run(move |(), (_v,)| if rank == 1 { Err("a failure upstream".into()) } else { Ok(()) })
        .blocking_wait()
        .map_err(|e| assert_eq!(rank, 1, "{e}"))
        .ok();
    let err = mpi.all_reduce(&v, Reduce::Sum).blocking_wait().expect_err("failed upstream on rank 1");
    match collective(&err) {
        CollectiveError::FailedOnRanks { ranks, .. } => assert_eq!(ranks, &[(1, RankFailure::InputError)]),
        other => panic!("not an upstream failure: {other}"),
    }
    assert!(format!("{err:#}").contains("rank 1: its input carried an error"), "{err:#}");
    let _ = futures::executor::block_on(engine.wait_for_var(&v));
    engine.wait_for_all().blocking_wait().expect_err("wait_for_all reports the failed collective");
}

/// A collective whose push is refused on one rank (its var deleted there)
/// still takes its place: the other ranks fail it instead of waiting for
/// that rank for ever, and the collectives after it are in step.
fn a_collective_refused_on_one_rank_fails_on_every_rank(engine: &Engine, mpi: &Collectives) {
    let rank = mpi.rank();
    let v = engine.var(vec![1i32; 4]);
    if rank == 1 {
        engine.delete_var(&v).blocking_wait().expect("deleted");
    }
    let err = mpi.all_reduce(&v, Reduce::Sum).blocking_wait().expect_err("refused on rank 1");
    if rank == 1 {
        assert!(err.is_var_deleted(), "{err}");
    } else {
        match collective(&err) {
            CollectiveError::FailedOnRanks { ranks, .. } => {
                assert_eq!(ranks, &[(1, RankFailure::RefusedVarDeleted)]);
            }
            other => panic!("not a failure on rank 1: {other}"),
        }
        let text = format!("{err:#}");
        assert!(text.contains("rank 1: its push was refused: its var was deleted"), "{text}");
        assert!(!text.contains("carried an error"), "no input carried an error: {text}");
    }
    let after = engine.var(vec![1u64]);
    mpi.all_reduce(&after, Reduce::Sum).blocking_wait().expect("in step after a refusal");
    assert_eq!(read(&after), vec![mpi.size() as u64]);
    let _ = engine.wait_for_all().blocking_wait();
}

/// A reduce-scatter whose input the ranks cannot cut into equal blocks
/// fails on every rank, as such: no MPI call was made, so no MPI error is
/// reported; the collectives after it are in step.
fn an_uneven_reduce_scatter_fails_without_blaming_mpi(engine: &Engine, mpi: &Collectives) {
    let size = mpi.size();
    let (input, output) = (engine.var(vec![1.0f32; size + 1]), engine.var(Vec::<f32>::new()));
    let err = mpi.reduce_scatter(&input, &output, Reduce::Sum).blocking_wait().expect_err("uneven");
    match collective(&err) {
        CollectiveError::Uneven { len, size: s, .. } => assert_eq!((*len, *s), (size + 1, size)),
        other => panic!("not an uneven input: {other}"),
    }
    assert!(!format!("{err:#}").contains("MPI error"), "{err:#}");
    let _ = futures::executor::block_on(engine.wait_for_var(&output));
    let after = engine.var(vec![1u64]);
    mpi.all_reduce(&after, Reduce::Sum).blocking_wait().expect("in step after an uneven input");
    assert_eq!(read(&after), vec![size as u64]);
    let _ = engine.wait_for_all().blocking_wait();
}

/// While rank 1 is late, rank 0's collective holds its var, and the hang
/// explainer says what the op behind it waits for: every rank.
fn the_explainer_shows_a_collective_waiting_for_other_ranks(engine: &Engine, mpi: &Collectives) {
    let v = engine.var_named("late", vec![1u32; 16]);
    if mpi.rank() == 1 {
        std::thread::sleep(Duration::from_millis(300));
    }
    let handle = mpi.all_reduce(&v, Reduce::Sum);
    let reader = engine.op("reads late").read(&v).run(|(v,), ()| Ok(v[0]));
    if mpi.rank() == 0 {
        std::thread::sleep(Duration::from_millis(100));
        let pending = engine.debug_pending().to_string();
        assert!(pending.contains("reads late") && pending.contains("with every rank"), "{pending}");
    }
    handle.blocking_wait().expect("the collective");
    assert_eq!(reader.blocking_wait().expect("the reader"), mpi.size() as u32);
}

/// A random program, the same on every rank (one seed): compute ops that
/// change a var by a function of the rank, and collectives; each rank
/// then checks its vars against a model that runs the program for every
/// rank in turn.
fn random_programs_match_a_model_of_every_rank(engine: &Engine, mpi: &Collectives) {
    let (rank, size) = (mpi.rank(), mpi.size());
    for seed in 0..20u64 {
        let mut rng = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        let mut next = move |n: u64| {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng % n
        };
        const VARS: usize = 4;
        let len = 1 + next(64) as usize;
        let vars: Vec<Var<Vec<i64>>> =
            (0..VARS).map(|k| engine.var(vec![(rank * 10 + k) as i64; len])).collect();
        let mut model: Vec<Vec<Vec<i64>>> =
            (0..size).map(|r| (0..VARS).map(|k| vec![(r * 10 + k) as i64; len]).collect()).collect();
        for step in 0..40 {
            let k = next(VARS as u64) as usize;
            match next(4) {
                0 | 1 => {
                    let add = (step as i64 + 1) * 3;
                    engine
                        .op("compute")
                        .write(&vars[k])
                        .run_detached(move |(), (mut v,)| {
                            v.iter_mut().enumerate().for_each(|(i, x)| *x = *x * 2 + add + (rank + i) as i64);
                            Ok(())
                        })
                        .expect("push");
                    for (r, m) in model.iter_mut().enumerate() {
                        m[k].iter_mut().enumerate().for_each(|(i, x)| *x = *x * 2 + add + (r + i) as i64);
                    }
                }
                2 => {
                    drop(mpi.all_reduce(&vars[k], Reduce::Max));
                    let max: Vec<i64> =
                        (0..len).map(|i| model.iter().map(|m| m[k][i]).max().unwrap()).collect();
                    model.iter_mut().for_each(|m| m[k].clone_from(&max));
                }
                _ => {
                    let root = next(size as u64) as usize;
                    drop(mpi.broadcast(&vars[k], root));
                    let from = model[root][k].clone();
                    model.iter_mut().for_each(|m| m[k].clone_from(&from));
                }
            }
        }
        engine.wait_for_all().blocking_wait().expect("the program ran");
        for (k, var) in vars.iter().enumerate() {
            assert_eq!(read(var), model[rank][k], "seed {seed}, var {k}");
        }
    }
}

/// Collectives in flight when the `Collectives` is dropped are done when
/// the drop returns, on every rank.
fn collectives_in_flight_are_waited_out_at_drop(engine: &Engine, mpi: Collectives) {
    let size = mpi.size() as u64;
    let vars: Vec<Var<Vec<u64>>> = (0..16).map(|_| engine.var(vec![1u64; 1 << 16])).collect();
    let handles: Vec<_> = vars.iter().map(|v| mpi.all_reduce(v, Reduce::Sum)).collect();
    drop(mpi);
    assert!(handles.iter().all(|h| h.is_finished()), "a collective still in flight after the drop");
    for v in &vars {
        assert_eq!(read(v), vec![size; 1 << 16]);
    }
    engine.blocking_shutdown(depengine::ShutdownMode::Drain).expect("every op completed");
}
