#!/bin/sh
# scripts/gpu/knobs.sh — one device call for two launch-shape settings of the decode step (issue
# 24), from the repository root after scripts/gpu/pack.sh (bench_decode, bench_verify, bench_matvec,
# gantry-mkmodel; carry build-cuda-pack):
#  1. GANTRY_PDL_ALL_ROWS (kernels/common.cuh kc_pdl_set_rows: steps of at most that many rows
#     launch every kernel early under PDL mode 2) 0 / 1 / 2 / 4: bench_decode --batch 1,2,4,8 on
#     qwen3-8b and qwen35-9b Q4_K_M, bench_verify --batches 1 (1 + 3 rows) on qwen35-9b;
#  2. GANTRY_MVM_TARGET_WARPS (the batch-1 tensor-core product's column split) 512 / 1024 / 2048
#     (default) / 4096: bench_matvec Q4_K / Q6_K at 1 row, bench_decode --batch 1.
# Env: OUT (/tmp/knobs), BUDGET (420 s), MODELDIR (/tmp), PARTS ("pdl mvm").
set -u
OUT=${OUT:-/tmp/knobs}
BUDGET=${BUDGET:-420}
. "$(dirname "$0")/session_lib.sh"
session_begin build-cuda-pack/dist.tar.xz
session_q4_models
has() { case " ${PARTS:-pdl mvm} " in *" $1 "*) return 0 ;; esac; return 1; }
rows() { grep -E '^\| [0-9]+ \|' /tmp/step.txt | awk -F'|' -v p="$1" '{printf "%s b%s %s ms %s (%s)\n", p, $2+0, $4+0, $10, $11}'; }
if has mvm; then
  for tw in 512 1024 2048 4096; do
    step "matvec tw=$tw" 60 env GANTRY_MVM_TARGET_WARPS=$tw "$D/bench_matvec" --types Q4_K,Q6_K --ns 1 --mmq 0 --reps 20 \
      --shapes 4096x4096,12288x4096,4096x12288,151936x4096,multi,swiglu
    grep -E " mma " /tmp/step.txt | sed "s/^/tw=$tw /"
    grep -E "FAIL|VALIDATION" /tmp/step.txt | head -3
  done
fi
for m in "$M8" "$M9"; do
  session_wait "$m" || { echo "== $m not made"; continue; }
  nm=$(basename "$m" .gguf)
  if has pdl; then
    for ar in 0 1 2 4; do
      step "decode $nm allrows=$ar" 60 env GANTRY_PDL_ALL_ROWS=$ar "$D/bench_decode" --model "$m" --batch 1,2,4,8 --prompt 512 --gen 32
      rows "$nm allrows=$ar"
      if [ "$m" = "$M9" ]; then
        step "verify allrows=$ar" 60 env GANTRY_PDL_ALL_ROWS=$ar "$D/bench_verify" --model "$M9" --device cuda --batches 1 --k 3 --ctx 512 --iters 30 --warm 5
        grep -E '^ +1 \|' /tmp/step.txt | sed "s/^/verify allrows=$ar /"
      fi
    done
  fi
  if has mvm; then
    for tw in 512 1024 4096; do
      step "decode $nm tw=$tw" 60 env GANTRY_MVM_TARGET_WARPS=$tw "$D/bench_decode" --model "$m" --batch 1 --prompt 512 --gen 32
      rows "$nm tw=$tw"
    done
  fi
done
echo "== done in $(($(date +%s) - t0)) s"
