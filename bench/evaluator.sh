#!/usr/bin/env bash
# Evaluator benchmark: the "evaluator scale" service level of SPEC §12.
#
# Runs examples/evaluator_bench.rs (release build) for each number of checks in
# BENCH_CHECKS: it bulk-loads that many checks of mixed schedules into a fresh
# SQLite database, starts the evaluator in-process as `overdue serve` does, and
# measures start-up time, RSS, CPU while nothing is due, and the delay between
# the instant each of BENCH_DUE checks goes down (all in the same second) and
# the flip the evaluator records. Results are printed and written to
# BENCHMARKS.md between <!-- evaluator-bench:start --> and <!-- evaluator-bench:end -->.
#
# Usage: bench/evaluator.sh
#
# Environment:
#   BENCH_CHECKS      numbers of checks, in order (default "100000 1000000")
#   BENCH_DUE         checks falling due in the same second (default 10000)
#   BENCH_IDLE        minimum seconds of the idle CPU window (default 10)
#   CARGO_TARGET_DIR  honoured, as by cargo
#
# Needs: cargo, jq. Takes about 2 min for 100,000 checks and 10 min for 1,000,000
# on 2 cores; every run is bounded with timeout(1).
set -euo pipefail

CHECKS_LIST=${BENCH_CHECKS:-100000 1000000}
DUE=${BENCH_DUE:-10000}
IDLE=${BENCH_IDLE:-10}

cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$PWD
START_SECONDS=$SECONDS

die() {
    echo "bench/evaluator.sh: $*" >&2
    exit 1
}
command -v cargo >/dev/null || die "cargo is not installed"
command -v jq >/dev/null || die "jq is not installed. Install it with: apt-get install jq (Debian/Ubuntu) or brew install jq (macOS)"
command -v timeout >/dev/null || die "timeout (coreutils) is not installed"
for n in $CHECKS_LIST; do
    [[ $n =~ ^[0-9]+$ ]] || die "BENCH_CHECKS: '$n' is not a number"
done
[[ $DUE =~ ^[0-9]+$ ]] || die "BENCH_DUE must be a number, got '$DUE'"
[[ $IDLE =~ ^[0-9]+$ ]] || die "BENCH_IDLE must be a whole number of seconds, got '$IDLE'"

WORK=$(mktemp -d "${TMPDIR:-/tmp}/overdue-evaluator-bench.XXXXXX")
RUN_PID=""
cleanup() {
    local rc=$?
    if [[ -n $RUN_PID ]]; then
        kill -TERM "$RUN_PID" 2>/dev/null || true
        wait "$RUN_PID" 2>/dev/null || true
    fi
    rm -rf "$WORK"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# 12345678 -> 12,345,678
fmt_int() { awk -v n="$1" 'BEGIN { s = sprintf("%d", n); o = ""; while (length(s) > 3) { o = "," substr(s, length(s) - 2) o; s = substr(s, 1, length(s) - 3) } print s o }'; }

# ---------------------------------------------------------------------------
# Build

echo "== building (cargo build --release --example evaluator_bench)"
cargo build --release --example evaluator_bench
TARGET_DIR=$(cargo metadata --format-version 1 --no-deps |
    grep -o '"target_directory":"[^"]*"' | head -n1 | sed 's/^"target_directory":"//; s/"$//')
BIN=$TARGET_DIR/release/examples/evaluator_bench
[[ -x $BIN ]] || die "built example not found at $BIN"

COMMIT=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
# BENCHMARKS.md is what this script writes: its own edits do not make the tree dirty.
if [[ $COMMIT != unknown && -n $(git status --porcelain -- . ':(exclude)BENCHMARKS.md' 2>/dev/null) ]]; then
    COMMIT="$COMMIT-dirty"
fi
NPROC=$(nproc)
CPU_MODEL=$(awk -F': *' '/^model name/ {print $2; exit}' /proc/cpuinfo 2>/dev/null || true)
CPU_MODEL=${CPU_MODEL:-unknown CPU}
MEM_TOTAL=$(awk '/^MemTotal:/ {printf "%.0f GiB", $2 / 1048576}' /proc/meminfo 2>/dev/null || echo "unknown")
SQLITE_NOTE="SQLite (bundled by sqlx), WAL, synchronous = normal"
DATE=$(date -u '+%Y-%m-%d %H:%M UTC')

# ---------------------------------------------------------------------------
# Runs

# Runs the example; $1 = checks, $2 = start-up budget in seconds ("" = its default).
run_one() {
    local n=$1 budget=$2 limit args
    args=(--checks "$n" --due "$DUE" --idle "$IDLE" --out "$WORK/$n.json" --dir "$WORK/db-$n")
    # Loading takes ~1 min per million checks, start-up at most the budget.
    if [[ -n $budget ]]; then
        args+=(--startup-budget "$budget")
        limit=$((300 + 3 * ${budget%.*} + n / 5000))
    else
        limit=$((600 + n / 2000))
    fi
    rm -rf "$WORK/db-$n"
    mkdir -p "$WORK/db-$n"
    echo "== $(fmt_int "$n") checks, $(fmt_int "$DUE") due in the same second (bounded to ${limit}s)"
    echo "   load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
    # The evaluator's log (a line per status change) goes to a file, as a server's would.
    timeout --signal=TERM --kill-after=30 "$limit" "$BIN" "${args[@]}" 2>"$WORK/$n.log" >"$WORK/$n.stdout" &
    RUN_PID=$!
    local rc=0
    wait "$RUN_PID" || rc=$?
    RUN_PID=""
    grep '^evaluator_bench:' "$WORK/$n.log" | sed 's/^/   /' || true
    rm -rf "$WORK/db-$n"
    return "$rc"
}

ROWS=()
NOTES=()
LAST_STARTUP_PER_CHECK=""
for n in $CHECKS_LIST; do
    budget=""
    if [[ -n $LAST_STARTUP_PER_CHECK ]]; then
        # Twice what the previous (smaller) run needed per check, plus 20 s.
        budget=$(awk -v p="$LAST_STARTUP_PER_CHECK" -v n="$n" 'BEGIN {printf "%d", 2 * p * n + 20}')
    fi
    if ! run_one "$n" "$budget"; then
        if grep -q 'larger --startup-budget' "$WORK/$n.log"; then
            budget=$(awk -v b="${budget:-$((30 + 60 * n / 1000000))}" 'BEGIN {printf "%d", 3 * b}')
            echo "   start-up overran its budget; once more with --startup-budget $budget"
            run_one "$n" "$budget" || { tail -n 20 "$WORK/$n.log" >&2; die "run with $n checks failed"; }
        else
            tail -n 20 "$WORK/$n.log" >&2
            die "run with $n checks failed"
        fi
    fi
    R=$WORK/$n.json
    [[ -s $R ]] || die "no result for $n checks"
    LOG_LINES=$(wc -l <"$WORK/$n.log")
    LAST_STARTUP_PER_CHECK=$(jq -r '.startup_s / .checks' "$R")
    ROWS+=("$n")
    NOTES+=("$(jq -r --arg lines "$(fmt_int "$LOG_LINES")" --arg n "$(fmt_int "$n")" '
        "\($n) checks: loaded in \(.load.load_s | . * 10 | round / 10) s (\(.load.cron_variants) cron × zone variants, \(.load.hours_variants) active-hours × zone variants of which \(.load.hours_variants_quiet_now) quiet at the start; \(.load.usual_checks // 0) checks with items_below_usual, their item history \(.load.item_hours_rows // 0) rows in the database, none in the evaluator); start-up \(.startup_s | . * 100 | round / 100) s of which reading and parsing \(.startup_load_phase_s // 0 | . * 100 | round / 100) s (\(.startup_load_phase_cpu_s // 0 | . * 100 | round / 100) CPU-s), \(.startup_cpu_s | . * 10 | round / 10) CPU-s; RSS before the evaluator \(.rss_before_mib | round) MiB, \(.per_check_bytes | round) bytes per check after start-up; size_of entry \(.sizes.entry_bytes) B (Summary \(.sizes.summary_bytes), Rules \(.sizes.rules_bytes)); idle window \(.idle_window_s | round) s with \(.flips_during_idle) flips; flips other than the cohort'"'"'s late → down after the idle window: \(.other_flips_after_idle); CPU while the cohort flipped \(.cpu_during_due_s | . * 100 | round / 100) s over \(.due_window_s | . * 10 | round / 10) s; other processes used \(.other_cores_startup | . * 100 | round / 100) cores during start-up and \(.other_cores_due | . * 100 | round / 100) while the cohort flipped; heartbeats that failed: \(.heartbeats_failed), unobserved spans recorded: \(.unobserved_spans | length)\(if (.unobserved_spans | length) > 0 then " (" + (.unobserved_spans | map("\(.length_ms) ms from T\(if .start_ms < 0 then "" else "+" end)\(.start_ms / 1000 | round) s") | join(", ")) + ")" else "" end); all \(.due) flips visible \(.all_seen_after_t_ms // "n/a") ms after T; \($lines) log lines"
    ' "$R")")
done

# ---------------------------------------------------------------------------
# Report

REPRO="bench/evaluator.sh"
[[ $CHECKS_LIST != "100000 1000000" ]] && REPRO="BENCH_CHECKS=\"$CHECKS_LIST\" $REPRO"
[[ $DUE != 10000 ]] && REPRO="BENCH_DUE=$DUE $REPRO"
[[ $IDLE != 10 ]] && REPRO="BENCH_IDLE=$IDLE $REPRO"

yes_no() { if [[ $1 == true ]]; then echo "met"; else echo "**not met**"; fi; }

SECTION=$WORK/section.md
{
    echo "<!-- evaluator-bench:start -->"
    echo "## Evaluator scale"
    echo
    echo "Evaluator scale (SPEC §12): \`examples/evaluator_bench.rs\` bulk-loads N checks into a fresh"
    echo "SQLite database (60% interval 1m/5m/1h/1d, 30% cron such as \`*/5 * * * *\`, \`0 3 * * *\`,"
    echo "\`0 9-17 * * MON-FRI\` in five zones, 10% interval checks with active hours; a tenth of all"
    echo "checks with \`items_below_usual\`, their usual count in force and five weeks of item history"
    echo "in \`item_hours\`, as a daily job leaves it), starts the"
    echo "evaluator in-process as \`overdue serve\` does, and measures it. No check but the cohort"
    echo "changes during the run: each one's last success is placed so that its next instant lies"
    echo "at least an hour away (in the near future for 1m/5m checks, which would keep pinging in"
    echo "real life). The cohort: $(fmt_int "$DUE") interval checks, already \`late\`, whose \`down\` instants"
    echo "are spread evenly over one second T, a while after start-up."
    echo
    echo "- Start-up: from the first heartbeat until every check has its committed status row"
    echo "  (load every check, evaluate each, record its status row and its new → status flip in batches)."
    echo "- RSS: VmRSS of the process once started; peak is VmHWM at the end of the run. The"
    echo "  bulk load runs in a child process and is not counted."
    echo "- Idle CPU: utime + stime of the process over the window between start-up and T"
    echo "  (at least ${IDLE} s; the heartbeat still writes every 5 s), as % of one core."
    echo "- Delay: \`flips.recorded_at\` (taken when the evaluator builds the change, before its"
    echo "  batch commits) minus the flip's own instant \`flips.at\`, and minus the instant as loaded"
    echo "  (last success + 2 × interval). The two differ when the evaluator found an unobserved"
    echo "  span (SPEC §3.5) during the run and moved every clock by its length; the service level"
    echo "  is judged against the instant as loaded. \"Visible\" is when a reader polling every 10 ms"
    echo "  first saw the committed flip, minus \`flips.at\`."
    echo "- Noise: the machine is shared (other builds and tests run on it); the CPU other"
    echo "  processes used during each run is listed below."
    echo
    echo "- Date: $DATE"
    echo "- Commit: $COMMIT"
    echo "- Machine: $NPROC CPUs (nproc), $CPU_MODEL, $MEM_TOTAL RAM; $SQLITE_NOTE"
    echo "- Reproduce: \`$REPRO\`"
    echo
    echo "| checks | start-up | RSS after start-up (peak) | idle CPU | down flips (at the instant as loaded) | delay after \`flips.at\` p50 / p99 / max | delay after the instant as loaded p50 / p99 / max | visible p99 | service level |"
    echo "|---:|---:|---:|---:|---:|---:|---:|---:|---|"
    for n in "${ROWS[@]}"; do
        R=$WORK/$n.json
        read -r checks startup rss hwm idle flips on_time p50 p99 max tp50 tp99 tmax vp99 rss_ok peak_ok p99_ok < <(jq -r '[
            .checks, (.startup_s | . * 10 | round / 10), (.rss_idle_mib | round), (.hwm_end_mib | round),
            (.idle_cpu_pct | . * 1000 | round / 1000), .down_flips, .down_flips_at_scheduled_instant,
            .delay_recorded.p50_ms, .delay_recorded.p99_ms, .delay_recorded.max_ms,
            .delay_vs_scheduled.p50_ms, .delay_vs_scheduled.p99_ms, .delay_vs_scheduled.max_ms,
            .delay_visible.p99_ms,
            .slo.rss_ready_1gib_met, .slo.peak_1gib_met, .slo.p99_1s_met] | map(tostring) | join(" ")' "$R")
        if ((checks >= 1000000)); then
            sl="RSS ≤ 1 GiB: $(yes_no "$rss_ok") (peak: $(yes_no "$peak_ok")); p99 ≤ 1 s: $(yes_no "$p99_ok")"
        else
            sl="p99 ≤ 1 s: $(yes_no "$p99_ok")"
        fi
        echo "| $(fmt_int "$checks") | $startup s | $(fmt_int "$rss") MiB ($(fmt_int "$hwm") MiB) | $idle % | $(fmt_int "$flips") ($(fmt_int "$on_time")) | $p50 / $p99 / $max ms | $(fmt_int "$tp50") / $(fmt_int "$tp99") / $(fmt_int "$tmax") ms | $vp99 ms | $sl |"
    done
    echo
    echo "Details of each run:"
    echo
    for note in "${NOTES[@]}"; do echo "- $note."; done
    echo "<!-- evaluator-bench:end -->"
} >"$SECTION"

BENCH_FILE=$ROOT/BENCHMARKS.md
if [[ -f $BENCH_FILE ]] && grep -qx '<!-- evaluator-bench:start -->' "$BENCH_FILE" && grep -qx '<!-- evaluator-bench:end -->' "$BENCH_FILE"; then
    awk -v section="$SECTION" '
        $0 == "<!-- evaluator-bench:start -->" { while ((getline line < section) > 0) print line; skip = 1; next }
        $0 == "<!-- evaluator-bench:end -->" { skip = 0; next }
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
sed -n '/^| checks/,/^$/p' "$SECTION"
echo "BENCHMARKS.md updated; took $((SECONDS - START_SECONDS)) s."
