//! Tiles across ranks (`depengine::mpi::distributed`, feature `mpi`), run by
//! every rank of an MPI world: `tests/mpi/run.sh` runs this binary under
//! `mpirun -np 2` and `-np 4`; alone it is a world of one.
//!
//! One program (MPI is initialised once per process) that runs its checks
//! in turn, every rank the same checks in the same order, and exits
//! non-zero at the first that fails.

// One-line bodies that assign and answer `Ok` read as the op they stand for.
#![allow(clippy::unit_arg)]

use std::time::{Duration, Instant};

use depengine::mpi::Collectives;
use depengine::mpi::distributed::{DistVar, Distribution, TransferError, block_cyclic, grid};

fn main() {
    let engine = depengine::EngineBuilder::from_env().cpu_workers(2).build().expect("engine");
    let world = Collectives::new(&engine).expect("MPI");
    let (rank, size) = (world.rank(), world.size());
    std::thread::spawn(|| {
        std::thread::sleep(Duration::from_secs(240));
        eprintln!("mpi_distributed: still running after 240 s");
        std::process::exit(3);
    });
    if std::env::args().any(|arg| arg == "--panic-on-the-last-rank") {
        the_last_rank_panics_out_of_main(&world);
    }
    block_cyclic_places_tiles_on_a_grid();
    for seed in 0..6 {
        random_programs_match_a_sequential_model(&world, seed);
    }
    a_write_on_the_owner_makes_copies_stale(&world);
    a_failure_on_the_owner_fails_the_readers_elsewhere(&world);
    an_op_writing_two_owners_is_refused_everywhere(&world);
    the_129th_live_distribution_is_refused_everywhere(&world);
    if size > 1 {
        distributions_alive_together_never_take_each_others_messages(&world);
        a_different_program_is_named_by_the_receiver(&world);
        a_rank_whose_engine_refuses_leaves_no_one_waiting(&world);
        a_rank_with_an_extra_transfer_does_not_hang(&world);
        a_size_that_differs_is_named_not_fatal(&world);
        the_explainer_shows_a_reader_waiting_for_its_transfer(&world);
        a_drop_without_a_wait_whose_programs_differ_ends_everywhere(&world);
    }
    a_wait_is_a_future_and_a_drop_blocks_no_runtime_thread(&world);
    world.barrier().blocking_wait().expect("barrier");
    drop(world);
    drop(engine);
    println!("mpi_distributed: rank {rank} of {size}: every check passed");
}

/// The value a body computes: a hash of what it reads and of the op, so
/// that a value reflects every write before it, in order.
fn mix(a: u64, b: u64) -> u64 {
    let mut z = a ^ b.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A small generator, the same on every rank for the same seed.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 = mix(self.0, 0x5EED);
        (self.0 % n as u64) as usize
    }
}

fn value_of(var: &DistVar<u64>) -> Vec<u64> {
    var.read().blocking_wait().expect("read").to_vec()
}

fn block_cyclic_places_tiles_on_a_grid() {
    assert_eq!(grid(1), (1, 1));
    assert_eq!(grid(2), (1, 2));
    assert_eq!(grid(4), (2, 2));
    assert_eq!(grid(6), (2, 3));
    let owners: Vec<usize> = (0..4).flat_map(|i| (0..4).map(move |j| block_cyclic(i, j, 2, 2))).collect();
    assert_eq!(owners, [0, 1, 0, 1, 2, 3, 2, 3, 0, 1, 0, 1, 2, 3, 2, 3]);
}

/// Random programs on vars of random owners and of two element types
/// (`u64` and `u32`, mixed in one op): each op writes one var (or none)
/// and reads up to three others; every rank runs the same program through
/// the distribution, and a sequential model of it. Each rank's own vars
/// must end as the model's, which folds every write in order.
fn random_programs_match_a_sequential_model(world: &Collectives, seed: u64) {
    let dist = Distribution::new(world).expect("a distribution");
    let (rank, size) = (dist.rank(), dist.size());
    let mut rng = Rng(seed + 1);
    let nvars = 3 + rng.below(10);
    // Short vars go through staged buffers, long ones from memory to memory.
    let len = if seed % 3 == 2 { 9000 } else { 1 + rng.below(5) };
    let owners: Vec<usize> = (0..nvars).map(|_| rng.below(size)).collect();
    // Odd vars hold u32: the model keeps their values below 2^32.
    let wide = |v: usize| v.is_multiple_of(2);
    let mut model: Vec<Vec<u64>> = (0..nvars).map(|v| vec![v as u64; len]).collect();
    let mut v64 = std::collections::BTreeMap::new();
    let mut v32 = std::collections::BTreeMap::new();
    for (v, &owner) in owners.iter().enumerate() {
        let name = format!("v{v}");
        if wide(v) {
            v64.insert(v, dist.var(&name, owner, len, || vec![v as u64; len]).expect("var"));
        } else {
            v32.insert(v, dist.var(&name, owner, len, || vec![v as u32; len]).expect("var"));
        }
    }
    for k in 0..150u64 {
        let write = (rng.below(6) != 0).then(|| rng.below(nvars));
        let mut reads: Vec<usize> =
            (0..rng.below(4)).map(|_| rng.below(nvars)).filter(|&r| Some(r) != write).collect();
        reads.sort_unstable();
        reads.dedup();
        // The op's body gets the u64 reads, then the u32 ones.
        let (r64, r32): (Vec<usize>, Vec<usize>) = reads.iter().partition(|&&r| wide(r));
        // The model: each element of the write folds the reads' and the op.
        let fold = move |inputs: &[Vec<u64>], old: &[u64]| -> Vec<u64> {
            (0..len).map(|e| inputs.iter().fold(mix(old[e], k), |acc, r| mix(acc, r[e]))).collect()
        };
        if let Some(w) = write {
            let inputs: Vec<Vec<u64>> = r64.iter().chain(&r32).map(|&r| model[r].clone()).collect();
            let mut new = fold(&inputs, &model[w]);
            if !wide(w) {
                new.iter_mut().for_each(|x| *x = u64::from(*x as u32));
            }
            model[w] = new;
        }
        let w64: Vec<_> = write.filter(|&w| wide(w)).map(|w| &v64[&w]).into_iter().collect();
        let w32: Vec<_> = write.filter(|&w| !wide(w)).map(|w| &v32[&w]).into_iter().collect();
        dist.op(&format!("op{k}"))
            .read_all(r64.iter().map(|r| &v64[r]))
            .read_all(r32.iter().map(|r| &v32[r]))
            .write_all(w64)
            .write_all(w32)
            .run(move |(r64, r32), (mut w64, mut w32)| {
                let mut inputs: Vec<Vec<u64>> = r64.iter().map(|r| r.to_vec()).collect();
                inputs.extend(r32.iter().map(|r| r.iter().map(|&x| u64::from(x)).collect::<Vec<_>>()));
                if let Some(out) = w64.first_mut() {
                    let new = fold(&inputs, out);
                    out.copy_from_slice(&new);
                }
                if let Some(out) = w32.first_mut() {
                    let old: Vec<u64> = out.iter().map(|&x| u64::from(x)).collect();
                    let new = fold(&inputs, &old);
                    out.iter_mut().zip(new).for_each(|(o, n)| *o = n as u32);
                }
                Ok(())
            })
            .expect("push");
    }
    dist.wait().blocking_wait().expect("the program");
    for v in 0..nvars {
        if owners[v] == rank {
            let value = if wide(v) {
                value_of(&v64[&v])
            } else {
                v32[&v].read().blocking_wait().expect("read").iter().map(|&x| u64::from(x)).collect()
            };
            assert_eq!(value, model[v], "seed {seed}: var v{v} on its owner, rank {rank}");
        }
    }
    let stats = dist.stats();
    if size == 1 {
        assert_eq!((stats.sent, stats.received), (0, 0), "a world of one moves nothing");
    }
}

/// A copy is stale once the owner writes again: the next read elsewhere
/// receives the new version, and a read of an unchanged var moves nothing.
fn a_write_on_the_owner_makes_copies_stale(world: &Collectives) {
    let dist = Distribution::new(world).expect("a distribution");
    let size = dist.size();
    let (a, b) =
        (dist.var("a", 0, 1, || vec![0u64]).unwrap(), dist.var("b", size - 1, 1, || vec![0u64]).unwrap());
    let set = |x: u64| dist.op("set a").write(&a).run(move |(), (mut w,)| Ok(w[0] = x)).unwrap();
    let copy =
        || dist.op("b = a").read(&a).write(&b).run(|(r,), (mut w,)| Ok(w[0] = w[0] * 100 + r[0])).unwrap();
    set(1);
    copy();
    copy(); // `a` unchanged: no second transfer
    set(2);
    copy();
    dist.wait().blocking_wait().expect("the program");
    if dist.rank() == size - 1 {
        assert_eq!(value_of(&b), vec![10102], "b saw a's versions 1, 1, 2");
    }
    let stats = dist.stats();
    if size > 1 && dist.rank() == 0 {
        assert_eq!(stats.sent, 2, "a sent once per version read elsewhere");
    }
    if size > 1 && dist.rank() == size - 1 {
        assert_eq!(stats.received, 2);
    }
}

/// An op that fails on its rank fails, with its error, the op that reads
/// its output on another rank; a repair on the owner, sent again, heals it.
fn a_failure_on_the_owner_fails_the_readers_elsewhere(world: &Collectives) {
    let dist = Distribution::new(world).expect("a distribution");
    let size = dist.size();
    let last = size - 1;
    let a = dist.var("a", 0, 1, || vec![0u64]).unwrap();
    let b = dist.var("b", last, 1, || vec![0u64]).unwrap();
    let failed = dist
        .op("fails")
        .write(&a)
        .run(|(), (_w,)| -> Result<(), depengine::BoxError> { Err("disk full".into()) })
        .unwrap();
    let reader = dist.op("reads a").read(&a).write(&b).run(|(r,), (mut w,)| Ok(w[0] = r[0] + 1)).unwrap();
    if dist.rank() == 0 {
        assert!(failed.expect("runs on rank 0").blocking_wait().is_err());
    }
    if dist.rank() == last {
        let err = reader.expect("runs on the last rank").blocking_wait().unwrap_err();
        let chain = format!("{err:#}");
        assert!(chain.contains("disk full"), "the reader's error names the owner's: {chain}");
        if size > 1 {
            let from_owner =
                std::iter::successors(Some(&err as &dyn std::error::Error), |e| e.source()).any(|e| {
                    matches!(
                        e.downcast_ref::<TransferError>(),
                        Some(TransferError::FailedOnOwner { rank: 0, .. })
                    )
                });
            assert!(from_owner, "a transfer error from rank 0 in the chain: {chain}");
        }
    }
    dist.op("repairs a").write(&a).repair(true).run(|(), (mut w,)| Ok(w[0] = 7)).unwrap();
    let _ = dist.wait().blocking_wait();
    // The repair replaced the error on the owner; `b` still carries the
    // reader's error, so the next read writes it from scratch.
    dist.op("fixes b").read(&a).write(&b).repair(true).run(|(r,), (mut w,)| Ok(w[0] = r[0] + 1)).unwrap();
    dist.wait().blocking_wait().expect("repaired, sent again, and read");
    if dist.rank() == 0 {
        assert_eq!(value_of(&a), vec![7]);
    }
    if dist.rank() == last {
        assert_eq!(value_of(&b), vec![8], "b read the repaired a");
    }
}

/// An op that writes vars of two owners is refused on every rank alike,
/// and the program goes on (nothing hangs).
fn an_op_writing_two_owners_is_refused_everywhere(world: &Collectives) {
    let dist = Distribution::new(world).expect("a distribution");
    let size = dist.size();
    let a = dist.var("a", 0, 1, || vec![1u64]).unwrap();
    let b = dist.var("b", size - 1, 1, || vec![2u64]).unwrap();
    let refused = dist.op("both").write(&a).write(&b).run(|_, _| Ok(()));
    if size > 1 {
        let err = refused.unwrap_err();
        assert!(err.to_string().contains("writes `a` (owned by rank 0) and `b`"), "{err}");
    } else {
        refused.expect("one owner in a world of one");
    }
    dist.op("after").read(&a).write(&b).run(|(r,), (mut w,)| Ok(w[0] += r[0])).unwrap();
    dist.wait().blocking_wait().expect("the program after the refusal");
    if dist.rank() == size - 1 {
        assert_eq!(value_of(&b), vec![3]);
    }
}

/// Ranks whose programs differ before a transfer: the receiver's op fails,
/// naming the sender and both sides' versions of the transfer, instead of
/// taking data it did not ask for.
fn a_different_program_is_named_by_the_receiver(world: &Collectives) {
    let dist = Distribution::new(world).expect("a distribution");
    let rank = dist.rank();
    let a = dist.var("a", 0, 2, || vec![1u64, 2]).unwrap();
    let b = dist.var("b", 1, 2, || vec![0u64, 0]).unwrap();
    // Rank 1 names the op differently: the programs' hashes part here.
    let name = if rank == 1 { "scale by two" } else { "scale" };
    dist.op(name).write(&a).run(|(), (mut w,)| Ok(w.iter_mut().for_each(|x| *x *= 2))).unwrap();
    let read = dist.op("copy").read(&a).write(&b).run(|(r,), (mut w,)| Ok(w.copy_from_slice(&r))).unwrap();
    if rank == 1 {
        let err = read.expect("runs on rank 1").blocking_wait().unwrap_err();
        let chain = format!("{err:#}");
        let mismatch = std::iter::successors(Some(&err as &dyn std::error::Error), |e| e.source()).any(|e| {
            matches!(e.downcast_ref::<TransferError>(), Some(TransferError::Mismatch { rank: 0, .. }))
        });
        assert!(mismatch, "a mismatch naming rank 0: {chain}");
    }
    // Compared at the wait, the programs differ on every rank.
    programs_differ_everywhere(&dist);
}

/// `dist.wait().blocking_wait()` fails on this rank with the programs' difference, naming
/// another rank.
fn programs_differ_everywhere(dist: &Distribution<'_>) {
    let err = dist.wait().blocking_wait().unwrap_err();
    let chain = format!("{err:#}");
    let named = std::iter::successors(Some(&err as &dyn std::error::Error), |e| e.source()).find_map(|e| {
        match e.downcast_ref::<TransferError>() {
            Some(TransferError::ProgramsDiffer { rank, .. }) => Some(*rank),
            _ => None,
        }
    });
    let rank = named.unwrap_or_else(|| panic!("rank {}: no ProgramsDiffer in {chain}", dist.rank()));
    assert_ne!(rank, dist.rank(), "the rank named is another: {chain}");
}

/// One rank pushes an op the others do not, which waits for a transfer
/// that is never sent: the wait compares the programs, fails on every
/// rank instead of hanging, and gives the receive up.
fn a_rank_with_an_extra_transfer_does_not_hang(world: &Collectives) {
    let dist = Distribution::new(world).expect("a distribution");
    let rank = dist.rank();
    let a = dist.var("a", 0, 1 << 16, || vec![3u64; 1 << 16]).unwrap();
    let b = dist.var("b", 1, 1, || vec![0u64]).unwrap();
    let extra = if rank == 1 {
        dist.op("extra").read(&a).write(&b).run(|(r,), (mut w,)| Ok(w[0] = r[0])).unwrap()
    } else {
        None
    };
    programs_differ_everywhere(&dist);
    if let Some(extra) = extra {
        let err = extra.blocking_wait().unwrap_err();
        assert!(format!("{err:#}").contains("given up"), "{err:#}");
    }
    // What was given up may hold its var for good: nothing more is taken.
    let refused = dist.op("after").read(&a).write(&b).run(|_, _| Ok(())).unwrap_err();
    assert!(format!("{refused:#}").contains("different programs"), "{refused:#}");
    assert!(dist.var::<u64>("later", 0, 1, || vec![0]).is_err());
}

/// The last rank's engine is shut down, so it refuses every op: its sends
/// go out as headers that say so (the readers elsewhere fail with the
/// reason), and what others send it is taken and dropped (the senders are
/// not left waiting). Nothing hangs.
fn a_rank_whose_engine_refuses_leaves_no_one_waiting(world: &Collectives) {
    let (rank, size) = (world.rank(), world.size());
    let last = size - 1;
    let engine = depengine::EngineBuilder::from_env().cpu_workers(1).build().expect("engine");
    if rank == last {
        futures::executor::block_on(engine.shutdown(depengine::ShutdownMode::Drain)).expect("shut down");
    }
    let dist = Distribution::with_engine(world, &engine).expect("a distribution");
    let theirs = dist.var("theirs", last, 1, || vec![5u64]).unwrap();
    let mine = dist.var("mine", 0, 1, || vec![1u64]).unwrap();
    let to_them = dist.var("to them", last, 1, || vec![0u64]).unwrap();
    let read = dist.op("reads theirs").read(&theirs).write(&mine).run(|(r,), (mut w,)| Ok(w[0] += r[0]));
    let sent = dist.op("sends mine").read(&mine).write(&to_them).run(|(r,), (mut w,)| Ok(w[0] = r[0]));
    if rank == 0 {
        let err = read.expect("pushed on rank 0").expect("runs on rank 0").blocking_wait().unwrap_err();
        let chain = format!("{err:#}");
        assert!(chain.contains("refused on rank"), "the reader names the refusal: {chain}");
    }
    if rank == last {
        assert!(sent.unwrap_err().is_shutdown(), "the last rank's own op is refused");
    }
    let _ = dist.wait().blocking_wait();
    drop(dist);
    if rank != last {
        let _ = futures::executor::block_on(engine.shutdown(depengine::ShutdownMode::Drain));
    }
}

/// Rank 0 owns a var of 4096 elements that rank 1 registered with 2: the
/// elements rank 0 sends do not fit what rank 1 posted, and rank 1's op
/// fails naming both sides, instead of MPI ending the job.
fn a_size_that_differs_is_named_not_fatal(world: &Collectives) {
    let dist = Distribution::new(world).expect("a distribution");
    let rank = dist.rank();
    let len = if rank == 1 { 2 } else { 4096 };
    let a = dist.var("a", 0, len, || vec![1u64; 4096]).unwrap();
    let b = dist.var("b", 1, 1, || vec![0u64]).unwrap();
    let read = dist.op("reads a").read(&a).write(&b).run(|(r,), (mut w,)| Ok(w[0] = r[0])).unwrap();
    if rank == 1 {
        let err = read.expect("runs on rank 1").blocking_wait().unwrap_err();
        let mismatch = std::iter::successors(Some(&err as &dyn std::error::Error), |e| e.source()).any(|e| {
            matches!(e.downcast_ref::<TransferError>(), Some(TransferError::Mismatch { rank: 0, .. }))
        });
        assert!(mismatch, "a mismatch naming rank 0: {err:#}");
    }
    programs_differ_everywhere(&dist);
}

/// While the owner is still writing a var, the explainer of the rank that
/// reads it shows the reading op waiting on its copy, behind the transfer
/// that will fill it.
fn the_explainer_shows_a_reader_waiting_for_its_transfer(world: &Collectives) {
    let dist = Distribution::new(world).expect("a distribution");
    let rank = dist.rank();
    let a = dist.var("slow", 0, 1, || vec![1u64]).unwrap();
    let b = dist.var("b", 1, 1, || vec![0u64]).unwrap();
    dist.op("writes slowly")
        .write(&a)
        .run(|(), (mut w,)| {
            std::thread::sleep(Duration::from_millis(300));
            w[0] = 2;
            Ok(())
        })
        .unwrap();
    dist.op("reads slow").read(&a).write(&b).run(|(r,), (mut w,)| Ok(w[0] = r[0])).unwrap();
    if rank == 1 {
        std::thread::sleep(Duration::from_millis(100));
        let pending = world.engine().debug_pending().to_string();
        assert!(pending.contains("reads slow") && pending.contains("receive slow from rank 0"), "{pending}");
    }
    dist.wait().blocking_wait().expect("the program");
    if rank == 1 {
        assert_eq!(value_of(&b), vec![2]);
    }
}

/// Every rank holds 128 distributions alive, the most at once: the 129th
/// is refused on every rank alike, with a clear error, and one more may be
/// made once one is dropped.
fn the_129th_live_distribution_is_refused_everywhere(world: &Collectives) {
    let mut live: Vec<Distribution<'_>> = (0..depengine::mpi::distributed::MAX_LIVE)
        .map(|_| Distribution::new(world).expect("a distribution"))
        .collect();
    let err = Distribution::new(world).expect_err("the 129th live distribution");
    assert!(err.is_invalid_argument() && err.to_string().contains("drop one"), "{err}");
    live.swap_remove(40);
    let again = Distribution::new(world).expect("a distribution once one is dropped");
    let v = again.var("v", 0, 1, || vec![9u64]).unwrap();
    again.wait().blocking_wait().expect("wait");
    if world.rank() == 0 {
        assert_eq!(value_of(&v), [9]);
    }
    drop(again);
    drop(live);
}

/// Two distributions alive together whose numbers differ by 128 (they
/// once shared their transfers' tags) each move a var from rank 0 to the
/// last rank. The last rank holds the first one's copy, so that the second
/// one's receive is posted first, while rank 0 sends the first one's
/// message first: each receive still takes its own distribution's message.
fn distributions_alive_together_never_take_each_others_messages(world: &Collectives) {
    let (rank, last) = (world.rank(), world.size() - 1);
    let first = Distribution::new(world).expect("a distribution");
    for _ in 0..127 {
        drop(Distribution::new(world).expect("a distribution"));
    }
    let second = Distribution::new(world).expect("a distribution");
    let a1 = first.var("a", 0, 4, || vec![1u64; 4]).unwrap();
    let b1 = first.var("b", last, 4, || vec![0u64; 4]).unwrap();
    let a2 = second.var("a", 0, 4, || vec![2u64; 4]).unwrap();
    let b2 = second.var("b", last, 4, || vec![0u64; 4]).unwrap();
    let held = (rank == last).then(|| a1.read().blocking_wait().expect("the copy, held"));
    first.op("copy").read(&a1).write(&b1).run(|(r,), (mut w,)| Ok(w.copy_from_slice(&r))).expect("pushed");
    second.op("copy").read(&a2).write(&b2).run(|(r,), (mut w,)| Ok(w.copy_from_slice(&r))).expect("pushed");
    if rank == last {
        assert_eq!(value_of(&b2), [2; 4], "the second distribution's own message");
    }
    drop(held);
    second.wait().blocking_wait().expect("the second distribution");
    first.wait().blocking_wait().expect("the first distribution");
    if rank == last {
        assert_eq!(value_of(&b1), [1; 4], "the first distribution's own message");
    }
}

/// Run alone (`--panic-on-the-last-rank`, by `tests/mpi/run.sh`): the last
/// rank panics out of `main` while the others wait for it in a
/// distribution's wait. Its unwinding ends the whole job (`mpirun` exits
/// non-zero at once) instead of finalising MPI, which would wait for the
/// others for ever.
fn the_last_rank_panics_out_of_main(world: &Collectives) -> ! {
    let (rank, last) = (world.rank(), world.size() - 1);
    let dist = Distribution::new(world).expect("a distribution");
    let a = dist.var("a", 0, 4, || vec![1u64; 4]).unwrap();
    let b = dist.var("b", last, 4, || vec![0u64; 4]).unwrap();
    dist.op("copy").read(&a).write(&b).run(|(r,), (mut w,)| Ok(w.copy_from_slice(&r))).expect("pushed");
    if rank == last {
        panic!("rank {rank} panics out of main, on purpose");
    }
    let _ = dist.wait().blocking_wait();
    std::thread::sleep(Duration::from_secs(600));
    unreachable!("the job ended while rank {rank} waited")
}

/// The errors of `err`'s chain, as text.
fn chain(err: &depengine::Error) -> String {
    format!("{err:#}")
}

/// Rank 1 pushes an op that reads a var of rank 0's, which rank 0's
/// program never sends, and every rank drops the distribution without a
/// wait. The drop compares the programs: every rank's world engine reports
/// the difference in bounded time (no rank waits for ever for the receive),
/// rank 1's receive is given up, and a later distribution that takes the
/// same tag slot moves its vars as it should.
fn a_drop_without_a_wait_whose_programs_differ_ends_everywhere(world: &Collectives) {
    let rank = world.rank();
    // What failed before is reported now, not by the checks below.
    let _ = world.engine().wait_for_all().blocking_wait();
    let start = Instant::now();
    let extra = {
        let dist = Distribution::new(world).expect("a distribution");
        let a = dist.var("a", 0, 4, || vec![1u64; 4]).unwrap();
        let b = dist.var("b", 1, 4, || vec![0u64; 4]).unwrap();
        if rank == 1 {
            dist.op("extra").read(&a).write(&b).run(|(a,), (mut b,)| Ok(b.copy_from_slice(&a))).unwrap()
        } else {
            None
        }
        // Dropped here, without a wait.
    };
    let err = world.engine().wait_for_all().blocking_wait().expect_err("the programs differ");
    assert!(chain(&err).contains("different programs"), "rank {rank}: {}", chain(&err));
    if let Some(extra) = extra {
        let err = extra.blocking_wait().expect_err("its receive was given up");
        assert!(chain(&err).contains("given up"), "{}", chain(&err));
    }
    assert!(start.elapsed() < Duration::from_secs(60), "ended in {:?}", start.elapsed());
    let last = world.size() - 1;
    let dist = Distribution::new(world).expect("a distribution on the slot again");
    let a = dist.var("a", 0, 2, || vec![5u64, 6]).unwrap();
    let b = dist.var("b", last, 2, || vec![0u64; 2]).unwrap();
    dist.op("copy").read(&a).write(&b).run(|(a,), (mut b,)| Ok(b.copy_from_slice(&a))).unwrap();
    dist.wait().blocking_wait().expect("the later distribution");
    if rank == last {
        assert_eq!(value_of(&b), [5, 6]);
    }
}

/// On a Tokio runtime's thread, a distribution's wait is awaited (its
/// blocking form refuses at once), a var is read with `.await`, and a
/// distribution dropped with a transfer still to come returns at once: the
/// comm thread starts the slot's next distribution's transfers after it.
fn a_wait_is_a_future_and_a_drop_blocks_no_runtime_thread(world: &Collectives) {
    let (rank, last) = (world.rank(), world.size() - 1);
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime");
    runtime.block_on(async {
        let dist = Distribution::new(world).expect("a distribution");
        let a = dist.var("a", 0, 3, || vec![1.5f64, 2.5, 3.5]).unwrap();
        let n = dist.var("n", 0, 1, || vec![7u32]).unwrap();
        let b = dist.var("b", last, 3, || vec![0.0f64; 3]).unwrap();
        dist.op("scale")
            .read(&a)
            .read(&n)
            .write(&b)
            .run(|(a, n), (mut b,)| {
                b.iter_mut().zip(a.iter()).for_each(|(b, a)| *b = a * f64::from(n[0]));
                Ok(())
            })
            .unwrap();
        let refused = dist.wait().blocking_wait().expect_err("a blocking wait on a runtime's thread");
        assert!(refused.is_blocking_in_runtime(), "{refused}");
        dist.wait().await.expect("the wait, awaited");
        if rank == last {
            assert_eq!(&b.read().await.expect("b")[..], [10.5, 17.5, 24.5]);
        }
        // Rank 0 writes `a` slowly, so its send is still to come when
        // every rank drops the distribution.
        dist.op("slow")
            .write(&a)
            .run(|(), (mut a,)| {
                std::thread::sleep(Duration::from_millis(200));
                a[0] = 9.0;
                Ok(())
            })
            .unwrap();
        dist.op("again").read(&a).write(&b).run(|(a,), (mut b,)| Ok(b.copy_from_slice(&a))).unwrap();
        let start = Instant::now();
        drop(dist);
        assert!(start.elapsed() < Duration::from_millis(100), "the drop took {:?}", start.elapsed());
        // The next distribution takes the same slot; its transfer goes
        // after the first one's.
        let dist = Distribution::new(world).expect("a distribution");
        let c = dist.var("c", 0, 1, || vec![3u16]).unwrap();
        let d = dist.var("d", last, 1, || vec![0u16]).unwrap();
        dist.op("copy").read(&c).write(&d).run(|(c,), (mut d,)| Ok(d[0] = c[0])).unwrap();
        dist.wait().await.expect("the second distribution");
        if rank == last {
            assert_eq!(&d.read().await.expect("d")[..], [3]);
        }
    });
    world.engine().wait_for_all().blocking_wait().expect("the first distribution's ops, done");
}
