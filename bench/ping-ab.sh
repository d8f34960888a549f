#!/usr/bin/env bash
# A/B of two (or more) overdue binaries on the SQLite spread load, alternating
# them on the same machine in one run: on a shared 2-CPU machine the speed
# moves between runs by more than most changes are worth, so two builds are
# compared only run against run, never against an older table.
#
# For each round and each binary: a fresh server and database, CHECKS checks
# created through the API, 3 s of warm-up load, then `wrk -t2 -c64` for
# BENCH_DURATION with bench/spread.lua (uniformly over the checks); prints
# req/s and p99. No no-op baseline: the binaries are compared to each other.
#
# Usage: bench/ping-ab.sh CHECKS BIN_A BIN_B [BIN...]
#   e.g. bench/ping-ab.sh 10000 /tmp/overdue-before target/release/overdue
# Environment: BENCH_ROUNDS (default 3), BENCH_DURATION (default 10s).
# Needs: wrk, curl.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
(($# >= 3)) || { echo "usage: $0 CHECKS BIN_A BIN_B [BIN...]" >&2; exit 2; }
N=$1
shift
for tool in wrk curl; do
    command -v "$tool" >/dev/null || { echo "$tool is not installed" >&2; exit 1; }
done
pid=
W=
trap '[[ -n $pid ]] && kill "$pid" 2>/dev/null; [[ -n $W ]] && rm -rf "$W"; true' EXIT
for round in $(seq "${BENCH_ROUNDS:-3}"); do
    for bin in "$@"; do
        W=$(mktemp -d "${TMPDIR:-/tmp}/overdue-ab.XXXXXX")
        port=$((20000 + RANDOM % 20000))
        cat >"$W/overdue.toml" <<T
listen = "127.0.0.1:$port"
database_url = "sqlite://$W/overdue.db"
shutdown_timeout = "5s"
T
        (
            while read -r v; do unset "$v"; done < <(compgen -e | grep '^OVERDUE_' || true)
            RUST_LOG=warn exec "$bin" --config "$W/overdue.toml" serve
        ) >"$W/server.log" 2>&1 &
        pid=$!
        up=
        for _ in $(seq 600); do
            curl -sf "http://127.0.0.1:$port/readyz" >/dev/null && { up=1; break; }
            sleep 0.2
        done
        [[ -n $up ]] || { echo "$bin did not start: $(cat "$W/server.log")" >&2; exit 1; }
        "$ROOT/bench/create-checks.sh" "http://127.0.0.1:$port" "$N" ab >"$W/uuids.txt"
        wrk -t2 -c64 -d3s -s "$ROOT/bench/spread.lua" "http://127.0.0.1:$port" -- "$W/uuids.txt" >/dev/null
        sleep 2
        out=$(wrk -t2 -c64 -d"${BENCH_DURATION:-10s}" --latency -s "$ROOT/bench/spread.lua" \
            "http://127.0.0.1:$port" -- "$W/uuids.txt")
        rps=$(awk '/Requests\/sec/ {print $2}' <<<"$out")
        p99=$(awk '$1 == "99%" {print $2}' <<<"$out")
        echo "round=$round bin=$bin checks=$N req/s=$rps p99=$p99"
        kill "$pid"
        wait "$pid" || true
        pid=
        rm -rf "$W"
        W=
    done
done
