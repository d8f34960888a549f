#!/usr/bin/env bash
# Failover benchmark: "failover ≤ lease TTL" (SPEC §12, durability), on
# PostgreSQL, with real processes of the release build.
#
# Each run gets a fresh database next to OVERDUE_BENCH_POSTGRES_URL (dropped
# afterwards), runs `overdue migrate`, and adds a trigger of its own that logs
# every change of the lease row with the database's clock (as tests/ha.rs
# does). Two replicas start (A, then B once A leads); a check whose interval
# is a third of the TTL is created and pinged once through the follower.
#
#  1. kill -9 of the leader, at a random moment of its renewal cycle (it
#     renews every fifth of the TTL) after the check's up flip: the check
#     falls due (late a third, down two thirds of the TTL after its ping)
#     while no replica leads. Measured from the kill (wall clock, just before
#     kill(1)): until the other replica's term began (the first lease row
#     with its token) and until it recorded its first due flip
#     (`flips.recorded_at`), with the old lease's expiry for context.
#  2. Graceful handover. A third replica joins as a follower; the leader gets
#     SIGTERM and releases its lease as it shuts down. Measured from the
#     signal until the lease was released and until the successor's term
#     began.
#
# The kill and the signal are read on the wall clock, everything else on the
# database's clock; both are this machine's clock. Results are printed and
# written to BENCHMARKS.md between <!-- failover-bench:start --> and
# <!-- failover-bench:end -->.
#
# With BENCH_CHECKS=N the database also holds N other checks (SPEC §12,
# "failover at scale"), bulk-loaded with SQL before the first replica starts:
# interval, cron and active-hours checks that stay up throughout, so the
# successor has N checks to load and judge before its first due flip. The
# first replica's own cold start over them (every check new → up) is timed
# from its log, and each replica's RSS is read from /proc. Results then go
# to their own section, between <!-- failover-scale-bench:start --> and
# <!-- failover-scale-bench:end -->, judged against the lease TTL + 5 s.
#
# Usage: bench/failover.sh
#        BENCH_CHECKS=1000000 BENCH_RUNS=3 bench/failover.sh
#
# Environment:
#   BENCH_RUNS                  runs (default 7)
#   BENCH_CHECKS                other checks in the database (default 0)
#   BENCH_LEASE_TTL             lease_ttl in whole seconds, e.g. 5s (default: the
#                               configuration's default, 15s)
#   OVERDUE_BENCH_POSTGRES_URL  admin URL (default postgres://postgres@127.0.0.1:5432/test)
#   CARGO_TARGET_DIR            honoured, as by cargo
#
# Needs: cargo, curl, psql. Takes about 25 s per run with the default TTL.
set -euo pipefail

RUNS=${BENCH_RUNS:-7}
CHECKS=${BENCH_CHECKS:-0}
TTL=${BENCH_LEASE_TTL:-}
PG_ADMIN_URL=${OVERDUE_BENCH_POSTGRES_URL:-postgres://postgres@127.0.0.1:5432/test}

cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$PWD
START_SECONDS=$SECONDS

die() {
    echo "bench/failover.sh: $*" >&2
    exit 1
}
for tool in cargo curl psql; do
    command -v "$tool" >/dev/null || die "$tool is not installed"
done
[[ $RUNS =~ ^[1-9][0-9]*$ ]] || die "BENCH_RUNS must be a positive number, got '$RUNS'"
[[ $CHECKS =~ ^[0-9]+$ ]] || die "BENCH_CHECKS must be a number, got '$CHECKS'"
if [[ -n $TTL ]]; then
    [[ $TTL =~ ^[0-9]+s$ ]] || die "BENCH_LEASE_TTL must be whole seconds such as 15s, got '$TTL'"
    TTL_MS=$((${TTL%s} * 1000))
else
    TTL_MS=$(awk -F'"' '/^lease_ttl *=/ {print $2}' src/config.default.toml)
    [[ $TTL_MS =~ ^[0-9]+s$ ]] || die "cannot read lease_ttl from src/config.default.toml"
    TTL_MS=$((${TTL_MS%s} * 1000))
fi
# How long to wait for what must happen before calling it a hang (a cold
# start over many checks takes a while: a minute per million is generous).
HANG_GUARD_S=$((3 * TTL_MS / 1000 + 60 + CHECKS * 60 / 1000000))
# The level: the TTL for the one check; the TTL + 5 s with many (SPEC §12).
if ((CHECKS > 0)); then
    LEVEL_MS=$((TTL_MS + 5000))
    MARK=failover-scale-bench
else
    LEVEL_MS=$TTL_MS
    MARK=failover-bench
fi

pg_admin() { PGCONNECT_TIMEOUT=5 psql "$PG_ADMIN_URL" -qAt -v ON_ERROR_STOP=1 "$@"; }
pg_admin -c 'SELECT 1' >/dev/null || die "cannot connect to PostgreSQL at $PG_ADMIN_URL"

WORK=$(mktemp -d "${TMPDIR:-/tmp}/overdue-failover-bench.XXXXXX")
PIDS=()
PG_DB=
cleanup() {
    local rc=$?
    for pid in "${PIDS[@]}"; do
        kill -KILL "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    done
    [[ -n $PG_DB ]] && pg_admin -c "DROP DATABASE IF EXISTS \"$PG_DB\" WITH (FORCE)" >/dev/null 2>&1
    rm -rf "$WORK"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# ---------------------------------------------------------------------------
# Build

echo "== building (cargo build --release --bin overdue)"
cargo build --release --bin overdue
TARGET_DIR=$(cargo metadata --format-version 1 --no-deps |
    grep -o '"target_directory":"[^"]*"' | head -n1 | sed 's/^"target_directory":"//; s/"$//')
BIN=$TARGET_DIR/release/overdue
[[ -x $BIN ]] || die "built binary not found at $BIN"

COMMIT=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
# BENCHMARKS.md is what this script writes: its own edits do not make the tree dirty.
if [[ $COMMIT != unknown && -n $(git status --porcelain -- . ':(exclude)BENCHMARKS.md' 2>/dev/null) ]]; then
    COMMIT="$COMMIT-dirty"
fi
NPROC=$(nproc)
CPU_MODEL=$(awk -F': *' '/^model name/ {print $2; exit}' /proc/cpuinfo 2>/dev/null || true)
CPU_MODEL=${CPU_MODEL:-unknown CPU}
PG_VERSION=$(pg_admin -c 'SHOW server_version')
LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
DATE=$(date -u '+%Y-%m-%d %H:%M UTC')

# ---------------------------------------------------------------------------
# One run

now_ms() { date +%s%3N; }

# Runs SQL on the run's database; prints the result unaligned.
q() { PGCONNECT_TIMEOUT=5 psql "$DB_URL" -qAt -v ON_ERROR_STOP=1 -c "$1"; }

# Polls SQL until it prints something other than "" or "0"; prints that.
await_sql() {
    local sql=$1 what=$2 out deadline=$((SECONDS + HANG_GUARD_S))
    while ((SECONDS < deadline)); do
        out=$(q "$sql")
        if [[ -n $out && $out != 0 ]]; then
            echo "$out"
            return
        fi
        sleep 0.1
    done
    die "hang guard: $what did not happen within ${HANG_GUARD_S}s"
}

# Starts replica $1 (a, b, c) on its own port; sets PID_$1 and PORT_$1.
start_replica() {
    local name=$1 port
    port=$((20000 + RANDOM % 20000))
    {
        echo "listen = \"127.0.0.1:$port\""
        echo "database_url = \"$DB_URL\""
        if [[ -n $TTL ]]; then
            echo "lease_ttl = \"$TTL\""
            # The TTL must be at least twice heartbeat_period (5s by default).
            ((TTL_MS < 10000)) && echo "heartbeat_period = \"$((TTL_MS / 2))ms\""
        fi
        true
    } >"$W/$name.toml"
    (
        while read -r v; do unset "$v"; done < <(compgen -e | grep '^OVERDUE_' || true)
        NO_COLOR=1 RUST_LOG=info exec "$BIN" --config "$W/$name.toml" serve
    ) >"$W/$name.log" 2>&1 &
    local pid=$!
    PIDS+=("$pid")
    printf -v "PID_$name" '%s' "$pid"
    printf -v "PORT_$name" '%s' "$port"
    local deadline=$((SECONDS + HANG_GUARD_S))
    until curl -sf "http://127.0.0.1:$port/readyz" >/dev/null; do
        kill -0 "$pid" 2>/dev/null || die "replica $name exited: $(tail -n 20 "$W/$name.log")"
        ((SECONDS < deadline)) || die "hang guard: replica $name not ready: $(tail -n 20 "$W/$name.log")"
        sleep 0.1
    done
}

# The replica id replica $1 logged.
replica_id() {
    sed 's/\x1b\[[0-9;]*m//g' "$W/$1.log" | grep -o 'replica started replica=[^ ]*' | head -n1 |
        sed 's/.*replica=//; s/"//g'
}

# Which of the given replicas holds the lease now.
leader_of() {
    local holder name
    holder=$(await_sql "SELECT holder FROM leases WHERE name = 'leader' \
        AND expires_at > (extract(epoch from clock_timestamp()) * 1000)::bigint" "a lease holder")
    for name in "$@"; do
        if [[ $(replica_id "$name") == "$holder" ]]; then
            echo "$name"
            return
        fi
    done
    die "the lease holder $holder is none of $*"
}

ping_check() {
    curl -sf --max-time 10 "http://127.0.0.1:$1/ping/$UUID" >/dev/null || die "ping through port $1 failed"
}

# 12345678 -> 12,345,678
fmt_int() { awk -v n="$1" 'BEGIN { s = sprintf("%d", n); o = ""; while (length(s) > 3) { o = "," substr(s, length(s) - 2) o; s = substr(s, 1, length(s) - 3) } print s o }'; }

# "RSS 612 MiB (peak 640 MiB)" of process $1.
rss_of() {
    awk '/^VmRSS:/ {r = $2} /^VmHWM:/ {h = $2} END {printf "RSS %d MiB (peak %d MiB)", r / 1024, h / 1024}' "/proc/$1/status"
}

# Waits until replica $1 logs a line containing $2; prints when (ms since
# the epoch, from the line's own timestamp).
await_log() {
    local name=$1 what=$2 line deadline=$((SECONDS + HANG_GUARD_S))
    while ((SECONDS < deadline)); do
        line=$(sed 's/\x1b\[[0-9;]*m//g' "$W/$name.log" | grep -m1 -F "$what" || true)
        if [[ -n $line ]]; then
            date -d "$(awk '{print $1}' <<<"$line")" +%s%3N
            return
        fi
        kill -0 "$(eval echo "\$PID_$name")" 2>/dev/null || die "replica $name exited: $(tail -n 20 "$W/$name.log")"
        sleep 0.2
    done
    die "hang guard: replica $name did not log '$what' within ${HANG_GUARD_S}s"
}

# Bulk-loads $CHECKS checks that stay up for hours: 60% interval (1 h to
# 1 d), 30% cron (rare fire times, five zones), 10% interval with active
# hours; each last succeeded just now.
load_checks() {
    local t0 now
    t0=$(now_ms)
    now=$t0
    q "INSERT INTO checks (id, uuid, name, interval_ms, cron, tz, active_hours, created_at, updated_at)
       SELECT g, gen_random_uuid()::text, 'job-' || g,
         CASE WHEN g % 10 < 6 THEN (ARRAY[3600000, 21600000, 86400000])[1 + g % 3]
              WHEN g % 10 = 9 THEN 86400000 END,
         CASE WHEN g % 10 BETWEEN 6 AND 8
              THEN (ARRAY['0 0 1 1 *', '30 4 1 7 *', '15 2 29 2 *'])[1 + g % 3] END,
         CASE WHEN g % 10 < 6 THEN 'UTC'
              ELSE (ARRAY['UTC', 'Europe/London', 'America/New_York', 'Asia/Tokyo', 'Australia/Sydney'])[1 + g % 5] END,
         CASE WHEN g % 10 = 9
              THEN '[{\"start\":\"00:00\",\"end\":\"23:59\"}]'
              ELSE '[]' END,
         $now, $now
       FROM generate_series(1, $CHECKS) g;
       INSERT INTO check_state (check_id, n_pings, last_ping_at, last_ping_kind, last_success_at,
         consecutive_successes)
       SELECT g, 1, $now, 'success', $now, 1 FROM generate_series(1, $CHECKS) g;
       SELECT setval(pg_get_serial_sequence('checks', 'id'), $CHECKS);
       ANALYZE;" >/dev/null
    echo "   loaded $(fmt_int "$CHECKS") checks in $(($(now_ms) - t0)) ms"
}

COLD_ROWS=()
KILL_ROWS=()
TERM_ROWS=()
FAILOVER_MS=()
FLIP_MS=()
HANDOVER_MS=()
run_one() {
    local run=$1
    W=$WORK/run-$run
    mkdir -p "$W"
    PG_DB="overdue_failover_$RANDOM$RANDOM"
    pg_admin -c "CREATE DATABASE \"$PG_DB\"" >/dev/null
    DB_URL="${PG_ADMIN_URL%/*}/$PG_DB"
    {
        echo "database_url = \"$DB_URL\""
    } >"$W/migrate.toml"
    "$BIN" --config "$W/migrate.toml" migrate >"$W/migrate.log" 2>&1 || die "migrate failed: $(cat "$W/migrate.log")"
    q "CREATE TABLE lease_log (id BIGSERIAL PRIMARY KEY, holder TEXT NOT NULL,
         token BIGINT NOT NULL, expires_at BIGINT NOT NULL, at BIGINT NOT NULL);
       CREATE FUNCTION log_lease() RETURNS trigger AS \$\$ BEGIN
         INSERT INTO lease_log (holder, token, expires_at, at) VALUES (NEW.holder, NEW.token,
           NEW.expires_at, (extract(epoch from clock_timestamp()) * 1000)::bigint);
         RETURN NULL; END \$\$ LANGUAGE plpgsql;
       CREATE TRIGGER lease_log AFTER INSERT OR UPDATE ON leases
         FOR EACH ROW EXECUTE FUNCTION log_lease();" >/dev/null

    if ((CHECKS > 0)); then
        load_checks
    fi
    local t_start_a
    t_start_a=$(now_ms)
    start_replica a
    leader_of a >/dev/null
    if ((CHECKS > 0)); then
        # A's cold start: loaded, then every check judged once (new → up).
        local loaded_ms pass_ms
        loaded_ms=$(await_log a 'evaluator loaded')
        pass_ms=$(await_log a 'evaluator judged every check')
        COLD_ROWS+=("| $run | $(fmt_int "$(q "SELECT count(*) FROM checks")") | $((loaded_ms - t_start_a)) ms | $((pass_ms - t_start_a)) ms | $(rss_of "$PID_a") |")
        echo "   run $run, replica a's cold start: loaded +$((loaded_ms - t_start_a)) ms, every check judged +$((pass_ms - t_start_a)) ms after its start; $(rss_of "$PID_a")"
    fi
    local t_start_b
    t_start_b=$(now_ms)
    start_replica b
    local leader follower
    leader=$(leader_of a b)
    if [[ $leader == a ]]; then follower=b; else follower=a; fi
    local warm_ms=
    if ((CHECKS > 0)); then
        # A follower reads every check once its change listener is up and
        # keeps them current (docs/ha.md): the kill comes once it does.
        warm_ms=$(await_log "$follower" 'evaluator holds every check while following')
        warm_ms=$((warm_ms - t_start_b))
        echo "   run $run, the follower holds every check +$warm_ms ms after its start; $(rss_of "$(eval echo "\$PID_$follower")")"
    fi
    local lport fport lpid
    lport=$(eval echo "\$PORT_$leader")
    fport=$(eval echo "\$PORT_$follower")
    lpid=$(eval echo "\$PID_$leader")
    UUID=$(curl -sf -X POST -H 'content-type: application/json' \
        -d "{\"slug\": \"failover\", \"interval\": \"$((TTL_MS / 3))ms\"}" \
        "http://127.0.0.1:$fport/api/v1/checks" |
        grep -o '"uuid":"[0-9a-f-]*"' | cut -d'"' -f4)
    [[ -n $UUID ]] || die "cannot create the check"
    ping_check "$fport"
    await_sql "SELECT count(*) FROM flips f JOIN checks c ON c.id = f.check_id
        WHERE c.slug = 'failover' AND f.new_status = 'up'" "the first up flip" >/dev/null
    local rss_leader rss_follower
    rss_leader=$(rss_of "$lpid")
    rss_follower=$(rss_of "$(eval echo "\$PID_$follower")")

    # 1. kill -9 at a random moment of the leader's renewal cycle.
    local old_token
    old_token=$(q "SELECT token FROM leases WHERE name = 'leader'")
    sleep "$(awk -v r="$RANDOM" -v p="$TTL_MS" 'BEGIN {printf "%.3f", r / 32768 * p / 5 / 1000}')"
    local t_kill
    t_kill=$(now_ms)
    kill -KILL "$lpid"
    wait "$lpid" 2>/dev/null || true
    local began flip
    began=$(await_sql "SELECT min(at) FROM lease_log WHERE token = $old_token + 1" "a new term")
    flip=$(await_sql "SELECT recorded_at || ' ' || at || ' ' || old_status || '>' || new_status
        FROM flips WHERE recorded_at >= $t_kill ORDER BY recorded_at, id LIMIT 1" "a flip after the kill")
    local old_end recorded due what
    old_end=$(q "SELECT expires_at FROM lease_log WHERE token = $old_token ORDER BY id DESC LIMIT 1")
    read -r recorded due what <<<"$flip"
    local to_lease=$((began - t_kill)) to_flip=$((recorded - t_kill))
    ((due < began)) || die "the first flip after the kill was not due before the takeover: $flip, term began $began"
    FAILOVER_MS+=("$to_lease")
    FLIP_MS+=("$to_flip")
    if ((CHECKS > 0)); then
        local caught
        await_log "$follower" 'evaluator loaded' >/dev/null
        caught=$(sed 's/\x1b\[[0-9;]*m//g' "$W/$follower.log" | grep -m1 -F 'evaluator loaded' |
            grep -o 'changed=[0-9]* took_ms=[0-9]*' || echo 'cold load')
        KILL_ROWS+=("| $run | $((old_end - t_kill)) ms | $to_lease ms | $to_flip ms ($what, due $((due - t_kill)) ms after the kill) | $caught | $rss_leader | held every check $warm_ms ms after its start; $rss_follower; after the flip $(rss_of "$(eval echo "\$PID_$follower")") |")
    else
        KILL_ROWS+=("| $run | $((old_end - t_kill)) ms | $to_lease ms | $to_flip ms ($what, due $((due - t_kill)) ms after the kill) |")
    fi
    echo "   run $run, kill -9: lease ran until +$((old_end - t_kill)) ms; successor's term began +$to_lease ms; its first due flip ($what, due +$((due - t_kill)) ms) recorded +$to_flip ms"

    # 2. Graceful handover from the successor to a third replica.
    start_replica c
    local survivor new_leader npid
    survivor=$follower
    new_leader=$(leader_of "$survivor" c)
    npid=$(eval echo "\$PID_$new_leader")
    local cur_token t_term
    cur_token=$(q "SELECT token FROM leases WHERE name = 'leader'")
    t_term=$(now_ms)
    kill -TERM "$npid"
    began=$(await_sql "SELECT min(at) FROM lease_log WHERE token = $cur_token + 1" "a handover")
    local rc=0
    wait "$npid" 2>/dev/null || rc=$?
    ((rc == 0)) || die "the leader exited with $rc after SIGTERM: $(tail -n 20 "$W/$new_leader.log")"
    local last_row released_at expires_at
    last_row=$(q "SELECT expires_at || ' ' || at FROM lease_log WHERE token = $cur_token ORDER BY id DESC LIMIT 1")
    read -r expires_at released_at <<<"$last_row"
    ((expires_at <= released_at)) || die "the leader did not release its lease (last row: $last_row)"
    HANDOVER_MS+=("$((began - t_term))")
    TERM_ROWS+=("| $run | $((expires_at - t_term)) ms | $((began - t_term)) ms |")
    echo "   run $run, SIGTERM: lease released +$((expires_at - t_term)) ms; successor's term began +$((began - t_term)) ms"

    for pid in "${PIDS[@]}"; do
        kill -TERM "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    done
    PIDS=()
    pg_admin -c "DROP DATABASE IF EXISTS \"$PG_DB\" WITH (FORCE)" >/dev/null
    PG_DB=
    rm -rf "$W"
}

echo "== $RUNS runs, $(fmt_int "$CHECKS") other checks, lease_ttl $((TTL_MS / 1000))s, PostgreSQL $PG_VERSION; load average before: $LOAD_BEFORE"
for run in $(seq "$RUNS"); do
    run_one "$run"
done
LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)

# ---------------------------------------------------------------------------
# Report

# "median (min–max)" of the numbers given, in ms.
summary() {
    printf '%s\n' "$@" | sort -n | awk '{ v[NR] = $1 } END {
        m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
        printf "%d ms (%d–%d ms)", m, v[1], v[NR] }'
}
# met LEVEL_MS VALUES...: how many runs were within the level.
met() {
    local n=0 v level=$1
    shift
    for v in "$@"; do ((v <= level)) && n=$((n + 1)); done
    if ((n == $#)); then echo "met ($n of $# runs)"; else echo "**not met** ($n of $# runs)"; fi
}

REPRO="bench/failover.sh"
[[ $RUNS != 7 ]] && REPRO="BENCH_RUNS=$RUNS $REPRO"
((CHECKS > 0)) && REPRO="BENCH_CHECKS=$CHECKS $REPRO"
[[ -n $TTL ]] && REPRO="BENCH_LEASE_TTL=$TTL $REPRO"

SECTION=$WORK/section.md
{
    echo "<!-- $MARK:start -->"
    if ((CHECKS > 0)); then
        echo "## Failover at scale"
        echo
        echo "Failover at scale (SPEC §12: with 1,000,000 checks, from the kill of the leader to the"
        echo "first due flip recorded by its successor ≤ lease TTL + 5 s, $((LEVEL_MS / 1000)) s here): as the"
        echo "failover benchmark above, with $(fmt_int "$CHECKS") other checks in the database, bulk-loaded with SQL"
        echo "before the first replica starts (60% interval 1 h to 1 d, 30% cron with rare fire"
        echo "times in five zones, 10% interval with active hours; each last succeeded just then, so"
        echo "none changes during a run). The first replica's cold start judges every one of them"
        echo "(new → up) before the second starts. The second, a follower, reads every check once"
        echo "its change listener is up and keeps them current from the changes the leader"
        echo "announces (docs/ha.md, warm followers); the leader is killed once it holds them."
        echo "When its term begins the successor reads again what changed since and the checks"
        echo "with pings in the inbox, then judges every check, those it saw falling due first"
        echo "(its log's \`evaluator loaded\` line: \`changed\`, \`took_ms\`). RSS is VmRSS (VmHWM)"
        echo "from /proc of each replica: the leader's and the follower's just before the kill,"
        echo "the follower's again after its first due flip."
    else
        echo "## Failover"
        echo
        echo "Failover (SPEC §12, durability: failover ≤ lease TTL, $((TTL_MS / 1000)) s here): two replicas of the"
        echo "release build on a fresh PostgreSQL database per run, one check whose interval is a"
        echo "third of the TTL (grace: the same), pinged once."
    fi
    echo "A trigger of the benchmark's own logs every change of the lease row with the"
    echo "database's clock; the kill and the signal are read on the wall clock of the same"
    echo "machine."
    echo
    echo "- kill -9: once the check is up, the leader is killed at a random moment of its"
    echo "  renewal cycle (it renews every fifth of the TTL), so the check falls due (late a"
    echo "  third, down two thirds of the TTL after its ping) while no replica leads. Measured"
    echo "  from the kill until the other replica's term began (its first lease row) and until"
    echo "  it recorded its first due flip (\`flips.recorded_at\`; the flip's own instant is"
    echo "  when the check fell due, before the takeover)."
    echo "  The successor can only take a lease that has run out, so the failover is what"
    echo "  was left of the killed leader's lease (between 4/5 of the TTL and the TTL) plus"
    echo "  the successor's poll (every tenth of the TTL, at most 500 ms): it can exceed"
    echo "  the TTL by up to one poll when the leader dies just after renewing."
    echo "- SIGTERM: a third replica joins as a follower and the leader gets SIGTERM; it"
    echo "  releases its lease as it shuts down. Measured from the signal until the release"
    echo "  and until the successor's term began."
    echo
    echo "- Date: $DATE"
    echo "- Commit: $COMMIT"
    echo "- Machine: $NPROC CPUs (nproc), $CPU_MODEL; load average before the runs $LOAD_BEFORE, after $LOAD_AFTER"
    echo "- PostgreSQL: $PG_VERSION on the same machine"
    echo "- Reproduce: \`$REPRO\`"
    echo
    echo "| | median (min–max) of $RUNS runs | target |"
    echo "|---|---:|---|"
    echo "| kill -9 → the successor holds the lease | $(summary "${FAILOVER_MS[@]}") | ≤ $((TTL_MS / 1000)) s: $(met "$TTL_MS" "${FAILOVER_MS[@]}") |"
    echo "| kill -9 → the successor recorded its first due flip | $(summary "${FLIP_MS[@]}") | ≤ $((LEVEL_MS / 1000)) s: $(met "$LEVEL_MS" "${FLIP_MS[@]}") |"
    echo "| SIGTERM → the successor holds the lease | $(summary "${HANDOVER_MS[@]}") | (none in SPEC; a graceful shutdown releases the lease) |"
    echo
    echo "Each kill -9, from the kill:"
    echo
    if ((CHECKS > 0)); then
        echo "| run | the killed leader's lease ran until | successor's term began | its first due flip recorded | successor's catch-up (checks read again, ms) | the leader before the kill | the successor before the kill |"
        echo "|---:|---:|---:|---|---|---|---|"
    else
        echo "| run | the killed leader's lease ran until | successor's term began | its first due flip recorded |"
        echo "|---:|---:|---:|---|"
    fi
    printf '%s\n' "${KILL_ROWS[@]}"
    if ((CHECKS > 0)); then
        echo
        echo "The first replica's cold start (PostgreSQL), from its start:"
        echo
        echo "| run | checks | evaluator loaded | every check judged and recorded (new → up) | RSS then |"
        echo "|---:|---:|---:|---:|---|"
        printf '%s\n' "${COLD_ROWS[@]}"
    fi
    echo
    echo "Each SIGTERM, from the signal:"
    echo
    echo "| run | lease released | successor's term began |"
    echo "|---:|---:|---:|"
    printf '%s\n' "${TERM_ROWS[@]}"
    echo "<!-- $MARK:end -->"
} >"$SECTION"

BENCH_FILE=$ROOT/BENCHMARKS.md
if [[ -f $BENCH_FILE ]] && grep -qx "<!-- $MARK:start -->" "$BENCH_FILE" && grep -qx "<!-- $MARK:end -->" "$BENCH_FILE"; then
    awk -v section="$SECTION" -v start="<!-- $MARK:start -->" -v end="<!-- $MARK:end -->" '
        $0 == start { while ((getline line < section) > 0) print line; skip = 1; next }
        $0 == end { skip = 0; next }
        !skip { print }
    ' "$BENCH_FILE" >"$WORK/BENCHMARKS.md"
else
    { cat "$BENCH_FILE"; echo; cat "$SECTION"; } >"$WORK/BENCHMARKS.md"
fi
cp "$WORK/BENCHMARKS.md" "$BENCH_FILE"

echo
sed -n '/^| | median/,/^$/p' "$SECTION"
echo "BENCHMARKS.md updated; took $((SECONDS - START_SECONDS)) s."
