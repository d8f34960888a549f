#!/usr/bin/env bash
# A/B of two (or more) overdue binaries on the spread load, alternating
# them on the same machine in one run: on a shared 2-CPU machine the speed
# moves between runs by more than most changes are worth, so two builds are
# compared only run against run, never against an older table.
#
# For each round and each binary: a fresh server and database, CHECKS checks
# created through the API and pinged once each (new -> up, as in
# bench/ping.sh), 3 s of warm-up load, then `wrk -t2 -c64` for BENCH_DURATION
# with bench/spread.lua (uniformly over the checks); prints req/s and p99. No
# no-op baseline: the binaries are compared to each other.
#
# A BIN may be a wrapper script that sets environment for the real binary
# (OVERDUE_* variables are unset before BIN starts, so the config file below
# is all the server reads unless the wrapper sets more).
#
# Usage: bench/ping-ab.sh CHECKS BIN_A BIN_B [BIN...]
#   e.g. bench/ping-ab.sh 10000 /tmp/overdue-before target/release/overdue
# Environment: BENCH_ROUNDS (default 3), BENCH_DURATION (default 10s),
#   BENCH_DATABASE (sqlite, the default, or postgres: a fresh database
#   overdue_ab_<random> next to the one OVERDUE_BENCH_POSTGRES_URL names,
#   default postgres://postgres@127.0.0.1:5432/test, dropped after the run).
# Needs: wrk, curl; psql for PostgreSQL.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
(($# >= 3)) || { echo "usage: $0 CHECKS BIN_A BIN_B [BIN...]" >&2; exit 2; }
N=$1
shift
for tool in wrk curl; do
    command -v "$tool" >/dev/null || { echo "$tool is not installed" >&2; exit 1; }
done
DATABASE=${BENCH_DATABASE:-sqlite}
PG_ADMIN_URL=${OVERDUE_BENCH_POSTGRES_URL:-postgres://postgres@127.0.0.1:5432/test}
case $DATABASE in
sqlite) ;;
postgres) command -v psql >/dev/null || { echo "psql is not installed" >&2; exit 1; } ;;
*) echo "BENCH_DATABASE must be sqlite or postgres, got '$DATABASE'" >&2; exit 2 ;;
esac
pg_admin() { PGCONNECT_TIMEOUT=5 psql "$PG_ADMIN_URL" -qAt -v ON_ERROR_STOP=1 "$@"; }
pid=
W=
PG_DB=
cleanup() {
    [[ -n $pid ]] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
    [[ -n $W ]] && rm -rf "$W"
    [[ -n $PG_DB ]] && pg_admin -c "DROP DATABASE IF EXISTS \"$PG_DB\" WITH (FORCE)" >/dev/null
    true
}
trap cleanup EXIT
for round in $(seq "${BENCH_ROUNDS:-3}"); do
    for bin in "$@"; do
        W=$(mktemp -d "${TMPDIR:-/tmp}/overdue-ab.XXXXXX")
        port=$((20000 + RANDOM % 20000))
        if [[ $DATABASE == postgres ]]; then
            PG_DB="overdue_ab_$RANDOM$RANDOM"
            pg_admin -c "CREATE DATABASE \"$PG_DB\"" >/dev/null
            url="${PG_ADMIN_URL%/*}/$PG_DB"
        else
            url="sqlite://$W/overdue.db"
        fi
        cat >"$W/overdue.toml" <<T
listen = "127.0.0.1:$port"
database_url = "$url"
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
        # shellcheck disable=SC2016
        xargs -n 250 -P 4 bash -c '
            url=$0; args=()
            for u in "$@"; do args+=(--next -sS --max-time 30 -o /dev/null "$url/ping/$u"); done
            curl "${args[@]:1}"
        ' "http://127.0.0.1:$port" <"$W/uuids.txt"
        sleep 3
        wrk -t2 -c64 -d3s -s "$ROOT/bench/spread.lua" "http://127.0.0.1:$port" -- "$W/uuids.txt" >/dev/null
        sleep 2
        out=$(wrk -t2 -c64 -d"${BENCH_DURATION:-10s}" --latency -s "$ROOT/bench/spread.lua" \
            "http://127.0.0.1:$port" -- "$W/uuids.txt")
        rps=$(awk '/Requests\/sec/ {print $2}' <<<"$out")
        p99=$(awk '$1 == "99%" {print $2}' <<<"$out")
        echo "round=$round bin=$bin database=$DATABASE checks=$N req/s=$rps p99=$p99"
        kill "$pid"
        wait "$pid" || true
        pid=
        rm -rf "$W"
        W=
        if [[ -n $PG_DB ]]; then
            pg_admin -c "DROP DATABASE IF EXISTS \"$PG_DB\" WITH (FORCE)" >/dev/null
            PG_DB=
        fi
    done
done
