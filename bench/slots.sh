#!/usr/bin/env bash
# The slot ledger's reads at scale (SPEC §14, issue #42's level): the first
# page of `GET /api/v1/slots?state=failed` (dead letters across checks) with
# 100,000 open dead-letter slots, on both databases.
#
# For each database: a fresh server (release build) and database, CHECKS
# checks created through the API, then OPEN ledger rows written straight
# into `slot_ledger` (as many failed as missed, spread over the checks and
# over the last days), then REQUESTS timed requests of each query with curl
# from a second process: the first page (100 rows) of failed, of failed and
# missed, the tenth page (following cursors), and one check's slots. Prints
# p50 / p99 / max and writes them into BENCHMARKS.md between
# <!-- slots-bench:start --> and <!-- slots-bench:end -->.
#
# Usage: bench/slots.sh [BIN]      (default target/release/overdue)
# Environment: BENCH_CHECKS (default 1000), BENCH_OPEN (default 100000),
#   BENCH_REQUESTS (default 50), OVERDUE_BENCH_POSTGRES_URL (default
#   postgres://postgres@127.0.0.1:5432/test; a fresh database next to it is
#   made and dropped).
# Needs: curl, sqlite3, psql.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=${1:-$ROOT/target/release/overdue}
CHECKS=${BENCH_CHECKS:-1000}
OPEN=${BENCH_OPEN:-100000}
REQUESTS=${BENCH_REQUESTS:-50}
PG_ADMIN_URL=${OVERDUE_BENCH_POSTGRES_URL:-postgres://postgres@127.0.0.1:5432/test}
for tool in curl sqlite3 psql; do
    command -v "$tool" >/dev/null || { echo "$tool is not installed" >&2; exit 1; }
done
[[ -x $BIN ]] || { echo "no binary at $BIN (cargo build --release)" >&2; exit 1; }
W=$(mktemp -d)
pid=
pgdb=
cleanup() {
    [[ -n $pid ]] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
    [[ -n $pgdb ]] && psql "$PG_ADMIN_URL" -qAt -c "DROP DATABASE IF EXISTS $pgdb" >/dev/null 2>&1
    rm -rf "$W"
}
trap cleanup EXIT

port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

start() { # database_url
    local p
    p=$(port)
    cat >"$W/overdue.toml" <<T
listen = "127.0.0.1:$p"
database_url = "$1"
T
    (env -u OVERDUE_URL RUST_LOG=warn "$BIN" --config "$W/overdue.toml" serve >"$W/server.log" 2>&1) &
    pid=$!
    BASE=http://127.0.0.1:$p
    for _ in $(seq 1 200); do
        curl -sf "$BASE/readyz" >/dev/null 2>&1 && return 0
        sleep 0.1
    done
    echo "the server did not start" >&2
    cat "$W/server.log" >&2
    exit 1
}

stop() {
    kill "$pid" && wait "$pid" 2>/dev/null || true
    pid=
}

# The SQL that writes OPEN rows: row i belongs to check (i mod CHECKS) + first
# id, its slot is i hours before a fixed instant (distinct per check), failed
# for even i, missed for odd.
rows_sql() { # first_check_id
    cat <<SQL
WITH RECURSIVE n(i) AS (SELECT CAST(0 AS BIGINT) UNION ALL SELECT i + 1 FROM n WHERE i + 1 < $OPEN)
INSERT INTO slot_ledger (check_id, slot, state, record, updated_at)
SELECT $1 + (i % $CHECKS), 1796688000000 - i * 3600000,
       CASE WHEN i % 2 = 0 THEN 'failed' ELSE 'missed' END,
       '{"slot":' || (1796688000000 - i * 3600000) || ',"state":"' ||
       CASE WHEN i % 2 = 0 THEN 'failed' ELSE 'missed' END || '"}',
       1796688000000
FROM n;
-- The checks existed before their oldest slot.
UPDATE checks SET created_at = 1796688000000 - CAST($OPEN AS BIGINT) * 3600000;
SQL
}

# p50 p99 max of REQUESTS timed GETs of a path, in ms.
timed() { # path
    local i
    for i in $(seq 1 "$REQUESTS"); do
        curl -s -o /dev/null -w '%{time_total}\n' "$BASE$1"
    done | sort -n | awk '{a[NR]=$1*1000} END {
        p50=a[int(NR*0.5)+(NR*0.5>int(NR*0.5))]; p99=a[int(NR*0.99)+(NR*0.99>int(NR*0.99))];
        printf "%.1f / %.1f / %.1f", p50, p99, a[NR]}'
}

# The path of the tenth page of failed slots, following cursors.
tenth_page() {
    local cursor="" i
    for i in $(seq 1 9); do
        cursor=$(curl -sf "$BASE/api/v1/slots?state=failed${cursor:+&cursor=$cursor}" |
            python3 -c 'import sys, json; print(json.load(sys.stdin)["next_cursor"])')
    done
    echo "/api/v1/slots?state=failed&cursor=$cursor"
}

measure() { # label
    local first page10 rows
    first=$(curl -sf "$BASE/api/v1/slots?state=failed" | python3 -c 'import sys, json; print(len(json.load(sys.stdin)["slots"]))')
    [[ $first == 100 ]] || { echo "the first page holds $first slots, not 100" >&2; exit 1; }
    page10=$(tenth_page)
    rows="| $1 | $CHECKS | $OPEN | $(timed '/api/v1/slots?state=failed') | $(timed '/api/v1/slots?state=failed,missed') | $(timed "$page10") | $(timed "/api/v1/checks/b-7/slots?state=failed,missed&limit=100") |"
    echo "$rows"
    RESULTS+=("$rows")
}

RESULTS=()
# SQLite.
start "sqlite://$W/overdue.db"
"$ROOT/bench/create-checks.sh" "$BASE" "$CHECKS" b >/dev/null
first=$(sqlite3 "$W/overdue.db" "SELECT MIN(id) FROM checks")
rows_sql "$first" | sqlite3 "$W/overdue.db"
sqlite3 "$W/overdue.db" "ANALYZE"
measure SQLite
stop

# PostgreSQL.
pgdb=overdue_slots_$RANDOM$RANDOM
psql "$PG_ADMIN_URL" -qAt -c "CREATE DATABASE $pgdb" >/dev/null
pgurl="${PG_ADMIN_URL%/*}/$pgdb"
start "$pgurl"
"$ROOT/bench/create-checks.sh" "$BASE" "$CHECKS" b >/dev/null
first=$(psql "$pgurl" -qAt -c "SELECT MIN(id) FROM checks")
rows_sql "$first" | psql "$pgurl" -qAt -v ON_ERROR_STOP=1 >/dev/null
psql "$pgurl" -qAt -c "ANALYZE" >/dev/null
measure PostgreSQL
stop

commit=$(git -C "$ROOT" rev-parse --short HEAD)$(git -C "$ROOT" diff --quiet || echo -dirty)
section=$(cat <<MD
<!-- slots-bench:start -->
## The slot ledger's reads

Issue #42's level: \`GET /api/v1/slots?state=failed\` with 100,000 open
dead-letter slots answers its first page in at most 50 ms. \`bench/slots.sh\`
starts the release server on a fresh database, creates the checks through
the API, writes the open rows straight into \`slot_ledger\` (half failed, half
missed, spread over the checks and the last days), and times $REQUESTS requests
of each query with curl from a second process (p50 / p99 / max, in ms, whole
request). Pages hold 100 slots.

- Date: $(date -u '+%Y-%m-%d %H:%M UTC')
- Commit: $commit
- Machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(free -g | awk '/Mem:/ {print $2}') GiB RAM
- Reproduce: \`bench/slots.sh\` (after \`cargo build --release\`)

| database | checks | open slots | first page of failed | first page of failed, missed | tenth page of failed | one check's slots |
|---|---:|---:|---:|---:|---:|---:|
$(printf '%s\n' "${RESULTS[@]}")
<!-- slots-bench:end -->
MD
)
python3 - "$ROOT/BENCHMARKS.md" "$section" <<'PY'
import sys
path, section = sys.argv[1], sys.argv[2]
text = open(path).read()
start, end = "<!-- slots-bench:start -->", "<!-- slots-bench:end -->"
if start in text:
    a = text.index(start)
    b = text.index(end) + len(end)
    text = text[:a] + section + text[b:]
else:
    text = text.rstrip("\n") + "\n\n" + section + "\n"
open(path, "w").write(text)
PY
echo "written to BENCHMARKS.md"
