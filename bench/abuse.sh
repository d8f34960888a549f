#!/usr/bin/env bash
# Abuse benchmark: what the largest silences the limits allow cost (issue #41 §3).
#
# Builds the release binary, starts `overdue serve` on loopback with a fresh
# SQLite database and no API key (loopback only), and for each KIND:
#   - reads the server's RSS once it is idle;
#   - creates BENCH_SILENCES silences, each with the most matchers a silence
#     may have (64) of about 1 KiB each;
#   - reads the RSS again (after one read of the list, as a client would);
#   - times BENCH_READS reads of `GET /api/v1/silences` from the client
#     (curl, to the last byte), and reports the median and the longest.
# KIND "words": every matcher a regex listing host names, dots unescaped as
# people write them (the usual big matcher). KIND "nfa": regexes that are no
# list of fixed shapes (`[0-9]+`), as many of about 1 KiB as the 128 KiB a
# silence's regexes may keep let in (found by trying), the rest 1 KiB
# equality matchers. Each KIND runs on a server of its own.
# Results are printed and written to BENCHMARKS.md between
# <!-- abuse-bench:start --> and <!-- abuse-bench:end -->.
#
# Usage: bench/abuse.sh
#
# Environment:
#   BENCH_SILENCES    silences per kind (default 100)
#   BENCH_READS       timed reads of the list per kind (default 21)
#   BENCH_KINDS       "words nfa" (default) or one of them
#   CARGO_TARGET_DIR  honoured, as by cargo
#
# Needs: cargo, curl, awk. About 1 min after the build; the server is
# stopped on exit.
set -euo pipefail

SILENCES=${BENCH_SILENCES:-100}
READS=${BENCH_READS:-21}
KINDS=${BENCH_KINDS:-words nfa}

cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$PWD
START_SECONDS=$SECONDS

die() {
    echo "bench/abuse.sh: $*" >&2
    exit 1
}
command -v cargo >/dev/null || die "cargo is not installed"
command -v curl >/dev/null || die "curl is not installed"
[[ $SILENCES =~ ^[1-9][0-9]*$ ]] || die "BENCH_SILENCES must be a positive number, got '$SILENCES'"
[[ $READS =~ ^[1-9][0-9]*$ ]] || die "BENCH_READS must be a positive number, got '$READS'"
for k in $KINDS; do
    [[ $k == words || $k == nfa ]] || die "BENCH_KINDS: '$k' is not words or nfa"
done

WORK=$(mktemp -d "${TMPDIR:-/tmp}/overdue-abuse-bench.XXXXXX")
SERVER_PID=""
stop_server() {
    if [[ -n $SERVER_PID ]]; then
        kill -TERM "$SERVER_PID" 2>/dev/null || true
        wait "$SERVER_PID" 2>/dev/null || true
        SERVER_PID=""
    fi
}
cleanup() {
    local rc=$?
    stop_server
    rm -rf "$WORK"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

echo "== building (cargo build --release --bin overdue)"
cargo build --release --bin overdue
TARGET_DIR=$(cargo metadata --format-version 1 --no-deps |
    grep -o '"target_directory":"[^"]*"' | head -n1 | sed 's/^"target_directory":"//; s/"$//')
SERVER=$TARGET_DIR/release/overdue
[[ -x $SERVER ]] || die "built binary not found at $SERVER"

COMMIT=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
if [[ $COMMIT != unknown && -n $(git status --porcelain -- . ':(exclude)BENCHMARKS.md' 2>/dev/null) ]]; then
    COMMIT="$COMMIT-dirty"
fi
NPROC=$(nproc)
CPU_MODEL=$(awk -F': *' '/^model name/ {print $2; exit}' /proc/cpuinfo 2>/dev/null || true)
DATE=$(date -u '+%Y-%m-%d %H:%M UTC')
LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)

rss_kib() { awk '/^VmRSS:/ {print $2}' "/proc/$SERVER_PID/status"; }
hwm_kib() { awk '/^VmHWM:/ {print $2}' "/proc/$SERVER_PID/status"; }
mib() { awk -v k="$1" 'BEGIN { printf "%.1f", k / 1024 }'; }

# Starts a server on a fresh database; sets SERVER_PID and BASE.
start_server() {
    local dir=$1
    mkdir -p "$dir"
    cat >"$dir/overdue.toml" <<EOF
listen = "127.0.0.1:0"
database_url = "sqlite://$dir/overdue.db"
EOF
    RUST_LOG=info NO_COLOR=1 "$SERVER" --config "$dir/overdue.toml" serve 2>"$dir/server.log" &
    SERVER_PID=$!
    BASE=""
    for _ in $(seq 1 600); do
        BASE=$(grep -o 'overdue listening on http://[0-9.:]*' "$dir/server.log" | head -n1 | sed 's/^overdue listening on //' || true)
        if [[ -n $BASE ]] && curl -fsS -o /dev/null "$BASE/readyz" 2>/dev/null; then
            return
        fi
        kill -0 "$SERVER_PID" 2>/dev/null || { cat "$dir/server.log" >&2; die "the server stopped"; }
        sleep 0.1
    done
    die "the server did not become ready"
}

# The JSON body of silence $1 with $2 regex matchers of kind $3 (the rest of
# the 64, 1 KiB equality matchers).
silence_body() {
    awk -v s="$1" -v regexes="$2" -v kind="$3" 'BEGIN {
        printf "{\"duration\": \"2h\", \"comment\": \"bench/abuse.sh\", \"created_by\": \"bench\", \"matchers\": ["
        for (m = 0; m < 64; m++) {
            if (m < regexes) {
                op = "=~"; v = ""; j = 0
                while (length(v) < 990) {
                    if (kind == "words") w = sprintf("web-%d-%d-%d.prod.example.com", s, m, j)
                    else w = sprintf("(web|api)-[0-9]+\\\\.s%dm%dx%d\\\\.example\\\\.com", s, m, j)
                    v = (v == "" ? w : v "|" w); j++
                }
            } else {
                op = "="; v = sprintf("value-%d-%d-", s, m)
                while (length(v) < 1000) v = v "x"
            }
            printf "%s\"l%d%s\\\"%s\\\"\"", (m ? ", " : ""), m, op, v
        }
        printf "]}"
    }'
}

post_silence() {
    curl -sS -o "$WORK/answer.json" -w '%{http_code}' -X POST \
        -H 'content-type: application/json' --data-binary @- "$BASE/api/v1/silences"
}

RESULTS=()
for kind in $KINDS; do
    echo "== $kind: $SILENCES silences (load average before: $(cut -d' ' -f1-3 /proc/loadavg))"
    start_server "$WORK/$kind"
    curl -fsS -o /dev/null "$BASE/api/v1/silences"
    sleep 2
    before=$(rss_kib)

    # How many 1 KiB regexes a silence takes: 64 words; for "nfa", found by trying.
    regexes=64
    while :; do
        code=$(silence_body 0 "$regexes" "$kind" | post_silence)
        [[ $code == 201 ]] && break
        grep -q 'compiles to more than' "$WORK/answer.json" || { cat "$WORK/answer.json" >&2; die "silence refused ($code)"; }
        regexes=$((regexes - 1))
        ((regexes > 0)) || die "no regex fits a silence"
    done
    for s in $(seq 1 $((SILENCES - 1))); do
        code=$(silence_body "$s" "$regexes" "$kind" | post_silence)
        [[ $code == 201 ]] || { cat "$WORK/answer.json" >&2; die "silence $s refused ($code)"; }
    done
    matcher_bytes=$(silence_body 0 "$regexes" "$kind" | wc -c)

    body=$(curl -fsS -o "$WORK/list.json" -w '%{size_download}' "$BASE/api/v1/silences")
    listed=$(grep -o '"id":' "$WORK/list.json" | wc -l)
    [[ $listed == "$SILENCES" ]] || die "listed $listed silences, created $SILENCES"
    sleep 2
    after=$(rss_kib)
    peak=$(hwm_kib)

    times=()
    for _ in $(seq 1 "$READS"); do
        times+=("$(curl -fsS -o /dev/null -w '%{time_total}' "$BASE/api/v1/silences")")
    done
    read -r median longest < <(printf '%s\n' "${times[@]}" | sort -g |
        awk '{ t[NR] = $1 } END { printf "%.1f %.1f\n", t[int((NR + 1) / 2)] * 1000, t[NR] * 1000 }')
    final=$(rss_kib)
    stop_server

    line="| $kind | $SILENCES × 64 ($regexes regexes of ~1 KiB) | $(mib "$before") → $(mib "$after") MiB (+$(mib $((after - before))) MiB; peak $(mib "$peak") MiB; $(mib "$final") MiB after the reads) | $median ms ($longest ms) | $(awk -v b="$body" 'BEGIN { printf "%.1f", b / 1048576 }') MiB |"
    echo "   $line"
    RESULTS+=("$line")
    echo "   (one request body: $matcher_bytes bytes)"
done

SECTION=$WORK/section.md
{
    echo "<!-- abuse-bench:start -->"
    echo "## Abuse: the largest silences the limits allow"
    echo
    echo "Issue #41: one 1.2 MB \`POST /api/v1/silences\` with 40,000 regex matchers took the"
    echo "server from 106 to 558 MB, and each \`GET /api/v1/silences\` then took 0.4 s and 450 MB"
    echo "more (every read compiled every regex again). Now a silence holds at most 64 matchers"
    echo "of at most 1 KiB whose regexes keep at most 128 KiB together, and stored silences are"
    echo "parsed once per change. \`bench/abuse.sh\` starts the release \`overdue serve\` on"
    echo "loopback (SQLite), creates $SILENCES of the largest silences, and reads them $READS times."
    echo
    echo "- words: every matcher \`lN=~\"web-…-0.prod.example.com|web-…-1.prod.example.com|…\"\`,"
    echo "  about 1 KiB of host names with unescaped dots, kept as those shapes."
    echo "- nfa: regexes that are no list of fixed shapes (\`(web|api)-[0-9]+\\.s1m2x3\\.example\\.com|…\`,"
    echo "  about 1 KiB each) as many as the 128 KiB budget of a silence lets in (found by"
    echo "  trying), the rest of the 64 being 1 KiB equality matchers."
    echo "- RSS: the server's VmRSS once idle before, and 2 s after the silences were created"
    echo "  and listed once; the peak is its VmHWM."
    echo "- Read: client time of \`curl http://127.0.0.1:PORT/api/v1/silences\` to the last byte, median (longest)."
    echo "- Target (issue #41): the RSS within 50 MB of before, a read under 10 ms."
    echo
    echo "- Date: $DATE"
    echo "- Commit: $COMMIT"
    echo "- Machine: $NPROC CPUs (nproc), ${CPU_MODEL:-unknown CPU}; shared: load average before the run $LOAD_BEFORE"
    echo "- Reproduce: \`bench/abuse.sh\` (\`BENCH_SILENCES=1000\` for more)"
    echo
    echo "| kind | silences × matchers | server RSS before → after | GET /api/v1/silences, median (longest) | list body |"
    echo "|---|---|---|---:|---:|"
    printf '%s\n' "${RESULTS[@]}"
    echo "<!-- abuse-bench:end -->"
} >"$SECTION"

BENCH_FILE=$ROOT/BENCHMARKS.md
if [[ -f $BENCH_FILE ]] && grep -qx '<!-- abuse-bench:start -->' "$BENCH_FILE" && grep -qx '<!-- abuse-bench:end -->' "$BENCH_FILE"; then
    awk -v section="$SECTION" '
        $0 == "<!-- abuse-bench:start -->" { while ((getline line < section) > 0) print line; skip = 1; next }
        $0 == "<!-- abuse-bench:end -->" { skip = 0; next }
        !skip { print }
    ' "$BENCH_FILE" >"$WORK/BENCHMARKS.md"
else
    { cat "$BENCH_FILE"; echo; cat "$SECTION"; } >"$WORK/BENCHMARKS.md"
fi
cp "$WORK/BENCHMARKS.md" "$BENCH_FILE"

echo
sed -n '/^| kind/,/^<!--/p' "$SECTION"
echo "BENCHMARKS.md updated; took $((SECONDS - START_SECONDS)) s."
