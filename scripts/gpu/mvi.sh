#!/bin/sh
# scripts/gpu/mvi.sh — one device call for the integer batch-1 product (kernels/matvec_i8.cuh,
# issue 24; kernels/README.md "The integer batch-1 product"), from the repository root after
# scripts/gpu/pack.sh (test_cuda_ops, test_cuda_golden, bench_matvec, bench_decode,
# gantry-mkmodel; carry build-cuda-pack): the op and golden tests, bench_matvec at 1 / 2 rows,
# bench_decode --batch 1,2,8 on qwen3-8b and qwen35-9b Q4_K_M, once per value of KS given to
# GANTRY_MVM_I8 (the measurement switch of that run's build: 0 bf16, 1 integer, 2 integer with
# two chunks in flight; the committed code has no switch, so KS defaults to one run).
# Env: OUT (/tmp/mvi), BUDGET (500 s), MODELDIR (/tmp), PARTS ("test mat dec"), KS ("1").
set -u
OUT=${OUT:-/tmp/mvi}
BUDGET=${BUDGET:-500}
. "$(dirname "$0")/session_lib.sh"
session_begin build-cuda-pack/dist.tar.xz
MD=${MODELDIR:-/tmp}
M9=$MD/qwen35-9b.Q4_K_M.mtp.gguf M8=$MD/qwen3-8b.Q4_K_M.gguf
has() { case " ${PARTS:-test mat dec} " in *" $1 "*) return 0 ;; esac; return 1; }
if has dec; then
  [ -s "$M8" ] || session_mkmodel "$M8" "$OUT/mk8.txt" --preset qwen3-8b --type Q4_K_M --threads 7
  [ -s "$M9" ] || session_mkmodel "$M9" "$OUT/mk9.txt" --preset qwen35-9b --type Q4_K_M --mtp --keep-output-bf16 --threads 7
fi
rows() { grep -E '^\| [0-9]+ \|' /tmp/step.txt | awk -F'|' -v p="$1" '{printf "%s b%s %s ms %s (%s)\n", p, $2+0, $4+0, $10, $11}'; }
if has test; then
  step "test_cuda_ops" 150 "$D/test_cuda_ops"
  grep -E "mma |multi|swiglu|FAIL|PASSED|FAILED|err " /tmp/step.txt | grep -vE "^\s*$" | tail -60
fi
if has mat; then
  for k in ${KS:-1}; do
    step "matvec i8=$k" 90 env GANTRY_MVM_I8=$k "$D/bench_matvec" --types Q4_K,Q6_K --ns 1,2 --mmq 0 --reps 20 \
      --shapes 4096x4096,12288x4096,4096x12288,151936x4096,multi,swiglu
    grep -E " mma |FAIL|VALIDATION|mismatch" /tmp/step.txt | sed "s/^/i8=$k /"
  done
fi
if has dec; then
  for m in "$M8" "$M9"; do
    session_wait "$m" || { echo "== $m not made"; continue; }
    nm=$(basename "$m" .gguf)
    for k in ${KS:-1}; do
      step "decode $nm i8=$k" 70 env GANTRY_MVM_I8=$k "$D/bench_decode" --model "$m" --batch 1,2,8 --prompt 512 --gen 32
      rows "$nm i8=$k"
    done
  done
fi
if has test; then
  step "test_cuda_golden" 150 "$D/test_cuda_golden"
  grep -E "FAIL|PASSED|FAILED|greedy|err " /tmp/step.txt | tail -30
fi
echo "== done in $(($(date +%s) - t0)) s"
