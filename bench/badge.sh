#!/usr/bin/env bash
# What an unknown badge key costs (issue #41 §4): for each binary, a fresh
# server on SQLite with CHECKS checks, then the client time of
# GET /badge/<unknown key>.svg (a 404) and of a known check's badge, median
# (longest) of BENCH_READS (default 21). Before the badge look-ups were
# indexed, every unknown key read and hashed every check.
#
# Usage: bench/badge.sh CHECKS BIN [BIN...]
#   e.g. bench/badge.sh 10000 /tmp/overdue-before target/release/overdue
# Needs: curl, sha1sum.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
(($# >= 2)) || { echo "usage: $0 CHECKS BIN [BIN...]" >&2; exit 2; }
N=$1
shift
READS=${BENCH_READS:-21}
pid=
W=
cleanup() {
    [[ -n $pid ]] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
    [[ -n $W ]] && rm -rf "$W"
    true
}
trap cleanup EXIT

# Median and longest of READS client times (ms) of GET URL.
timed() {
    local url=$1 times=()
    for _ in $(seq "$READS"); do
        times+=("$(curl -s -o /dev/null -w '%{time_total}' "$url")")
    done
    printf '%s\n' "${times[@]}" | sort -n |
        awk '{a[NR]=$1} END {printf "%.2f ms (%.2f ms)", a[int((NR+1)/2)]*1000, a[NR]*1000}'
}

for bin in "$@"; do
    W=$(mktemp -d "${TMPDIR:-/tmp}/overdue-badge.XXXXXX")
    port=$((20000 + RANDOM % 20000))
    cat >"$W/overdue.toml" <<T
listen = "127.0.0.1:$port"
database_url = "sqlite://$W/overdue.db"
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
    "$ROOT/bench/create-checks.sh" "http://127.0.0.1:$port" "$N" badge >"$W/uuids.txt"
    base="http://127.0.0.1:$port"
    unknown="$base/badge/$(printf '0%.0s' $(seq 40)).svg"
    # A known check's badge: its unique key (the SHA-1 of the first 16 hex digits).
    first=$(head -n1 "$W/uuids.txt" | tr -d '-' | cut -c1-16)
    known="$base/badge/$(printf %s "$first" | sha1sum | cut -c1-40).svg"
    status=$(curl -s -o /dev/null -w '%{http_code}' "$unknown")
    [[ $status == 404 ]] || { echo "unknown key answered $status" >&2; exit 1; }
    status=$(curl -s -o /dev/null -w '%{http_code}' "$known")
    [[ $status == 200 ]] || { echo "known key answered $status" >&2; exit 1; }
    echo "bin=$bin checks=$N unknown_key=$(timed "$unknown") check_badge=$(timed "$known")"
    kill "$pid"
    wait "$pid" || true
    pid=
    rm -rf "$W"
    W=
done
