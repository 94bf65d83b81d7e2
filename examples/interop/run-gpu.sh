#!/usr/bin/env bash
# examples/interop/run-gpu.sh [OUT] [STEPS] — issue 29's GPU checks, from the repository root on a
# GPU machine with PyTorch, CuPy and numba-cuda (OUT defaults to $OUT, else logs/interop; STEPS to 300):
#   1. installs streampool (pip install --no-build-isolation --no-deps ./python, offline, as
#      scripts/pytorch-tests does) unless the installed one has the extension and the adapters
#      (STREAMPOOL_REINSTALL=1 forces it);
#   2. examples/interop/adapters_check.py: the real CuPy and Numba adapters, and the bad uses;
#   3. examples/interop/pipeline.py in each mode (own pools, shared through the extension route,
#      shared through the pluggable route), then compare.py: identical outputs, the memory table,
#      the reuse evidence (OUT/summary.md).
# Logs and results go under OUT; the exit status is non-zero if any step failed.
set -uo pipefail
out=${1:-${OUT:-logs/interop}}
steps=${2:-300}
root=$(cd "$(dirname "$0")/../.." && pwd)
here=$root/examples/interop
mkdir -p "$out"
out=$(cd "$out" && pwd)
status=0
started=$SECONDS

if [ "${STREAMPOOL_REINSTALL:-0}" = 1 ] ||
   ! python3 -c 'import streampool._C10, streampool.interop, streampool.cupy, streampool.numba' 2>/dev/null; then
  echo "== installing streampool (pip install --no-build-isolation --no-deps ./python; log: $out/pip.log)"
  STREAMPOOL_BENCH=${STREAMPOOL_BENCH:-off} STREAMPOOL_JOBS=$(nproc) \
    python3 -m pip install -q --no-build-isolation --no-deps --force-reinstall "$root/python" >"$out/pip.log" 2>&1 ||
    { tail -n 30 "$out/pip.log"; exit 1; }
  echo "   installed in $((SECONDS - started)) s"
fi
python3 - <<'EOF' | tee "$out/versions.txt"
import importlib.metadata as metadata
import cupy, numba, torch, streampool
try:
    numba_cuda = metadata.version("numba-cuda")
except metadata.PackageNotFoundError:
    numba_cuda = "not installed (numba's own numba.cuda)"
print(f"torch {torch.__version__} | cupy {cupy.__version__} | numba {numba.__version__} | numba-cuda {numba_cuda} "
      f"| streampool {streampool.__version__} ({streampool.__file__})")
EOF

step() {  # step NAME TIMEOUT COMMAND...
  local name=$1 limit=$2 start=$SECONDS
  shift 2
  echo "== $name"
  timeout "$limit" "$@" >"$out/$name.log" 2>&1
  local rc=$?
  tail -n 20 "$out/$name.log"
  echo "-- $name: exit $rc, $((SECONDS - start)) s"
  [ "$rc" = 0 ] || status=1
}

step adapters 240 python3 "$here/adapters_check.py"
for mode in own shared shared-pluggable; do
  step "pipeline-$mode" 150 python3 "$here/pipeline.py" --mode "$mode" --steps "$steps" --out "$out/$mode"
done
step compare 30 python3 "$here/compare.py" "$out"
echo "== total $((SECONDS - started)) s; summary: $out/summary.md"
exit $status
