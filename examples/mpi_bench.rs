//! What an all-reduce, and a transfer of a distributed var, through the
//! engine cost against rsmpi called directly (feature `mpi`; run by every
//! rank under `mpirun`).
//!
//! ```sh
//! cargo build --release --features mpi --example mpi_bench
//! mpirun -np 2 target/release/examples/mpi_bench engine      # Collectives::all_reduce, pushed, then blocking_wait
//! mpirun -np 2 target/release/examples/mpi_bench engine-park # the same, the handle awaited by a parked thread
//! mpirun -np 2 target/release/examples/mpi_bench engine-spin # the same, the handle polled, yielding between polls
//! mpirun -np 2 target/release/examples/mpi_bench blocking    # rsmpi's all_reduce_into
//! mpirun -np 2 target/release/examples/mpi_bench immediate   # rsmpi's immediate all-reduce, tested in a busy loop
//! mpirun -np 2 target/release/examples/mpi_bench signed      # the same after an immediate all-gather of 64 B (the engine's MPI calls)
//! mpirun -np 2 target/release/examples/mpi_bench transfer    # a var sent from rank 0 to rank 1 (depengine::mpi::distributed), per version
//! mpirun -np 2 target/release/examples/mpi_bench p2p         # rsmpi's immediate send and receive, tested in a busy loop
//! mpirun -np 4 target/release/examples/mpi_bench tasks       # a tiled Cholesky's program with empty kernels: ops per second
//! ```
//!
//! (`tests/mpi/run.sh` has the environment for `mpirun` on one machine;
//! pass `--bind-to none` too, or each rank's threads share one core.)
//! Each mode is its own process (MPI is initialised once per process). For
//! f32 sums of 8 B, 64 KiB and 4 MiB, rank 0 prints one line per size: the
//! median time per all-reduce over the rounds, one after the other, after
//! a warm-up. `transfer` and `p2p` move the same sizes from rank 0 to rank
//! 1, one message after the other (each send completes before the next
//! starts), and rank 1 prints the time per message over a batch, the
//! median of five batches (`tools/transfer_rounds.sh` runs the two in
//! turn, round after round). `MPI_BENCH_BYTES=8,65536` (passed on with
//! `mpirun -x`) keeps only those sizes. `tasks` runs the program of a
//! tiled Cholesky of 32 × 32 one-element tiles with empty kernels, five
//! times, and rank 0 prints the median ops per second of the whole world.

use std::time::Instant;

use mpi::collective::SystemOperation;
use mpi::traits::*;

/// (elements, rounds) of each size; `MPI_BENCH_BYTES=8,65536` keeps only
/// those sizes.
fn sizes() -> Vec<(usize, usize)> {
    let keep = std::env::var("MPI_BENCH_BYTES").ok();
    let kept =
        |elems: usize| keep.as_deref().is_none_or(|k| k.split(',').any(|b| b == (elems * 4).to_string()));
    [(2, 20_000), (16 * 1024, 4_000), (1024 * 1024, 200)].into_iter().filter(|&(e, _)| kept(e)).collect()
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}

fn report(mode: &str, rank: usize, size: usize, elems: usize, times: Vec<f64>) {
    if rank == 0 {
        let bytes = elems * 4;
        println!(
            "mode={mode} np={size} bytes={bytes} rounds={} median_us={:.2}",
            times.len(),
            median(times) * 1e6
        );
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Wait {
    Blocking,
    Park,
    Spin,
}

fn engine_mode(wait: Wait) {
    let engine = depengine::Engine::from_env();
    let mpi = depengine::mpi::Collectives::new(&engine).expect("MPI");
    let (rank, size) = (mpi.rank(), mpi.size());
    for (elems, rounds) in sizes() {
        let var = engine.var(vec![1.0f32; elems]);
        let mut times = Vec::with_capacity(rounds);
        for round in 0..rounds + rounds / 10 {
            let start = Instant::now();
            let handle = mpi.all_reduce(&var, depengine::mpi::Reduce::Sum);
            match wait {
                Wait::Blocking => handle.blocking_wait().expect("all_reduce"),
                Wait::Park => futures::executor::block_on(handle).expect("all_reduce"),
                Wait::Spin => {
                    while !handle.is_finished() {
                        std::thread::yield_now();
                    }
                    handle.blocking_wait().expect("all_reduce");
                }
            }
            if round >= rounds / 10 {
                times.push(start.elapsed().as_secs_f64());
            }
        }
        let mode = match wait {
            Wait::Blocking => "engine",
            Wait::Park => "engine-park",
            Wait::Spin => "engine-spin",
        };
        report(mode, rank, size, elems, times);
    }
}

/// Tests `req` in a busy loop until it completes.
fn spin<'a, S: mpi::request::Scope<'a>>(mut req: mpi::request::Request<'a, impl ?Sized, S>) {
    loop {
        match req.test() {
            Ok(_) => return,
            Err(r) => req = r,
        }
    }
}

fn direct_mode(immediate: bool, signed: bool) {
    let (universe, _) = mpi::initialize_with_threading(mpi::Threading::Funneled).expect("MPI");
    let world = universe.world();
    let (rank, size) = (world.rank() as usize, world.size() as usize);
    let mode = match (immediate, signed) {
        (_, true) => "signed",
        (true, false) => "immediate",
        (false, false) => "blocking",
    };
    let sig = [7u8; 64];
    let mut sigs = vec![0u8; 64 * size];
    for (elems, rounds) in sizes() {
        let send = vec![1.0f32; elems];
        let mut recv = vec![0.0f32; elems];
        let mut times = Vec::with_capacity(rounds);
        for round in 0..rounds + rounds / 10 {
            let start = Instant::now();
            if signed {
                mpi::request::scope(|scope| {
                    spin(world.immediate_all_gather_into(scope, &sig[..], &mut sigs[..]))
                });
            }
            if immediate {
                mpi::request::scope(|scope| {
                    spin(world.immediate_all_reduce_into(
                        scope,
                        &send[..],
                        &mut recv[..],
                        SystemOperation::sum(),
                    ));
                });
            } else {
                world.all_reduce_into(&send[..], &mut recv[..], SystemOperation::sum());
            }
            if round >= rounds / 10 {
                times.push(start.elapsed().as_secs_f64());
            }
        }
        assert_eq!(recv[0], size as f32);
        report(mode, rank, size, elems, times);
    }
}

/// A var owned by rank 0, written there and read on rank 1, `rounds`
/// times: one transfer per version, streamed.
fn transfer_mode() {
    use depengine::mpi::distributed::Distribution;
    let engine = depengine::Engine::from_env();
    let world = depengine::mpi::Collectives::new(&engine).expect("MPI");
    let (rank, size) = (world.rank(), world.size());
    assert_eq!(size, 2, "transfer mode runs on two ranks");
    for (elems, rounds) in sizes() {
        let dist = Distribution::new(&world).expect("a distribution");
        let x = dist.var("x", 0, elems, || vec![1.0f32; elems]).expect("var");
        let y = dist.var("y", 1, 1, || vec![0.0f32]).expect("var");
        let batch = |n: usize| {
            world.barrier().blocking_wait().expect("barrier");
            let start = Instant::now();
            for _ in 0..n {
                dist.op("write x")
                    .write(&x)
                    .run(|(), (mut x,)| {
                        x[0] += 1.0;
                        Ok(())
                    })
                    .expect("push");
                dist.op("read x")
                    .read(&x)
                    .write(&y)
                    .run(|(x,), (mut y,)| {
                        y[0] = x[0];
                        Ok(())
                    })
                    .expect("push");
            }
            dist.wait().blocking_wait().expect("the batch");
            start.elapsed().as_secs_f64() / n as f64
        };
        batch(rounds / 10);
        let times: Vec<f64> = (0..5).map(|_| batch(rounds)).collect();
        if rank == 1 {
            println!(
                "mode=transfer np={size} bytes={} rounds={rounds} median_us={:.2}",
                elems * 4,
                median(times) * 1e6
            );
        }
    }
}

/// The same messages with rsmpi's immediate send and receive.
fn p2p_mode() {
    let (universe, _) = mpi::initialize_with_threading(mpi::Threading::Funneled).expect("MPI");
    let world = universe.world();
    let (rank, size) = (world.rank() as usize, world.size() as usize);
    assert_eq!(size, 2, "p2p mode runs on two ranks");
    for (elems, rounds) in sizes() {
        let mut buf = vec![1.0f32; elems];
        let mut batch = |n: usize| {
            world.barrier();
            let start = Instant::now();
            for _ in 0..n {
                mpi::request::scope(|scope| {
                    if rank == 0 {
                        spin(world.process_at_rank(1).immediate_send(scope, &buf[..]));
                    } else {
                        spin(world.process_at_rank(0).immediate_receive_into(scope, &mut buf[..]));
                    }
                });
            }
            world.barrier();
            start.elapsed().as_secs_f64() / n as f64
        };
        batch(rounds / 10);
        let times: Vec<f64> = (0..5).map(|_| batch(rounds)).collect();
        if rank == 1 {
            println!(
                "mode=p2p np={size} bytes={} rounds={rounds} median_us={:.2}",
                elems * 4,
                median(times) * 1e6
            );
        }
    }
}

/// A tiled Cholesky's program with empty kernels, on one-element tiles
/// spread block-cyclically: what the ranks sustain in ops per second.
fn tasks_mode() {
    use depengine::mpi::distributed::{Distribution, block_cyclic, grid};
    let engine = depengine::Engine::from_env();
    let world = depengine::mpi::Collectives::new(&engine).expect("MPI");
    let (rank, size) = (world.rank(), world.size());
    let (p, q) = grid(size);
    let nt = 32;
    let mut rates = Vec::new();
    for _ in 0..5 {
        let dist = Distribution::new(&world).expect("a distribution");
        let t: Vec<Vec<_>> = (0..nt)
            .map(|i| {
                (0..=i)
                    .map(|j| dist.var("t", block_cyclic(i, j, p, q), 1, || vec![1.0f64]).expect("var"))
                    .collect()
            })
            .collect();
        world.barrier().blocking_wait().expect("barrier");
        let start = Instant::now();
        let mut ops = 0u64;
        for k in 0..nt {
            dist.op("potrf").write(&t[k][k]).run(|_, _| Ok(())).expect("push");
            ops += 1;
            for i in k + 1..nt {
                dist.op("trsm").read(&t[k][k]).write(&t[i][k]).run(|_, _| Ok(())).expect("push");
                ops += 1;
            }
            for i in k + 1..nt {
                dist.op("syrk").read(&t[i][k]).write(&t[i][i]).run(|_, _| Ok(())).expect("push");
                ops += 1;
                for j in k + 1..i {
                    dist.op("gemm")
                        .read(&t[i][k])
                        .read(&t[j][k])
                        .write(&t[i][j])
                        .run(|_, _| Ok(()))
                        .expect("push");
                    ops += 1;
                }
            }
        }
        dist.wait().blocking_wait().expect("the program");
        world.barrier().blocking_wait().expect("barrier");
        rates.push(ops as f64 / start.elapsed().as_secs_f64());
    }
    if rank == 0 {
        println!(
            "mode=tasks np={size} tiles={nt}x{nt} ops={} median_ops_per_s={:.0}",
            nt * (nt + 1) * (nt + 2) / 6,
            median(rates)
        );
    }
}

fn main() {
    match std::env::args().nth(1).as_deref() {
        Some("engine") | None => engine_mode(Wait::Blocking),
        Some("engine-park") => engine_mode(Wait::Park),
        Some("engine-spin") => engine_mode(Wait::Spin),
        Some("blocking") => direct_mode(false, false),
        Some("immediate") => direct_mode(true, false),
        Some("signed") => direct_mode(true, true),
        Some("transfer") => transfer_mode(),
        Some("p2p") => p2p_mode(),
        Some("tasks") => tasks_mode(),
        Some(other) => {
            eprintln!(
                "unknown mode `{other}`: engine, engine-park, engine-spin, blocking, immediate, signed, transfer, p2p, tasks"
            );
            std::process::exit(2);
        }
    }
}
