#!/bin/sh
# On the GPU machine, from the repository root: runs the packed CUDA tests (build-cuda-dist/,
# see pack.sh; the list: gpu_tests.sh) against tests/golden. MEMCHECK=1 also runs the qwen35
# golden test under compute-sanitizer memcheck. Logs go to $OUT when set. ONLY: a space-separated
# subset of the list to run instead.
set -u
SRC=$(cd "$(dirname "$0")/../.." && pwd)
D=$SRC/build-cuda-dist
LOG=${OUT:-/tmp}
export LD_LIBRARY_PATH="$D/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
export GANTRY_GOLDEN="$SRC/tests/golden" GANTRY_SRC="$SRC" GANTRY_BIN="$D"
export NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0}
. "$SRC/scripts/gpu/nccl_lib.sh" # test_cuda_tp: libnccl for the NCCL communicator
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv,noheader
rc=0
. "$SRC/scripts/gpu/gpu_tests.sh"
for t in ${ONLY:-$GPU_TESTS}; do
  [ -x "$D/$t" ] || continue
  echo "== $t"
  "$D/$t" >"$LOG/$t.log" 2>&1; r=$?
  grep -E "FAIL|err [0-9]|cuda |\[  (PASSED|FAILED|  SKIPPED)|\[ +(OK|FAILED|SKIPPED) +\]|error|Error" "$LOG/$t.log" | tail -${TAIL:-200}
  echo "== $t rc=$r"
  [ $r -eq 0 ] || rc=1
done
if [ "${MEMCHECK:-0}" = 1 ] && [ -x "$D/test_cuda_golden" ]; then
  echo "== memcheck (qwen35 bf16 + qwen3 Q4_K_M golden)"
  CMOCKA_TEST_ABORT=0 compute-sanitizer --tool memcheck --leak-check full --error-exitcode 9 \
    "$D/test_cuda_golden" >"$LOG/memcheck.log" 2>&1; echo "memcheck rc=$?"
  grep -E "ERROR SUMMARY|LEAK SUMMARY|Invalid" "$LOG/memcheck.log" | head -20
fi
exit $rc
