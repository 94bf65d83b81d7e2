#!/usr/bin/env bash
# examples/run-gpu-checks.sh — the integration checks that need a GPU, in one command, for a GPU
# machine run from the repository root:
#   examples/run-gpu-checks.sh [LOG_DIR] [BUILD_DIR]      (defaults: logs/integrations, build-gpu)
# Runs, continuing past failures: the Thrust/CUB/cuda::mr GPU tests, the PyTorch acceptance run
# (6 allocator configurations + 2 CUDA-graph checks), the NCCL check (one rank per GPU; one rank
# when there is a single GPU), the Python package with PyTorch (record, dump_snapshot opened by
# PyTorch's memory_viz), its pip install into a fresh venv, and the CMake package check. Each writes its log under LOG_DIR;
# the last lines summarise, and the exit status is non-zero if any check failed.
set -uo pipefail
log_dir=${1:-logs/integrations}
build=${2:-build-gpu}
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
mkdir -p "$log_dir"
lib=$build/libstreampool.so
export PATH=/usr/local/cuda/bin:$PATH
results=()

step() {  # step NAME LOG COMMAND...
  local name=$1 log=$2
  shift 2
  echo "== $name (log: $log)"
  local start=$SECONDS
  "$@" >"$log" 2>&1
  local rc=$?
  tail -n 25 "$log"
  results+=("$(printf '%-22s exit %-3s %4ss  %s' "$name" "$rc" "$((SECONDS - start))" "$log")")
  return 0
}

step build "$log_dir/build.log" cmake --build "$build" --target streampool_shared streampool_gpu_tests
step thrust-cub-mr "$log_dir/thrust_gtest.log" \
  "$build/tests/streampool_gpu_tests" --gtest_filter='*thrust_adapter*' --gtest_brief=0
step torch-acceptance "$log_dir/torch_acceptance.log" \
  python3 examples/torch/acceptance.py --lib "$lib" --steps 30 --out "$log_dir/torch" --timeout 300 --require-gpu
step torch-distributed "$log_dir/torch_distributed.log" \
  python3 examples/torch/distributed_check.py --lib "$lib" --out "$log_dir/dist" --allow-single-gpu --timeout 240
step python-package "$log_dir/python_package.log" \
  env STREAMPOOL_LIB="$lib" python3 python/tests/gpu_package.py --out "$log_dir/package"
step check-python "$log_dir/check_python.log" scripts/check-python "$build"
step check-package "$log_dir/check_package.log" scripts/check-package "$build"

echo
echo "== summary (exit 0 = passed; acceptance tables: $log_dir/torch/summary.md)"
printf '%s\n' "${results[@]}" | tee "$log_dir/summary.txt"
! grep -qv ' exit 0 ' "$log_dir/summary.txt"
