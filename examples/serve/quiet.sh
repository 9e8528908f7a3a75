#!/usr/bin/env bash
# A quiet service (PERFORMANCE.md, "Four applications against their anchors"): one client on one
# keep-alive connection asks GET /predict once every GAP microseconds,
# REQUESTS times, against each variant of examples/serve in turn,
# alternated round by round. For each run it prints the client's latency
# percentiles and the server's CPU time per request (all its threads,
# from /proc/PID/task/*/schedstat, Linux).
#
#   examples/serve/quiet.sh [ROUNDS] [REQUESTS] [GAP_US] [VARIANTS...]
#
# Variants as serve's --variant (engine, engine-pool, rwlock,
# rwlock-blocking). Needs python3. Every run is bounded in time.
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds=${1:-2}
requests=${2:-3000}
gap=${3:-1000}
shift 3 || true
variants=("${@:-engine rwlock}")
read -r -a variants <<<"${variants[*]}"
bin=$(tools/built.sh build --release -p depengine-serve --bin serve 2>/dev/null)
dir=$(mktemp -d)
# Ends only the server this script started, by its id.
pid=
trap 'rm -rf "$dir"; [ -z "$pid" ] || kill "$pid" 2>/dev/null || true' EXIT

cat >"$dir/client.py" <<'PY'
import http.client, os, sys, time
pid, n, gap = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]) / 1e6

def cpu_ns():
    total = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/schedstat") as f:
                total += int(f.read().split()[0])
        except OSError:
            pass
    return total

conn = http.client.HTTPConnection("127.0.0.1", 3998, timeout=5)
for _ in range(100):  # warm-up
    conn.request("GET", "/predict?x=0.5")
    conn.getresponse().read()
lat = []
before = cpu_ns()
next_at = time.perf_counter()
for _ in range(n):
    next_at += gap
    t = time.perf_counter()
    conn.request("GET", "/predict?x=0.5")
    r = conn.getresponse()
    r.read()
    assert r.status == 200, r.status
    lat.append(time.perf_counter() - t)
    pause = next_at - time.perf_counter()
    if pause > 0:
        time.sleep(pause)
cpu = (cpu_ns() - before) / n / 1e3
lat.sort()
q = lambda p: lat[min(len(lat) - 1, int(p * len(lat)))] * 1e6
print(f"p50_us={q(0.5):.0f} p90_us={q(0.9):.0f} p99_us={q(0.99):.0f} server_cpu_us_per_request={cpu:.1f}")
PY

for round in $(seq 1 "$rounds"); do
    for variant in "${variants[@]}"; do
        "$bin" --addr 127.0.0.1:3998 --variant "$variant" --workers 2 >/dev/null 2>&1 &
        pid=$!
        for _ in $(seq 1 100); do
            (exec 3<>/dev/tcp/127.0.0.1/3998) 2>/dev/null && break
            sleep 0.05
        done
        out=$(timeout 120 python3 "$dir/client.py" "$pid" "$requests" "$gap" || echo "failed")
        echo "round=$round variant=$variant requests=$requests gap_us=$gap $out"
        kill -TERM "$pid" 2>/dev/null || true
        timeout 30 tail --pid="$pid" -f /dev/null || kill -KILL "$pid" 2>/dev/null || true
    done
done
