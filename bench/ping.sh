#!/usr/bin/env bash
# Ping ingestion benchmark: the service levels of SPEC §12.
#
# For each database it starts `overdue serve` on a fresh database, creates one
# check plus 10,000 more through the API, and measures with wrk:
#
#   no-op | overdue, all pings to one check | no-op | overdue, pings spread over
#   10,000 checks | no-op
#
# Each overdue figure is reported as a ratio to the mean of the two no-op runs
# around it (examples/noop.rs, an axum handler that answers 200 "OK" and does
# nothing), because the machine's own speed moves between runs. All runs use the
# same wrk Lua script (bench/spread.lua), so wrk does the same work per request
# in every run. Every check gets its first ping before the first run (see
# first_pings).
#
# The whole sequence is repeated BENCH_RUNS times (databases alternating, each
# run on a fresh server and database), because on a shared 2-CPU machine one
# 10 s run's ratio is good to about ±10%. Each cell reports the median ratio and
# the median p99 of its runs, and lists every run. Results are printed and
# written to BENCHMARKS.md.
#
# Usage: bench/ping.sh
#
# Environment:
#   BENCH_DURATION              wrk duration per run (default 10s)
#   BENCH_CONNECTIONS           wrk connections (default 64)
#   BENCH_DATABASES             databases to measure (default "sqlite postgres")
#   BENCH_RUNS                  how many times the sequence runs (default 3)
#   OVERDUE_BENCH_POSTGRES_URL  admin URL of a PostgreSQL server; a database
#                               overdue_bench_<random> is created next to the one
#                               it names and dropped afterwards
#                               (default postgres://postgres@127.0.0.1:5432/test)
#   BENCH_PG_WAL_MB             before each PostgreSQL run, WAL is written until the
#                               server keeps this much in segments for reuse (default
#                               1024, capped at its max_wal_size; 0: skip), so that the
#                               run measures a server whose WAL is sized for the load
#                               (BENCHMARKS.md, "Ping ingestion: 2026-12-01 night")
#   BENCH_OUTPUT_DIR            if set, wrk's full outputs, the uuid files and the
#                               server logs are kept there
#   CARGO_TARGET_DIR            honoured, as by cargo
#
# Needs: cargo, wrk, curl; psql for PostgreSQL.
set -euo pipefail

DURATION=${BENCH_DURATION:-10s}
CONNECTIONS=${BENCH_CONNECTIONS:-64}
DATABASES=${BENCH_DATABASES:-sqlite postgres}
RUNS=${BENCH_RUNS:-3}
PG_ADMIN_URL=${OVERDUE_BENCH_POSTGRES_URL:-postgres://postgres@127.0.0.1:5432/test}
OUTPUT_DIR=${BENCH_OUTPUT_DIR:-}
PG_WAL_MB=${BENCH_PG_WAL_MB:-1024}
[[ -z $OUTPUT_DIR || $OUTPUT_DIR == /* ]] || OUTPUT_DIR=$PWD/$OUTPUT_DIR
THREADS=2
N_CHECKS=10000
# Parallel curl processes creating checks, each with a batch on one keep-alive connection.
CREATE_PARALLEL=4
CREATE_BATCH=250

cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$PWD
LUA=$ROOT/bench/spread.lua
START_SECONDS=$SECONDS

die() {
    echo "bench/ping.sh: $*" >&2
    exit 1
}
warn() {
    echo "WARNING: $*" >&2
    WARNINGS+=("$*")
}
# 12345678 -> 12,345,678
fmt_int() { awk -v n="$1" 'BEGIN { s = sprintf("%d", n); o = ""; while (length(s) > 3) { o = "," substr(s, length(s) - 2) o; s = substr(s, 1, length(s) - 3) } print s o }'; }
# Hides the password of a URL before it is printed.
redact() { sed -E 's#(://[^:/@]+):[^@]*@#\1:***@#' <<<"$1"; }

command -v wrk >/dev/null || die "wrk is not installed. Install it with: apt-get install wrk (Debian/Ubuntu) or brew install wrk (macOS)"
command -v curl >/dev/null || die "curl is not installed"
command -v cargo >/dev/null || die "cargo is not installed"
[[ $CONNECTIONS =~ ^[0-9]+$ ]] || die "BENCH_CONNECTIONS must be a number, got '$CONNECTIONS'"
[[ $RUNS =~ ^[0-9]+$ ]] && ((RUNS >= 1)) || die "BENCH_RUNS must be a number of at least 1, got '$RUNS'"
[[ $PG_WAL_MB =~ ^[0-9]+$ ]] || die "BENCH_PG_WAL_MB must be a number of megabytes, got '$PG_WAL_MB'"
for db in $DATABASES; do
    [[ $db == sqlite || $db == postgres ]] || die "BENCH_DATABASES: unknown database '$db' (sqlite, postgres)"
done

# wrk's duration (10s, 2m, 1h, or seconds) in seconds, to bound each wrk run.
duration_seconds() {
    local d=$1
    case $d in
        *s) echo "${d%s}" ;;
        *m) echo $((${d%m} * 60)) ;;
        *h) echo $((${d%h} * 3600)) ;;
        *) echo "$d" ;;
    esac
}
DURATION_S=$(duration_seconds "$DURATION")
[[ $DURATION_S =~ ^[0-9]+$ ]] || die "BENCH_DURATION must look like 10s, 1m or 30, got '$DURATION'"

WORK=$(mktemp -d "${TMPDIR:-/tmp}/overdue-ping-bench.XXXXXX")
export WORK_DIR=$WORK
PIDS=()
PG_DB=""
WARNINGS=()
HTTP_PROBLEMS=0

stop_pid() {
    local pid=$1
    kill -TERM "$pid" 2>/dev/null || return 0
    for _ in $(seq 1 100); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
}

# Removes a process that has ended from the ones the cleanup stops.
forget_pid() {
    local pid kept=()
    for pid in "${PIDS[@]}"; do [[ $pid == "$1" ]] || kept+=("$pid"); done
    PIDS=("${kept[@]}")
}

drop_pg_db() {
    [[ -n $PG_DB ]] || return 0
    PGCONNECT_TIMEOUT=5 psql "$PG_ADMIN_URL" -qAt -v ON_ERROR_STOP=1 \
        -c "DROP DATABASE IF EXISTS \"$PG_DB\" WITH (FORCE)" >/dev/null 2>&1 ||
        PGCONNECT_TIMEOUT=5 psql "$PG_ADMIN_URL" -qAt -v ON_ERROR_STOP=1 \
            -c "DROP DATABASE IF EXISTS \"$PG_DB\"" >/dev/null ||
        echo "bench/ping.sh: could not drop PostgreSQL database $PG_DB" >&2
    PG_DB=""
}

# PostgreSQL writes its WAL into 16 MB segment files. When it needs a segment
# and has none kept for reuse, the backend that needs it creates one (writes
# 16 MB of zeros and fsyncs it) while holding the WAL write lock, and every
# commit on the server waits: 40-60 ms measured on this kind of machine, one
# stall per 16 MB of WAL (BENCHMARKS.md). A server that has run a load keeps its segments
# for reuse at each checkpoint; a fresh one creates them.
pg_admin() { PGCONNECT_TIMEOUT=5 psql "$PG_ADMIN_URL" -qAt -v ON_ERROR_STOP=1 "$@"; }
# Segment files in pg_wal (needs superuser or pg_monitor), or nothing.
pg_wal_segments() {
    pg_admin -c "SELECT count(*) FROM pg_ls_waldir() WHERE name ~ '^[0-9A-F]{24}\$'" 2>/dev/null || true
}
# presize_wal DATABASE_URL: writes WAL (a table written and dropped) and
# checkpoints until pg_wal holds PG_WAL_MB of segments or stops growing. Sets
# WAL_NOTE.
presize_wal() {
    local url=$1 want have prev before max_mb seg_mb rows i
    WAL_NOTE=""
    ((PG_WAL_MB > 0)) || return 0
    have=$(pg_wal_segments)
    seg_mb=$(pg_admin -c "SELECT setting::bigint / 1048576 FROM pg_settings WHERE name = 'wal_segment_size'" 2>/dev/null || true)
    max_mb=$(pg_admin -c "SELECT setting FROM pg_settings WHERE name = 'max_wal_size'" 2>/dev/null || true)
    if ! [[ $have =~ ^[0-9]+$ && $seg_mb =~ ^[0-9]+$ && $max_mb =~ ^[0-9]+$ ]] || ((seg_mb == 0)); then
        warn "PostgreSQL: cannot read pg_wal (needs superuser or pg_monitor); its WAL was not sized before the run"
        return 0
    fi
    want=$(((PG_WAL_MB < max_mb ? PG_WAL_MB : max_mb) / seg_mb))
    before=$have
    for i in 1 2 3 4 5 6; do
        ((have >= want)) && break
        rows=$(((want - have) * seg_mb * 1024 * 1024 / 2000 + 1000))
        PGCONNECT_TIMEOUT=5 psql "$url" -qAt -v ON_ERROR_STOP=1 \
            -c "CREATE TABLE overdue_bench_wal AS SELECT repeat(md5(g::text), 60) AS pad FROM generate_series(1, $rows) g" \
            -c "DROP TABLE overdue_bench_wal" -c "CHECKPOINT" >/dev/null ||
            { warn "PostgreSQL: could not write WAL to size it before the run"; return 0; }
        prev=$have
        have=$(pg_wal_segments)
        [[ $have =~ ^[0-9]+$ ]] || return 0
        # The server keeps no more than its estimate of the WAL between two
        # checkpoints allows.
        ((have > prev)) || break
    done
    WAL_NOTE="pg_wal held $before segments, $have after sizing (wanted $want)"
}

cleanup() {
    local rc=$?
    local pid
    for pid in "${PIDS[@]}"; do stop_pid "$pid"; done
    drop_pg_db
    if [[ -n $OUTPUT_DIR ]]; then
        if mkdir -p "$OUTPUT_DIR"; then
            cp -r "$WORK"/results/. "$WORK"/*.log "$OUTPUT_DIR"/ 2>/dev/null || true
        fi
    fi
    rm -rf "$WORK"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# A TCP port nothing on 127.0.0.1 answers on (the server fails loudly if it is taken).
# Picked below the kernel's range of ephemeral ports where it leaves room, so
# that no client connection (wrk's, curl's) holds it.
free_port() {
    local p _ low=20000 span=40000 eph
    eph=$(awk '{print $1}' /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || true)
    if [[ $eph =~ ^[0-9]+$ ]] && ((eph > 12000)); then
        low=10000 span=$((eph - 10000))
    fi
    for _ in $(seq 1 100); do
        p=$((low + RANDOM % span))
        if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
            echo "$p"
            return 0
        fi
    done
    die "no free TCP port found"
}

# ---------------------------------------------------------------------------
# Build

echo "== building (cargo build --release --bin overdue --example noop)"
cargo build --release --bin overdue --example noop
TARGET_DIR=$(cargo metadata --format-version 1 --no-deps |
    grep -o '"target_directory":"[^"]*"' | head -n1 | sed 's/^"target_directory":"//; s/"$//')
[[ -n $TARGET_DIR ]] || die "cannot find cargo's target directory"
OVERDUE_BIN=$TARGET_DIR/release/overdue
NOOP_BIN=$TARGET_DIR/release/examples/noop
[[ -x $OVERDUE_BIN && -x $NOOP_BIN ]] || die "built binaries not found in $TARGET_DIR/release"
# A release build leaves ~250 MB of dirty pages, which the kernel writes back
# about 30 s later: in the middle of the first run, where SQLite's writes
# waited for it (p99 of 180-230 ms in that run only). Written now instead.
sync

# ---------------------------------------------------------------------------
# Machine and revision, taken before the load starts

COMMIT=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
# BENCHMARKS.md is what this script writes: its own edits do not make the tree dirty.
if [[ $COMMIT != unknown && -n $(git status --porcelain -- . ':(exclude)BENCHMARKS.md' 2>/dev/null) ]]; then
    COMMIT="$COMMIT-dirty"
fi
NPROC=$(nproc)
CPU_MODEL=$(awk -F': *' '/^model name/ {print $2; exit}' /proc/cpuinfo 2>/dev/null || true)
CPU_MODEL=${CPU_MODEL:-unknown CPU}
LOADAVG=$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo unknown)
DATE=$(date -u '+%Y-%m-%d %H:%M UTC')

# ---------------------------------------------------------------------------
# The no-op baseline, one process for the whole run

echo "== starting the no-op baseline"
"$NOOP_BIN" 127.0.0.1:0 2>"$WORK/noop.log" &
PIDS+=($!)
NOOP_PID=$!
NOOP_URL=""
for _ in $(seq 1 100); do
    NOOP_URL=$(grep -o 'http://[0-9.:]*' "$WORK/noop.log" | head -n1 || true)
    [[ -n $NOOP_URL ]] && break
    kill -0 "$NOOP_PID" 2>/dev/null || break
    sleep 0.1
done
[[ -n $NOOP_URL ]] || die "the no-op server did not start: $(cat "$WORK/noop.log")"
echo "   $NOOP_URL"

# ---------------------------------------------------------------------------
# overdue

SERVER_PID=""
SERVER_URL=""

# start_server DATABASE_URL LOG: starts `overdue serve` and waits until /readyz answers 200.
# A port picked as free can still be taken before the server binds it (wrk's own
# connections use ports from the ephemeral range): then it tries another.
start_server() {
    local attempt port
    for attempt in 1 2 3 4 5; do
        # Not inside the call: free_port's die would only leave a subshell.
        port=$(free_port) || exit 1
        start_server_on "$@" "$port" && return 0
        stop_server
        echo "   port taken, trying another (attempt $attempt)"
    done
    die "overdue could not bind a port in 5 attempts"
}

# start_server_on DATABASE_URL LOG PORT: returns 1 if the port was taken.
start_server_on() {
    local database_url=$1 port=$3
    SERVER_LOG=$2
    SERVER_URL="http://127.0.0.1:$port"
    cat >"$WORK/overdue.toml" <<EOF
listen = "127.0.0.1:$port"
database_url = "$database_url"
shutdown_timeout = "5s"
EOF
    # OVERDUE_* variables from the caller's environment would override the file.
    (
        while read -r v; do unset "$v"; done < <(compgen -e | grep '^OVERDUE_' || true)
        RUST_LOG=info exec "$OVERDUE_BIN" --config "$WORK/overdue.toml" serve
    ) >"$SERVER_LOG" 2>&1 &
    SERVER_PID=$!
    PIDS+=("$SERVER_PID")
    for _ in $(seq 1 300); do
        if ! kill -0 "$SERVER_PID" 2>/dev/null; then
            grep -q 'Address already in use' "$SERVER_LOG" && return 1
            tail -n 20 "$SERVER_LOG" >&2
            die "overdue exited during start-up (log above)"
        fi
        if [[ $(curl -s -o /dev/null -w '%{http_code}' --max-time 2 "$SERVER_URL/readyz" || true) == 200 ]]; then
            SERVER_LOG_MARK=$(wc -l <"$SERVER_LOG")
            return 0
        fi
        sleep 0.1
    done
    tail -n 20 "$SERVER_LOG" >&2
    die "overdue did not become ready within 30 s (log above)"
}

# server_log_problems LABEL: warns about WARN and ERROR lines overdue logged since it
# became ready (up to 3 distinct messages, without their timestamps).
server_log_problems() {
    local label=$1 lines n msg msgs
    lines=$(tail -n +"$((SERVER_LOG_MARK + 1))" "$SERVER_LOG" | sed 's/\x1b\[[0-9;]*m//g' |
        grep -E '(^| )(WARN|ERROR) ' || true)
    [[ -n $lines ]] || return 0
    n=$(wc -l <<<"$lines")
    warn "$label: overdue logged $n warnings or errors during the runs"
    mapfile -t msgs < <(sed -E 's/^[^ ]+ +//' <<<"$lines" | cut -c1-240 | awk '!seen[$0]++' | head -n 3)
    for msg in "${msgs[@]}"; do warn "$label: overdue logged \`$msg\`"; done
}

stop_server() {
    [[ -n $SERVER_PID ]] || return 0
    stop_pid "$SERVER_PID"
    forget_pid "$SERVER_PID"
    SERVER_PID=""
}

# create_checks FIRST LAST OUT: creates checks bench-FIRST..bench-LAST, their uuids to OUT.
create_checks() {
    local first=$1 last=$2 out=$3
    rm -f "$WORK"/create.*.out
    # Each curl process creates a batch of checks on one keep-alive connection and
    # writes its own file, so parallel outputs never interleave.
    # shellcheck disable=SC2016
    seq "$first" "$last" | xargs -n "$CREATE_BATCH" -P "$CREATE_PARALLEL" bash -c '
        url=$0; dir=$WORK_DIR; args=()
        for i in "$@"; do
            args+=(--next -sS --max-time 30 -X POST -H "content-type: application/json"
                   -d "{\"slug\": \"bench-$i\", \"interval\": \"1h\"}" -w "\n%{http_code}\n" "$url")
        done
        curl "${args[@]:1}" >"$dir/create.$1.out"
    ' "$SERVER_URL/api/v1/checks" || true
    cat "$WORK"/create.*.out 2>/dev/null | grep -o '"uuid":"[0-9a-fA-F-]*"' | cut -d'"' -f4 >"$out" || true
    local want=$((last - first + 1)) got
    got=$(wc -l <"$out")
    if ((got != want)); then
        echo "responses that were not 201 (first 5):" >&2
        cat "$WORK"/create.*.out 2>/dev/null | grep -v '"uuid"' | grep -v '^201$' | grep -v '^$' | head -n 5 >&2 || true
        die "created $got of $want checks"
    fi
}

# first_pings FILE: one ping to each check in FILE, before anything is
# measured. A check's first ping moves it from new to up, and the evaluator
# records that change under the ping writer's lock; 10,000 of them at once is
# a one-time event of a fresh set of checks, not the steady load the service
# level is about (BENCHMARKS.md, 2026-12-03).
first_pings() {
    local file=$1
    # shellcheck disable=SC2016
    xargs -n "$CREATE_BATCH" -P "$CREATE_PARALLEL" bash -c '
        url=$0; args=()
        for u in "$@"; do args+=(--next -sS --max-time 30 -o /dev/null "$url/ping/$u"); done
        curl "${args[@]:1}"
    ' "$SERVER_URL" <"$file" || die "cannot send the first pings"
    # Let the evaluator record the changes before the first measured run.
    sleep 3
}

# Sum of n_pings over all checks, as the API reports it.
stored_pings() {
    curl -sS --fail --max-time 60 "$SERVER_URL/api/v1/checks" |
        grep -o '"n_pings":[0-9]*' | awk -F: '{s += $2} END {print s + 0}'
}

# wrk prints latencies as 950.00us, 1.23ms, 1.05s or 2.00m: in milliseconds.
to_ms() {
    awk -v v="$1" 'BEGIN {
        n = v + 0; u = v; sub(/^[0-9.]+/, "", u)
        if (u == "us") n /= 1000; else if (u == "s") n *= 1000; else if (u == "m") n *= 60000
        printf "%.2f", n }'
}

# The machine is shared: to tell a slow server from a busy machine, each run
# measures the CPU that processes other than wrk, the no-op, overdue and the
# PostgreSQL server used meanwhile.
CLK_TCK=$(getconf CLK_TCK)
# Busy CPU time of the whole machine (all but idle and iowait), in clock ticks.
# It includes irq and softirq: a process's own times include the softirq work
# (loopback networking) done on its behalf.
machine_ticks() { awk '/^cpu / {print $2 + $3 + $4 + $7 + $8 + $9; exit}' /proc/stat; }
# CPU time of the servers being measured, in clock ticks.
servers_ticks() {
    local pid sum=0 t
    for pid in $NOOP_PID $SERVER_PID $(pgrep -x postgres || true); do
        t=$(sed 's/^.*) //' "/proc/$pid/stat" 2>/dev/null | awk '{print $12 + $13}' || true)
        sum=$((sum + ${t:-0}))
    done
    echo "$sum"
}
# Sets CHILDREN_SECONDS to the CPU seconds used by this shell's finished children
# (wrk, through timeout). Not in $(...): a subshell's `times` sees only its own.
children_seconds() {
    times >"$WORK/times"
    CHILDREN_SECONDS=$(awk 'NR == 2 {
        n = split($0, f, " "); s = 0
        for (i = 1; i <= n; i++) { split(f[i], p, "m"); s += p[1] * 60 + p[2] }
        printf "%.3f", s }' "$WORK/times")
}
now_seconds() { date +%s.%N; }

# run_wrk NAME URL UUID_FILE: one wrk run; sets RPS, P99_MS, TOTAL, NON2XX, SOCKERR, OTHER_CPU.
run_wrk() {
    local name=$1 url=$2 uuids=$3 out="$WORK/wrk.$1.txt"
    local m0 s0 c0 t0 m1 s1 c1 t1
    children_seconds
    m0=$(machine_ticks) s0=$(servers_ticks) c0=$CHILDREN_SECONDS t0=$(now_seconds)
    # In the background and waited for, so that a signal runs the cleanup at once.
    timeout $((DURATION_S + 60)) wrk -t"$THREADS" -c"$CONNECTIONS" -d"$DURATION" --latency \
        -s "$LUA" "$url" -- "$uuids" >"$out" 2>&1 &
    local wrk_pid=$! wrk_rc=0
    PIDS+=("$wrk_pid")
    wait "$wrk_pid" || wrk_rc=$?
    forget_pid "$wrk_pid"
    children_seconds
    m1=$(machine_ticks) s1=$(servers_ticks) c1=$CHILDREN_SECONDS t1=$(now_seconds)
    OTHER_CPU=$(awk -v m="$((m1 - m0))" -v s="$((s1 - s0))" -v hz="$CLK_TCK" -v c0="$c0" -v c1="$c1" \
        -v t0="$t0" -v t1="$t1" 'BEGIN { o = ((m - s) / hz - (c1 - c0)) / (t1 - t0); if (o < 0) o = 0; printf "%.2f", o }')
    OTHER_CPUS+=("$name $OTHER_CPU")
    if ((wrk_rc != 0)); then
        cat "$out" >&2
        die "wrk failed ($name, exit status $wrk_rc)"
    fi
    cp "$out" "$RESULTS/wrk.$name.txt"
    RPS=$(awk '/^Requests\/sec:/ {printf "%.0f", $2}' "$out")
    TOTAL=$(awk '/ requests in / {print $1}' "$out")
    NON2XX=$(awk '/Non-2xx or 3xx responses:/ {print $NF}' "$out")
    NON2XX=${NON2XX:-0}
    SOCKERR=$(grep -o 'Socket errors:.*' "$out" || true)
    P99_MS=$(to_ms "$(awk '$1 == "99%" {print $2}' "$out")")
    [[ -n $RPS && -n $TOTAL ]] || {
        cat "$out" >&2
        die "cannot parse wrk's output ($name)"
    }
    printf '   %-28s %9s req/s  p99 %7s ms  %s responses, other processes %s CPUs' \
        "$name" "$RPS" "$P99_MS" "$TOTAL" "$OTHER_CPU"
    ((NON2XX > 0)) && printf ', %s non-2xx' "$NON2XX"
    [[ -n $SOCKERR ]] && printf ', %s' "$SOCKERR"
    printf '\n'
    if ((NON2XX > 0)); then
        warn "$name: wrk reported $NON2XX non-2xx responses of $TOTAL"
        HTTP_PROBLEMS=1
    fi
    if [[ -n $SOCKERR ]]; then
        warn "$name: wrk reported $SOCKERR"
        HTTP_PROBLEMS=1
    fi
    if awk -v o="$OTHER_CPU" 'BEGIN {exit !(o > 0.2)}'; then
        warn "$name: other processes used $OTHER_CPU CPUs of $NPROC during the run; its figures are disturbed"
    fi
    return 0
}

noop_run() { run_wrk "$1" "$NOOP_URL" "$2"; }

# overdue_run NAME UUID_FILE: one wrk run against overdue, then checks that every
# 200 it got is counted in the stored pings.
overdue_run() {
    local name=$1 uuids=$2 before after ok delta wal0="" wal1=""
    before=$(stored_pings)
    [[ $name == *postgres* ]] && wal0=$(pg_wal_segments)
    run_wrk "$name" "$SERVER_URL" "$uuids"
    [[ $name == *postgres* ]] && wal1=$(pg_wal_segments)
    if ! kill -0 "$SERVER_PID" 2>/dev/null; then
        tail -n 20 "$SERVER_LOG" >&2
        die "overdue died during $name (log above)"
    fi
    ok=$((TOTAL - NON2XX))
    # 200 is sent only after the commit (SPEC §4), so every 200 must be counted; a
    # few more is normal (pings in flight when wrk stopped). Summaries may be
    # flushed a little later than the commit: give them a few seconds.
    for _ in $(seq 1 10); do
        after=$(stored_pings)
        delta=$((after - before))
        ((delta >= ok)) && break
        sleep 0.5
    done
    if ((delta < ok)); then
        warn "$name: wrk got $ok 200 responses but the server counts only $delta new pings"
    elif ((delta > TOTAL + CONNECTIONS)); then
        warn "$name: the server counts $delta new pings, more than the $TOTAL requests wrk completed + $CONNECTIONS in flight"
    fi
    printf '   %-28s stored pings +%s for %s 200 responses\n' "" "$delta" "$ok"
    PINGS_NOTE="$(fmt_int "$delta") pings counted by the server for $(fmt_int "$ok") 200 responses"
    if [[ $wal0 =~ ^[0-9]+$ && $wal1 =~ ^[0-9]+$ ]]; then
        # Only checkpoints remove segments, and they rarely fall inside a run.
        PINGS_NOTE="$PINGS_NOTE; WAL segments PostgreSQL created: $((wal1 > wal0 ? wal1 - wal0 : 0))"
        printf '   %-28s WAL segments in pg_wal: %s -> %s\n' "" "$wal0" "$wal1"
    fi
}

# ---------------------------------------------------------------------------
# The measurements

RESULTS=$WORK/results
mkdir -p "$RESULTS"
: >"$RESULTS/rows"
NOTES=()
OTHER_CPUS=()
PG_VERSION=""

ratio() { awk -v a="$1" -v b="$2" -v c="$3" 'BEGIN {printf "%.2f", a / ((b + c) / 2)}'; }
meets_min() { awk -v v="$1" -v t="$2" 'BEGIN {exit !(v >= t)}'; }
meets_max() { awk -v v="$1" -v t="$2" 'BEGIN {exit !(v <= t)}'; }

# record RUN LOAD DB RPS NOOP_BEFORE NOOP_AFTER P99 TARGET_RATIO TARGET_P99 NOTE
record() {
    local r
    r=$(ratio "$4" "$5" "$6")
    printf '%s|%s|%s|%s|%s|%s|%s|%s|%s|%s|%s\n' "$1" "$2" "$3" "$4" "$5" "$6" "$r" "$7" "$8" "$9" "${10}" >>"$RESULTS/rows"
}

# PostgreSQL is measured only if the server answers (checked once, before the runs).
MEASURED=()
for db in $DATABASES; do
    if [[ $db == postgres ]]; then
        if ! command -v psql >/dev/null; then
            echo "== PostgreSQL: skipped, psql is not installed"
            NOTES+=("PostgreSQL: not measured (psql is not installed).")
            continue
        fi
        if ! PGCONNECT_TIMEOUT=5 psql "$PG_ADMIN_URL" -qAtc 'SELECT 1' >/dev/null 2>"$WORK/psql.err"; then
            echo "== PostgreSQL: skipped, cannot connect to $(redact "$PG_ADMIN_URL"): $(head -n1 "$WORK/psql.err")"
            NOTES+=("PostgreSQL: not measured (cannot connect to $(redact "$PG_ADMIN_URL")).")
            continue
        fi
        PG_VERSION=$(PGCONNECT_TIMEOUT=5 psql "$PG_ADMIN_URL" -qAtc 'SHOW server_version' || true)
    fi
    MEASURED+=("$db")
done

for run in $(seq 1 "$RUNS"); do
    for db in "${MEASURED[@]}"; do
        case $db in
            sqlite)
                label=SQLite
                rm -rf "$WORK/sqlite"
                mkdir -p "$WORK/sqlite"
                database_url="sqlite://$WORK/sqlite/overdue.db"
                t_one=0.5 t_spread=0.4 t_p99=10
                ;;
            postgres)
                label=PostgreSQL
                t_one=0.3 t_spread=0.25 t_p99=15
                PG_DB="overdue_bench_$(date +%s)_$RANDOM"
                PGCONNECT_TIMEOUT=5 psql "$PG_ADMIN_URL" -qAt -v ON_ERROR_STOP=1 -c "CREATE DATABASE \"$PG_DB\"" >/dev/null
                # Same server and options, database name replaced.
                base=${PG_ADMIN_URL%%\?*}
                query=${PG_ADMIN_URL#"$base"}
                if [[ ${base#*://} == */* ]]; then base=${base%/*}; fi
                database_url="$base/$PG_DB$query"
                presize_wal "$database_url"
                [[ -n $WAL_NOTE ]] && echo "   PostgreSQL's WAL: $WAL_NOTE"
                ;;
        esac

        echo "== $label, run $run of $RUNS"
        # Nor the previous run's writes (its database was just deleted).
        sync
        start_server "$database_url" "$WORK/overdue.$db.$run.log"
        echo "   overdue on $SERVER_URL"

        t0=$SECONDS
        create_checks 0 0 "$RESULTS/one.$db.$run.txt"
        create_checks 1 "$N_CHECKS" "$RESULTS/spread.$db.$run.txt"
        echo "   created 1 + $(fmt_int "$N_CHECKS") checks in $((SECONDS - t0)) s"
        first_pings "$RESULTS/one.$db.$run.txt"
        first_pings "$RESULTS/spread.$db.$run.txt"

        tag="$db-$run"
        noop_run "noop-before-one-$tag" "$RESULTS/one.$db.$run.txt"
        nb=$RPS
        overdue_run "overdue-one-$tag" "$RESULTS/one.$db.$run.txt"
        o_rps=$RPS o_p99=$P99_MS o_note="one check, run $run: $PINGS_NOTE"
        noop_run "noop-between-$tag" "$RESULTS/spread.$db.$run.txt"
        nm=$RPS
        record "$run" "one check" "$label" "$o_rps" "$nb" "$nm" "$o_p99" "$t_one" "$t_p99" "$o_note"
        overdue_run "overdue-spread-$tag" "$RESULTS/spread.$db.$run.txt"
        o_rps=$RPS o_p99=$P99_MS o_note="$(fmt_int "$N_CHECKS") checks, run $run: $PINGS_NOTE"
        noop_run "noop-after-spread-$tag" "$RESULTS/spread.$db.$run.txt"
        na=$RPS
        record "$run" "$(fmt_int "$N_CHECKS") checks" "$label" "$o_rps" "$nm" "$na" "$o_p99" "$t_spread" "$t_p99" "$o_note"

        server_log_problems "$label, run $run"
        stop_server
        [[ $db == postgres ]] && drop_pg_db
    done
done

[[ -s $RESULTS/rows ]] || die "nothing was measured"

# ---------------------------------------------------------------------------
# Report


# One line per cell (load × database), in the order measured:
# load|db|rps|noop before|noop after|ratio|p99|target ratio|target p99|runs meeting the ratio|
# runs meeting the p99|runs|every run's "ratio (p99 ms)".
# The ratio is the median of the runs' ratios and rps/no-op are those of the run
# that has it; the p99 is the median of the runs' p99s. With an even number of
# runs, each median is the one nearer to missing its target.
awk -F'|' '
    {
        key = $2 "|" $3
        if (!(key in n)) { order[++cells] = key }
        i = ++n[key]
        run_r[key, i] = $7; run_p[key, i] = $8; line[key, i] = $0
        tr[key] = $9; tp[key] = $10
        if ($7 + 0 >= $9 + 0) met_r[key]++
        if ($8 + 0 <= $10 + 0) met_p[key]++
        runs[key] = runs[key] (i > 1 ? ", " : "") $7 " (" $8 " ms)"
    }
    # Sorts v[1..m] ascending (insertion sort: a handful of runs).
    function sort(v, m,    a, b, t) {
        for (a = 2; a <= m; a++) for (b = a; b > 1 && v[b - 1] + 0 > v[b] + 0; b--) { t = v[b]; v[b] = v[b - 1]; v[b - 1] = t }
    }
    END {
        for (c = 1; c <= cells; c++) {
            key = order[c]; m = n[key]
            delete rs; delete ps
            for (i = 1; i <= m; i++) { rs[i] = run_r[key, i]; ps[i] = run_p[key, i] }
            sort(rs, m); sort(ps, m)
            mr = rs[int((m + 1) / 2)]
            mp = ps[int(m / 2) + 1]
            for (i = 1; i <= m; i++) if (run_r[key, i] == mr) { split(line[key, i], f, "|"); break }
            printf "%s|%s|%s|%s|%s|%s|%s|%s|%s|%d|%d|%d|%s\n", f[2], f[3], f[4], f[5], f[6], mr, mp, tr[key], tp[key], met_r[key], met_p[key], m, runs[key]
        }
    }' "$RESULTS/rows" >"$RESULTS/cells"

REPRO="bench/ping.sh"
[[ $RUNS != 3 ]] && REPRO="BENCH_RUNS=$RUNS $REPRO"
[[ $DURATION != 10s ]] && REPRO="BENCH_DURATION=$DURATION $REPRO"
[[ $CONNECTIONS != 64 ]] && REPRO="BENCH_CONNECTIONS=$CONNECTIONS $REPRO"
[[ $DATABASES != "sqlite postgres" ]] && REPRO="BENCH_DATABASES=\"$DATABASES\" $REPRO"

SECTION=$WORK/section.md
{
    echo "<!-- ping-bench:start -->"
    echo "## Ping ingestion"
    echo
    echo "Durable ping ingestion (SPEC §12): \`GET /ping/<uuid>\` answered 200 only after the"
    echo "ping is committed, as a ratio to a no-op axum handler (\`examples/noop.rs\`) measured"
    echo "just before and just after each overdue run (the ratio uses the mean of the two)."
    echo "\`wrk -t$THREADS -c$CONNECTIONS -d$DURATION --latency -s bench/spread.lua\` over loopback, on the"
    echo "same machine as the server; p99 is overdue's 99th percentile latency."
    echo "The sequence ran $RUNS times (databases alternating, each run on a fresh server and"
    echo "database); each cell gives the median ratio (with the req/s of the run that has it)"
    echo "and the median p99, then every run's ratio (p99). Every check had its first ping"
    echo "(new → up) before the first run, so the runs measure steady ingestion (see"
    echo "\"Ping ingestion: the allocator, and what holds the SQLite writer\" below)."
    if [[ -n $PG_VERSION ]] && ((PG_WAL_MB > 0)); then
        echo "Before each PostgreSQL run the script writes WAL and checkpoints until the server"
        echo "keeps ${PG_WAL_MB} MB of WAL segments (at most its \`max_wal_size\`) for reuse, as a server that"
        echo "has run this load keeps them; each run then lists the segments PostgreSQL had to"
        echo "create (see \"Ping ingestion: 2026-12-01 night\" below for why)."
    fi
    echo
    echo "- Date: $DATE"
    echo "- Commit: $COMMIT"
    echo "- Machine: $NPROC CPUs (nproc), $CPU_MODEL; load average before the run: $LOADAVG"
    [[ -n $PG_VERSION ]] && echo "- PostgreSQL: $PG_VERSION on the same machine"
    echo "- Reproduce: \`$REPRO\`"
    echo
    echo "| load | database | overdue req/s | no-op req/s (before/after) | ratio | p99 | target ratio | target p99 | every run: ratio (p99) |"
    echo "|---|---|---:|---:|---:|---:|---|---|---|"
    while IFS='|' read -r load dbl rps nb na r p99 tr tp kr kp n runs; do
        if meets_min "$r" "$tr"; then mr="met"; else mr="**not met**"; fi
        if meets_max "$p99" "$tp"; then mp="met"; else mp="**not met**"; fi
        echo "| $load | $dbl | $(fmt_int "$rps") | $(fmt_int "$nb") / $(fmt_int "$na") | $r | $p99 ms | ≥ $tr: $mr ($kr of $n runs) | ≤ $tp ms: $mp ($kp of $n runs) | $runs |"
    done <"$RESULTS/cells"
    echo
    echo "Checks after each run:"
    echo
    while IFS='|' read -r run load dbl rps nb na r p99 tr tp note; do
        echo "- $dbl, $note."
    done <"$RESULTS/rows"
    echo "- CPUs used by other processes (not wrk, the no-op, overdue or PostgreSQL) during each run, of $NPROC:"
    echo "  $(printf '%s, ' "${OTHER_CPUS[@]}" | sed 's/, $//')."
    for n in "${NOTES[@]}"; do echo "- $n"; done
    if ((HTTP_PROBLEMS == 0)); then
        echo "- No non-2xx responses and no socket errors in any run."
    fi
    for w in "${WARNINGS[@]}"; do echo "- Warning: $w."; done
    echo "<!-- ping-bench:end -->"
} >"$SECTION"

BENCH_FILE=$ROOT/BENCHMARKS.md
if [[ -f $BENCH_FILE ]] && grep -qx '<!-- ping-bench:start -->' "$BENCH_FILE" && grep -qx '<!-- ping-bench:end -->' "$BENCH_FILE"; then
    awk -v section="$SECTION" '
        $0 == "<!-- ping-bench:start -->" { while ((getline line < section) > 0) print line; skip = 1; next }
        $0 == "<!-- ping-bench:end -->" { skip = 0; next }
        !skip { print }
    ' "$BENCH_FILE" >"$WORK/BENCHMARKS.md"
elif [[ -f $BENCH_FILE ]]; then
    { cat "$BENCH_FILE"; echo; cat "$SECTION"; } >"$WORK/BENCHMARKS.md"
else
    {
        echo "# Benchmarks"
        echo
        echo "Measured numbers for the service levels of SPEC §12. Each section is written by"
        echo "the script it names; rerun it to update the section (the rest of the file is kept)."
        echo
        cat "$SECTION"
    } >"$WORK/BENCHMARKS.md"
fi
cp "$WORK/BENCHMARKS.md" "$BENCH_FILE"

echo
echo "== results (commit $COMMIT, $NPROC CPUs, $CPU_MODEL)"
echo "(median of $RUNS runs; every run: ratio (p99 ms))"
printf '%-14s %-11s %13s %21s %6s %10s  %-25s %-25s %s\n' load database "overdue req/s" "no-op before/after" ratio p99 "target ratio" "target p99" "every run"
while IFS='|' read -r load dbl rps nb na r p99 tr tp kr kp n runs; do
    if meets_min "$r" "$tr"; then mr="met"; else mr="NOT MET"; fi
    if meets_max "$p99" "$tp"; then mp="met"; else mp="NOT MET"; fi
    printf '%-14s %-11s %13s %21s %6s %7s ms  %-25s %-25s %s\n' "$load" "$dbl" "$rps" "$nb/$na" "$r" "$p99" ">= $tr $mr ($kr/$n)" "<= $tp ms $mp ($kp/$n)" "$runs"
done <"$RESULTS/cells"
for n in "${NOTES[@]}"; do echo "$n"; done
for w in "${WARNINGS[@]}"; do echo "WARNING: $w"; done
echo
echo "BENCHMARKS.md updated; took $((SECONDS - START_SECONDS)) s."
