#!/usr/bin/env bash
# examples/sleep/run-gpu.sh [OUT] — the sleep/wake acceptance loop on a GPU machine with PyTorch
# and transformers (docs/sleep-wake.md): examples/sleep/colocate.py without sleeping (the
# reference), sleeping, and sleeping with expandable_segments:True, then compare.py (identical
# outputs, peak memory, sleep/wake time: OUT/summary.md). streampool must be installed (the
# extension route); the exit status is non-zero if a run failed or an output differs.
set -uo pipefail
out=${1:-${OUT:-logs/sleep}}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
status=0
run() {  # run NAME MODE [CONF]
  local start=$SECONDS
  echo "== $1"
  CUBLAS_WORKSPACE_CONFIG=:4096:8 STREAMPOOL_ALLOC_CONF=${3:-} timeout 300 python3 "$here/colocate.py" --mode "$2" --out "$out/$1" >"$out/$1.log" 2>&1
  local rc=$?
  tail -n 8 "$out/$1.log"
  echo "-- $1: exit $rc, $((SECONDS - start)) s"
  [ "$rc" = 0 ] || status=1
}
run nosleep nosleep
run sleep sleep
run sleep-expandable sleep "expandable_segments:True"
python3 "$here/compare.py" "$out" || status=1
exit $status
