#!/usr/bin/env bash
# Fault service levels (SPEC §12, "faults"), measured rather than asserted.
#
# The fault tests assert what must hold whatever the machine's load (every
# acknowledged ping stored, nothing sent twice, the instants the server
# recorded); how fast the server recovers is a service level, so it is read
# here from the figures the same tests print, over RUNS runs of each:
#
# - full disk (tests/reliability_disk_full.rs, release binary): after the
#   filler is deleted, how long until a ping is answered 200 and /readyz 200
#   (level: within 5 s);
# - partition from PostgreSQL (tests/reliability_partition.rs): when the
#   cut-off leader stepped down and its lease ran out, after the cut; the
#   slowest 503 it gave a ping while cut off (a ping waits at most 5 s for the
#   database);
# - wall-clock steps (tests/reliability_clock_steps.rs, SQLite): how long
#   after its last ping a silent check was told down across a +2 h step (6 s
#   of observed time) and a -2 h step (4 s).
#
# Needs what those tests need: root (tmpfs, nftables), PostgreSQL at
# OVERDUE_TEST_POSTGRES_URL, Python 3, libfaketime. The figures are printed
# and written to BENCHMARKS.md between <!-- faults-bench:start --> and
# <!-- faults-bench:end -->.
#
#   OVERDUE_TEST_POSTGRES_URL=postgres://postgres@127.0.0.1:5432/test bench/faults.sh
#   RUNS=5 bench/faults.sh
set -euo pipefail
cd "$(dirname "$0")/.."

runs=${RUNS:-3}
: "${OVERDUE_TEST_POSTGRES_URL:?set OVERDUE_TEST_POSTGRES_URL (the partition test needs PostgreSQL)}"
export OVERDUE_TEST_POSTGRES_URL
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

cargo build --release --quiet
export OVERDUE_TEST_RELEASE_BIN="$PWD/target/release/overdue"
cargo test --quiet --no-run --test reliability_disk_full --test reliability_partition \
    --test reliability_clock_steps

for i in $(seq 1 "$runs"); do
    echo "run $i of $runs" >&2
    cargo test --quiet --test reliability_disk_full a_full_disk -- --nocapture 2>/dev/null \
        | grep -oE 'full disk \(.*' >>"$out/disk" || { echo "the full-disk test failed" >&2; exit 1; }
    cargo test --quiet --test reliability_partition -- --nocapture 2>/dev/null \
        | grep -oE 'partition: .*' >>"$out/partition" || { echo "the partition test failed" >&2; exit 1; }
    cargo test --quiet --test reliability_clock_steps -- --nocapture --test-threads 1 \
        'step_forward_raises_no_storm_and_silent_checks_go_down_once::sqlite' \
        'step_backward_keeps_down_checks_down_and_instants_in_order::sqlite' 2>/dev/null \
        | grep -oE '(forward|backward): .*' >>"$out/clock" || { echo "the clock-step tests failed" >&2; exit 1; }
done

table=$(python3 - "$out" "$runs" "$(git rev-parse --short HEAD)" "$(nproc)" <<'EOF'
import re, statistics, sys
out, runs, rev, cores = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
def read(name):
    return open(f"{out}/{name}").read().splitlines()
def spread(xs, unit):
    xs = sorted(xs)
    return f"{xs[0]:.0f} / {statistics.median(xs):.0f} / {xs[-1]:.0f} {unit}"
disk = read("disk")
ping200 = [float(re.search(r"a ping got 200 after (\d+) ms", l).group(1)) for l in disk]
ready = [float(re.search(r"/readyz 200 after (\d+) ms", l).group(1)) for l in disk]
part = read("partition")
stepped = [float(re.search(r"A stepped down (\d+) ms after the cut", l).group(1)) for l in part]
ran_out = [float(re.search(r"A's lease ran out (\d+) ms after the cut", l).group(1)) for l in part]
slow503 = [1000 * float(re.search(r"A's slowest 503 after ([\d.]+)s", l).group(1)) for l in part]
clock = read("clock")
def secs(s):
    m = re.match(r"([\d.]+)(ms|s|µs)", s)
    v = float(m.group(1))
    return {"s": v * 1000, "ms": v, "µs": v / 1000}[m.group(2)]
fwd = [secs(re.search(r"went down (\S+) after", l).group(1)) for l in clock if l.startswith("forward")]
back = [secs(re.search(r"went down (\S+) after", l).group(1)) for l in clock if l.startswith("backward")]
print(f"Commit {rev}, {cores} cores, {runs} runs of each test (min / median / max):\n")
print("| fault | measured | level (SPEC §12) |")
print("|---|---|---|")
print(f"| full disk freed → a ping answered 200 (release binary) | {spread(ping200, 'ms')} | ≤ 5 s |")
print(f"| full disk freed → `/readyz` 200 | {spread(ready, 'ms')} | ≤ 5 s |")
print(f"| partition: cut → the leader's lease ran out (database's clock) | {spread(ran_out, 'ms')} | within its lease (TTL 3 s here) |")
print(f"| partition: cut → the cut-off leader stepped down (its own log) | {spread(stepped, 'ms')} | within its lease |")
print(f"| partition: the slowest 503 the cut-off replica gave | {spread(slow503, 'ms')} | a ping waits ≤ 5 s for the database |")
print(f"| +2 h step: last ping → told down (6 s of observed time) | {spread(fwd, 'ms')} | no storm, no missed alert |")
print(f"| −2 h step: last ping → told down (4 s) | {spread(back, 'ms')} | no storm, no missed alert |")
EOF
)
echo "$table"

python3 - "$table" <<'EOF'
import sys
table = sys.argv[1]
path = "BENCHMARKS.md"
text = open(path).read()
start, end = "<!-- faults-bench:start -->", "<!-- faults-bench:end -->"
block = f"{start}\n{table}\n{end}"
if start in text:
    head, rest = text.split(start, 1)
    text = head + block + rest.split(end, 1)[1]
else:
    text = text.rstrip("\n") + "\n\n## Faults\n\n`bench/faults.sh` (root, PostgreSQL at `OVERDUE_TEST_POSTGRES_URL`).\n\n" + block + "\n"
open(path, "w").write(text)
EOF
