#!/usr/bin/env bash
# Metrics benchmark: the time, memory and size of a /metrics scrape (SPEC §7).
#
# Runs examples/metrics_bench.rs (release build) for each number of checks in
# BENCH_CHECKS: it bulk-loads that many checks (every one with a slug, a name,
# two labels and a last success) into a fresh SQLite database, starts the
# release binary `overdue serve` on it as a child process with
# `[metrics] labels = ["team"]`, waits until it is idle, and scrapes /metrics
# BENCH_SCRAPES times, measuring each scrape from the client and the server's
# /proc. Results are printed and written to BENCHMARKS.md between
# <!-- metrics-bench:start --> and <!-- metrics-bench:end -->.
#
# Usage: bench/metrics.sh
#
# Environment:
#   BENCH_CHECKS      numbers of checks, in order (default "100000")
#   BENCH_SCRAPES     scrapes per run (default 5)
#   CARGO_TARGET_DIR  honoured, as by cargo
#
# Needs: cargo, jq, and root or the server's owner to write /proc/PID/clear_refs
# (it resets the peak RSS before each scrape). About 2 min for 100,000 checks
# on 2 cores after the build; every run is bounded with timeout(1).
set -euo pipefail

CHECKS_LIST=${BENCH_CHECKS:-100000}
SCRAPES=${BENCH_SCRAPES:-5}

cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$PWD
START_SECONDS=$SECONDS

die() {
    echo "bench/metrics.sh: $*" >&2
    exit 1
}
command -v cargo >/dev/null || die "cargo is not installed"
command -v jq >/dev/null || die "jq is not installed. Install it with: apt-get install jq (Debian/Ubuntu) or brew install jq (macOS)"
command -v timeout >/dev/null || die "timeout (coreutils) is not installed"
for n in $CHECKS_LIST; do
    [[ $n =~ ^[0-9]+$ ]] || die "BENCH_CHECKS: '$n' is not a number"
done
[[ $SCRAPES =~ ^[1-9][0-9]*$ ]] || die "BENCH_SCRAPES must be a positive number, got '$SCRAPES'"

WORK=$(mktemp -d "${TMPDIR:-/tmp}/overdue-metrics-bench.XXXXXX")
trap 'rm -rf "$WORK"' EXIT

# 12345678 -> 12,345,678
fmt_int() { awk -v n="$1" 'BEGIN { s = sprintf("%d", n); o = ""; while (length(s) > 3) { o = "," substr(s, length(s) - 2) o; s = substr(s, 1, length(s) - 3) } print s o }'; }

echo "== building (cargo build --release --bin overdue --example metrics_bench)"
cargo build --release --bin overdue --example metrics_bench
TARGET_DIR=$(cargo metadata --format-version 1 --no-deps |
    grep -o '"target_directory":"[^"]*"' | head -n1 | sed 's/^"target_directory":"//; s/"$//')
BIN=$TARGET_DIR/release/examples/metrics_bench
SERVER=$TARGET_DIR/release/overdue
[[ -x $BIN && -x $SERVER ]] || die "built binaries not found under $TARGET_DIR/release"

COMMIT=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
if [[ $COMMIT != unknown && -n $(git status --porcelain -- . ':(exclude)BENCHMARKS.md' 2>/dev/null) ]]; then
    COMMIT="$COMMIT-dirty"
fi
NPROC=$(nproc)
CPU_MODEL=$(awk -F': *' '/^model name/ {print $2; exit}' /proc/cpuinfo 2>/dev/null || true)
DATE=$(date -u '+%Y-%m-%d %H:%M UTC')

ROWS=()
LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
for n in $CHECKS_LIST; do
    echo "== $(fmt_int "$n") checks, $SCRAPES scrapes (load average before: $(cut -d' ' -f1-3 /proc/loadavg))"
    timeout --signal=TERM --kill-after=30 $((600 + n / 500)) \
        "$BIN" --bin "$SERVER" --checks "$n" --scrapes "$SCRAPES" --out "$WORK/$n.json" \
        2> >(tee "$WORK/$n.log" | grep '^metrics_bench:' | sed 's/^/   /' >&2) >/dev/null ||
        { tail -n 20 "$WORK/$n.log" >&2; die "run with $n checks failed"; }
    [[ -s $WORK/$n.json ]] || die "no result for $n checks"
    ROWS+=("$n")
done

SECTION=$WORK/section.md
{
    echo "<!-- metrics-bench:start -->"
    echo "## Metrics scrape"
    echo
    echo "A \`GET /metrics\` of N checks (SPEC §7): \`examples/metrics_bench.rs\` loads N checks"
    echo "(70% interval, 20% cron in three zones, 10% with active hours; each with a slug, a name,"
    echo "two labels and a recent success) into SQLite, runs the release \`overdue serve\` with"
    echo "\`[metrics] labels = [\"team\"]\`, and once it is idle scrapes it $SCRAPES times over loopback."
    echo
    echo "- Time: client-side, from sending the request to the last byte (and to the first:"
    echo "  every check is read and measured before the text streams out family by family)."
    echo "- Peak memory: the server's VmHWM during the scrape (reset just before it through"
    echo "  \`/proc/PID/clear_refs\`) minus its VmRSS just before the scrape, and minus its RSS"
    echo "  when idle before the first scrape: freed memory that the allocator keeps for the"
    echo "  next scrape shows in the former's baseline, not in the latter's."
    echo "- Evaluator wait: the server waits on the evaluator task once per page of 5,000"
    echo "  checks (it copies their state and goes back to its deadlines); the longest wait"
    echo "  bounds how long a scrape can hold up an evaluation."
    echo "- Between scrapes nothing per check is kept: the evaluator's entry per check is"
    echo "  unchanged by this feature (see the evaluator section for its size)."
    echo
    echo "- Date: $DATE"
    echo "- Commit: $COMMIT"
    echo "- Machine: $NPROC CPUs (nproc), ${CPU_MODEL:-unknown CPU}; shared: load average before the run $LOAD_BEFORE"
    echo "- Reproduce: \`bench/metrics.sh\` (\`BENCH_CHECKS=\"100000 1000000\"\` for more sizes)"
    echo
    echo "| checks | scrape time median (max) | first byte median | body | samples | peak memory over the RSS before, median (max) | peak over the idle RSS, max | server CPU per scrape | evaluator wait per page, longest | server RSS idle → after the scrapes |"
    echo "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    for n in "${ROWS[@]}"; do
        jq -r '
            def med: sort | .[(length - 1) / 2 | floor];
            def r1: . * 10 | round / 10;
            [ .checks,
              ([.scrapes[].total_ms] | med | round), ([.scrapes[].total_ms] | max | round),
              ([.scrapes[].first_byte_ms] | med | round),
              (.scrapes[0].bytes / 1048576 | r1), .scrapes[0].samples, .scrapes[0].checks,
              ([.scrapes[].peak_increase_mib] | med | r1), ([.scrapes[].peak_increase_mib] | max | r1),
              ([.scrapes[].peak_over_idle_mib] | max | r1),
              ([.scrapes[].server_cpu_s] | med | . * 100 | round / 100),
              ([.scrapes[].evaluator_wait_max_ms] | max | r1),
              (.rss_idle_mib | round), (.rss_end_mib | round) ] | map(tostring) | join(" ")' "$WORK/$n.json" |
            while read -r checks med max first mb samples seen pmed pmax pidle cpu wait idle end; do
                echo "| $(fmt_int "$checks") ($(fmt_int "$seen") in the body) | $(fmt_int "$med") ms ($(fmt_int "$max") ms) | $(fmt_int "$first") ms | $mb MiB | $(fmt_int "$samples") | $pmed MiB ($pmax MiB) | $pidle MiB | $cpu s | $wait ms | $(fmt_int "$idle") → $(fmt_int "$end") MiB |"
            done
    done
    echo
    echo "Each scrape:"
    echo
    for n in "${ROWS[@]}"; do
        jq -r '.checks as $n | .scrapes | to_entries[] | "- \($n) checks, scrape \(.key + 1): \(.value.total_ms | round) ms (first byte \(.value.first_byte_ms | round) ms; reading and measuring the checks \(.value.measured_ms) ms, of which waiting on the evaluator \(.value.evaluator_wait_ms) ms over \(.value.pages) pages, longest \(.value.evaluator_wait_max_ms * 10 | round / 10) ms), \(.value.bytes) bytes, peak +\(.value.peak_increase_mib * 10 | round / 10) MiB over the RSS before (+\(.value.peak_over_idle_mib * 10 | round / 10) MiB over the idle RSS), server CPU \(.value.server_cpu_s * 100 | round / 100) s."' "$WORK/$n.json"
    done
    echo "<!-- metrics-bench:end -->"
} >"$SECTION"

BENCH_FILE=$ROOT/BENCHMARKS.md
if [[ -f $BENCH_FILE ]] && grep -qx '<!-- metrics-bench:start -->' "$BENCH_FILE" && grep -qx '<!-- metrics-bench:end -->' "$BENCH_FILE"; then
    awk -v section="$SECTION" '
        $0 == "<!-- metrics-bench:start -->" { while ((getline line < section) > 0) print line; skip = 1; next }
        $0 == "<!-- metrics-bench:end -->" { skip = 0; next }
        !skip { print }
    ' "$BENCH_FILE" >"$WORK/BENCHMARKS.md"
else
    { cat "$BENCH_FILE"; echo; cat "$SECTION"; } >"$WORK/BENCHMARKS.md"
fi
cp "$WORK/BENCHMARKS.md" "$BENCH_FILE"

echo
sed -n '/^| checks/,/^$/p' "$SECTION"
echo "BENCHMARKS.md updated; took $((SECONDS - START_SECONDS)) s."
