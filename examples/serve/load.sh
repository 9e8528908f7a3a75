#!/usr/bin/env bash
# Load figures for examples/serve (PERFORMANCE.md, "Four applications
# against their anchors"): wrk against each variant in turn, alternated round by round, at
# 1, 64 and 256 connections, reads only and reads with updates (one request
# in 50 is an update), while a probe measures /health once every 5 ms.
#
#   examples/serve/load.sh [ROUNDS] [SECONDS] [VARIANTS...]
#
# LOAD_CONNS (default "1 64 256") and LOAD_MIXES ("reads mixed") narrow
# the runs.
#
# A variant is one of serve's (`engine`, `engine-pool`, `rwlock`,
# `rwlock-blocking`), optionally with an engine spin budget in
# microseconds (`engine@100`) and engine settings from the environment,
# each as `+NAME=VALUE` for `DEPENGINE_NAME` (`engine+PUSHER_RUNS_AT=1`).
# Needs wrk (Debian package `wrk`) and python3. Prints one line per run.
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds=${1:-2}
secs=${2:-8}
shift 2 || true
variants=("${@:-engine rwlock}")
read -r -a variants <<<"${variants[*]}"
bin=$(tools/built.sh build --release -p depengine-serve --bin serve 2>/dev/null)
dir=$(mktemp -d)
# Ends only the server this script started, by its id.
pid=
trap 'rm -rf "$dir"; [ -z "$pid" ] || kill "$pid" 2>/dev/null || true' EXIT

cat >"$dir/mixed.lua" <<'LUA'
local n = 0
request = function()
  n = n + 1
  if n % 50 == 0 then
    return wrk.format("POST", "/update")
  end
  return wrk.format("GET", "/predict?x=0.5")
end
LUA

cat >"$dir/probe.py" <<'PY'
import http.client, sys, time
end = time.time() + float(sys.argv[1])
lat = []
conn = http.client.HTTPConnection("127.0.0.1", 3999, timeout=5)
while time.time() < end:
    t = time.perf_counter()
    conn.request("GET", "/health")
    conn.getresponse().read()
    lat.append(time.perf_counter() - t)
    time.sleep(0.005)
lat.sort()
q = lambda p: lat[min(len(lat) - 1, int(p * len(lat)))] * 1e3
print(f"health_p50_ms={q(0.5):.3f} health_p99_ms={q(0.99):.3f} health_n={len(lat)}")
PY

cat >"$dir/p99.py" <<'PY'
import re, sys
buckets = []
for line in sys.stdin:
    m = re.match(r'serve_http_request_seconds_bucket\{le="([^"]+)",route="/health"\} (\d+)', line)
    if m:
        buckets.append((float(m.group(1)), int(m.group(2))))
total = buckets[-1][1] if buckets else 0
upper = next((le for le, n in buckets if n >= 0.99 * total), float("nan")) if total else float("nan")
print(f"health_served_p99_ms<={upper * 1e3:.3f}")
PY

for round in $(seq 1 "$rounds"); do
  for conns in ${LOAD_CONNS:-1 64 256}; do
    threads=$(( conns < 2 ? 1 : 2 ))
    for mix in ${LOAD_MIXES:-reads mixed}; do
      for variant in "${variants[@]}"; do
        IFS=+ read -r -a parts <<<"$variant"
        spin=(env)
        for setting in "${parts[@]:1}"; do spin+=("DEPENGINE_$setting"); done
        [[ ${parts[0]} == *@* ]] && spin+=("DEPENGINE_SPIN_US=${parts[0]#*@}")
        "${spin[@]}" "$bin" --addr 127.0.0.1:3999 --variant "${parts[0]%@*}" --max-in-flight 100000 2>/dev/null &
        pid=$!
        for _ in $(seq 1 100); do curl -s 127.0.0.1:3999/health >/dev/null && break; sleep 0.05; done
        # Warm up (pools started, connections open).
        wrk -t"$threads" -c"$conns" -d1s "http://127.0.0.1:3999/predict?x=0.5" >/dev/null
        script=()
        [ "$mix" = mixed ] && script=(-s "$dir/mixed.lua")
        python3 "$dir/probe.py" "$secs" >"$dir/probe.txt" &
        out=$(wrk -t"$threads" -c"$conns" -d"${secs}s" --latency "${script[@]}" "http://127.0.0.1:3999/predict?x=0.5")
        wait $!
        # The server's own view of /health: its latency histogram's p99.
        served=$(curl -s 127.0.0.1:3999/metrics | python3 "$dir/p99.py")
        kill -TERM "$pid"; wait "$pid" || true
        rps=$(awk '/Requests\/sec/ {print $2}' <<<"$out")
        p50=$(awk '$1=="50%" {print $2}' <<<"$out")
        p99=$(awk '$1=="99%" {print $2}' <<<"$out")
        non2xx=$(awk '/Non-2xx/ {print $5}' <<<"$out")
        echo "round=$round conns=$conns mix=$mix variant=$variant rps=$rps p50=$p50 p99=$p99 non2xx=${non2xx:-0} $(cat "$dir/probe.txt") $served"
      done
    done
  done
done
