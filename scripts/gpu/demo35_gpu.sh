#!/bin/bash
# scripts/gpu/demo35_gpu.sh — demo35 (tests/golden/demo35) on the GPU in one call: its golden cases
# (test_cuda_golden, GANTRY_GOLDEN_ONLY=demo35: fp32 and bf16 activations), its TP refusal
# (test_cuda_tp test_local_demo35), then issue 25's speed runs through the stack (spec_stack.sh).
# Here:   STACK=1 TARGETS="test_cuda_golden test_cuda_tp gantry-engine" scripts/gpu/pack.sh
#         sh scripts/gpu/slim.sh hide stack     (and `restore` after the call)
# Device: bash scripts/gpu/demo35_gpu.sh   (carry build-cuda-pack and build-cuda-stack; ~4 min)
# Env: as spec_stack.sh (MODES, WORKLOADS, CONC, K, OUTPUT_LEN); OUT (default /tmp/gpu-demo35).
set -u
SRC=$(cd "$(dirname "$0")/../.." && pwd)
cd "$SRC" || exit 1
export OUT=${OUT:-/tmp/gpu-demo35}
mkdir -p "$OUT"
rm -rf build-cuda-dist && tar xJf build-cuda-pack/dist.tar.xz && tar xJf build-cuda-stack/stack.tar.xz || { echo "== unpack FAILED"; exit 1; }
D=$SRC/build-cuda-dist
echo "commit $(cat "$D/COMMIT" 2>/dev/null || git rev-parse --short HEAD) $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
export LD_LIBRARY_PATH="$D/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}" GANTRY_GOLDEN=$SRC/tests/golden GANTRY_SRC=$SRC
GANTRY_GOLDEN_ONLY=demo35 timeout 120 "$D/test_cuda_golden" >"$OUT/golden.txt" 2>&1
echo "== test_cuda_golden demo35 rc=$?"; grep -E "demo35|PASSED|FAILED" "$OUT/golden.txt" | head -12
GANTRY_TEST_ONLY=test_local_demo35 timeout 120 "$D/test_cuda_tp" >"$OUT/tp.txt" 2>&1
echo "== test_cuda_tp test_local_demo35 rc=$?"; grep -E "refused|PASSED|FAILED" "$OUT/tp.txt" | head -4
OUT=$OUT/stack bash scripts/gpu/spec_stack.sh
