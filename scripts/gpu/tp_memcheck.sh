#!/bin/sh
# scripts/gpu/tp_memcheck.sh — issue 28's sharded-kernel checks in one device call, with a short
# table: (1) test_cuda_ops test_tp_shapes_* (every product and head-count op of one rank of
# qwen3-8b / qwen35-9b / qwen35-27b at TP 2 and 4 against the CPU, within the op bounds); (2)
# compute-sanitizer memcheck of test_cuda_tp's TP 2 + TP 4 runs on one GPU (qwen3-tiny bf16 over the
# device-local communicator, against TP 1).
# Here:   TARGETS="test_cuda_ops test_cuda_tp" scripts/gpu/pack.sh
# Device: sh scripts/gpu/tp_memcheck.sh   (carry build-cuda-pack; builds nothing; ~3-6 min)
# Env: OUT (logs, default /tmp/gpu-tp-memcheck), MEMCHECK_TESTS (cmocka pattern of test_cuda_tp,
# default test_local_qwen3_bf16; "test_local_qwen3*_bf16" adds qwen35-tiny's GDN ranks),
# MEMCHECK_SHAPES=1 also runs test_tp_shapes_qwen3_8b under memcheck (slow).
# Under memcheck the decode steps run eagerly (GANTRY_CUDA_GRAPHS=0): the sanitizer serialises
# kernels, so a captured graph's device wait for a peer rank would spin with the peer's kernels
# queued behind it (engine/TP.md "Ranks sharing one GPU"); eager steps meet on the host between
# each all-reduce's put and its wait, so every peer's put has run first. Same kernels either way.
# Exit 1 when a step failed.
set -u
SRC=$(cd "$(dirname "$0")/../.." && pwd)
cd "$SRC" || exit 1
OUT=${OUT:-/tmp/gpu-tp-memcheck}
mkdir -p "$OUT"
# always this pack's programs (session_unpack keeps an older build-cuda-dist that has bench_decode)
if [ -f build-cuda-pack/dist.tar.xz ]; then rm -rf build-cuda-dist && tar xJf build-cuda-pack/dist.tar.xz || exit 1; fi
D=$SRC/build-cuda-dist
[ -x "$D/test_cuda_ops" ] && [ -x "$D/test_cuda_tp" ] || { echo "tp_memcheck.sh: no test_cuda_ops / test_cuda_tp in $D (pack.sh)"; exit 2; }
export LD_LIBRARY_PATH="$D/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
export GANTRY_GOLDEN="$SRC/tests/golden" GANTRY_SRC="$SRC" GANTRY_BIN="$D"
. "$SRC/scripts/gpu/nccl_lib.sh"
export NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0}
export CUDA_DEVICE_MAX_CONNECTIONS=32 # each rank's stream its own hardware queue
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
rc=0
row() { printf '| %-56s | %-6s | %s |\n' "$1" "$2" "$3"; }
verdict() { case $1 in 0) echo PASS ;; 77) echo SKIP ;; *) echo FAIL ;; esac; } # 77: no GPU visible
summary=$OUT/summary.txt
: >"$summary"

# 1. the production shapes, no sanitizer
t=$(date +%s)
GANTRY_TEST_ONLY='test_tp_shapes*' timeout 240 "$D/test_cuda_ops" >"$OUT/tp_shapes.txt" 2>&1
r=$?
[ $r -eq 0 ] || rc=1
n_cmp=$(grep -c ' err [0-9]' "$OUT/tp_shapes.txt")
n_fail=$(grep -c '  FAIL$' "$OUT/tp_shapes.txt")
shapes="rc=$r, $(($(date +%s) - t)) s: $n_cmp comparisons, $n_fail over their bound"
# 2. memcheck of TP 2 / 4 on one GPU
pat=${MEMCHECK_TESTS:-test_local_qwen3_bf16}
t=$(date +%s)
GANTRY_TEST_ONLY=$pat GANTRY_CUDA_GRAPHS=0 GANTRY_LOCAL_AR_TIMEOUT_S=120 timeout 420 \
  compute-sanitizer --tool memcheck --error-exitcode 9 "$D/test_cuda_tp" >"$OUT/memcheck_tp.txt" 2>&1
m=$?
[ $m -eq 0 ] || rc=1
mem="rc=$m, $(($(date +%s) - t)) s: $(grep -m1 'ERROR SUMMARY' "$OUT/memcheck_tp.txt" || echo 'no ERROR SUMMARY line')"
mem_s=
if [ "${MEMCHECK_SHAPES:-0}" = 1 ]; then
  t=$(date +%s)
  GANTRY_TEST_ONLY=test_tp_shapes_qwen3_8b timeout 300 compute-sanitizer --tool memcheck --error-exitcode 9 \
    "$D/test_cuda_ops" >"$OUT/memcheck_shapes.txt" 2>&1
  s=$?
  [ $s -eq 0 ] || rc=1
  mem_s="rc=$s, $(($(date +%s) - t)) s: $(grep -m1 'ERROR SUMMARY' "$OUT/memcheck_shapes.txt" || echo 'no ERROR SUMMARY line')"
fi

{
  echo "== tp_memcheck.sh: $(cat "$D/COMMIT" 2>/dev/null)"
  row "step" "result" "detail (logs in $OUT)"
  row "---" "---" "---"
  row "test_cuda_ops test_tp_shapes_* (op bounds)" "$(verdict $r)" "$shapes"
  row "memcheck test_cuda_tp $pat (TP 2 + 4)" "$(verdict $m)" "$mem"
  [ -n "$mem_s" ] && row "memcheck test_tp_shapes_qwen3_8b" "$(verdict $s)" "$mem_s"
  echo "-- ranks and failures (test_tp_shapes):"
  grep -E 'rank 0: heads|  FAIL$|\[  ERROR   \]|not run|left by this test|poisoned|\[  (PASSED|FAILED)  \]' "$OUT/tp_shapes.txt"
  echo "-- test_cuda_tp under memcheck:"
  grep -E 'on one GPU|waited more|Invalid|\[  ERROR   \]|\[  (PASSED|FAILED)  \]' "$OUT/memcheck_tp.txt" | head -20
} | tee "$summary"
exit $rc
