#!/bin/sh
# scripts/gpu/ring.sh — one device call for the ring-streamed batch-1 Q4_K product (issue 24,
# kernels/matvec_ring.cuh), from the repository root after scripts/gpu/pack.sh (test_cuda_ops,
# test_cuda_golden, bench_matvec, bench_decode, gantry-mkmodel; carry build-cuda-pack):
#  1. test_cuda_ops (test_matvec_mma checks ring == registers bit for bit) and test_cuda_golden;
#  2. bench_matvec Q4_K / Q6_K at NS rows (1; NS=1,2 for both): GANTRY_MVR=0 (weights loaded into registers: the integer
#     kernel, Q6_K the bf16 one) against the ring at GANTRY_MVR_NST (Q4_K) = GANTRY_MVR_NST6 (Q6_K)
#     2 / 3 / 4 (GANTRY_MVR_NST2 at two rows likewise);
#  3. MMQNS (e.g. 4,8): bench_matvec's mmq table at those rows (mmq1 / mmq3 against ring1: the ring
#     with x in one part, kc_mvm_rows_launch);
#  4. bench_decode --batch 1 (and BATCHES) on qwen3-8b and qwen35-9b Q4_K_M for the same settings;
#  5. VERIFY=1: bench_verify on qwen35-9b (1 + 3 tokens, --batches VBATCHES (1,8)) for the same settings.
# Env: TYPES (bench_matvec's, Q4_K,Q6_K), OUT (/tmp/ring), BUDGET (420 s), MODELDIR (/tmp), VARIANTS ("0 2 3 4": 0 = GANTRY_MVR=0,
# else the ring depth; "d": the defaults; pN: the one-part ring at N stages; w0: the wide kernel off (9..32 rows
# on mmq), wN: the wide kernel with N warps per block, 8 or 16), NS (1), BATCHES (1), MMQV (the variants of step 3, "d"), TESTS (1;
# all: every packed GPU test, run_tests.sh; 0: none; else a GANTRY_TEST_ONLY pattern for test_cuda_ops), PROFILE (N: bench_verify --profile, N lines of its table),
# MATVEC (1; 0 leaves step 2 out).
set -u
OUT=${OUT:-/tmp/ring}
BUDGET=${BUDGET:-420}
. "$(dirname "$0")/session_lib.sh"
session_begin build-cuda-pack/dist.tar.xz
session_q4_models
vset() {
  case $1 in
    0) echo "GANTRY_MVR=0" ;;
    d) echo "GANTRY_MVR=1" ;;
    p*) echo "GANTRY_MVR=1 GANTRY_MVR_NSTP=${1#p}" ;;
    w0) echo "GANTRY_MVW=0" ;;
    w*) echo "GANTRY_MVW_W=${1#w}" ;;
    *) echo "GANTRY_MVR=1 GANTRY_MVR_NST=$1 GANTRY_MVR_NST6=$1 GANTRY_MVR_NST2=$1" ;;
  esac
}
if [ "${TESTS:-1}" = all ]; then
  mkdir -p /tmp/tlogs
  step tests 300 env OUT=/tmp/tlogs sh scripts/gpu/run_tests.sh
  grep -E "^== test_[a-z0-9_]+ rc=" /tmp/step.txt | tr '\n' ' '; echo
  grep -E "FAIL" /tmp/step.txt | head -12
  grep -hcE "ring vs registers.*bitwise" /tmp/tlogs/test_cuda_ops.txt /tmp/tlogs/test_cuda_ops.log 2>/dev/null
elif [ "${TESTS:-1}" = 1 ]; then
  step ops 200 "$D/test_cuda_ops"
  grep -E "ring vs|FAIL|\[  (PASSED|FAILED)" /tmp/step.txt | sort | uniq -c | sort -rn | head -12
  grep -E "mma Q4_K .*rows 1" /tmp/step.txt | head -8
  step golden 120 "$D/test_cuda_golden"
  grep -E "FAIL|\[  (PASSED|FAILED)" /tmp/step.txt | head -6
elif [ "${TESTS:-1}" != 0 ]; then
  step "ops $TESTS" 200 env GANTRY_TEST_ONLY="$TESTS" "$D/test_cuda_ops"
  grep -E "FAIL|\[  (PASSED|FAILED)" /tmp/step.txt | head -12
  grep -E " (rows (9|16|17|32)|ring vs mmq)" /tmp/step.txt | grep -E "12288|vs mmq" | sort | uniq -c | sort -rn | head -8
fi
for v in $([ "${MATVEC:-1}" = 1 ] && echo ${VARIANTS:-0 2 3 4}); do
  step "matvec $(vset $v)" 60 env $(vset $v) "$D/bench_matvec" --types ${TYPES:-Q4_K,Q6_K} --ns ${NS:-1} --mmq 0 --reps 20 \
    --shapes 4096x4096,12288x4096,4096x12288,151936x4096,multi,swiglu
  grep -E " mma " /tmp/step.txt | sed "s/^/v=$v /"
  grep -E "FAIL|VALIDATION|error" /tmp/step.txt | head -3
done
if [ -n "${MMQNS:-}" ]; then
  for v in ${MMQV:-d}; do
    step "mmq rows $MMQNS v=$v" 120 env $(vset $v) "$D/bench_matvec" --types ${TYPES:-Q4_K,Q6_K} --ns 1 --mmq 1 \
      --mmq-ns "$MMQNS" --reps 20 --shapes 4096x4096,12288x4096,4096x12288,151936x4096
    grep -E "\| (mmq1/[12]|ring1) " /tmp/step.txt | sed "s/^/v=$v /"
    grep -E "FAIL|VALIDATION|error" /tmp/step.txt | head -3
  done
fi
for m in "$M8" "$M9"; do
  session_wait "$m" || { echo "== $m not made"; continue; }
  nm=$(basename "$m" .gguf)
  for v in ${VARIANTS:-0 2 3 4}; do
    step "decode $nm v=$v" 60 env $(vset $v) "$D/bench_decode" --model "$m" --batch "${BATCHES:-1}" --prompt 512 --gen 32
    grep -E '^\| [0-9]+ \|' /tmp/step.txt | awk -F'|' -v p="$nm v=$v" '{printf "%s b%s %s ms %s (%s)\n", p, $2+0, $4+0, $10, $11}'
    grep -E "FAIL|error" /tmp/step.txt | head -3
  done
done
if [ "${VERIFY:-0}" = 1 ] && session_wait "$M9"; then
  for v in ${VARIANTS:-0 2 3 4}; do
    step "verify v=$v" 90 env $(vset $v) "$D/bench_verify" --model "$M9" --device cuda --batches "${VBATCHES:-1,8}" --k 3 \
      --ctx 512 --iters 30 --warm 5 ${PROFILE:+--profile}
    grep -E "^ *[0-9]+ \||eager|FAIL|error" /tmp/step.txt | sed "s/^/v=$v /" | head -12
    [ -n "${PROFILE:-}" ] && grep -A"${PROFILE}" -E "^batch [0-9]+, one decode step" /tmp/step.txt | grep -E "^batch|^\| " | head -80
  done
fi
echo "== done in $(($(date +%s) - t0)) s"
