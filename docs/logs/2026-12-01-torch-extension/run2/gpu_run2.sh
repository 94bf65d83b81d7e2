#!/bin/bash
# Second H200 run of issue 18's extension acceptance (helper ext2). Runs in the repository root.
unset STREAMPOOL_ALLOC_CONF PYTORCH_ALLOC_CONF
export PIP_BREAK_SYSTEM_PACKAGES=1
(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; python3 -c 'import torch,sys;print(torch.__version__,sys.version)'; date -u) > $OUT/env.txt 2>&1
(STREAMPOOL_BUILD_DIR=$PWD/build-gpu-py STREAMPOOL_BENCH=off STREAMPOOL_TORCH_EXT=on STREAMPOOL_JOBS=16 \
 STREAMPOOL_CMAKE_ARGS="-DCMAKE_BUILD_TYPE=Release -DSTREAMPOOL_BUILD_KERNELS=OFF -DSTREAMPOOL_BUILD_PERF=OFF" \
 python3 -m pip install -v --no-build-isolation --no-deps --force-reinstall ./python > /tmp/pip.log 2>&1) \
 || { echo PIP FAILED; tail -100 /tmp/pip.log; exit 1; }
grep "streampool build: wrote" /tmp/pip.log; echo "build done at ${SECONDS}s"
tail -40 /tmp/pip.log > $OUT/pip_tail.log
CHECKS="route graph_step shared_pool graphed_callables compile stats empty_cache record_stream history mempool ipc oom gpt2 ddp"
for b in native cudaMallocAsync; do
  if [ $b = native ]; then unset PYTORCH_CUDA_ALLOC_CONF; else export PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync; fi
  s=$SECONDS
  timeout 225 python3 python/tests/gpu_torch_extension.py --out /tmp/art/$b > $OUT/$b.log 2>&1
  echo "== $b full pass rc=$? $((SECONDS-s))s"
  grep -E "^(PASS|FAIL|SUMMARY|note|SKIP)" $OUT/$b.log | cut -c1-700
  cp /tmp/art/$b/gpt2.json $OUT/$b-gpt2.json 2>/dev/null
done
# Checks a crashed or timed-out pass never reported: each alone, while time is left.
for b in native cudaMallocAsync; do
  if [ $b = native ]; then unset PYTORCH_CUDA_ALLOC_CONF; else export PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync; fi
  for c in $CHECKS; do
    grep -qE "^(PASS|FAIL) $c:" $OUT/$b.log && continue
    [ $SECONDS -gt 480 ] && { echo "== $b $c: no time left"; continue; }
    timeout 60 python3 python/tests/gpu_torch_extension.py --only $c --out /tmp/art1/$b > /tmp/one.log 2>&1
    echo "== $b $c alone rc=$?"; grep -E "^(PASS|FAIL)" /tmp/one.log | cut -c1-700
    cat /tmp/one.log >> $OUT/$b.log
  done
done
cp /tmp/art/native/memory_summary.txt $OUT/native-memory_summary.txt 2>/dev/null
cp /tmp/art/cudaMallocAsync/oom_message.txt $OUT/async-oom_message.txt 2>/dev/null
echo "total ${SECONDS}s"; ls $OUT
