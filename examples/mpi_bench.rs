//! What an all-reduce through the engine costs against rsmpi called
//! directly (feature `mpi`; run by every rank under `mpirun`).
//!
//! ```sh
//! cargo build --release --features mpi --example mpi_bench
//! mpirun -np 2 target/release/examples/mpi_bench engine      # Collectives::all_reduce, pushed, then blocking_wait
//! mpirun -np 2 target/release/examples/mpi_bench engine-park # the same, the handle awaited by a parked thread
//! mpirun -np 2 target/release/examples/mpi_bench engine-spin # the same, the handle polled, yielding between polls
//! mpirun -np 2 target/release/examples/mpi_bench blocking    # rsmpi's all_reduce_into
//! mpirun -np 2 target/release/examples/mpi_bench immediate   # rsmpi's immediate all-reduce, tested in a busy loop
//! mpirun -np 2 target/release/examples/mpi_bench signed      # the same after an immediate all-gather of 64 B (the engine's MPI calls)
//! ```
//!
//! (`tests/mpi/run.sh` has the environment for `mpirun` on one machine;
//! pass `--bind-to none` too, or each rank's threads share one core.)
//! Each mode is its own process (MPI is initialised once per process). For
//! f32 sums of 8 B, 64 KiB and 4 MiB, rank 0 prints one line per size: the
//! median time per all-reduce over the rounds, one after the other, after
//! a warm-up.

use std::time::Instant;

use mpi::collective::SystemOperation;
use mpi::traits::*;

fn sizes() -> [(usize, usize); 3] {
    // (elements, rounds)
    [(2, 20_000), (16 * 1024, 4_000), (1024 * 1024, 200)]
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
    let engine = depengine::Engine::new();
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

fn main() {
    match std::env::args().nth(1).as_deref() {
        Some("engine") | None => engine_mode(Wait::Blocking),
        Some("engine-park") => engine_mode(Wait::Park),
        Some("engine-spin") => engine_mode(Wait::Spin),
        Some("blocking") => direct_mode(false, false),
        Some("immediate") => direct_mode(true, false),
        Some("signed") => direct_mode(true, true),
        Some(other) => {
            eprintln!(
                "unknown mode `{other}`: engine, engine-park, engine-spin, blocking, immediate, signed"
            );
            std::process::exit(2);
        }
    }
}
