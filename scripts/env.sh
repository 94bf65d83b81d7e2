# scripts/env.sh — sourced by the other scripts: puts nvcc on PATH and picks the build folder.
if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH=/usr/local/cuda/bin:$PATH
fi
STREAMPOOL_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
STREAMPOOL_BUILD=${STREAMPOOL_BUILD:-$STREAMPOOL_ROOT/build}
STREAMPOOL_JOBS=${STREAMPOOL_JOBS:-$(nproc)}
