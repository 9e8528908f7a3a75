#!/usr/bin/env bash
# Runs tests/mpi_collectives.rs, tests/mpi_distributed.rs, examples/cholesky_mpi.rs
# and examples/data_parallel.rs, by every
# rank of a world of 1, 2 and 4 processes on this machine: shared memory between the ranks, the control
# plane on loopback only, every run bounded in time. Needs Open MPI
# (Debian: libopenmpi-dev openmpi-bin libclang-dev).
set -euo pipefail
cd "$(dirname "$0")/../.."

# mpirun refuses root unless told; the rest keeps every byte on this
# machine (shared memory, no TCP or UCX) and lets 4 ranks share 2 cores.
# Each run passes --bind-to none: a rank's engine threads and comm thread
# would otherwise share the one core Open MPI binds it to.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_pml=ob1 OMPI_MCA_btl=self,vader
export OMPI_MCA_oob_tcp_if_include=lo OMPI_MCA_btl_tcp_if_include=lo
export OMPI_MCA_btl_vader_single_copy_mechanism=none
export OMPI_MCA_rmaps_base_oversubscribe=1

# The unit tests of the MPI module (signatures, tags, distributions'
# slots): they need the feature, and so MPI's headers to build.
cargo test --release --features mpi --lib mpi::

# The MPI module's doc tests: among them the compile_fail proofs that a
# distributed op's body touches only what it declares, with each var's
# element type, and that no handle to a distributed var's engine var is
# given out.
cargo test --release --features mpi --doc mpi::

# Built with feature `nccl` (which brings `mpi` and `cuda`): its GPU
# collectives' checks run on a machine with a GPU per rank and skip,
# saying so, elsewhere.
# Binaries are run from where cargo put them (tools/built.sh), so that a
# CARGO_TARGET_DIR elsewhere works.
bin=$(tools/built.sh test --release --features nccl --test mpi_collectives --no-run)
for np in 1 2 4; do
    echo "mpi_collectives under mpirun -np $np"
    timeout 300 mpirun --bind-to none -np "$np" "$bin"
done

# Tiles across ranks (depengine::mpi::distributed): random programs against a
# sequential model, stale copies, failures, refusals and mismatches.
dist=$(tools/built.sh test --release --features nccl --test mpi_distributed --no-run)
for np in 1 2 4; do
    echo "mpi_distributed under mpirun -np $np"
    timeout 300 mpirun --bind-to none -np "$np" "$dist"
done

# A rank that panics out of main while the other waits for it ends the
# whole job at once, failed (not by the timeout: 124).
echo "mpi_distributed: a rank that panics out of main ends the job"
code=0
timeout 60 mpirun --bind-to none -np 2 "$dist" --panic-on-the-last-rank >/dev/null 2>&1 || code=$?
if [ "$code" -eq 0 ] || [ "$code" -eq 124 ]; then
    echo "tests/mpi/run.sh: a rank that panicked left the job exiting with $code" >&2
    exit 1
fi

# The tiled Cholesky across ranks checks itself on rank 0: the gathered
# factor bit for bit against the sequential run's, and the residual.
cholesky=$(tools/built.sh build --release --features mpi --example cholesky_mpi)
for np in 1 2 4; do
    echo "cholesky_mpi under mpirun -np $np"
    timeout 300 mpirun --bind-to none -np "$np" "$cholesky" 512 64
done

# The data-parallel example checks itself: the same weights on every rank,
# bit for bit, and those of one process training on the whole batch.
example=$(tools/built.sh build --release --features mpi --example data_parallel)
for np in 1 2 4; do
    echo "data_parallel under mpirun -np $np"
    timeout 300 mpirun --bind-to none -np "$np" "$example"
done
timeout 300 mpirun --bind-to none -np 2 "$example" --comm-after-backward

# DEPENGINE_PROFILE under mpirun: each rank writes its trace to a file of
# its own (the rank in the name), none replacing another's.
profiles=$(mktemp -d)
DEPENGINE_PROFILE="$profiles/trace.json" timeout 300 mpirun --bind-to none -x DEPENGINE_PROFILE -np 2 \
    "$example" >/dev/null
for rank in 0 1; do
    if [ ! -s "$profiles/trace.rank$rank.json" ]; then
        echo "tests/mpi/run.sh: no trace of rank $rank in $(ls "$profiles")" >&2
        exit 1
    fi
done
if [ -e "$profiles/trace.json" ]; then
    echo "tests/mpi/run.sh: a trace without a rank in its name" >&2
    exit 1
fi
# The Cholesky's --profile: one trace per rank.
timeout 300 mpirun --bind-to none -np 2 "$cholesky" 256 64 --profile "$profiles/chol" >/dev/null
for rank in 0 1; do
    if [ ! -s "$profiles/chol/cholesky_mpi-n256-b64.rank$rank.json" ]; then
        echo "tests/mpi/run.sh: no Cholesky trace of rank $rank" >&2
        exit 1
    fi
done
rm -rf "$profiles"
echo "DEPENGINE_PROFILE under mpirun: one trace per rank"
