#!/usr/bin/env bash
# The real-GPU checks of the `cuda` backend, for a machine with a CUDA GPU.
#
#   tools/real-gpu.sh build [BUNDLE]   where a Rust toolchain is: builds, in
#                                      release, the real-GPU tests
#                                      (tests/gpu_cuda.rs and
#                                      gpu_cuda_differential.rs), gpu_bench,
#                                      gpu_pipeline and, where Open MPI is
#                                      installed, the NCCL collectives
#                                      (tests/mpi_collectives.rs with
#                                      feature `nccl`) into BUNDLE
#                                      (default target/real-gpu)
#   tools/real-gpu.sh run [BUNDLE] [OUT]
#                                      on the GPU machine (no Rust needed):
#                                      runs them, the tests with
#                                      DEPENGINE_REQUIRE_GPU=1, and writes
#                                      OUT/summary.md (default OUT:
#                                      BUNDLE/out) with each log beside it
#   tools/real-gpu.sh                  both, on a GPU machine with Rust
#
# The bundle is a folder of x86-64 Linux programs: copy it to the GPU
# machine with this script. They load libcuda and NVRTC at run time; `run`
# finds an NVRTC of any CUDA major version (cudarc looks for a few names
# only) and puts it on the loader's path. Exits non-zero if a test fails
# or a program fails its own checks.
set -uo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
mode=${1:-all}
bundle=${2:-$here/target/real-gpu}

build() {
    set -e
    mkdir -p "$bundle"
    cd "$here"
    local test exe
    for test in gpu_cuda gpu_cuda_differential; do
        exe=$(cargo test --release --features cuda --test $test --no-run --message-format=json 2>/dev/null \
            | grep -o '"executable":"[^"]*"' | tail -1 | cut -d'"' -f4)
        cp "$exe" "$bundle/$test"
    done
    for exe in gpu_bench gpu_pipeline; do
        cp "$(tools/built.sh build --release --features cuda --example $exe)" "$bundle/"
    done
    # The NCCL collectives (feature `nccl`), where Open MPI is here to
    # build them (they run under the GPU machine's mpirun).
    exe=$(cargo test --release --features nccl --test mpi_collectives --no-run --message-format=json 2>/dev/null \
        | grep -o '"executable":"[^"]*"' | tail -1 | cut -d'"' -f4) || true
    if [ -n "$exe" ]; then
        cp "$exe" "$bundle/mpi_collectives"
    else
        echo "no Open MPI here: the NCCL collectives are left out"
    fi
    cp "$0" "$bundle/real-gpu.sh"
    set +e
    echo "built $bundle: $(ls "$bundle" | tr '\n' ' ')"
}

# Puts an NVRTC on the loader's path under a name cudarc tries
# (libnvrtc.so): CUDA 13's is libnvrtc.so.13, which cudarc built for 12.x
# never asks for.
find_nvrtc() {
    local found
    found=$(ldconfig -p 2>/dev/null | awk '/libnvrtc\.so/ {print $NF}' | grep -v builtins | head -1)
    if [ -z "$found" ]; then
        found=$(find /usr/local/cuda*/ /usr/lib /opt /usr/local/lib -name 'libnvrtc.so*' 2>/dev/null \
            | grep -v builtins | sort -V | tail -1)
    fi
    if [ -z "$found" ]; then
        echo "NVRTC: none found (the tests will say so)"
        return
    fi
    local shim
    shim=$(mktemp -d)
    ln -s "$found" "$shim/libnvrtc.so"
    export LD_LIBRARY_PATH="$shim:$(dirname "$found")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    echo "NVRTC: $found"
}

run() {
    local out=${3:-$bundle/out}
    mkdir -p "$out"
    local summary=$out/summary.md status=0
    {
        echo "# Real-GPU checks, $(date -u +%Y-%m-%dT%H:%MZ)"
        echo
        echo '```'
        nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv 2>&1
        find_nvrtc
        echo '```'
    } >"$summary"
    find_nvrtc >/dev/null
    step() {
        local name=$1
        shift
        local start=$SECONDS
        DEPENGINE_REQUIRE_GPU=1 timeout 300 "$@" >"$out/$name.log" 2>&1
        local rc=$?
        [ $rc -eq 0 ] || status=1
        {
            echo
            echo "## $name: exit $rc, $((SECONDS - start)) s"
            echo
            echo '```'
            grep -E '^(test |test result|[0-9]+ seeds|nccl|mpi|CUDA driver|device|chain|latency|cross|running|[0-9]+ (tiles|GPU ops)|thread .* panicked|skipped)' \
                "$out/$name.log" | head -60
            [ $rc -eq 0 ] || tail -30 "$out/$name.log"
            echo '```'
        } >>"$summary"
    }
    step tests "$bundle/gpu_cuda" --test-threads=1
    DEPENGINE_CUDA_DIFF_SEEDS=${DEPENGINE_CUDA_DIFF_SEEDS:-2000} step differential "$bundle/gpu_cuda_differential" --nocapture
    step gpu_bench "$bundle/gpu_bench" all 5000
    step gpu_pipeline "$bundle/gpu_pipeline"
    if [ -x "$bundle/mpi_collectives" ] && command -v mpirun >/dev/null; then
        # One rank per GPU, on this machine only (see tests/mpi/run.sh).
        local gpus
        gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
        OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_pml=ob1 OMPI_MCA_btl=self,vader \
            OMPI_MCA_oob_tcp_if_include=lo OMPI_MCA_btl_vader_single_copy_mechanism=none \
            step nccl mpirun --bind-to none -np "${gpus:-1}" "$bundle/mpi_collectives"
    fi
    cat "$summary"
    return $status
}

case $mode in
    build) build ;;
    run) run "$@" ;;
    all) build && run run "$bundle" ;;
    *) echo "usage: $0 [build|run] [BUNDLE] [OUT]" >&2; exit 2 ;;
esac
