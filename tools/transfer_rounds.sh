#!/usr/bin/env bash
# A distributed var's transfer through the engine (`mpi_bench transfer`)
# against rsmpi's immediate send and receive (`mpi_bench p2p`), at np 2,
# the two run in turn for ROUNDS rounds (default 5) in one sitting: each
# round's µs per message at 8 B, 64 KiB and 4 MiB, then per size the
# median of the rounds and the median of the rounds' ratios.
# PERFORMANCE.md (*Tiles across ranks*) quotes what it prints.
#
#   tools/transfer_rounds.sh [ROUNDS]
#
# Needs Open MPI; the environment is tests/mpi/run.sh's (shared memory
# only, loopback, every run bounded in time).
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-5}

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_pml=ob1 OMPI_MCA_btl=self,vader
export OMPI_MCA_oob_tcp_if_include=lo OMPI_MCA_btl_tcp_if_include=lo
export OMPI_MCA_btl_vader_single_copy_mechanism=none
export OMPI_MCA_rmaps_base_oversubscribe=1

bench=$(tools/built.sh build --release --features mpi --example mpi_bench)
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for round in $(seq "$rounds"); do
    for mode in transfer p2p; do
        timeout 300 mpirun --bind-to none -np 2 "$bench" "$mode" |
            sed -n "s/^mode=\([a-z0-9]*\) np=2 bytes=\([0-9]*\) .*median_us=\([0-9.]*\)$/$round \1 \2 \3/p" >>"$out"
    done
done
echo "round mode bytes median_us"
cat "$out"
python3 - "$out" <<'PY'
import statistics, sys
rows = [line.split() for line in open(sys.argv[1])]
for size in sorted({int(r[2]) for r in rows}):
    by = {(r[0], r[1]): float(r[3]) for r in rows if int(r[2]) == size}
    rounds = sorted({r for r, _ in by})
    t = [by[(r, "transfer")] for r in rounds]
    p = [by[(r, "p2p")] for r in rounds]
    ratios = [a / b for a, b in zip(t, p)]
    print(f"{size} B: transfer median {statistics.median(t):.2f} us ({min(t):.2f}-{max(t):.2f}), "
          f"p2p median {statistics.median(p):.2f} us ({min(p):.2f}-{max(p):.2f}), "
          f"ratio median {statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f})")
PY
