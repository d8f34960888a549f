#!/usr/bin/env bash
# Alert-storm benchmark: the "alert storm" service level of SPEC §12.
#
# Runs examples/alert_storm.rs (release build): the real server in-process,
# BENCH_CHECKS checks in BENCH_GROUPS route groups going down within about a
# second, one local webhook receiver; reports the notifications that arrive
# and their delay after the first alert of their group. On SQLite, then on a
# fresh PostgreSQL database next to OVERDUE_BENCH_POSTGRES_URL (unless
# BENCH_DATABASES=sqlite). Writes BENCHMARKS.md between
# <!-- alert-storm:start --> and <!-- alert-storm:end -->.
#
# Usage: bench/alert-storm.sh
#
# Environment:
#   BENCH_CHECKS                checks (default 10000)
#   BENCH_GROUPS                route groups (default 10)
#   BENCH_GROUP_WAIT            group_wait (default 5s)
#   BENCH_DATABASES             "sqlite postgres" (default) or "sqlite"
#   OVERDUE_BENCH_POSTGRES_URL  admin URL (default postgres://postgres@127.0.0.1:5432/test)
#   CARGO_TARGET_DIR            honoured, as by cargo
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

args=(--checks "${BENCH_CHECKS:-10000}" --groups "${BENCH_GROUPS:-10}"
      --group-wait "${BENCH_GROUP_WAIT:-5s}" --write BENCHMARKS.md)
if [[ " ${BENCH_DATABASES:-sqlite postgres} " == *" postgres "* ]]; then
    args+=(--postgres "${OVERDUE_BENCH_POSTGRES_URL:-postgres://postgres@127.0.0.1:5432/test}")
fi
cargo build --release --example alert_storm
timeout 900 cargo run --release --quiet --example alert_storm -- "${args[@]}"
