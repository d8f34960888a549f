#!/usr/bin/env bash
# Instructions per ping (valgrind's callgrind), SQLite: a measure of the ping
# path's work that does not move with the machine's speed, for comparing
# where the work goes in the one-check and the spread loads (BENCHMARKS.md,
# "Ping ingestion: instructions per ping"). Not a throughput figure: under
# callgrind the server does ~1,000 req/s, so its batches are small and each
# round writes about one summary per ping.
#
# It creates the checks and takes the first ping of each with the plain
# binary (the new -> up changes), restarts the server under callgrind with
# counting off, lets it replay and settle (20 s, then 10 s of load), counts
# 20 s of `wrk -t2 -c64` load, and prints Ir per answered request with the
# callgrind output file for callgrind_annotate.
#
# Usage: bench/ping-instructions.sh [CHECKS]   (default 10000; 1 = one check)
# Needs: valgrind, wrk, curl. BIN= picks the binary (default: a release build).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
N=${1:-10000}
if [[ -z ${BIN:-} ]]; then
    (cd "$ROOT" && cargo build --release --bin overdue)
    BIN=$ROOT/target/release/overdue
fi
for tool in valgrind callgrind_control callgrind_annotate wrk curl; do
    command -v "$tool" >/dev/null || { echo "$tool is not installed" >&2; exit 1; }
done
W=$(mktemp -d "${TMPDIR:-/tmp}/overdue-ping-ir.XXXXXX")
port=$((20000 + RANDOM % 20000))
cat >"$W/overdue.toml" <<T
listen = "127.0.0.1:$port"
database_url = "sqlite://$W/overdue.db"
shutdown_timeout = "5s"
T
pid=
trap '[[ -n $pid ]] && kill "$pid" 2>/dev/null; true' EXIT
start() {
    (
        while read -r v; do unset "$v"; done < <(compgen -e | grep '^OVERDUE_' || true)
        RUST_LOG=warn exec "$@" --config "$W/overdue.toml" serve
    ) >"$W/server.log" 2>&1 &
    pid=$!
    for _ in $(seq 600); do
        curl -sf "http://127.0.0.1:$port/readyz" >/dev/null && return
        sleep 0.2
    done
    echo "the server did not start (log: $W/server.log)" >&2
    exit 1
}
load() { wrk -t2 -c64 -d"$1" -s "$ROOT/bench/spread.lua" "http://127.0.0.1:$port" -- "$W/uuids.txt"; }

start "$BIN"
"$ROOT/bench/create-checks.sh" "http://127.0.0.1:$port" "$N" ir >"$W/uuids.txt"
load 5s >/dev/null
kill "$pid"; wait "$pid" || true

start valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file="$W/callgrind.out" "$BIN"
sleep 20
load 10s >/dev/null
callgrind_control -i on "$pid" >/dev/null
load 20s >"$W/wrk.txt"
callgrind_control -i off "$pid" >/dev/null
kill "$pid"; wait "$pid" || true
pid=
requests=$(awk '/requests in/ {print $1}' "$W/wrk.txt")
ir=$(callgrind_annotate "$W/callgrind.out" 2>/dev/null | awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1}')
echo "checks=$N requests=$requests Ir=$ir Ir_per_request=$((ir / requests))"
echo "callgrind_annotate --inclusive=yes $W/callgrind.out"
