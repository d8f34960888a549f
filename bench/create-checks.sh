#!/usr/bin/env bash
# Creates N checks (slugs PREFIX-0 … PREFIX-N-1, interval 1h) through the API
# of the server at BASE_URL, 200 per curl and 4 curls at a time, and prints
# their uuids, one per line. Fails unless all N were created.
#
# Usage: bench/create-checks.sh BASE_URL N PREFIX > uuids.txt
set -euo pipefail
(($# == 3)) || { echo "usage: $0 BASE_URL N PREFIX" >&2; exit 2; }
url=$1/api/v1/checks
n=$2
prefix=$3
# shellcheck disable=SC2016
uuids=$(seq 0 $((n - 1)) | xargs -n 200 -P 4 bash -c '
    url=$0; prefix=$1; shift; args=()
    for i in "$@"; do
        args+=(--next -sS -X POST -H "content-type: application/json"
               -d "{\"slug\": \"$prefix-$i\", \"interval\": \"1h\"}" "$url")
    done
    curl "${args[@]:1}"; echo' "$url" "$prefix" |
    grep -o '"uuid":"[0-9a-f-]*"' | cut -d'"' -f4 || true)
got=$(grep -c . <<<"$uuids" || true)
[[ $got == "$n" ]] || { echo "created $got of $n checks" >&2; exit 1; }
echo "$uuids"
